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
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from anec.training.data import Batches, load_tokens
from anec.training.plot import loss_png
from anec.training.state import load_state, save_state
from anec.diagnostics import TrainingError
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


def _lock(run_dir: Path):
    import fcntl

    f = open(run_dir / ".lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise TrainingError(f"another anec train is using '{run_dir}'", hint="wait for it, or use another -o") from None
    return f


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_log(path: Path, upto: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    for line in path.read_text("utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= upto:
            rows.append(row)
    return rows


def train_run(cfg: RunConfig, run_dir: str | os.PathLike, resume: bool = False,
              on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run (or resume) a training run; returns a summary (final loss, steps, timings)."""
    d = Path(run_dir)
    if cfg.steps < 1:
        raise TrainingError(f"--steps must be >= 1, got {cfg.steps}")
    if cfg.save_every < 1:
        raise TrainingError(f"--save-every must be >= 1, got {cfg.save_every}")
    if resume:
        if not (d / "run.json").is_file() or not (d / "state").is_dir():
            raise TrainingError(f"'{d}' holds no run to resume", hint="start it without --resume")
        try:
            saved = json.loads((d / "run.json").read_text("utf-8"))
        except (OSError, ValueError) as e:
            raise TrainingError(f"cannot read {d / 'run.json'}: {e}") from None
        diff = cfg.same_run(saved if isinstance(saved, dict) else {})
        if diff:
            raise TrainingError(f"the run in '{d}' was started with other settings: {', '.join(diff)}",
                                hint="resume with the settings in run.json")
    else:
        if d.exists() and any(d.iterdir()):
            raise TrainingError(f"'{d}' is not empty", hint="resume it with --resume, or choose a new -o")
    d.mkdir(parents=True, exist_ok=True)
    lock = _lock(d)
    try:
        tokens = load_tokens(cfg.data, cfg.checkpoint, _vocab(cfg.checkpoint))
        batches = Batches(tokens, cfg.seq_len, cfg.batch_size, cfg.seed)
        tr = Trainer(cfg.checkpoint, backend=cfg.backend, seq_len=cfg.seq_len, batch_size=cfg.batch_size,
                     lr=cfg.lr, weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip,
                     lora_rank=cfg.lora_rank, target=cfg.target)
        try:
            if resume:
                load_state(tr, d / "state")  # before any compile
            else:
                _write_atomic(d / "run.json", (json.dumps(asdict(cfg), indent=1) + "\n").encode())
            log_rows = _read_log(d / "log.jsonl", tr.step_index)
            _write_atomic(d / "log.jsonl", "".join(json.dumps(r) + "\n" for r in log_rows).encode())
            log = open(d / "log.jsonl", "a", encoding="utf-8")
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
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    log_rows.append(row)
                    if on_step is not None:
                        on_step(row)
                    if tr.step_index % cfg.save_every == 0 or tr.step_index == cfg.steps:
                        save_state(tr, d / "state")
                        _write_atomic(d / "loss.png", loss_png([r["step"] for r in log_rows],
                                                               [r["loss"] for r in log_rows]))
            finally:
                log.close()
            tr.save(d / "model")
            return {"steps": tr.step_index, "final_loss": tr.last_loss, "skipped": tr.scaler.skipped,
                    "loss_scale": tr.scaler.scale, "seconds": time.perf_counter() - t_start,
                    "model": str(d / "model")}
        finally:
            tr.close()
    finally:
        lock.close()


def _vocab(checkpoint: str) -> int:
    from anec.models.generate import decoder_frontend
    from anec.models.hf import load_checkpoint

    return decoder_frontend(load_checkpoint(checkpoint), None).cfg.vocab


__all__ = ["RunConfig", "train_run"]
