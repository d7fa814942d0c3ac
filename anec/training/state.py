"""Saving and resuming training: atomic directories, checked on the way back in.

``save_state(trainer, dir)`` writes everything a run needs to continue bit for
bit: the fp32 master weights, AdamW's moments and step count, the loss
scaler, the step index and the hyperparameters::

    dir/trainer.json          format anec-train-state/2
    dir/params.safetensors    fp32 master weights (checkpoint layout; PEFT shapes for LoRA)
    dir/adam_m.safetensors
    dir/adam_v.safetensors

The directory is written to a temporary sibling and renamed into place: a run
killed at any moment leaves the previous state or the new one, never a mix.
``load_state`` treats the directory as hostile (see its docstring): it is
read through :class:`~anec.mil.beneath.Beneath` (no symbolic link followed,
FIFOs and devices refused without blocking, sizes bounded), every field is
checked for type and range, the model identity (the sha256 of the
checkpoint's ``config.json``) must be the trainer's, and every tensor must
match the trainer's parameters in name, shape and dtype and be finite (second
moments non-negative). There is no random state to restore: the batches are
a function of (seed, step) and LoRA's initialization a fixed seed.

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

FORMAT = "anec-train-state/2"
FORMAT_V1 = "anec-train-state/1"
"""States of format 1 (no ``model_config_sha256``) still load."""
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                    "merges.txt", "tokenizer.model", "generation_config.json")
MAX_JSON = 1 << 20


def _st_bytes(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    from safetensors.numpy import save

    return save({k: np.ascontiguousarray(v) for k, v in tensors.items()},
                metadata=dict(metadata) if metadata else None)


def _write_dir(dest: str | os.PathLike, files: Mapping[str, bytes]) -> Path:
    from anec.fsutil import write_tree_atomic

    from anec.diagnostics import ArtifactError

    d = Path(dest)
    if d.exists() and not d.is_dir():
        raise TrainingError(f"cannot write '{d}': it is a file")
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        write_tree_atomic(d, files)
    except OSError as e:
        raise TrainingError(f"cannot write '{d}': {e.strerror or e}") from None
    except ArtifactError as e:  # the write's own error: "cannot write artifact '<path>': <reason>"
        raise TrainingError(e.message.replace("artifact ", "", 1), hint=e.hint) from None
    return d


def save_state(tr: "Trainer", dest: str | os.PathLike) -> Path:
    state = tr.state_dict()
    adam = dict(state["adam"])
    m, v = adam.pop("m"), adam.pop("v")
    meta = {
        "format": FORMAT,
        "checkpoint": str(tr.checkpoint_dir),
        "model_config_sha256": config_sha256(tr.checkpoint_dir),
        "step": state["step"],
        "seq_len": tr.seq_len,
        "batch_size": tr.batch_size,
        "lora_rank": tr.lora_rank,
        "adam": adam,
        "scaler": state["scaler"],
        "grad_clip": state["grad_clip"],
    }
    files = {
        "trainer.json": (json.dumps(meta, indent=1) + "\n").encode(),
        "params.safetensors": _st_bytes(state["params"]),
        "adam_m.safetensors": _st_bytes(m),
        "adam_v.safetensors": _st_bytes(v),
    }
    return _write_dir(dest, files)


MAX_STEP = 10**9
"""The largest step index (and AdamW step count) a state may hold: a billion steps."""
_CLIP_MAX = 1e12


def config_sha256(checkpoint: str | os.PathLike) -> str | None:
    """The sha256 of the checkpoint's ``config.json``: the model a state was trained from."""
    import hashlib

    try:
        return hashlib.sha256((Path(checkpoint) / "config.json").read_bytes()).hexdigest()
    except OSError:
        return None


def _field(meta: Any, path: str, where: str) -> Any:
    """The value at ``path`` (``adam.step_count``) of the JSON object ``meta``."""
    obj = meta
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            raise TrainingError(f"{where}: field '{path}' is missing",
                                hint="resume from RUN_DIR/state written by anec train")
        obj = obj[key]
    return obj


def _int_field(meta: Any, path: str, where: str, lo: int, hi: int) -> int:
    v = _field(meta, path, where)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise TrainingError(f"{where}: field '{path}': expected an integer in [{lo}, {hi}], got {_show(v)}",
                            hint="the state is damaged or was not written by anec train")
    return v


def _float_field(meta: Any, path: str, where: str, lo: float, hi: float, *, open_lo: bool = False) -> float:
    v = _field(meta, path, where)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
    if ok:
        v = float(v)
        ok = (lo < v if open_lo else lo <= v) and v <= hi
    if not ok:
        interval = f"({lo}, {hi}]" if open_lo else f"[{lo}, {hi}]"
        raise TrainingError(f"{where}: field '{path}': expected a finite number in {interval}, got {_show(v)}",
                            hint="the state is damaged or was not written by anec train")
    return float(v)


def _show(v: Any) -> str:
    s = json.dumps(v) if isinstance(v, (int, float, str, bool, type(None))) else type(v).__name__
    return s if len(s) <= 40 else s[:37] + "..."


def _read(d: Any, name: str, limit: int, what: str) -> bytes:
    """A regular file directly in the open state directory ``d`` (a Beneath): no link
    followed, a FIFO or device refused without blocking, at most ``limit`` bytes."""
    from anec.diagnostics import ArtifactError

    try:
        return d.read(name, limit, what)
    except ArtifactError as e:
        raise TrainingError(e.message, hint="resume from a directory written by anec train") from None


def _tensors(d: Any, name: str, want: Mapping[str, np.ndarray], limit: int, *,
             subset: bool = False) -> dict[str, np.ndarray]:
    """The fp32 tensors of ``name``, each one of ``want`` with its shape (``subset``: some of them)."""
    from safetensors.numpy import load

    where = d.path / name
    raw = _read(d, name, limit, "training state")
    try:
        got = load(raw)
    except Exception as e:  # the library's own parse errors
        raise TrainingError(f"{where} is not a safetensors file: {str(e)[:200]}") from None
    extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
    if extra or (missing and not subset):
        raise TrainingError(f"{where} does not hold this run's tensors"
                            + (f"; unknown: {', '.join(extra[:3])}" if extra else "")
                            + (f"; missing: {', '.join(missing[:3])}" if missing and not subset else ""),
                            hint="resume with the same checkpoint and LoRA settings as the saved run")
    for k in sorted(got):
        arr = got[k]
        if arr.dtype != np.float32 or arr.shape != want[k].shape:
            raise TrainingError(f"{where}: '{k}' is {arr.dtype} {list(arr.shape)}, expected float32 "
                                f"{list(want[k].shape)}")
        bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
        if bad:
            raise TrainingError(f"{where}: tensor '{k}' holds {bad} NaN or infinite values",
                                hint="the state is damaged; resume from an earlier copy or start again")
    return {k: np.array(v, copy=True) for k, v in got.items()}


def load_state(tr: "Trainer", src: str | os.PathLike) -> None:
    """Restore ``tr`` from a directory written by :func:`save_state` (nothing changes on error).

    Everything is checked before anything is applied: the files are read beneath ``src``
    (no symbolic link followed, no FIFO or device opened, sizes bounded), ``trainer.json``
    is strict JSON whose every field has its type and range (steps in [0, MAX_STEP], the
    loss scale finite and positive, the hyperparameters finite), the model it was trained
    from is this trainer's (the sha256 of the checkpoint's config.json), and every tensor
    is fp32 of its parameter's shape and finite (parameters within fp16's range, second
    moments >= 0)."""
    from anec.diagnostics import ArtifactError
    from anec.mil.beneath import Beneath

    try:
        d = Beneath.open(src)
    except ArtifactError:
        raise TrainingError(f"no training state in '{src}'",
                            hint="resume from RUN_DIR/state of an earlier run") from None
    with d:
        _load(tr, d)


def _load(tr: "Trainer", d: Any) -> None:
    from anec.diagnostics import ArtifactError
    from anec.fsutil import parse_json

    from anec.training.optim import FP16_MAX, LossScaler

    where = str(d.path / "trainer.json")
    raw = _read(d, "trainer.json", MAX_JSON, "training state")
    try:
        meta = parse_json(raw, where, "training state")
    except ArtifactError as e:
        reason = e.message[len(where) + 2:] if e.message.startswith(where + ": ") else e.message
        raise TrainingError(f"{where} is not JSON: {reason}",
                            hint="the state is damaged or was not written by anec train") from None
    if not isinstance(meta, dict) or meta.get("format") not in (FORMAT, FORMAT_V1):
        raise TrainingError(f"{where} is not an anec training state ({FORMAT})")
    for key, mine in (("seq_len", tr.seq_len), ("lora_rank", tr.lora_rank)):
        saved = _int_field(meta, key, where, 0 if key == "lora_rank" else 1, 1 << 31)
        if saved != mine:
            raise TrainingError(f"{where}: field '{key}': the saved run has {key} {saved}, this one {mine}",
                                hint=f"resume with --{key.replace('_', '-')} {saved}")
    _int_field(meta, "batch_size", where, 1, 1 << 31)
    if meta["format"] == FORMAT:  # the model the state belongs to (format 1 did not record it)
        model = _field(meta, "model_config_sha256", where)
        if not isinstance(model, str) or len(model) != 64:
            raise TrainingError(f"{where}: field 'model_config_sha256': expected a sha256 hex digest, "
                                f"got {_show(model)}")
        mine = config_sha256(tr.checkpoint_dir)
        if model != mine:
            raise TrainingError(f"{where}: field 'model_config_sha256': the state was trained from another "
                                f"model than '{tr.checkpoint_dir}' (its config.json differs)",
                                hint="resume with the checkpoint the run was started from")
    step = _int_field(meta, "step", where, 0, MAX_STEP)
    count = _int_field(meta, "adam.step_count", where, 0, step)
    for name in ("lr", "weight_decay"):
        _float_field(meta, f"adam.{name}", where, 0.0, 1e6)
    for name in ("beta1", "beta2"):
        _float_field(meta, f"adam.{name}", where, 0.0, 1.0)
    _float_field(meta, "adam.eps", where, 0.0, 1.0, open_lo=True)
    lim = LossScaler()
    scale = _float_field(meta, "scaler.scale", where, 0.0, lim.max_scale, open_lo=True)
    interval = _int_field(meta, "scaler.growth_interval", where, 1, MAX_STEP)
    good = _int_field(meta, "scaler.good_steps", where, 0, interval)
    skipped = _int_field(meta, "scaler.skipped", where, 0, step)
    _float_field(meta, "grad_clip", where, 0.0, _CLIP_MAX)
    if count + skipped > step:
        raise TrainingError(f"{where}: fields 'adam.step_count' ({count}) and 'scaler.skipped' ({skipped}) "
                            f"add up to more than 'step' ({step})",
                            hint="the state is damaged or was not written by anec train")
    limit = sum(a.nbytes for a in tr.params.values()) + (16 << 20)
    params = _tensors(d, "params.safetensors", tr.params, limit)
    for k in sorted(params):
        big = float(np.max(np.abs(params[k]), initial=0.0))
        if big > FP16_MAX:
            raise TrainingError(f"{d.path / 'params.safetensors'}: tensor '{k}' has a value of magnitude "
                                f"{big:g}, beyond fp16's range ({FP16_MAX:g}) the programs compute in",
                                hint="the state is damaged; resume from an earlier copy or start again")
    m = _tensors(d, "adam_m.safetensors", tr.params, limit, subset=True)
    v = _tensors(d, "adam_v.safetensors", tr.params, limit, subset=True)
    if set(m) != set(v) or (count > 0 and set(m) != set(tr.params)) or (count == 0 and m):
        raise TrainingError(f"{d.path}: the AdamW moments do not match the step count {count} (first moments "
                            f"for {len(m)}, second moments for {len(v)} of {len(tr.params)} parameters)",
                            hint="the state is damaged or was not written by anec train")
    for k in sorted(v):
        neg = int(np.count_nonzero(v[k] < 0))
        if neg:
            raise TrainingError(f"{d.path / 'adam_v.safetensors'}: tensor '{k}' holds {neg} negative values "
                                "(a second moment is a mean of squares, never negative)",
                                hint="the state is damaged; resume from an earlier copy or start again")
    # all checked: apply
    tr.load_state_dict({"step": step, "params": params,
                        "adam": {"m": m, "v": v, "step_count": count},
                        "scaler": {"scale": scale, "good_steps": good, "skipped": skipped}})


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
    tensors = {tr.peft_key(n): np.asarray(a, np.float32) for n, a in tr.params.items()}
    cfg = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": tr.lora_rank, "lora_alpha": tr.lora_alpha,
        "target_modules": sorted(tr.lora_targets), "lora_dropout": 0.0, "bias": "none",
        "fan_in_fan_out": tr.fe.kind == "gpt2", "use_rslora": False, "inference_mode": True,
        "base_model_name_or_path": str(tr.checkpoint_dir),
    }
    files = {"adapter_model.safetensors": _st_bytes(tensors, {"format": "pt"}),
             "adapter_config.json": (json.dumps(cfg, indent=1) + "\n").encode()}
    return _write_dir(dest, files)



__all__ = ["FORMAT", "MAX_STEP", "config_sha256", "load_state", "save_hf", "save_peft", "save_state"]
