"""Generator registries: AI data-workflow traces and LLM session traces, by name.

Workflow generators (``aicache gen workflow``) write ``block-csv`` with true phase labels;
session generators (``aicache gen sessions``) yield :class:`~aicache.traces.base.KVRequest`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from aicache.registry import Registry
from aicache.traces.base import KVRequest

#: name -> callable(sessions: int | None, seed: int) -> Iterator[KVRequest]
SESSIONS: Registry[Callable[..., Iterator[KVRequest]]] = Registry("session workload")
SESSIONS.register("agent", "aicache.traces.gen_agent:generate_agent", "TraceLab-like coding-agent sessions")
SESSIONS.register("weka", "aicache.traces.gen_agent:generate_weka", "WEKA/Claude-Code-proxy-like streams")
SESSIONS.register("chat", "aicache.traces.gen_chat:generate_chat", "ShareGPT/LMSys-like multi-turn chats")
SESSIONS.register("arena", "aicache.traces.gen_chat:generate_arena", "single-turn prompts over shared templates")
SESSIONS.register("tool", "aicache.traces.gen_chat:generate_tool", "agentic tool-use sessions")
SESSIONS.register("mix", "aicache.traces.gen_chat:generate_mix", "chat-heavy to tool-heavy shifting mix")

#: Workflow generators (W1..W3, T1..T6) are registered by aicache.traces.workflows.
