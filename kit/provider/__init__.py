"""The embedded provider: a simulated OpenAI / Anthropic endpoint with a real prompt-cache model.

Importing this package starts nothing and stays light: ``serve`` and ``proxy`` (the recording proxy in
front of a real endpoint; they pull in starlette, uvicorn and httpx) are imported on first use, so the
pure cache engine can be used without the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kit.provider.cache import load_profile
from kit.provider.policy import Conversation, EchoPolicy, Message, Policy, Reply, ToolCall, ToolSpec

if TYPE_CHECKING:
    from kit.provider.proxy_server import Proxy, proxy
    from kit.provider.server import Provider, serve, start

__all__ = [
    "Conversation",
    "EchoPolicy",
    "Message",
    "Policy",
    "Provider",
    "Proxy",
    "Reply",
    "ToolCall",
    "ToolSpec",
    "load_profile",
    "proxy",
    "serve",
    "start",
]


def __getattr__(name: str) -> Any:
    if name in ("serve", "start", "Provider"):
        from kit.provider import server

        return getattr(server, name)
    if name in ("proxy", "Proxy"):
        from kit.provider import proxy_server

        return getattr(proxy_server, name)
    raise AttributeError(f"module 'kit.provider' has no attribute {name!r}")
