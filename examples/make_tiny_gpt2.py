"""Write a tiny random GPT-2 checkpoint (Hugging Face format) for trying `anec generate`.

    python examples/make_tiny_gpt2.py /tmp/tiny-gpt2
    anec generate /tmp/tiny-gpt2 --prompt "Hello" --max-new-tokens 24

The directory gets ``config.json``, ``model.safetensors`` (random weights, the
key names and layouts of ``GPT2LMHeadModel``) and a byte-level
``tokenizer.json`` whose token ids are the UTF-8 bytes of the text (id 256 is
``<|endoftext|>``). Only numpy and safetensors are needed, no download; the
``tokenizers`` package is needed to use ``--prompt`` (``--prompt-ids`` works
without it). The weights are random, so the text it writes is noise: the
point is to exercise the whole path (tokenizer, prefill, KV-cache decode,
sampling) on any machine.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in character for each byte value 0..255."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def tokenizer_json() -> dict:
    """A byte-level BPE tokenizer without merges: token id = byte value."""
    vocab = {c: i for i, c in enumerate(byte_alphabet())}
    vocab["<|endoftext|>"] = 256
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": []},
    }


def make(out: Path, layers: int = 2, dim: int = 128, heads: int = 4, positions: int = 256,
         seed: int = 0, std: float = 0.1) -> None:
    from safetensors.numpy import save_file

    vocab = 257
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    wte = normal(vocab, dim)
    # Larger embeddings for lowercase letters and space make the (tied) LM head
    # favour them, so the noise the model writes is at least readable.
    wte[list(b" abcdefghijklmnopqrstuvwxyz")] *= 4.0
    t: dict[str, np.ndarray] = {
        "transformer.wte.weight": wte,
        "transformer.wpe.weight": normal(positions, dim),
        "transformer.ln_f.weight": np.ones(dim, np.float32),
        "transformer.ln_f.bias": np.zeros(dim, np.float32),
    }
    for i in range(layers):
        p = f"transformer.h.{i}."
        t |= {
            p + "ln_1.weight": np.ones(dim, np.float32), p + "ln_1.bias": np.zeros(dim, np.float32),
            p + "ln_2.weight": np.ones(dim, np.float32), p + "ln_2.bias": np.zeros(dim, np.float32),
            # GPT-2's Conv1D layers store weights as [in, out]
            p + "attn.c_attn.weight": normal(dim, 3 * dim), p + "attn.c_attn.bias": normal(3 * dim),
            p + "attn.c_proj.weight": normal(dim, dim), p + "attn.c_proj.bias": normal(dim),
            p + "mlp.c_fc.weight": normal(dim, 4 * dim), p + "mlp.c_fc.bias": normal(4 * dim),
            p + "mlp.c_proj.weight": normal(4 * dim, dim), p + "mlp.c_proj.bias": normal(dim),
        }
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
        "n_layer": layers, "n_embd": dim, "n_head": heads, "n_inner": None, "n_positions": positions,
        "vocab_size": vocab, "layer_norm_epsilon": 1e-5, "bos_token_id": 256, "eos_token_id": 256,
        "initializer_range": std, "tie_word_embeddings": True,
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("config.json", json.dumps(config, indent=2)),
                       ("tokenizer.json", json.dumps(tokenizer_json(), ensure_ascii=False))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, out / name)
    tmp = out / ".model.safetensors.tmp"
    save_file(t, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / "model.safetensors")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="output directory")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    make(a.out, a.layers, a.dim, a.heads, seed=a.seed)
    print(f"wrote a {a.layers}-layer GPT-2 (d={a.dim}, {a.heads} heads, 257 byte tokens) to {a.out}")


if __name__ == "__main__":
    main()
