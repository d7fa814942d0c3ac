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


def random_weights(fe, graphs, seed: int = 0):
    """``key -> array`` for every weight the graphs read, in the IR layout: norm gains
    ``1 + 0.1 N``, other vectors ``0.02 N``, matrices ``0.02 N`` (GPT-2's init), each
    drawn from a generator seeded by the key (the same tensor whatever func asks);
    generated keys (``anec.*``: masks, RoPE) from the frontend."""
    shapes = {}
    for g in graphs:
        for n in g.nodes:
            if n.op == "const" and "weight" in n.attrs:
                shapes[n.attrs["weight"]] = n.result.type.shape
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
