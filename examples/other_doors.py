"""The same Parley through its other doors: OpenAI's Responses API and embeddings with the
official openai SDK, and Anthropic's Messages API with the official anthropic SDK
(pip install anthropic).

PARLEY_URL=http://127.0.0.1:8000/v1 python examples/other_doors.py
"""

import os

import anthropic
from openai import OpenAI

url = os.environ.get("PARLEY_URL", "http://127.0.0.1:8000/v1")
key = os.environ.get("PARLEY_API_KEY", "not-needed-on-loopback")
client = OpenAI(base_url=url, api_key=key)
model = os.environ.get("PARLEY_MODEL", client.models.list().data[0].id)

# The Responses API: a stored response, then one that continues it.
first = client.responses.create(model=model, input="Name a colour.", max_output_tokens=32)
print("response:", first.output_text)
second = client.responses.create(
    model=model, input="And another one?", previous_response_id=first.id, max_output_tokens=32
)
print("continued:", second.output_text)

# Anthropic's Messages API, streamed (its base URL has no /v1).
claude_style = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key=key)
with claude_style.messages.stream(
    model=model, max_tokens=32, messages=[{"role": "user", "content": "Name a fruit."}]
) as stream:
    print("messages:", "".join(stream.text_stream))

# Embeddings with the server's knowledge embedder (its id is what the error names).
try:
    vectors = client.embeddings.create(model="local/multilingual-e5-small-int8", input=["hi"])
    print("embedding:", len(vectors.data[0].embedding), "dimensions")
except Exception as error:  # a server without the embed extra, or another embedder
    print("embeddings:", error)
