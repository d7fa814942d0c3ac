"""Saving and resuming training: atomic directories, checked on the way back in.

``save_state(trainer, dir)`` writes everything a run needs to continue bit for
bit: the fp32 master weights, AdamW's moments and step count, the loss
scaler, the step index and the hyperparameters::

    dir/trainer.json          format anec-train-state/1
    dir/params.safetensors    fp32 master weights (checkpoint layout; PEFT shapes for LoRA)
    dir/adam_m.safetensors
    dir/adam_v.safetensors

The directory is written to a temporary sibling and renamed into place: a run
killed at any moment leaves the previous state or the new one, never a mix.
``load_state`` treats the directory as hostile: symlinks are not followed,
sizes are bounded by the files, every tensor must match the trainer's
parameters in name, shape and dtype, and every field its type.

``save_hf`` writes a Hugging Face checkpoint (the original config, tokenizer
files and every tensor, trained ones replaced) and ``save_peft`` a PEFT
adapter, both atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from anec.diagnostics import TrainingError

if TYPE_CHECKING:
    from anec.training.trainer import Trainer

FORMAT = "anec-train-state/1"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                    "merges.txt", "tokenizer.model", "generation_config.json")
MAX_JSON = 1 << 20


def _st_bytes(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    from safetensors.numpy import save

    return save({k: np.ascontiguousarray(v) for k, v in tensors.items()},
                metadata=dict(metadata) if metadata else None)


def _write_dir(dest: str | os.PathLike, files: Mapping[str, bytes]) -> Path:
    from anec.mil.artifact import write_tree_atomic

    d = Path(dest)
    if d.exists() and not d.is_dir():
        raise TrainingError(f"cannot write '{d}': it is a file")
    d.parent.mkdir(parents=True, exist_ok=True)
    write_tree_atomic(d, files)
    return d


def save_state(tr: "Trainer", dest: str | os.PathLike) -> Path:
    meta = {
        "format": FORMAT,
        "checkpoint": str(tr.checkpoint_dir),
        "step": tr.step_index,
        "seq_len": tr.seq_len,
        "batch_size": tr.batch_size,
        "lora_rank": tr.lora_rank,
        "adam": {"lr": tr.opt.lr, "beta1": tr.opt.beta1, "beta2": tr.opt.beta2, "eps": tr.opt.eps,
                 "weight_decay": tr.opt.weight_decay, "step_count": tr.opt.step_count},
        "scaler": {"scale": tr.scaler.scale, "good_steps": tr.scaler.good_steps, "skipped": tr.scaler.skipped,
                   "growth_interval": tr.scaler.growth_interval},
        "grad_clip": tr.grad_clip,
    }
    files = {
        "trainer.json": (json.dumps(meta, indent=1) + "\n").encode(),
        "params.safetensors": _st_bytes(tr.params),
        "adam_m.safetensors": _st_bytes(tr.opt.m),
        "adam_v.safetensors": _st_bytes(tr.opt.v),
    }
    return _write_dir(dest, files)


def _read_beneath(d: Path, name: str, limit: int) -> bytes:
    """A regular file directly in ``d`` (no symlink), at most ``limit`` bytes."""
    p = d / name
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise TrainingError(f"cannot read {p}: {e.strerror}",
                            hint="resume from a directory written by anec train") from None
    try:
        st = os.fstat(fd)
        import stat

        if not stat.S_ISREG(st.st_mode):
            raise TrainingError(f"{p} is not a regular file")
        if st.st_size > limit:
            raise TrainingError(f"{p} is {st.st_size} bytes, more than this run's state can be ({limit})")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)
    finally:
        os.close(fd)


def _tensors(d: Path, name: str, want: Mapping[str, np.ndarray], limit: int) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    raw = _read_beneath(d, name, limit)
    try:
        got = load(raw)
    except Exception as e:  # the library's own parse errors
        raise TrainingError(f"{d / name} is not a safetensors file: {e}") from None
    if set(got) != set(want):
        extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
        raise TrainingError(f"{d / name} does not hold this run's tensors"
                            + (f"; unknown: {', '.join(extra[:3])}" if extra else "")
                            + (f"; missing: {', '.join(missing[:3])}" if missing else ""),
                            hint="resume with the same checkpoint and LoRA settings as the saved run")
    for k, arr in got.items():
        if arr.dtype != np.float32 or arr.shape != want[k].shape:
            raise TrainingError(f"{d / name}: '{k}' is {arr.dtype} {list(arr.shape)}, expected float32 "
                                f"{list(want[k].shape)}")
    return {k: np.array(v, copy=True) for k, v in got.items()}


def load_state(tr: "Trainer", src: str | os.PathLike) -> None:
    """Restore ``tr`` from a directory written by :func:`save_state` (nothing changes on error)."""
    d = Path(src)
    if d.is_symlink() or not d.is_dir():
        raise TrainingError(f"no training state in '{d}'", hint="resume from RUN_DIR/state of an earlier run")
    try:
        meta = json.loads(_read_beneath(d, "trainer.json", MAX_JSON).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise TrainingError(f"{d / 'trainer.json'} is not JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise TrainingError(f"{d / 'trainer.json'} is not an anec training state ({FORMAT})")

    def field(obj: Any, key: str, kind: type | tuple[type, ...]) -> Any:
        v = obj.get(key) if isinstance(obj, dict) else None
        if not isinstance(v, kind) or isinstance(v, bool):
            raise TrainingError(f"{d / 'trainer.json'}: field '{key}' is missing or not a number")
        return v

    for key, mine in (("seq_len", tr.seq_len), ("lora_rank", tr.lora_rank)):
        if field(meta, key, int) != mine:
            raise TrainingError(f"the saved run has {key} {meta[key]}, this one {mine}",
                                hint=f"resume with --{key.replace('_', '-')} {meta[key]}")
    step = field(meta, "step", int)
    adam, scaler = meta.get("adam"), meta.get("scaler")
    count = field(adam, "step_count", int)
    scale = float(field(scaler, "scale", (int, float)))
    good = field(scaler, "good_steps", int)
    skipped = field(scaler, "skipped", int)
    if step < 0 or count < 0 or not (0 < scale < float("inf")):
        raise TrainingError(f"{d / 'trainer.json'}: step, step_count and scale must be non-negative/positive")
    limit = sum(a.nbytes for a in tr.params.values()) + (16 << 20)
    params = _tensors(d, "params.safetensors", tr.params, limit)
    m = _tensors(d, "adam_m.safetensors", {k: tr.params[k] for k in _keys(d, "adam_m.safetensors", limit)}, limit)
    v = _tensors(d, "adam_v.safetensors", {k: tr.params[k] for k in m}, limit)
    for k in m:
        if k not in tr.params:
            raise TrainingError(f"{d}: optimizer state for unknown parameter '{k}'")
    # all checked: apply
    tr.params.update(params)
    tr.opt.m, tr.opt.v = m, v
    tr.opt.step_count = count
    tr.scaler.scale, tr.scaler.good_steps, tr.scaler.skipped = scale, good, skipped
    tr.step_index = step
    tr._store = None
    if tr._programs is not None:
        tr._push_weights()


def _keys(d: Path, name: str, limit: int) -> list[str]:
    from safetensors.numpy import load

    try:
        return list(load(_read_beneath(d, name, limit)))
    except TrainingError:
        raise
    except Exception as e:
        raise TrainingError(f"{d / name} is not a safetensors file: {e}") from None


def save_hf(tr: "Trainer", dest: str | os.PathLike) -> Path:
    """The trained model as a Hugging Face checkpoint directory."""
    ckpt = tr.fe.ckpt
    tensors: dict[str, np.ndarray] = {}
    for k in ckpt.keys():
        src = tr.params.get(k)
        arr = src if src is not None else ckpt.get(k)
        tensors[k] = np.asarray(arr, np.float32) if src is not None else np.asarray(arr)
    files = {"model.safetensors": _st_bytes(tensors, {"format": "pt"}),
             "config.json": (ckpt.path / "config.json").read_bytes()}
    for name in _TOKENIZER_FILES:
        p = ckpt.path / name
        if p.is_file() and not p.is_symlink():
            files[name] = p.read_bytes()
    return _write_dir(dest, files)


def save_peft(tr: "Trainer", dest: str | os.PathLike) -> Path:
    """The trained LoRA adapters in PEFT's format (loads with ``PeftModel.from_pretrained``)."""
    tensors = {tr._peft_key(n): np.asarray(a, np.float32) for n, a in tr.params.items()}
    cfg = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": tr.lora_rank, "lora_alpha": tr.lora_alpha,
        "target_modules": sorted(tr.lora_targets), "lora_dropout": 0.0, "bias": "none",
        "fan_in_fan_out": tr.fe.kind == "gpt2", "use_rslora": False, "inference_mode": True,
        "base_model_name_or_path": str(tr.checkpoint_dir),
    }
    files = {"adapter_model.safetensors": _st_bytes(tensors, {"format": "pt"}),
             "adapter_config.json": (json.dumps(cfg, indent=1) + "\n").encode()}
    return _write_dir(dest, files)



__all__ = ["FORMAT", "load_state", "save_hf", "save_peft", "save_state"]
