"""Parley's MCP client: connections to MCP servers (stdio and streamable HTTP) and the
``mcp__{server}__{tool}`` tools the agent loop runs through them.

``client.py`` owns one server's connection (lazy connect, tool-list cache, per-call
timeout, one reconnect-and-retry, health, clean shutdown); ``tools.py`` turns a server
tool into a Parley ``Tool`` and its results into ``ToolOutput``. Which servers exist and
who may add them (config, admin API, allowlists, quarantine) live above this package.
"""
