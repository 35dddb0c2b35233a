"""A tiny model directory for vLLM's ``--load-format dummy`` (no weights are ever downloaded).

``config.json`` describes a small ``LlamaForCausalLM`` (hidden 128, 2 layers, 2 heads of
head_dim 64, vocabulary 1024: the shape checked on vLLM 0.32.0's CPU build
by ``tests/referee/test_referee.py``); the tokenizer is a byte-level BPE trained here, from a fixed
generated corpus, with the ``tokenizers`` package, and saved as ``tokenizer.json`` with a
``tokenizer_config.json`` naming ``PreTrainedTokenizerFast`` (what transformers'
``AutoTokenizer`` loads without any other file). The same inputs give the same files.

Use :func:`write_tiny_model` from tests (it runs this file with the vLLM venv's Python, which
has ``tokenizers``), or ``python tests/peers/tinymodel.py DIR`` with such a Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

VOCAB = 1024
MAX_LEN = 512
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": VOCAB,
    "max_position_embeddings": MAX_LEN,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]


def _corpus() -> list[str]:
    """A fixed English-like corpus (letters, digits, punctuation) to train the BPE on."""
    words = ("the cache block prefix token model server reset clear store key value tier "
             "request prompt engine worker controller redis mooncake vllm lmcache kubernetes "
             "pod service deployment namespace hello world alpha beta gamma delta").split()
    lines = []
    for i in range(2000):
        pick = [words[(i * 7 + j * 13) % len(words)] for j in range(12)]
        lines.append(" ".join(pick) + f" {i} , . ! ? : ; - ( ) \" '")
    return lines


def write_files(out: Path) -> Path:
    """Write ``config.json`` and the tokenizer files into ``out`` (created); needs
    ``tokenizers`` importable. Returns ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": MAX_LEN,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}",
    }, indent=1))
    config = dict(CONFIG, vocab_size=max(VOCAB, tok.get_vocab_size()))
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}))
    return out


def write_tiny_model(out: str | os.PathLike[str], python: str | None = None) -> Path:
    """Write the tiny model into ``out`` with ``python`` (default: the vLLM venv's, from
    ``tests.peers.vllm_python``) unless ``out/config.json`` and ``out/tokenizer.json`` are
    already there. Returns the directory. Raises ``RuntimeError`` when no Python with
    ``tokenizers`` is found or the writer fails (its stderr in the message)."""
    path = Path(out)
    if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
        return path
    if python is None:
        from . import vllm_python
        python = vllm_python()
    if python is None:
        raise RuntimeError("no Python with tokenizers: the vLLM peer is not installed (make peers)")
    done = subprocess.run([python, str(Path(__file__).resolve()), str(path)], capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"writing the tiny model into {path} failed: {done.stderr[-2000:]}")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: tinymodel.py DIR", file=sys.stderr)
        sys.exit(2)
    write_files(Path(sys.argv[1]))
