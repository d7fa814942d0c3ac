"""Host-side optimization: AdamW on fp32 master weights, dynamic loss scaling, clipping.

All state is numpy fp32 (the moments) and plain numbers, saved and restored
exactly by :mod:`anec.training.state`, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from anec.training.kernels import adamw_into, sum_squares

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
        self._scratch: dict[tuple[int, ...], np.ndarray] = {}  # the numpy path's temporary, by shape

    def step(self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray],
             decay: Mapping[str, bool] | None = None, lr: float | None = None,
             check: Callable[[str, np.ndarray], bool] | None = None, *, grad_scale: Any = None,
             limit: float | None = None, half: Mapping[str, np.ndarray] | None = None) -> bool:
        """Update ``params`` (fp32) from ``grads``; ``decay[key]`` False skips weight decay.

        ``grad_scale`` (an fp32 factor, e.g. :func:`clip_factor`'s) multiplies every gradient
        first, as clipping them in place would, without a pass of its own. ``limit``: every new
        parameter must be finite with ``|x| <= limit``, checked in the same pass as the update;
        ``check(key, new)`` is any further test. ``half[key]`` (an fp16 array of the parameter's
        shape) receives the new parameter rounded to fp16, valid when the step commits.

        New parameters and moments are computed into a second set of buffers and committed
        (the two sets swap) only when every new parameter passes the checks: otherwise nothing
        changes (parameters, moments, step count) and the result is False. The buffers are
        reused from step to step, so a step allocates nothing. Each tensor is one pass of the
        C kernel (``anec_adamw_f32``) when the runtime is built, else numpy; both compute every
        element with the same fp32 operations in the same order."""
        t = self.step_count + 1
        lr = self.lr if lr is None else lr
        coef = {"grad_scale": np.float32(1.0 if grad_scale is None else grad_scale),
                "beta1": np.float32(self.beta1), "one_minus_beta1": np.float32(1.0 - self.beta1),
                "beta2": np.float32(self.beta2), "one_minus_beta2": np.float32(1.0 - self.beta2),
                "inv_bias2": np.float32(1.0 / (1.0 - self.beta2 ** t)), "eps": np.float32(self.eps),
                "step_size": np.float32(lr / (1.0 - self.beta1 ** t)),
                "decay_factor": np.float32(1.0 - lr * self.weight_decay), "limit": np.float32(limit or 0.0),
                "scale_grad": grad_scale is not None, "check": limit is not None}
        if limit is not None and not 0.0 <= limit <= float(np.finfo(np.float32).max):
            raise ValueError(f"limit must be a finite fp32 value >= 0, got {limit}")
        new: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for k, g in grads.items():
            p = params[k]
            g = np.asarray(g, np.float32)
            pn, mn, vn = self._buffers(k, p)
            decays = bool(self.weight_decay) and (decay is None or decay.get(k, True))
            h = None if half is None else half.get(k)
            if not adamw_into(p, g, self.m.get(k), self.v.get(k), pn, mn, vn, h, dict(coef, decay=decays),
                              self._scratch):
                return False
            if check is not None and not check(k, pn):
                return False
            new[k] = (pn, mn, vn)
        self.step_count = t
        for k, (pn, mn, vn) in new.items():
            old = (params[k], self.m.get(k), self.v.get(k))
            params[k], self.m[k], self.v[k] = pn, mn, vn
            self._spare[k] = old
        return True

    def _buffers(self, k: str, p: np.ndarray) -> tuple[np.ndarray, ...]:
        """The spare (parameter, first moment, second moment) buffers of ``k``."""
        sp = self._spare.get(k)
        if sp is None or any(b is None or b.shape != p.shape or b.dtype != np.float32 or not b.flags.writeable
                             or not b.flags.c_contiguous for b in sp):
            sp = tuple(np.empty(p.shape, np.float32) for _ in range(3))
            self._spare[k] = sp
        return sp


def global_norm(grads: Mapping[str, np.ndarray]) -> float:
    """The L2 norm of all of ``grads``: Inf or NaN exactly when some gradient is not finite (the
    float64 squares of fp32 values cannot overflow)."""
    return math.sqrt(sum(sum_squares(g) for g in grads.values()))


def clip_factor(norm: float, max_norm: float) -> np.float32 | None:
    """The fp32 factor that brings a global norm ``norm`` down to ``max_norm`` (None: within it)."""
    if max_norm > 0 and norm > max_norm:
        return np.float32(max_norm / (norm + 1e-6))
    return None


def clip_(grads: dict[str, np.ndarray], max_norm: float) -> float:
    """Scale ``grads`` in place so their global L2 norm is at most ``max_norm``; returns the norm before."""
    norm = global_norm(grads)
    f = clip_factor(norm, max_norm)
    if f is not None:
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


__all__ = ["AdamW", "LossScaler", "all_finite", "clip_", "clip_factor", "global_norm"]
