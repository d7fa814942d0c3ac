"""Optimizer steps on the sim: loss tracks a PyTorch fp32 run, compiles stop after the first
step, bad steps are skipped without a trace, long runs stay finite."""

from __future__ import annotations

import numpy as np
import pytest

from anec.training import Trainer
from anec.training.data import Batches, load_tokens
from tests.training.conftest import hf, torch


def batches(ckpt, corpus, seq_len, batch):
    return Batches(load_tokens(corpus, ckpt, 320), seq_len, batch, seed=0)


def test_loss_tracks_pytorch_adamw_over_200_steps(gpt2_ckpt, corpus):
    """Same initial weights, same 200 batches, same AdamW (lr 3e-3, betas 0.9/0.999, clip 1.0):
    the final loss (mean of the last 10 steps) within 5% of PyTorch fp32's."""
    data = batches(gpt2_ckpt, corpus, 32, 2)
    steps, lr = 200, 3e-3
    ours = []
    with Trainer(gpt2_ckpt, backend="sim", seq_len=32, lr=lr, grad_clip=1.0) as tr:
        for k in range(steps):
            ours.append(tr.step(data.batch(k)))
        assert tr.scaler.skipped <= 10  # the dynamic scale finds its level in a few halvings
    m = hf(gpt2_ckpt)
    m.train(False)
    opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    ref = []
    for k in range(steps):
        ids = torch.tensor(data.batch(k))
        loss = m(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        ref.append(float(loss.detach()))
    assert abs(ours[0] - ref[0]) <= 1e-3 * ref[0]
    a, b = float(np.mean(ours[-10:])), float(np.mean(ref[-10:]))
    assert ours[-1] < 0.8 * ours[0]  # it learned
    assert abs(a - b) <= 0.05 * b, (a, b)


def test_compiles_stop_after_the_first_step(llama_ckpt, corpus):
    from anec.runtime import Runtime

    data = batches(llama_ckpt, corpus, 16, 1)
    with Runtime("sim") as rt:
        tr = Trainer(llama_ckpt, backend="sim", seq_len=16, runtime=rt)
        tr.step(data.batch(0))
        after_first = rt.stats
        for k in range(1, 6):
            tr.step(data.batch(k))
        st = rt.stats
        assert st["compiles"] == after_first["compiles"] and st["process_compiles"] == after_first["process_compiles"]
        assert st["loads"] == after_first["loads"]
        assert st["reloads_inputs"] - after_first["reloads_inputs"] == 2 * 5  # forward and backward, 5 steps
        tr.close()


def test_a_non_finite_step_is_skipped_and_the_scale_halves(gpt2_ckpt, corpus):
    data = batches(gpt2_ckpt, corpus, 16, 1)
    with Trainer(gpt2_ckpt, backend="sim", seq_len=16, loss_scale=2.0 ** 40) as tr:
        before = {k: v.copy() for k, v in tr.params.items()}
        tr.step(data.batch(0))  # 2**40 overflows fp16 in the backward program
        assert tr.history[-1]["skipped"] and tr.scaler.skipped == 1 and tr.scaler.scale == 2.0 ** 39
        assert all(np.array_equal(before[k], tr.params[k]) for k in before)
        assert tr.opt.step_count == 0
        while tr.history[-1]["skipped"]:
            tr.step(data.batch(tr.step_index))
        assert tr.scaler.scale <= 2.0 ** 16 and tr.opt.step_count == 1


def test_a_step_leaving_the_fp16_range_is_skipped(gpt2_ckpt, corpus):
    data = batches(gpt2_ckpt, corpus, 16, 1)
    with Trainer(gpt2_ckpt, backend="sim", seq_len=16, lr=1e6) as tr:
        before = {k: v.copy() for k, v in tr.params.items()}
        tr.step(data.batch(0))  # Adam moves every weight by ~lr: beyond 65504
        assert tr.history[-1]["skipped"]
        assert all(np.array_equal(before[k], tr.params[k]) for k in before)
        assert tr.opt.step_count == 0 and not tr.opt.m


def test_a_thousand_steps_stay_finite(llama_ckpt, corpus):
    data = batches(llama_ckpt, corpus, 8, 1)
    with Trainer(llama_ckpt, backend="sim", seq_len=8, lr=1e-3) as tr:
        losses = [tr.step(data.batch(k)) for k in range(1000)]
    assert all(np.isfinite(losses))
    assert np.mean(losses[-50:]) < np.mean(losses[:50])


def test_steps_with_saved_activations_reload_each_program_with_its_own_weights(gpt2_ckpt, corpus):
    """With saved activations the backward program does not read every weight (a bias only shifts
    forward values it takes as inputs): each program is reloaded with the weights it holds, and the
    programs then compute with the new weights (a forward call equals the interpreter's)."""
    data = batches(gpt2_ckpt, corpus, 16, 1)
    with Trainer(gpt2_ckpt, backend="sim", seq_len=16, activations="save", lr=1e-2) as tr:
        for k in range(3):
            tr.step(data.batch(k))
        assert not any(h["skipped"] for h in tr.history)
        with Trainer(gpt2_ckpt, backend="interp", seq_len=16, activations="save") as ref:
            ref.params.update({k: v.copy() for k, v in tr.params.items()})
            ref._push_weights()
            ids = np.asarray(data.batch(3))
            ours, theirs = tr.gradients(ids), ref.gradients(ids)
    assert abs(tr.last_loss - ref.last_loss) <= 1e-2 * ref.last_loss
    for k in ours:
        cos = float(np.dot(ours[k].ravel(), theirs[k].ravel()) /
                    (np.linalg.norm(ours[k]) * np.linalg.norm(theirs[k]) + 1e-30))
        assert cos > 0.99 or np.linalg.norm(theirs[k]) < 1e-6, k


def test_state_dict_resumes_a_trainer_to_the_same_steps(gpt2_ckpt, corpus):
    """A second Trainer given the first's ``state_dict()`` after 3 steps takes the same next
    steps: the same losses and bit-identical parameters and moments (interp backend: exact)."""
    data = batches(gpt2_ckpt, corpus, 16, 2)
    with Trainer(gpt2_ckpt, backend="interp", seq_len=16, lr=3e-3) as a, \
            Trainer(gpt2_ckpt, backend="interp", seq_len=16, lr=3e-3) as b:
        for k in range(3):
            a.step(data.batch(k))
        state = a.state_dict()
        assert state["step"] == 3 and state["adam"]["step_count"] + state["scaler"]["skipped"] == 3
        resumed = {k: v.copy() for k, v in state["params"].items()}
        b.load_state_dict(state)
        for k in range(3, 5):
            assert a.step(data.batch(k)) == b.step(data.batch(k))
        sa, sb = a.state_dict(), b.state_dict()
        assert sa["step"] == sb["step"] == 5
        for key in sa["params"]:
            assert np.array_equal(sa["params"][key], sb["params"][key]), key
            assert np.array_equal(sa["adam"]["m"][key], sb["adam"]["m"][key]), key
        changed = [k for k in sa["params"] if not np.array_equal(sa["params"][k], resumed[k])]
        assert changed  # the steps after the resume did move the weights
