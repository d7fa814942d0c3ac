"""``anec models export``: a checkpoint's programs as readable ``.ir`` files.

The output directory holds one ``.ir`` file per program group (each func is
one ANE program), ``weights.safetensors`` with every tensor the IR references
(checkpoint keys, in the IR's conv layout, fp16, plus generated tensors such
as causal masks under ``anec.*`` keys) and ``model.json`` describing the
programs and buckets. Every file compiles as is::

    anec models export gpt2 ./gpt2 -o out/
    anec compile out/prefill_s64.ir -o build/
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from anec.models.buckets import target_limits
from anec.models.common import ModelError
from anec.fsutil import write_text_atomic
from anec.models.hf import load_checkpoint

KINDS = ("gpt2", "llama", "bert")
_TYPES = {"gpt2": ("gpt2",), "llama": ("llama", "mistral"), "bert": ("bert",)}


def export_checkpoint(kind: str, checkpoint: str | Path, out_dir: str | Path,
                      prefill: Sequence[int] | None = None, cache: Sequence[int] | None = None,
                      target: str | None = None, lora_targets: Sequence[str] = (),
                      lora_rank: int = 8) -> dict[str, Any]:
    """Export ``checkpoint`` as a ``kind`` model; returns the ``model.json`` content."""
    if kind not in KINDS:
        raise ModelError(f"unknown model kind '{kind}'", hint=f"one of: {', '.join(KINDS)}")
    ckpt = load_checkpoint(checkpoint)
    if ckpt.model_type not in _TYPES[kind]:
        raise ModelError(f"'{checkpoint}' is a '{ckpt.model_type}' checkpoint, not {kind}",
                         hint=f"export it as: anec models export {_kind_of(ckpt.model_type)} ...")
    _, min_surface = target_limits(target)
    if kind == "bert":
        from anec.models.bert import Bert

        if cache:
            raise ModelError("BERT is an encoder: it has no decode programs (drop --cache)")
        info = Bert(ckpt, min_surface).export(out_dir, list(prefill) if prefill else None)
    else:
        from anec.models.generate import decoder_frontend

        fe = decoder_frontend(ckpt, min_surface)
        info = fe.export(out_dir, list(prefill) if prefill else None, list(cache) if cache else None)
    if lora_targets:
        info["lora"] = _lora_files(Path(out_dir), info, list(lora_targets), lora_rank)
        write_text_atomic(Path(out_dir) / "model.json", json.dumps(info, indent=2) + "\n")
    return info


def _kind_of(model_type: str) -> str:
    for k, types in _TYPES.items():
        if model_type in types:
            return k
    return "(unsupported)"


def _lora_files(out: Path, info: dict[str, Any], targets: list[str], rank: int) -> dict[str, Any]:
    """Rewrite the exported ``.ir`` files with LoRA inputs on ``targets``."""
    from anec.ir.parser import parse_file
    from anec.ir.printer import print_module
    from anec.ir.verifier import verify
    from anec.models.lora import apply_lora

    slots: dict[str, list[dict[str, Any]]] = {}
    for name in info["files"]:
        module = parse_file(out / name)
        for g in module.funcs.values():
            added = apply_lora(g, targets, rank)
            if added:
                slots[g.name] = [asdict(s) for s in added]
        verify(module)
        head = (out / name).read_text().split("\n", 1)[0]
        write_text_atomic(out / name, head + "\n" + print_module(module))
    if not slots:
        raise ModelError(f"no projection matches the LoRA targets {', '.join(targets)}",
                         hint="targets are module-name endings such as q_proj, v_proj, c_attn, query, value")
    return {"targets": targets, "rank": rank, "inputs": slots}
