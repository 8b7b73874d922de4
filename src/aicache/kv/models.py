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

from aicache.registry import Registry


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

DEFAULT_MODEL = "qwen3-8b"


def get_model(name: str) -> ModelSpec:
    """The registered :class:`ModelSpec` for ``name`` (an unknown name lists the valid ones)."""
    return MODELS.get(name)
