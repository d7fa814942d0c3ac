"""Hashes of everything ``anec compile`` writes for the examples and a GPT-2-shaped graph.

``python -m tests.mil.emitted_bytes OUT.json`` records them (run it against the
code whose output is the reference); tests/mil/test_mil_bytes_identical.py
compiles the same inputs and compares. Speed work on the compile path must not
change a byte of MIL text, BLOBFILEs or manifests.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPT2_2L = {"model_type": "gpt2", "n_layer": 2, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
           "n_positions": 1024}
"""GPT-2 small's widths (d=768, 12 heads, its 3072-wide MLP) with two layers."""


def _tree(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def gpt2_inputs(tmp: Path):
    """The 2-layer GPT-2 body as one func and as per-layer funcs, with fp16 weights in a
    safetensors file (seeded): (one-func module, per-layer module, weights path)."""
    import numpy as np
    from safetensors.numpy import save_file

    from anec.ir.builder import Builder
    from anec.models.generate import decoder_frontend
    from tests.models.synthetic import random_weights, shape_checkpoint

    fe = decoder_frontend(shape_checkpoint(tmp / "ckpt", GPT2_2L, ["transformer.wte.weight"]), 49152)
    body = fe.prefill(64)
    blocks = [g for i in range(2) for g in (fe.attn(i, 64), fe.mlp(i, 64))]
    weights = {k: np.asarray(v, np.float16) for k, v in random_weights(fe, [body, *blocks]).items()}
    path = tmp / "w.safetensors"
    save_file(weights, str(path))
    return Builder.module(body), Builder.module(*blocks), path


def record() -> dict[str, dict[str, str]]:
    from anec.compiler import compile_module
    from anec.ir.parser import parse

    out: dict[str, dict[str, str]] = {}
    # concat="rewrite": the manifest records the concat reading and why, which the default
    # (this machine's selftest verdict) would make depend on the machine
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for path in sorted((ROOT / "examples").glob("*.ir")):
            for pack in (False, True):
                dest = tmp / f"{path.stem}-{pack}"
                # named relative to the checkout: the manifest records source locations
                module = parse(path.read_text("utf-8"), f"examples/{path.name}")
                compile_module(module, random_seed=0, out_dir=dest, pack_weights=pack, concat="rewrite")
                out[f"{path.name} pack={pack}"] = _tree(dest)
        one, many, weights = gpt2_inputs(tmp)
        for name, module in (("gpt2-2l one func", one), ("gpt2-2l per layer", many)):
            dest = tmp / name.replace(" ", "-")
            compile_module(module, weights=weights, out_dir=dest, concat="rewrite")
            out[name] = _tree(dest)
    return out


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
