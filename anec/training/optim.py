"""Host-side optimization: AdamW on fp32 master weights, dynamic loss scaling, clipping.

All state is numpy fp32 (the moments) and plain numbers, saved and restored
exactly by :mod:`anec.training.state`, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np


@dataclass
class AdamW:
    """Decoupled weight decay Adam (Loshchilov & Hutter), as ``torch.optim.AdamW``."""

    lr: float = 3e-4
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    step_count: int = 0

    def __post_init__(self) -> None:
        self.m: dict[str, np.ndarray] = {}
        self.v: dict[str, np.ndarray] = {}

    def step(self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray],
             decay: Mapping[str, bool] | None = None, lr: float | None = None,
             check: Callable[[str, np.ndarray], bool] | None = None) -> bool:
        """Update ``params`` (fp32) from ``grads``; ``decay[key]`` False skips weight decay.

        New parameters and moments are computed into new arrays and committed only when every
        new parameter passes ``check``: otherwise nothing changes (parameters, moments, step
        count) and the result is False."""
        t = self.step_count + 1
        lr = self.lr if lr is None else lr
        step_size = np.float32(lr / (1.0 - self.beta1 ** t))
        inv_bc2 = np.float32(1.0 / (1.0 - self.beta2 ** t))
        b1, b2 = np.float32(self.beta1), np.float32(self.beta2)
        new: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for k, g in grads.items():
            p = params[k]
            g = np.asarray(g, np.float32)
            m = self.m.get(k)
            v = self.v.get(k)
            m = (1 - b1) * g if m is None else b1 * m + (1 - b1) * g
            g2 = g * g
            v = (1 - b2) * g2 if v is None else b2 * v + (1 - b2) * g2
            denom = np.sqrt(v * inv_bc2)
            denom += np.float32(self.eps)
            upd = m / denom
            upd *= step_size
            if self.weight_decay and (decay is None or decay.get(k, True)):
                pn = p * np.float32(1.0 - lr * self.weight_decay)
                pn -= upd
            else:
                pn = p - upd
            if check is not None and not check(k, pn):
                return False
            new[k] = (pn, m, v)
        self.step_count = t
        for k, (pn, m, v) in new.items():
            params[k] = pn
            self.m[k], self.v[k] = m, v
        return True


def global_norm(grads: Mapping[str, np.ndarray]) -> float:
    return math.sqrt(sum(float(np.dot(g.reshape(-1).astype(np.float64), g.reshape(-1).astype(np.float64)))
                         for g in grads.values()))


def clip_(grads: dict[str, np.ndarray], max_norm: float) -> float:
    """Scale ``grads`` in place so their global L2 norm is at most ``max_norm``; returns the norm before."""
    norm = global_norm(grads)
    if max_norm > 0 and norm > max_norm:
        f = np.float32(max_norm / (norm + 1e-6))
        for g in grads.values():
            g *= f
    return norm


@dataclass
class LossScaler:
    """Dynamic loss scaling for fp16 backward programs.

    The logits' gradient is multiplied by ``scale`` before the backward
    program and every gradient divided by it after. A gradient with an Inf or
    NaN skips the step and halves the scale; ``growth_interval`` finite steps
    in a row double it (at most ``max_scale``)."""

    scale: float = 2.0 ** 10
    growth_interval: int = 200
    min_scale: float = 1.0
    max_scale: float = 2.0 ** 16
    good_steps: int = 0
    skipped: int = 0

    def update(self, finite: bool) -> None:
        if not finite:
            self.scale = max(self.min_scale, self.scale / 2)
            self.good_steps = 0
            self.skipped += 1
            return
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale = min(self.max_scale, self.scale * 2)
            self.good_steps = 0


def all_finite(grads: Mapping[str, np.ndarray]) -> bool:
    return all(bool(np.isfinite(g).all()) for g in grads.values())


__all__ = ["AdamW", "LossScaler", "all_finite", "clip_", "global_norm"]
