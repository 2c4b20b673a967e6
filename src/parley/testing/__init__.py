"""Parley for tests, yours and ours: fakes and servers to build tests on.

- ``FunctionProvider(handler)``: a model whose replies a function of yours makes
  (text, tool calls, or events); it keeps every request it was sent.
- ``MockOpenAI``: a real OpenAI-compatible upstream on loopback, scripted per test
  (streams byte-exact SSE; errors, cuts and silences on demand).
- ``LiveServer(app)``: an ASGI app (``parley.app.create_app(settings, providers=...,
  tools=...)``) served on a loopback port in a thread of this process, for real clients.

The README's "Testing with Parley" shows a whole test.
"""

from parley.testing.function import Call, FunctionProvider, Handler, Reply
from parley.testing.live import LiveServer
from parley.testing.mock_openai import MockOpenAI

__all__ = ["Call", "FunctionProvider", "Handler", "LiveServer", "MockOpenAI", "Reply"]
