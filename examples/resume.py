"""A streamed reply that survives a lost connection: remember the last event's id, and
if the connection drops, send the request again with ``Last-Event-ID`` (to any
instance) to get the rest. The official SDK does not resume by itself; these few lines
with httpx do. (Here the first connection is dropped on purpose after three events.)

PARLEY_URL=http://127.0.0.1:8000/v1 python examples/resume.py
"""

import json
import os

import httpx

url = os.environ.get("PARLEY_URL", "http://127.0.0.1:8000/v1") + "/chat/completions"
headers = {"Authorization": f"Bearer {os.environ.get('PARLEY_API_KEY', 'not-needed')}"}
model = os.environ.get("PARLEY_MODEL", "local")
conversation = httpx.post(
    url.replace("/chat/completions", "/conversations"), json={}, headers=headers
)
body = {
    "model": model,
    "messages": [{"role": "user", "content": "Count from one to ten."}],
    "stream": True,
    "conversation_id": conversation.json()["id"],  # a stored reply goes on without us
}


def events(last_event_id, stop_after=None):
    """(id, data) of the reply's events after ``last_event_id`` (None: a new reply)."""
    sent = {**headers, **({"Last-Event-ID": last_event_id} if last_event_id else {})}
    with httpx.stream("POST", url, json=body, headers=sent, timeout=120) as response:
        response.raise_for_status()
        event_id, count = None, 0
        for line in response.iter_lines():
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                yield event_id, line[5:].strip()
                count += 1
                if count == stop_after:
                    return  # as if the connection had dropped


text, last = "", None
for first_pass in (True, False):
    for event_id, data in events(last, stop_after=3 if first_pass else None):
        last = event_id
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise SystemExit(f"the reply stopped: {chunk['error']['message']}")
        if chunk.get("choices"):
            text += chunk["choices"][0]["delta"].get("content") or ""
    if first_pass:
        print("connection dropped after event", last)
print("reply:", text)
