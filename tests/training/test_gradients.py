"""Trainer.gradients against PyTorch autograd (fp32) on the same checkpoint and batch.

Acceptance: per parameter, cosine >= 0.999 and relative norm error <= 1e-2 (the sim stores fp16
and accumulates in fp32; the loss scale keeps small gradients out of fp16's subnormals).
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.training import Trainer, TrainingError
from tests.training.conftest import hf, torch

COS, REL = 0.999, 1e-2


def compare(got: dict, ref: dict) -> None:
    assert set(got) == set(ref)
    for k, r in ref.items():
        g = got[k]
        assert g.shape == r.shape, k
        a, b = g.ravel().astype(np.float64), r.ravel().astype(np.float64)
        cos = a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)
        rel = np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-30)
        assert cos >= COS and rel <= REL, (k, cos, rel)


def torch_grads(path, ids):
    m = hf(path)
    out = m(torch.tensor(ids), labels=torch.tensor(ids))
    out.loss.backward()
    return float(out.loss.detach()), {k: p.grad.numpy() for k, p in m.named_parameters()}


@pytest.mark.parametrize("which", ["gpt2_ckpt", "llama_ckpt"])
@pytest.mark.parametrize("backend,weight_grads,activations", [
    ("sim", "device", "recompute"), ("sim", "host", "recompute"), ("sim", "device", "save"),
    ("interp", "device", "recompute")])
def test_gradients_match_torch(request, which, backend, weight_grads, activations):
    path = request.getfixturevalue(which)
    ids = np.random.default_rng(0).integers(0, 320, (2, 25))
    loss_ref, ref = torch_grads(path, ids)
    with Trainer(path, backend=backend, seq_len=32, weight_grads=weight_grads, activations=activations) as tr:
        got = tr.gradients(ids)
        assert abs(tr.last_loss - loss_ref) <= 1e-3 * loss_ref
    compare(got, ref)


def test_lora_gradients_match_peft(llama_ckpt):
    peft = pytest.importorskip("peft")
    ids = np.random.default_rng(1).integers(0, 320, (1, 17))
    with Trainer(llama_ckpt, backend="sim", seq_len=16, lora_rank=4, lora_alpha=8.0) as tr:
        rng = np.random.default_rng(2)
        for s in tr.lora_slots:  # a nonzero B, or A's gradient is zero
            tr.params[s.b_input] = rng.standard_normal(tr.params[s.b_input].shape).astype(np.float32) * 0.1
        got = tr.gradients(ids)
        values = {tr.peft_key(n): v for n, v in tr.params.items()}
    base = hf(llama_ckpt)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    m = peft.get_peft_model(base, cfg)
    named = dict(m.named_parameters())
    with torch.no_grad():
        for k, v in values.items():
            named[k.replace(".weight", ".default.weight")].copy_(torch.tensor(v))
    out = m(input_ids=torch.tensor(ids), labels=torch.tensor(ids))
    out.loss.backward()
    ref = {k: named[k.replace(".weight", ".default.weight")].grad.numpy() for k in values}
    compare(got, ref)


def test_bad_input_ids_are_clear_errors(gpt2_ckpt):
    with Trainer(gpt2_ckpt, backend="interp", seq_len=8) as tr:
        with pytest.raises(TrainingError, match="do not fit"):
            tr.gradients(np.zeros((1, 12), np.int64))
        with pytest.raises(TrainingError, match="token ids must be in"):
            tr.gradients(np.full((1, 4), 999, np.int64))
        with pytest.raises(TrainingError, match="array of token ids"):
            tr.gradients(np.zeros((1, 4), np.float32))


@pytest.fixture(scope="module")
def massive_llama(llama_ckpt, tmp_path_factory):
    """The Llama checkpoint with embedding channel 5 at 600 for a quarter of the vocabulary (a
    "massive activation": x * x overflows fp16 in the RMSNorms of those tokens' residual stream;
    without the range-safe pass the gradients' cosines drop to 0.77-0.96)."""
    import shutil

    d = tmp_path_factory.mktemp("massive")
    m = hf(llama_ckpt)
    with torch.no_grad():
        m.model.embed_tokens.weight[::4, 5] = 600.0
    m.save_pretrained(d, safe_serialization=True)
    for f in llama_ckpt.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, d / f.name)
    return d


def test_gradients_hold_with_a_massive_activation_channel(massive_llama):
    """Forward and backward programs go through the range-safe pass: the norms' gradients stay
    finite and match torch although |x| = 600 in the residual stream."""
    ids = np.random.default_rng(3).integers(0, 320, (2, 25))
    loss_ref, ref = torch_grads(massive_llama, ids)
    with Trainer(massive_llama, backend="sim", seq_len=32) as tr:
        got = tr.gradients(ids)
        assert abs(tr.last_loss - loss_ref) <= 1e-3 * loss_ref
    compare(got, ref)


def test_a_checkpoint_missing_a_layer_tensor_is_refused_before_anything_is_built(gpt2_ckpt, tmp_path):
    import shutil

    from safetensors.numpy import load_file, save_file

    from anec.models.hf import CheckpointError

    d = tmp_path / "ckpt"
    shutil.copytree(gpt2_ckpt, d)
    tensors = load_file(str(d / "model.safetensors"))
    missing = next(k for k in tensors if ".1.mlp.c_fc.weight" in k)
    del tensors[missing]
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="c_fc.weight"):
        Trainer(d, backend="interp", seq_len=8)
