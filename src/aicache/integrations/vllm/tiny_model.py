"""A tiny random-weight Llama and word-level tokenizer written to a directory, so tests and
benchmarks run a real vLLM engine with no download (test harness, like ``cpu_worker``)."""

from __future__ import annotations

from pathlib import Path

VOCAB = 512


def build_tiny_llama(directory: Path, *, hidden: int = 256, layers: int = 2,
                     intermediate: int = 512) -> Path:
    """``directory/tiny-llama-{hidden}x{layers}`` (built once): 4 heads of 64, 2 KV heads,
    bf16 weights from a fixed seed; tokens ``t0``..``t511``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(directory) / f"tiny-llama-{hidden}x{layers}"
    if (out / "config.json").exists():
        return out
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=hidden // 64,
                      num_key_value_heads=2, max_position_embeddings=2048,
                      torch_dtype="bfloat16")  # type: ignore[call-arg]  # transformers: a **kwargs field
    model = LlamaForCausalLM(cfg)  # type: ignore[no-untyped-call]  # transformers: __init__ unannotated
    model.to(torch.bfloat16).save_pretrained(out)  # type: ignore[arg-type]  # transformers: `to` typed for devices
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers: __init__ unannotated
        tokenizer_object=tok, unk_token="t0", bos_token="t1", eos_token="t2")
    fast.save_pretrained(out)
    return out
