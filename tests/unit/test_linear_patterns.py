"""Parley's own patterns over strangers' text take linear time, whatever the text
(issue 17: the class of the regular-expression stall, looked for beyond user patterns).

The sniffers of fetched pages (``web_fetch``) and attached documents read the first KB
of something a stranger wrote; their pattern once let HTML comments merge, so a page
opening with 30 empty comments took minutes of backtracking, holding the GIL. The
finder of base64 images in replies once let a URL and its title share characters, so
an image left unclosed was quadratic (32,000 characters: 9 s). Each check runs in a
subprocess with a deadline: one that backtracked could not be interrupted.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMENTS = "b'<!---->' * 500"
CASES = [
    (f"{COMMENTS} + b'x'", False),
    (f"{COMMENTS} + b'<html><body>hi</body></html>'", True),
    ("b'  <!-- a -- b --> <!DOCTYPE html><html>'", True),
    ("b'<!-- never closed <html>'", False),
]


@pytest.mark.parametrize("module", ["parley.tools.builtins.web", "parley.documents.kinds"])
def test_the_html_sniffer_is_linear(module: str) -> None:
    checks = "\n".join(
        f"assert bool(HTML_START.match(({data})[:4096])) is {expected}, {data!r}"
        for data, expected in CASES
    )
    code = f"from {module} import HTML_START\n{checks}\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)


def test_finding_images_in_a_reply_is_linear() -> None:
    code = (
        "from parley.transforms.images import _MARKDOWN_IMAGE as p\n"
        "assert not list(p.finditer('![a](data:image/' + 'x' * 200_000))\n"
        "assert not list(p.finditer(('![a](data:image/' + 'x' * 100 + ' y') * 2_000))\n"
        "assert not list(p.finditer('![a](data:image/x' * 20_000))\n"
        "assert not list(p.finditer('![' * 200_000))\n"
        "m = p.search('![cat](data:image/png;base64,AAAA \"title\")')\n"
        "assert m and m['url'] == 'data:image/png;base64,AAAA' and m['rest'] == ' \"title\"'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)
