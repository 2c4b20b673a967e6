"""Approve a tool call from a plain OpenAI client.

With the server started on examples/approvals.yaml, the model's call to write a file
pauses the turn; the reply lists the call in ``parley.pending_approvals``. Sending the
decision with ``conversation_id`` and ``approvals`` resumes it.

PARLEY_URL=http://127.0.0.1:8000/v1 PARLEY_MODEL=openai/gpt-4o-mini python examples/approvals.py
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
    messages=[{"role": "user", "content": "Save a haiku about rain to rain.txt."}],
)
parley = reply.model_extra["parley"]
for call in parley.get("pending_approvals", []):
    print(f"waiting: {call['tool']} {call['arguments']}")

decisions = [
    {"tool_call_id": call["id"], "decision": "approve"}
    for call in parley.get("pending_approvals", [])
]
if decisions:
    # messages may be empty: the stored conversation is the history
    resumed = client.chat.completions.create(
        model=model,
        messages=[],
        extra_body={"conversation_id": parley["conversation_id"], "approvals": decisions},
    )
    for tool in resumed.model_extra["parley"]["tools"]:
        print(f"ran: {tool['name']} -> {tool['tool_output']}")
    print("reply:", resumed.choices[0].message.content)
else:
    print("reply:", reply.choices[0].message.content)
