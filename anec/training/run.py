"""A training run on disk: what ``anec train`` does.

    RUN_DIR/run.json       the run's settings (a resume must match them)
    RUN_DIR/state/         the resumable state (anec.training.state), every --save-every steps
    RUN_DIR/log.jsonl      one line per step: step, loss, grad_norm, loss_scale, skipped, tokens_per_s
    RUN_DIR/loss.png       the loss curve, redrawn at every save
    RUN_DIR/model/         the trained checkpoint (Hugging Face) or adapter (PEFT), at the end

A run killed at any moment resumes (``resume=True``) from its last saved
state: the programs are compiled only after the state is loaded, the steps
after that state are recomputed on the same batches, and the run ends with
the same weights, bit for bit on the sim, as a run that was never interrupted.
A run killed before its first save has no state: running it again (with or
without ``resume``) starts it from step 0.

Every file of the folder is opened beneath it (``openat`` with
``O_NOFOLLOW`` from one descriptor of the folder, ``O_NONBLOCK`` then a
regular-file check): a symbolic link, FIFO, socket or device where
``.lock``, ``run.json``, ``log.jsonl`` or ``state/`` belongs is refused with
an error naming it, and files are replaced by new temporary files renamed
over them (a link there is replaced, never followed).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from anec.training.data import Batches, load_tokens
from anec.training.plot import loss_png
from anec.training.state import load_state, save_state
from anec.diagnostics import ArtifactError, TrainingError
from anec.fsutil import is_temp_name, parse_json, remove_tree_at, replace_file_at
from anec.mil.beneath import Beneath, kind_of
from anec.training.trainer import Trainer


@dataclass
class RunConfig:
    checkpoint: str
    data: str
    steps: int
    seq_len: int = 64
    batch_size: int = 1
    lr: float = 3e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    lora_rank: int = 0
    seed: int = 0
    save_every: int = 50
    backend: str = "auto"
    target: str | None = None

    def same_run(self, other: dict[str, Any]) -> list[str]:
        """Settings that differ from a saved run's (the step count and backend may change)."""
        mine = asdict(self)
        return [k for k in mine if k not in ("steps", "backend", "save_every") and other.get(k) != mine[k]]


MAX_RUN_JSON = 1 << 20
MAX_LOG = 1 << 30
"""Bounds of the run folder files read back on resume (run.json, log.jsonl)."""
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_OWN_FILES = ("run.json", "log.jsonl", "loss.png")
_OWN_TEMP = re.compile(r"\.(run\.json|log\.jsonl|loss\.png)\.([0-9a-f]{8}\.tmp|tmp[0-9]+-[0-9a-f]+)\Z")
"""The temporary files of a killed write of the run's own files (``.log.jsonl.XXXXXXXX.tmp``;
older versions wrote ``.log.jsonl.tmpPID-XXXX``)."""


def _open_in(rd: Beneath, name: str, flags: int, what: str) -> int:
    """``openat(run dir, name)`` without following a link and without blocking on a FIFO;
    the descriptor of a regular file, or a TrainingError naming the file."""
    path = rd.path / name
    try:
        fd = os.open(name, flags | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, 0o666, dir_fd=rd.fileno)
    except OSError as e:
        kind = rd.kind(name)
        if kind not in (None, "file"):
            raise TrainingError(f"cannot open {what} '{path}': it is a {kind}",
                                hint="the files of a run folder are never followed through links; "
                                     "remove it and run again") from None
        raise TrainingError(f"cannot open {what} '{path}': {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise TrainingError(f"cannot open {what} '{path}': it is a {kind_of(st.st_mode)}, not a regular file",
                            hint="remove it and run again")
    os.set_blocking(fd, True)
    return fd


def _lock(rd: Beneath) -> int:
    """``flock`` on RUN_DIR/.lock (never followed through a link); its descriptor."""
    import fcntl

    fd = _open_in(rd, ".lock", os.O_RDWR | os.O_CREAT, "lock file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise TrainingError(f"another anec train is using '{rd.path}'", hint="wait for it, or use another -o") from None
    return fd


def _write_atomic(rd: Beneath, name: str, data: bytes) -> None:
    """Replace RUN_DIR/name by ``data`` (:func:`anec.fsutil.replace_file_at`: a new temporary
    file, never an existing one nor through a link, fsynced, renamed over ``name``; a link
    there is replaced, not followed)."""
    try:
        replace_file_at(rd.fileno, name, lambda f: f.write(data), mode=0o666)
    except OSError as e:
        raise TrainingError(f"cannot write '{rd.path / name}': {e.strerror or e}") from None


_WRITE_TEMP = re.compile(r"\.(state|model)\.(anec-tmp-[A-Za-z0-9_]+|anec-lock|[A-Za-z0-9_]{8}\.(tmp|old))\Z")
"""What a killed write of ``state/`` or ``model/`` leaves (its temporary directory, its lock file)."""


def _remove_own_temps(rd: Beneath) -> None:
    """The leftovers of killed runs: temporary files (``.log.jsonl.XXXXXXXX.tmp``) and the
    temporary directories and lock files of ``state/`` and ``model/`` writes. Removed (the
    run's lock is held, so no writer of this folder is alive), never followed."""
    for n in rd.names():
        if not (_OWN_TEMP.match(n) or _WRITE_TEMP.match(n)):
            continue
        try:
            remove_tree_at(rd.fileno, n)
        except OSError:
            pass


def _leftover(name: str) -> bool:
    """Entries a run killed before its first save may leave, which a new run replaces."""
    return (name in (".lock", "run.json", "log.jsonl") or bool(_OWN_TEMP.match(name))
            or is_temp_name(name) or name.endswith(".anec-lock"))


def _read_json(rd: Beneath, name: str) -> dict[str, Any]:
    where = str(rd.path / name)
    try:
        obj = parse_json(rd.read(name, MAX_RUN_JSON, "run settings"), where, "run settings")
    except ArtifactError as e:
        raise TrainingError(e.message, hint="start the run again in a new -o") from None
    if not isinstance(obj, dict):
        raise TrainingError(f"{where}: the run settings are not a JSON object", hint="start the run again in a new -o")
    return obj


def _read_log(rd: Beneath, upto: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if rd.kind("log.jsonl") is None:
        return rows
    try:
        raw = rd.read("log.jsonl", MAX_LOG, "training log")
    except ArtifactError as e:
        raise TrainingError(e.message, hint="remove it (it is rewritten from the saved state's steps) "
                                            "and resume again") from None
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a line cut by a kill
        if (isinstance(row, dict) and type(row.get("step")) is int and 1 <= row["step"] <= upto
                and isinstance(row.get("loss"), (int, float))):
            rows.append(row)
    return rows


def train_run(cfg: RunConfig, run_dir: str | os.PathLike, resume: bool = False,
              on_step: Callable[[dict[str, Any]], None] | None = None,
              on_note: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) a training run; returns a summary (final loss, steps, timings).

    ``resume`` continues from RUN_DIR/state; a run killed before its first save has no
    state, and resuming it starts it again from step 0 (``on_note`` is told so). Without
    ``resume`` the folder must be new, empty, or hold only what such a run leaves."""
    d = Path(run_dir)
    if cfg.steps < 1:
        raise TrainingError(f"--steps must be >= 1, got {cfg.steps}")
    if cfg.save_every < 1:
        raise TrainingError(f"--save-every must be >= 1, got {cfg.save_every}")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or not 0 <= cfg.seed < 2 ** 63:
        raise TrainingError(f"--seed must be an integer in [0, 2^63), got {cfg.seed!r}")
    if resume and not d.is_dir():
        raise TrainingError(f"'{d}' holds no run to resume", hint="start it without --resume")
    if os.path.lexists(d) and not d.is_dir():
        raise TrainingError(f"cannot use '{d}' as a run folder: it is a file", hint="choose a new -o")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TrainingError(f"cannot create the run folder '{e.filename or d}': {e.strerror}") from None
    try:
        rd = Beneath.open(d)
    except ArtifactError as e:
        raise TrainingError(e.message) from None
    with rd:
        lock = _lock(rd)
        try:
            return _train(cfg, rd, resume, on_step, on_note)
        finally:
            os.close(lock)


def _train(cfg: RunConfig, rd: Beneath, resume: bool, on_step: Callable[[dict[str, Any]], None] | None,
           on_note: Callable[[str], None] | None) -> dict[str, Any]:
    d = rd.path
    _remove_own_temps(rd)
    names = rd.names()
    fresh = not resume
    if resume:
        if rd.kind("run.json") is None:
            raise TrainingError(f"'{d}' holds no run to resume", hint="start it without --resume")
        saved = _read_json(rd, "run.json")
        diff = cfg.same_run(saved)
        if diff:
            raise TrainingError(f"the run in '{d}' was started with other settings: {', '.join(diff)}",
                                hint="resume with the settings in run.json")
        kind = rd.kind("state")
        if kind is None:
            fresh = True
            if on_note is not None:
                on_note(f"'{d}' has no saved state yet (the run stopped before its first save): "
                        "starting it again from step 0")
        elif kind != "directory":
            raise TrainingError(f"cannot resume from '{d / 'state'}': it is a {kind}",
                                hint="the state is never followed through links; start the run in a new -o")
    else:
        others = [n for n in names if not _leftover(n)]
        if others:
            raise TrainingError(f"'{d}' is not empty (it holds '{others[0]}')",
                                hint="resume it with --resume, or choose a new -o")
    tokens = load_tokens(cfg.data, cfg.checkpoint, _vocab(cfg.checkpoint))
    batches = Batches(tokens, cfg.seq_len, cfg.batch_size, cfg.seed)
    tr = Trainer(cfg.checkpoint, backend=cfg.backend, seq_len=cfg.seq_len, batch_size=cfg.batch_size,
                 lr=cfg.lr, weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip,
                 lora_rank=cfg.lora_rank, target=cfg.target)
    try:
        if fresh:
            _write_atomic(rd, "run.json", (json.dumps(asdict(cfg), indent=1) + "\n").encode())
        else:
            load_state(tr, d / "state")  # before any compile
        log_rows = _read_log(rd, tr.step_index) if not fresh else []
        _write_atomic(rd, "log.jsonl", "".join(json.dumps(r) + "\n" for r in log_rows).encode())
        log_path = d / "log.jsonl"
        log = os.fdopen(_open_in(rd, "log.jsonl", os.O_WRONLY | os.O_APPEND, "training log"), "a", encoding="utf-8")
        t_start = time.perf_counter()
        try:
            while tr.step_index < cfg.steps:
                ids = batches.batch(tr.step_index)
                t0 = time.perf_counter()
                tr.step(ids)
                dt = time.perf_counter() - t0
                row = dict(tr.history[-1])
                row["tokens_per_s"] = ids.shape[0] * (ids.shape[1] - 1) / dt if dt > 0 else 0.0
                row.update({k: round(v, 6) for k, v in tr.timings.items()})
                try:
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                except OSError as e:
                    raise TrainingError(f"cannot write '{log_path}': {e.strerror or e}") from None
                log_rows.append(row)
                if on_step is not None:
                    on_step(row)
                if tr.step_index % cfg.save_every == 0 or tr.step_index == cfg.steps:
                    save_state(tr, d / "state")
                    _write_atomic(rd, "loss.png", loss_png([r["step"] for r in log_rows],
                                                           [r["loss"] for r in log_rows]))
        finally:
            try:
                log.close()
            except OSError:
                pass
        tr.save(d / "model")
        return {"steps": tr.step_index, "final_loss": tr.last_loss, "skipped": tr.scaler.skipped,
                "loss_scale": tr.scaler.scale, "seconds": time.perf_counter() - t_start,
                "model": str(d / "model")}
    finally:
        tr.close()


def _vocab(checkpoint: str) -> int:
    from anec.models.generate import decoder_frontend
    from anec.models.hf import load_checkpoint

    return decoder_frontend(load_checkpoint(checkpoint), None).cfg.vocab


__all__ = ["RunConfig", "train_run"]
