"""Full-size model shapes without a download: a placeholder checkpoint directory
and random weights in the IR layout (for tests and benchmarks; numpy and
safetensors only)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from anec.models.programs import weight_keys
from anec.models.hf import load_checkpoint

GPT2_SMALL = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
              "n_positions": 1024}


def shape_checkpoint(path: Path, config: dict, keys: list[str]):
    """A checkpoint directory with ``config`` and placeholder tensors for ``keys``
    (what a frontend checks on construction): for building full-size IR without a
    download. Program weights then come from :func:`random_weights`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file({k: np.zeros((1, 1), np.float32) for k in keys}, str(path / "model.safetensors"))
    return load_checkpoint(path)


def _stored_shape(n) -> tuple[int, ...]:
    """The least stored shape a weight const's view needs: its declared shape, the sliced
    axis as long as the slice's end (the largest over a key's consts is the tensor: the LM
    head's slivers of a tied embedding), the permutation undone."""
    shape = list(n.result.type.shape)
    if n.attrs.get("slice") is not None:
        axis, _, stop = (int(v) for v in n.attrs["slice"])
        shape[axis] = stop
    perm = n.attrs.get("perm")
    if perm is not None and len(perm) == len(shape):
        stored = [0] * len(shape)
        for i, p in enumerate(perm):
            stored[p] = shape[i]
        shape = stored
    return tuple(shape)


def random_weights(fe, graphs, seed: int = 0):
    """``key -> array`` for every weight the graphs read, in the IR layout: norm gains
    ``1 + 0.1 N``, other vectors ``0.02 N``, matrices ``0.02 N`` (GPT-2's init), each
    drawn from a generator seeded by the key (the same tensor whatever func asks);
    generated keys (``anec.*``: masks, RoPE) from the frontend."""
    shapes: dict[str, tuple[int, ...]] = {}
    for g in graphs:
        for n in g.nodes:
            if n.op == "const" and "weight" in n.attrs:
                key, shape = n.attrs["weight"], _stored_shape(n)
                old = shapes.get(key, shape)
                shapes[key] = tuple(max(a, b) for a, b in zip(old, shape)) if len(old) == len(shape) else shape
    out = {}
    for key in dict.fromkeys(k for g in graphs for k in weight_keys(g)):
        if key.startswith("anec."):
            out[key] = fe.weight(key)
            continue
        rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
        shape = shapes[key]
        r = rng.standard_normal(shape).astype(np.float32)
        gain = len(shape) == 4 and shape[0] == 1 and key.endswith("weight") and ("ln" in key or "norm" in key)
        out[key] = 1 + 0.1 * r if gain else 0.02 * r
    return out


LLAMA_06B = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "intermediate_size": 3072, "vocab_size": 151936,
             "max_position_embeddings": 4096, "tie_word_embeddings": True, "rms_norm_eps": 1e-6}
"""A 28-layer 0.6B GQA model's shape (Llama layout, head dim 64, tied embeddings)."""
LLAMA_1B = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
            "max_position_embeddings": 4096, "tie_word_embeddings": True, "rms_norm_eps": 1e-5}
"""Llama-3.2-1B's shape (without its llama3 RoPE scaling, which anec rejects)."""


def llama_tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a tied-embedding Llama checkpoint of ``config``, as stored."""
    d, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * d // config["num_attention_heads"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                   p + "self_attn.q_proj.weight": (d, d), p + "self_attn.k_proj.weight": (kv, d),
                   p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, d),
                   p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                   p + "mlp.down_proj.weight": (d, f)}
    return shapes


def write_random_llama(path: Path, config: dict, seed: int = 0, dtype: str = "F16") -> int:
    """A random-weight Llama checkpoint of ``config`` in ``path`` (fp16, or ``dtype="F32"``),
    streamed into ``model.safetensors`` a block of rows at a time: a billion-parameter
    checkpoint is written without holding it. Norm gains ``1 + 0.1 N``, matrices
    ``N / sqrt(in)`` (so activations stay O(1) through the layers), the embedding ``N``.
    Returns the tensors' element count."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    shapes = llama_tensor_shapes(config)
    np_dtype = {"F16": np.float16, "F32": np.float32}[dtype]
    header: dict = {}
    offset = 0
    for key in sorted(shapes):
        n = int(np.prod(shapes[key])) * np.dtype(np_dtype).itemsize
        header[key] = {"dtype": dtype, "shape": list(shapes[key]), "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path / "model.safetensors", "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for key in sorted(shapes):
            rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
            shape = shapes[key]
            if len(shape) == 1:
                f.write((1 + 0.1 * rng.standard_normal(shape)).astype(np_dtype).tobytes())
                continue
            scale = 1.0 if key == "model.embed_tokens.weight" else shape[1] ** -0.5
            rows = max(1, (1 << 20) // shape[1])
            for r in range(0, shape[0], rows):
                block = rng.standard_normal((min(rows, shape[0] - r), shape[1]), np.float32)
                f.write((scale * block).astype(np_dtype).tobytes())
    return sum(int(np.prod(s)) for s in shapes.values())
