"""``anec models export``: a checkpoint's programs as readable ``.ir`` files.

The output directory holds one ``.ir`` file per bucket (format
``anec-model/2``): a decoder's ``prefill_sS.ir`` and ``decode_wW_tT.ir``, each
one func for the whole layer stack, and ``lm_head.ir``; a BERT encoder's
``encoder_sS.ir``. The compiler partitions each func into as many ANE
programs as the target's budgets need. Next to them: ``weights.safetensors``
with every tensor the IR references (checkpoint keys, in the IR's conv layout,
fp16, plus generated tensors such as causal masks under ``anec.*`` keys) and
``model.json`` describing the funcs and buckets. Every file compiles as is,
and ``anec models compile`` compiles them all::

    anec models export gpt2 ./gpt2 -o out/
    anec compile out/prefill_s64.ir -o build/        # one file
    anec models compile out/ -o build/               # every file, checked against model.json

Directories written by older versions (``anec-model/1``: one func per layer
half) are refused by :func:`read_export` with the command that re-exports them.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from anec.fsutil import replace_file, write_text_atomic
from anec.models.buckets import target_limits
from anec.models.common import ModelError
from anec.models.hf import load_checkpoint
from anec.models.programs import weight_keys

if TYPE_CHECKING:
    from anec.ir.graph import Graph

FORMAT = "anec-model/2"
"""``model.json`` format: one func per bucket (``anec-model/1`` had one func per layer half)."""
MODEL_JSON = "model.json"
WEIGHTS = "weights.safetensors"
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
        fe = Bert(ckpt, min_surface)
        groups, info = fe.export_funcs(list(prefill) if prefill else None)
    else:
        from anec.models.generate import decoder_frontend

        fe = decoder_frontend(ckpt, min_surface)
        groups, info = fe.export_funcs(list(prefill) if prefill else None, list(cache) if cache else None)
    info = write_export(out_dir, kind, groups, fe.weight, info)
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


def write_export(out_dir: str | Path, kind: str, groups: dict[str, list["Graph"]],
                 weight: Callable[[str], Any], info: dict[str, Any]) -> dict[str, Any]:
    """Write one ``<group>.ir`` per group of funcs, the weights they reference and ``model.json``.

    Files a previous export listed in ``model.json`` and this one does not
    write are removed (never other files). Each file is written atomically,
    ``model.json`` last."""
    from anec.ir.graph import Module, WeightSource
    from anec.ir.printer import print_module
    from anec.ir.verifier import verify

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    previous = _listed_files(out)
    files: dict[str, list[str]] = {}
    keys: dict[str, None] = {}
    for group, graphs in groups.items():
        module = Module()
        module.weight_sources.append(WeightSource(WEIGHTS))
        for g in graphs:
            module.add_func(g)
            keys.update(dict.fromkeys(weight_keys(g)))
        verify(module)
        text = f"// {kind} programs '{group}', generated by `anec models export`.\n" + print_module(module)
        write_text_atomic(out / f"{group}.ir", text)
        files[f"{group}.ir"] = [g.name for g in graphs]
    save_fp16(out / WEIGHTS, {k: weight(k) for k in keys}, {"format": "anec-weights", "model": kind})
    for name in previous - set(files):
        (out / name).unlink(missing_ok=True)
    info = {"format": FORMAT, **info, "files": files, "weights": WEIGHTS}
    write_text_atomic(out / MODEL_JSON, json.dumps(info, indent=2) + "\n")
    return info


_CHUNK = 1 << 20


def save_fp16(path: str | Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Write ``tensors`` as fp16 safetensors, atomically: each tensor converted once,
    in cache-sized chunks, straight into the file (no copy of the whole file in memory).

    Tensors are laid out by name, as the safetensors library orders tensors of one
    dtype; the conversion rounds like numpy (the runtime's F16C converter when it is
    built, else numpy itself)."""
    names = sorted(tensors)
    arrays = [np.asarray(tensors[k]) for k in names]
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for k, a in zip(names, arrays):
        header[k] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [offset, offset + 2 * a.size]}
        offset += 2 * a.size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    convert = _f32_to_f16()

    def write(f: Any) -> None:
        f.write(struct.pack("<Q", len(head)) + head)
        buf = np.empty(_CHUNK, np.float16)
        for a in arrays:
            flat = a.reshape(-1)
            if flat.dtype == np.float16:
                f.write(memoryview(np.ascontiguousarray(flat)).cast("B"))
                continue
            for i in range(0, flat.size, _CHUNK):
                part = flat[i:i + _CHUNK]
                out = buf[:part.size]
                convert(part, out)
                f.write(memoryview(out).cast("B"))

    replace_file(path, write)


def _f32_to_f16() -> Callable[[np.ndarray, np.ndarray], None]:
    """``convert(src, out)``: src (any float dtype) into the fp16 array ``out``."""
    from anec.runtime import native

    if native.available():
        def convert(src: np.ndarray, out: np.ndarray) -> None:
            if src.dtype == np.float32:
                native.f32_to_f16_into(src, out)
            else:
                out[...] = src.astype(np.float16)
        return convert

    def convert_np(src: np.ndarray, out: np.ndarray) -> None:
        out[...] = src.astype(np.float16)
    return convert_np


_FILE = re.compile(r"[A-Za-z0-9_.-]+\.ir\Z")


def _listed_files(out: Path) -> set[str]:
    """The ``.ir`` files a previous export's ``model.json`` in ``out`` lists (any format)."""
    try:
        files = json.loads((out / MODEL_JSON).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(files, dict):
        return set()
    return {f for f in files if isinstance(f, str) and _FILE.match(f)}


def read_export(path: str | Path) -> dict[str, Any]:
    """The ``model.json`` of an exported directory, checked: the current format, and every
    listed ``.ir`` file present. Older formats are a ModelError naming the re-export command."""
    d = Path(path)
    mj = d / MODEL_JSON
    if not mj.is_file():
        raise ModelError(f"'{path}' is not an exported model (no {MODEL_JSON})",
                         hint="write one with: anec models export {gpt2,llama,bert} CHECKPOINT -o DIR")
    try:
        info = json.loads(mj.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ModelError(f"cannot read {mj}: {e}") from None
    if not isinstance(info, dict):
        raise ModelError(f"{mj} is not a JSON object")
    fmt = info.get("format")
    if fmt != FORMAT:
        what = ("an older anec (one func per layer half; this anec exports one func per bucket "
                "and lets the compiler partition it)" if fmt == "anec-model/1" else f"an unknown format {fmt!r}")
        raise ModelError(f"{mj} is {fmt!r}, written by {what}; this anec reads {FORMAT!r}",
                         hint=_reexport(info, d))
    files = info.get("files")
    if not isinstance(files, dict) or not files or not all(
            isinstance(f, str) and _FILE.match(f) and isinstance(v, list) for f, v in files.items()):
        raise ModelError(f"{mj}: 'files' must map .ir file names to lists of func names")
    for f in files:
        if not (d / f).is_file():
            raise ModelError(f"{d / f} is listed in {MODEL_JSON} but missing",
                             hint=_reexport(info, d))
    return info


def _reexport(info: dict[str, Any], d: Path) -> str:
    kind = info.get("model") if info.get("model") in KINDS else "{gpt2,llama,bert}"
    ckpt = info.get("checkpoint") if isinstance(info.get("checkpoint"), str) else "CHECKPOINT"
    return f"re-export it: anec models export {kind} {ckpt} -o {d}"


def compile_export(path: str | Path, out_dir: str | Path | None,
                   target: str | None = None) -> list[tuple[str, Any, Any]]:
    """Compile every func of an exported directory (weights from its weights file).

    Returns ``(func, artifact, written path or None)`` in file order; each
    func is one artifact directory under ``out_dir`` (written after every func
    compiled), a pipeline when the compiler cut it."""
    from anec.compiler import compile_module
    from anec.ir.parser import parse_file

    d = Path(path)
    info = read_export(d)
    arts: dict[str, Any] = {}
    for f, funcs in info["files"].items():
        module = parse_file(d / f)
        if list(module.funcs) != funcs:
            raise ModelError(f"{d / f} holds funcs {list(module.funcs)}, but {MODEL_JSON} lists {funcs}",
                             hint=_reexport(info, d))
        arts.update(compile_module(module, target=target).artifacts)
    # written once every func compiled: a failure leaves out_dir as it was
    return [(name, art, None if out_dir is None else art.write(Path(out_dir) / name)) for name, art in arts.items()]
