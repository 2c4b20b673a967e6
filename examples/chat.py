"""Talk to Parley with the official openai SDK: a reply, a stream, then a follow-up.

PARLEY_URL=http://127.0.0.1:8000/v1 python examples/chat.py
"""

import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("PARLEY_URL", "http://127.0.0.1:8000/v1"),
    api_key=os.environ.get("PARLEY_API_KEY", "not-needed-on-loopback"),
)
model = os.environ.get("PARLEY_MODEL", client.models.list().data[0].id)

reply = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Name a colour."}],
    max_tokens=32,
)
print("reply:", reply.choices[0].message.content)
conversation_id = reply.model_extra["parley"]["conversation_id"]
print("conversation:", conversation_id)

# Continue the stored conversation: send only the new message.
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "And another one?"}],
    max_tokens=32,
    stream=True,
    stream_options={"include_usage": True},
    extra_body={"conversation_id": conversation_id},
)
print("stream: ", end="")
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)
    elif chunk.usage:
        print(f"\nusage: {chunk.usage.total_tokens} tokens")
