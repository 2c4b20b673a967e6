"""Interceptors: hooks around every model call and tool call (see ``protocol.py``).

What a third-party interceptor package imports::

    from parley.interceptors import CallInfo, Interceptor, ModelResponse
"""

from parley.interceptors.protocol import (
    CallCancelled,
    CallInfo,
    Interceptor,
    ModelResponse,
    Services,
    ToolCall,
    TurnEnd,
    TurnInfo,
)

__all__ = [
    "CallCancelled",
    "CallInfo",
    "Interceptor",
    "ModelResponse",
    "Services",
    "ToolCall",
    "TurnEnd",
    "TurnInfo",
]
