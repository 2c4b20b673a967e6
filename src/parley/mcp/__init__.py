"""MCP in Parley: the client of MCP servers whose tools the agent loop runs, and Parley's
own MCP endpoint.

- ``client.py``: one server's connection (lazy connect, tool-list cache, per-call
  timeout, reconnect with backoff and retry, keep-alive pings, health, clean shutdown);
  ``transports.py``: the SDK's stdio, streamable HTTP and SSE transports, watched;
  ``config.py``: a server's ``ServerConfig``;
- ``tools.py``: a server tool as a Parley ``Tool`` (``mcp__{server}__{tool}``) and its
  results as ``ToolOutput``;
- ``manager.py``: the set of servers (concurrent listing, per-server deadlines,
  quarantine, health);
- ``settings.py`` and ``service.py``: where servers come from (the config file and the
  admin API's rows) and which servers and tools a request gets;
- ``serve.py``: Parley as an MCP server at ``/mcp`` (knowledge, memory and conversation
  search for other agents).
"""
