"""Imported norms and whole models hold at real activation magnitudes (fp16 range).

PyTorch's rms_norm, LayerNorm and the transformers RMSNorm idiom, imported with
anec.import_torch and run on the sim, against torch fp32 at max |x| from 1 to
60000; and GPT-2, Llama and BERT with a "massive activation" channel (one
embedding channel set to 600-3000, as pretrained LLMs carry in their residual
stream): logits within the importer's tolerance, greedy tokens equal away from
near-ties. Before the range-safe pass these gave all-zero norms (rel 1.0).
"""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import _bert, _gpt2, _ids, _llama, assert_close, reference

torch = pytest.importorskip("torch")
F = torch.nn.functional


class RmsNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(64) + 0.5)

    def forward(self, x):
        return F.rms_norm(x, (64,), self.w, 1e-6)


class HfRmsNorm(torch.nn.Module):
    """The transformers idiom: ``x * rsqrt(x.pow(2).mean(-1) + eps) * w``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(64) + 0.5)

    def forward(self, x):
        v = x.pow(2).mean(-1, keepdim=True)
        return self.w * (x * torch.rsqrt(v + 1e-6))


def _layer_norm():
    ln = torch.nn.LayerNorm(64)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-1.0, 1.0)
    return ln


NORMS = {"rms_norm": RmsNorm, "hf_rms_norm": HfRmsNorm, "layer_norm": _layer_norm}


@pytest.mark.parametrize("name", list(NORMS))
def test_imported_norms_hold_up_to_60000(name):
    import anec

    torch.manual_seed(0)
    module = NORMS[name]().eval()
    im = anec.import_torch(module, (torch.randn(1, 16, 64),))
    g = torch.Generator().manual_seed(1)
    with im.runner(backend="sim") as run:
        for scale in (1.0, 100.0, 1000.0, 60000.0):
            x = torch.randn(1, 16, 64, generator=g)
            x[0, 3, 7] = 50.0  # a massive channel in one position
            x = (x / x.abs().amax(-1, keepdim=True) * scale).half().float()
            (got,) = run(x)
            assert_close([np.asarray(got)], reference(module, (x,)), ["y"], f"{name} at |x| <= {scale:g}")


def _massive(model, weight, channel: int, value: float):
    with torch.no_grad():
        weight[:, channel] = value
    return model


MODELS = {
    "gpt2": (lambda: _gpt2(), lambda m: m.transformer.wpe.weight, 600.0),  # wte is the tied head
    "llama": (lambda: _llama(), lambda m: m.model.embed_tokens.weight, 3000.0),
    "bert": (lambda: _bert(), lambda m: m.embeddings.word_embeddings.weight, 1000.0),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_models_with_a_massive_activation_channel(name):
    import anec

    make, weight, value = MODELS[name]
    model = make()
    model = _massive(model, weight(model), 5, value)
    args = (_ids(21),)
    want = reference(model, args)
    im = anec.import_torch(model, args)
    with im.runner(backend="sim") as run:
        got = [np.asarray(o) for o in run(*args)]
    names = [f"out{i}" for i in range(len(want))]
    assert_close(got[:1], want[:1], names[:1], f"{name} with channel 5 = {value:g}")
    if name != "bert":  # causal LMs: greedy tokens away from near-ties
        logits, ref = got[0][0], want[0][0]
        top2 = np.sort(ref, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-3 * np.abs(ref).max()
        assert clear.sum() >= 4
        assert (logits.argmax(-1)[clear] == ref.argmax(-1)[clear]).all()


class Overflowing(torch.nn.Module):
    """A layer whose pre-activation leaves fp16 on large inputs although its output fits."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 64, bias=False)
        with torch.no_grad():
            self.up.weight.copy_(torch.eye(64) * 100.0)

    def forward(self, x):
        return torch.tanh(self.up(x))


def test_imported_model_range_check_names_the_node():
    import anec

    module = Overflowing().eval()
    im = anec.import_torch(module, (torch.randn(1, 16, 64),))
    (small,) = im.check_ranges(torch.randn(1, 16, 64))
    assert not small.errors and small.largest < 1000
    (big,) = im.check_ranges(torch.randn(1, 16, 64) * 1000)
    (finding,) = big.errors
    assert finding.op == "conv1x1" and finding.largest > 65504
    text = finding.diagnostic().render()
    assert "[ANE-FP16-RANGE]" in text and "test_import_fp16_range.py" in text
