"""``GET /connect`` (and ``/`` without the web UI's bundle): a small page saying what this
server is and how to connect a client.

It needs no key and shows nothing of anyone's data: the version, the API's address (as
the browser reached it), the routes worth knowing, and snippets for the OpenAI SDK,
curl and ``parley chat``. The page is self-contained (no script, no remote asset) and
served with a Content-Security-Policy that allows nothing else; it may not be framed.
The routes that serve it are the web UI's (``api/webui.py``).
"""

from __future__ import annotations

from html import escape

from fastapi import Request
from fastapi.responses import HTMLResponse

from parley import __version__

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Parley {version}</title>
<style>
body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 46rem; margin: 2rem auto;
        padding: 0 1rem; color: #1d1d1f; }}
code, pre {{ font: 14px ui-monospace, monospace; background: #f3f3f5; }}
pre {{ padding: .75rem 1rem; overflow-x: auto; border-radius: 6px; }}
code {{ padding: 0 .2rem; }}
a {{ color: #0b57d0; }}
</style>
</head>
<body>
<h1>Parley {version}</h1>
<p>A self-hosted agentic chat server. It speaks the OpenAI API at
<code>{api}</code>: point any OpenAI client there.</p>
<ul>{web_ui}
<li><a href="{root}/docs">API reference</a> (Swagger UI; <a href="{root}/redoc">ReDoc</a>,
<a href="{root}/openapi.json">openapi.json</a>)</li>
<li><a href="{root}/v1/models">/v1/models</a>: the models you can name</li>
<li><a href="{root}/health">/health</a>: liveness</li>
</ul>
<h2>Connect a client</h2>
<pre>from openai import OpenAI

client = OpenAI(base_url="{api}", api_key="YOUR_PARLEY_KEY")
reply = client.chat.completions.create(
    model="MODEL",  # one of /v1/models
    messages=[{{"role": "user", "content": "Hello!"}}],
)
print(reply.choices[0].message.content)</pre>
<pre>curl {api}/chat/completions -H "Authorization: Bearer YOUR_PARLEY_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{{"model": "MODEL", "messages": [{{"role": "user", "content": "Hello!"}}]}}'</pre>
<pre>parley chat --url {root}</pre>
<p>Keys come from <code>parley keys create</code>. Until one exists, the server
answers clients on this machine without a key. <code>parley doctor</code> checks
the installation.</p>
</body>
</html>
"""


def connect_page(request: Request, *, web_ui: bool) -> HTMLResponse:
    """The page, linking to the web UI when it is served (``web_ui``)."""
    root = escape(str(request.base_url).rstrip("/"), quote=True)
    link = f'\n<li><a href="{root}/">The web UI</a>: chat in this browser</li>' if web_ui else ""
    page = _PAGE.format(version=escape(__version__), root=root, api=f"{root}/v1", web_ui=link)
    return HTMLResponse(page, headers=HEADERS)
