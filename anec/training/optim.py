"""Host-side optimization: AdamW on fp32 master weights, dynamic loss scaling, clipping.

All state is numpy fp32 (the moments) and plain numbers, saved and restored
exactly by :mod:`anec.training.state`, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

FP16_MAX = 65504.0
"""The largest finite fp16 value: what the programs compute in."""


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
        self._spare: dict[str, tuple] = {}

    def step(self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray],
             decay: Mapping[str, bool] | None = None, lr: float | None = None,
             check: Callable[[str, np.ndarray], bool] | None = None) -> bool:
        """Update ``params`` (fp32) from ``grads``; ``decay[key]`` False skips weight decay.

        New parameters and moments are computed into a second set of buffers and committed
        (the two sets swap) only when every new parameter passes ``check``: otherwise nothing
        changes (parameters, moments, step count) and the result is False. The buffers are
        reused from step to step, so a step allocates nothing."""
        t = self.step_count + 1
        lr = self.lr if lr is None else lr
        step_size = np.float32(lr / (1.0 - self.beta1 ** t))
        inv_bc2 = np.float32(1.0 / (1.0 - self.beta2 ** t))
        b1, b2 = np.float32(self.beta1), np.float32(self.beta2)
        c1, c2 = np.float32(1.0 - self.beta1), np.float32(1.0 - self.beta2)
        new: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for k, g in grads.items():
            p = params[k]
            g = np.asarray(g, np.float32)
            pn, mn, vn, tmp = self._buffers(k, p)
            m, v = self.m.get(k), self.v.get(k)
            np.multiply(g, c1, out=mn)
            if m is not None:
                np.multiply(m, b1, out=tmp)
                mn += tmp
            np.multiply(g, g, out=vn)
            vn *= c2
            if v is not None:
                np.multiply(v, b2, out=tmp)
                vn += tmp
            np.multiply(vn, inv_bc2, out=tmp)
            np.sqrt(tmp, out=tmp)
            tmp += np.float32(self.eps)
            np.divide(mn, tmp, out=tmp)
            tmp *= step_size
            if self.weight_decay and (decay is None or decay.get(k, True)):
                np.multiply(p, np.float32(1.0 - lr * self.weight_decay), out=pn)
            else:
                np.copyto(pn, p)
            pn -= tmp
            if check is not None and not check(k, pn):
                return False
            new[k] = (pn, mn, vn)
        self.step_count = t
        for k, (pn, mn, vn) in new.items():
            old = (params[k], self.m.get(k), self.v.get(k))
            params[k], self.m[k], self.v[k] = pn, mn, vn
            self._spare[k] = (*old, self._spare[k][3])
        return True

    def _buffers(self, k: str, p: np.ndarray) -> tuple[np.ndarray, ...]:
        """The spare (parameter, first moment, second moment, scratch) buffers of ``k``."""
        sp = self._spare.get(k)
        if sp is None or sp[0] is None or sp[0].shape != p.shape or any(b is None for b in sp):
            sp = tuple(np.empty_like(p, dtype=np.float32) for _ in range(4))
            self._spare[k] = sp
        return sp


def global_norm(grads: Mapping[str, np.ndarray]) -> float:
    return math.sqrt(sum(float(np.square(g, dtype=np.float64).sum()) for g in grads.values()))


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
