"""A tiny model directory for a real vLLM started with ``--load-format dummy`` (no download).

research/real-peers.md §1: ``config.json`` of a tiny ``LlamaForCausalLM`` (hidden 128, 2 layers,
2 heads, head_dim 64, vocab 1024) and a tokenizer. The tokenizer here is a word-level one
written directly as a ``tokenizers`` JSON document (``WordLevel`` model, ``Whitespace``
pre-tokenizer): the words ``w0`` ... ``w1019`` are one token each, so a prompt of N such words
is exactly N prompt tokens (plus nothing: no BOS is added, there is no post-processor).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["SPECIAL_TOKENS", "VOCAB_SIZE", "prompt_of", "write_tiny_model"]

VOCAB_SIZE = 1024
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")


def _config() -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
        "torch_dtype": "bfloat16",
    }


def _tokenizer() -> dict[str, object]:
    vocab: dict[str, int] = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for i in range(VOCAB_SIZE - len(SPECIAL_TOKENS)):
        vocab[f"w{i}"] = len(vocab)
    added = [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, tok in enumerate(SPECIAL_TOKENS)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def write_tiny_model(directory: Path) -> Path:
    """Write ``config.json``, ``tokenizer.json``, ``tokenizer_config.json`` and
    ``generation_config.json`` into ``directory`` (created if missing) and return it.

    Raises OSError when the directory cannot be written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(_config(), indent=1))
    (directory / "tokenizer.json").write_text(json.dumps(_tokenizer()))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "model_max_length": 512, "add_bos_token": False, "add_eos_token": False,
    }))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return directory


def prompt_of(n_tokens: int, start: int = 0) -> str:
    """A prompt of exactly ``n_tokens`` tokens for the tiny tokenizer (words ``w{start}`` ...,
    wrapping inside the vocabulary)."""
    words = VOCAB_SIZE - len(SPECIAL_TOKENS)
    return " ".join(f"w{(start + i) % words}" for i in range(n_tokens))
