"""KV-cache geometry of real models: bytes per token, block size, recurrent checkpoints.

Why: every SARIA number that is not a ratio (SSD bytes written, transfer seconds, DRAM
capacity in bytes) depends on the KV footprint of the model. The footprint of full
attention is ``layers × kv_heads × head_dim × 2 (K and V) × dtype_bytes`` per token,
taken from each model's published ``config.json`` (cited next to each entry).

Hybrid models (full attention interleaved with linear attention / gated-delta-net layers)
also need a *recurrent checkpoint* to resume at a prefix boundary: the recurrent state
of every linear layer (``heads × k_dim × v_dim``) plus its short-convolution state. SARIA
keeps one every ``checkpoint_tokens`` tokens (16,384 in the seed) and uses 1,024-token
blocks for hybrids, 512 for dense models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aicache.registry import Registry


class BlockGeometry(Protocol):
    """What the SARIA index and the real store read of a KV layout: a block's tokens and
    bytes, and recurrent checkpoints (none: dense). A model's :class:`ModelSpec` is one;
    an engine tier whose unit is an opaque fixed-size chunk has its own (one "token" of
    the chunk's bytes), so no model is made up for it."""

    @property
    def name(self) -> str: ...
    @property
    def block_tokens(self) -> int: ...
    @property
    def checkpoint_tokens(self) -> int: ...
    @property
    def checkpoint_bytes(self) -> int: ...
    @property
    def kv_bytes_per_token(self) -> int: ...
    @property
    def hybrid(self) -> bool: ...
    @property
    def block_bytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Geometry of one model's KV cache. ``checkpoint_bytes == 0`` means dense (no
    recurrent state, every block boundary is reusable)."""

    name: str
    fa_layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    block_tokens: int = 512
    checkpoint_tokens: int = 0
    checkpoint_bytes: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        """Full-attention K+V bytes for one token across all full-attention layers."""
        return self.fa_layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    @property
    def hybrid(self) -> bool:
        return self.checkpoint_bytes > 0

    @property
    def block_bytes(self) -> int:
        return self.kv_bytes_per_token * self.block_tokens


def _gdn_checkpoint_bytes(layers: int, v_heads: int, k_dim: int, v_dim: int, k_heads: int,
                          conv_kernel: int, state_dtype_bytes: int) -> int:
    """Recurrent state of ``layers`` gated-delta-net layers: the delta-rule matrix state
    (v_heads × k_dim × v_dim) plus the causal-conv state ((2·k_heads·k_dim + v_heads·v_dim)
    × (kernel − 1))."""
    ssm = v_heads * k_dim * v_dim
    conv = (2 * k_heads * k_dim + v_heads * v_dim) * (conv_kernel - 1)
    return layers * (ssm + conv) * state_dtype_bytes


MODELS: Registry[ModelSpec] = Registry("model")

# Qwen/Qwen3-8B config.json: num_hidden_layers 36, num_key_value_heads 8, head_dim 128,
# torch_dtype bfloat16 -> 147,456 B/token (the seed's dense model).
MODELS.register("qwen3-8b", ModelSpec("qwen3-8b", 36, 8, 128), "Qwen3-8B, 144 KiB/token")
# meta-llama/Llama-3.1-8B config.json: num_hidden_layers 32, num_key_value_heads 8,
# hidden_size 4096 / num_attention_heads 32 = head_dim 128, bfloat16 -> 131,072 B/token.
MODELS.register("llama-3.1-8b", ModelSpec("llama-3.1-8b", 32, 8, 128), "Llama-3.1-8B, 128 KiB/token")
# meta-llama/Meta-Llama-3-70B config.json: num_hidden_layers 80, num_key_value_heads 8,
# hidden_size 8192 / 64 heads = head_dim 128, bfloat16 -> 327,680 B/token.
MODELS.register("llama-3-70b", ModelSpec("llama-3-70b", 80, 8, 128), "Llama-3-70B, 320 KiB/token")
# mistralai/Mistral-7B-v0.1 config.json: num_hidden_layers 32, num_key_value_heads 8,
# hidden_size 4096 / 32 heads = head_dim 128, bfloat16 -> 131,072 B/token.
MODELS.register("mistral-7b", ModelSpec("mistral-7b", 32, 8, 128), "Mistral-7B, 128 KiB/token")
# Qwen/Qwen2.5-7B config.json: num_hidden_layers 28, num_key_value_heads 4,
# hidden_size 3584 / 28 heads = head_dim 128, bfloat16 -> 57,344 B/token.
MODELS.register("qwen2.5-7b", ModelSpec("qwen2.5-7b", 28, 4, 128), "Qwen2.5-7B, 56 KiB/token")
# Qwen/Qwen3-Next-80B-A3B-Instruct config.json: num_hidden_layers 48 with
# full_attention_interval 4 -> 12 full-attention layers, num_key_value_heads 2, head_dim 256
# (24,576 B/token in bf16); the other 36 are gated-delta-net layers with
# linear_num_value_heads 32, linear_num_key_heads 16, linear_key_head_dim 128,
# linear_value_head_dim 128, linear_conv_kernel_dim 4. State kept in bf16 (an assumption:
# implementations may hold it in fp32, which doubles checkpoint_bytes).
MODELS.register(
    "qwen3-next-80b-a3b",
    ModelSpec("qwen3-next-80b-a3b", 12, 2, 256, block_tokens=1024, checkpoint_tokens=16384,
              checkpoint_bytes=_gdn_checkpoint_bytes(36, 32, 128, 128, 16, 4, 2)),
    "Qwen3-Next-80B-A3B hybrid (12 FA + 36 GDN layers), 1,024-token blocks, checkpoint every 16K",
)

# Qwen3.5-9B (the seed's hybrid: "8 full-attention and 24 gated-delta-network layers"):
# transformers' Qwen3_5TextConfig, whose defaults are the "Qwen3.5-9B style configuration"
# (transformers 5.19, models/qwen3_5/configuration_qwen3_5.py, installed with the vllm
# extra): num_hidden_layers 32, full_attention_interval 4 -> 8 full-attention layers with
# num_key_value_heads 4, head_dim 256 (32,768 B/token in bf16); 24 GDN layers with
# linear_num_value_heads 32, linear_num_key_heads 16, linear_key_head_dim 128,
# linear_value_head_dim 128, linear_conv_kernel_dim 4. Recurrent state in bf16, the
# model's dtype (vLLM's default for the state cache); 1,024-token blocks and a checkpoint
# every 16,384 tokens (docs/results/kv-models.md).
MODELS.register(
    "qwen3.5-9b",
    ModelSpec("qwen3.5-9b", 8, 4, 256, block_tokens=1024, checkpoint_tokens=16384,
              checkpoint_bytes=_gdn_checkpoint_bytes(24, 32, 128, 128, 16, 4, 2)),
    "Qwen3.5-9B hybrid (8 FA + 24 GDN layers), 32 KiB/token, 1,024-token blocks, "
    "checkpoint every 16K (the seed's hybrid)",
)
# The seed's A30-testbed models are scaled-down constructions, not released checkpoints
# (docs/results/kv-models.md): "Qwen3-1.7B with 20 full-attention layers" and "Qwen3.5-5.6B with 5
# full-attention and 15 GDN layers", keeping the attention structures of their families:
# Qwen/Qwen3-1.7B config.json num_key_value_heads 8, head_dim 128 (20 layers -> 81,920
# B/token); Qwen3.5's as for qwen3.5-9b above (5 FA layers -> 20,480 B/token).
MODELS.register("qwen3-1.7b-seed", ModelSpec("qwen3-1.7b-seed", 20, 8, 128),
                "the seed's scaled Qwen3-1.7B (20 FA layers), 80 KiB/token")
MODELS.register(
    "qwen3.5-5.6b-seed",
    ModelSpec("qwen3.5-5.6b-seed", 5, 4, 256, block_tokens=1024, checkpoint_tokens=16384,
              checkpoint_bytes=_gdn_checkpoint_bytes(15, 32, 128, 128, 16, 4, 2)),
    "the seed's scaled Qwen3.5-5.6B hybrid (5 FA + 15 GDN layers), 20 KiB/token",
)
# The seed's endurance table (docs/results/kv-models.md): Qwen/Qwen3-30B-A3B config.json
# num_hidden_layers 48, num_key_value_heads 4, head_dim 128, BF16 KV -> 98,304 B/token;
# Qwen/Qwen3-235B-A22B config.json num_hidden_layers 94, num_key_value_heads 4, head_dim
# 128, FP8 KV as in the seed's table (Qwen3-235B-A22B-Instruct-2507-FP8) -> 96,256
# B/token.
MODELS.register("qwen3-30b-a3b", ModelSpec("qwen3-30b-a3b", 48, 4, 128),
                "Qwen3-30B-A3B (the seed's endurance table), 96 KiB/token")
MODELS.register("qwen3-235b-a22b-fp8", ModelSpec("qwen3-235b-a22b-fp8", 94, 4, 128,
                                                  dtype_bytes=1),
                "Qwen3-235B-A22B with FP8 KV (the seed's endurance table), 94 KiB/token")

DEFAULT_MODEL = "qwen3-8b"


def get_model(name: str) -> ModelSpec:
    """The registered :class:`ModelSpec` for ``name`` (an unknown name lists the valid ones)."""
    return MODELS.get(name)
