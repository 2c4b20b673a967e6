"""Server-side tools through the plain OpenAI API: Parley runs them, the client watches.

Name the server's tools with plain strings in ``tools``; Parley's agent loop calls them
and reports each call in extension fields (``parley.tool``, and Langchain-Chatchat's
``status`` 7/8 with ``tool_calls[].tool_output``), never as standard ``tool_calls``.
Needs a model that can call tools (the embedded SmolLM2 cannot).

PARLEY_URL=http://127.0.0.1:8000/v1 PARLEY_MODEL=gpt python examples/agent.py
"""

import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("PARLEY_URL", "http://127.0.0.1:8000/v1"),
    api_key=os.environ.get("PARLEY_API_KEY", "not-needed-on-loopback"),
)
model = os.environ.get("PARLEY_MODEL", client.models.list().data[0].id)

stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What time is it on the server?"}],
    tools=["current_time"],  # a server tool, by name
    stream=True,
)
for chunk in stream:
    parley = (chunk.model_extra or {}).get("parley", {})
    tool = parley.get("tool")
    if tool and tool["phase"] == "start":
        print(f"[calling {tool['name']}({tool['arguments']})]")
    elif tool:
        print(f"[{tool['name']} -> {tool['tool_output']}]")
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)
    if "cost" in parley:
        print(f"\ncost: ${parley['cost']['response_usd']:.6f}")

# The same as a task: the agent works until done and returns the result.
task = client.post(
    "/tasks",
    body={"task": "Tell me the server's time zone.", "tools": ["current_time"], "model": model},
    cast_to=object,
)
print("task:", task["status"], "-", task["result"])
