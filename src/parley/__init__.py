"""Parley: a self-hosted agentic chat server with an OpenAI-compatible API."""

__version__ = "0.1.0"
