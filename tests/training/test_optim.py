"""The host optimizer against torch.optim.AdamW, clipping against clip_grad_norm_, the scaler."""

from __future__ import annotations

import numpy as np

from anec.training.optim import FP16_MAX, AdamW, LossScaler, clip_, clip_factor, global_norm
from tests.training.conftest import torch


def test_adamw_matches_torch_over_steps_with_weight_decay():
    rng = np.random.default_rng(0)
    shapes = {"w": (5, 7), "b": (7,)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    tp = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in params.items()}
    opt = AdamW(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
    topt = torch.optim.AdamW([{"params": [tp["w"]], "weight_decay": 0.1}, {"params": [tp["b"]], "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    for _ in range(20):
        grads = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        assert opt.step(params, grads, decay={"w": True, "b": False})
        for k, t in tp.items():
            t.grad = torch.tensor(grads[k])
        topt.step()
    for k in shapes:
        np.testing.assert_allclose(params[k], tp[k].detach().numpy(), rtol=1e-5, atol=1e-6)


def test_clipping_folded_into_the_step_matches_torch():
    """The trainer's step: the norm, then AdamW with the clipping factor, the fp16-range limit and
    the fp16 copy, against clip_grad_norm_ + torch.optim.AdamW."""
    rng = np.random.default_rng(4)
    shapes = {"w": (33, 17), "b": (17,)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    tp = [torch.tensor(v.copy(), requires_grad=True) for v in params.values()]
    opt = AdamW(lr=1e-2, weight_decay=0.1)
    topt = torch.optim.AdamW(tp, lr=1e-2, weight_decay=0.1)
    half = {k: np.empty(s, np.float16) for k, s in shapes.items()}
    for _ in range(10):
        grads = {k: rng.standard_normal(s).astype(np.float32) * 5 for k, s in shapes.items()}
        norm = global_norm(grads)
        assert opt.step(params, grads, grad_scale=clip_factor(norm, 1.0), limit=FP16_MAX, half=half)
        for t, g in zip(tp, grads.values()):
            t.grad = torch.tensor(g)
        tnorm = float(torch.nn.utils.clip_grad_norm_(tp, 1.0))
        topt.step()
        assert abs(norm - tnorm) <= 1e-5 * tnorm
    for t, k in zip(tp, shapes):
        np.testing.assert_allclose(params[k], t.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(half[k], params[k].astype(np.float16))


def test_a_failed_check_changes_nothing():
    params = {"w": np.ones(3, np.float32)}
    opt = AdamW(lr=1.0)
    assert opt.step(params, {"w": np.ones(3, np.float32)})
    snap = (params["w"].copy(), opt.m["w"].copy(), opt.v["w"].copy(), opt.step_count)
    assert not opt.step(params, {"w": np.ones(3, np.float32)}, check=lambda k, a: False)
    assert np.array_equal(params["w"], snap[0]) and np.array_equal(opt.m["w"], snap[1])
    assert np.array_equal(opt.v["w"], snap[2]) and opt.step_count == snap[3]


def test_clip_matches_torch():
    rng = np.random.default_rng(1)
    grads = {"a": rng.standard_normal((4, 4)).astype(np.float32) * 3, "b": rng.standard_normal(4).astype(np.float32)}
    ts = [torch.tensor(v.copy(), requires_grad=True) for v in grads.values()]
    for t, v in zip(ts, grads.values()):
        t.grad = torch.tensor(v.copy())
    ref = float(torch.nn.utils.clip_grad_norm_(ts, 1.0))
    norm = clip_(grads, 1.0)
    assert abs(norm - ref) <= 1e-5 * ref
    for t, v in zip(ts, grads.values()):
        np.testing.assert_allclose(v, t.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert abs(global_norm(grads) - 1.0) < 1e-4


def test_the_scaler_halves_on_overflow_and_grows_after_a_run_of_good_steps():
    s = LossScaler(scale=8.0, growth_interval=3, max_scale=16.0)
    s.update(False)
    assert s.scale == 4.0 and s.skipped == 1
    for _ in range(3):
        s.update(True)
    assert s.scale == 8.0
    for _ in range(6):
        s.update(True)
    assert s.scale == 16.0  # capped
