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
        """Update ``params`` in place (fp32) from ``grads``; ``decay[key]`` False skips weight
        decay. With ``check``, every new tensor is computed and checked first: if any fails,
        nothing changes (parameters, moments, step count) and the result is False."""
        if check is not None:
            for k, g in grads.items():
                p, _, _ = self._update(k, params[k], g, decay, lr, self.step_count + 1, commit=False)
                if not check(k, p):
                    return False
        self.step_count += 1
        for k, g in grads.items():
            self._update(k, params[k], g, decay, lr, self.step_count, commit=True)
        return True

    def _update(self, k: str, p: np.ndarray, g: np.ndarray, decay: Mapping[str, bool] | None,
                lr: float | None, t: int, commit: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lr = self.lr if lr is None else lr
        g = g.astype(np.float32, copy=False)
        m = self.m.get(k)
        v = self.v.get(k)
        m = np.zeros_like(p) if m is None else m
        v = np.zeros_like(p) if v is None else v
        if not commit:
            p, m, v = p.copy(), m.copy(), v.copy()
        if self.weight_decay and (decay is None or decay.get(k, True)):
            p *= np.float32(1.0 - lr * self.weight_decay)
        m *= np.float32(self.beta1)
        m += np.float32(1.0 - self.beta1) * g
        v *= np.float32(self.beta2)
        v += np.float32(1.0 - self.beta2) * (g * g)
        bc1 = 1.0 - self.beta1 ** t
        bc2 = 1.0 - self.beta2 ** t
        denom = np.sqrt(v / np.float32(bc2)) + np.float32(self.eps)
        p -= np.float32(lr / bc1) * (m / denom)
        if commit:
            self.m[k], self.v[k] = m, v
        return p, m, v


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
