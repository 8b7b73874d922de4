"""Generator registries: AI data-workflow traces and LLM session traces, by name.

Workflow generators (``aicache gen workflow``) write ``block-csv`` with true phase labels;
session generators (``aicache gen sessions``) yield :class:`~aicache.traces.base.KVRequest`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aicache.registry import Registry
from aicache.traces.base import KVRequest

if TYPE_CHECKING:  # the generators load lazily: naming one must not import numpy
    from aicache.traces.workflows import WorkflowTrace

#: name -> callable(sessions: int | None, seed: int) -> Iterator[KVRequest]
SESSIONS: Registry[Callable[..., Iterator[KVRequest]]] = Registry("session workload")
SESSIONS.register("agent", "aicache.traces.gen_agent:generate_agent", "TraceLab-like coding-agent sessions")
SESSIONS.register("weka", "aicache.traces.gen_agent:generate_weka", "WEKA/Claude-Code-proxy-like streams")
SESSIONS.register("chat", "aicache.traces.gen_chat:generate_chat", "ShareGPT/LMSys-like multi-turn chats")
SESSIONS.register("arena", "aicache.traces.gen_chat:generate_arena", "single-turn prompts over shared templates")
SESSIONS.register("tool", "aicache.traces.gen_chat:generate_tool", "agentic tool-use sessions")
SESSIONS.register("mix", "aicache.traces.gen_chat:generate_mix", "chat-heavy to tool-heavy shifting mix")

#: name -> callable(scale: float, seed: int) -> aicache.traces.workflows.WorkflowTrace
WORKFLOWS: Registry[Callable[..., WorkflowTrace]] = Registry("workflow workload")
WORKFLOWS.register("W1", "aicache.traces.workflows:generate_w1", "ResNet-50: sequential -> random -> skewed")
WORKFLOWS.register("W2", "aicache.traces.workflows:generate_w2", "Minimal-FNO: sequential -> random -> skewed")
WORKFLOWS.register("W3", "aicache.traces.workflows:generate_w3", "SD 1.5 LoRA: random -> sequential")
WORKFLOWS.register("T1", "aicache.traces.workflows:generate_t1", "tokenization: sequential")
WORKFLOWS.register("T2", "aicache.traces.workflows:generate_t2", "weight loading: sequential")
WORKFLOWS.register("T3", "aicache.traces.workflows:generate_t3", "ViT fine-tuning: random")
WORKFLOWS.register("T4", "aicache.traces.workflows:generate_t4", "wav2vec2 fine-tuning: random")
WORKFLOWS.register("T5", "aicache.traces.workflows:generate_t5", "DLRM training: skewed")
WORKFLOWS.register("T6", "aicache.traces.workflows:generate_t6", "RAG retrieval: skewed")
