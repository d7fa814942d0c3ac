"""Shared pieces of the PyTorch importer tests: the acceptance models and the metrics.

Every acceptance model is a random-init transformers / torch.nn model whose
default config is shrunk to 2 layers; blocks are single layers of those
models (the programs that fit one ANE program today: at most 15 BLOBFILE
weights). Metrics, per output, against the torch module in fp32:

* ``rel`` = max |anec - torch| / max |torch| (relative to the output's scale),
* ``cos`` = cosine similarity of the flattened outputs.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")

MAX_REL = 2e-2
MIN_COS = 0.999
SEQ = 16


def metrics(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """``(rel, cos)`` of ``got`` against the reference ``want``."""
    g = np.asarray(got, dtype=np.float64).ravel()
    w = np.asarray(want, dtype=np.float64).ravel()
    scale = np.abs(w).max()
    rel = float(np.abs(g - w).max() / scale) if scale else float(np.abs(g - w).max())
    denom = np.linalg.norm(g) * np.linalg.norm(w)
    cos = float(g @ w / denom) if denom else (1.0 if np.array_equal(g, w) else 0.0)
    return rel, cos


def reference(module: Any, args: tuple) -> list[np.ndarray]:
    """The torch module's outputs in fp32, flattened in torch.export's output order."""
    with torch.no_grad():
        out = module(*args)
    flat, _ = torch.utils._pytree.tree_flatten(out)
    return [t.detach().float().numpy() if t.dtype.is_floating_point else t.detach().numpy() for t in flat]


def assert_close(outs: Any, refs: list[np.ndarray], names: list[str], what: str,
                 max_rel: float = MAX_REL, min_cos: float = MIN_COS) -> list[tuple[str, float, float]]:
    assert len(outs) == len(refs) == len(names)
    measured = []
    for name, got, want in zip(names, outs, refs):
        assert np.shape(got) == np.shape(want), f"{what} {name}: shape {np.shape(got)} vs {np.shape(want)}"
        rel, cos = metrics(got, want)
        measured.append((name, rel, cos))
        assert rel <= max_rel and cos >= min_cos, f"{what} {name}: rel {rel:.3g}, cos {cos:.6f}"
    return measured


# ---------------------------------------------------------------------------
# the acceptance models (random init, default configs shrunk)


class Block(torch.nn.Module):
    """One layer of a transformers model as a module of the hidden states alone
    (Llama layers get their rotary tables from the model's rotary embedding)."""

    def __init__(self, layer: Any, rotary: Any = None) -> None:
        super().__init__()
        self.layer = layer
        self.rotary = rotary

    def forward(self, x):
        kw = {}
        if self.rotary is not None:
            kw["position_embeddings"] = self.rotary(x, torch.arange(x.shape[1])[None])
        out = self.layer(x, **kw)
        return out[0] if isinstance(out, tuple) else out


def _gpt2():
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=64, vocab_size=512,
                                  use_cache=False)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _llama():
    import transformers

    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=256, vocab_size=512,
                                   max_position_embeddings=64, use_cache=False)
    return transformers.LlamaForCausalLM(cfg).eval()


def _bert():
    import transformers

    torch.manual_seed(2)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                  intermediate_size=256, vocab_size=512, max_position_embeddings=64)
    return transformers.BertModel(cfg).eval()


def _vit():
    import transformers

    torch.manual_seed(3)
    cfg = transformers.ViTConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                 intermediate_size=256, image_size=32, patch_size=8)
    return transformers.ViTModel(cfg).eval()


def _encoder(layers: int):
    torch.manual_seed(4)
    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True,
                                             dropout=0.0)
    return torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False).eval()


def _ids(seed: int, n: int = SEQ, vocab: int = 512):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, n), generator=g)


def _hidden(seed: int, n: int = SEQ, c: int = 128):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, n, c, generator=g)


def case_gpt2():
    return _gpt2(), (_ids(10),)


def case_llama():
    return _llama(), (_ids(11),)


def case_bert():
    mask = torch.ones(1, SEQ, dtype=torch.long)
    mask[0, 12:] = 0  # padded tail
    return _bert(), (_ids(12), mask)


def case_vit():
    g = torch.Generator().manual_seed(13)
    return _vit(), (torch.randn(1, 3, 32, 32, generator=g),)


def case_encoder():
    return _encoder(2), (_hidden(14),)


def case_encoder_1layer():
    return _encoder(1), (_hidden(15),)


def case_mlp():
    torch.manual_seed(5)
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                            torch.nn.SiLU(), torch.nn.Linear(256, 10)).eval()
    g = torch.Generator().manual_seed(16)
    return m, (torch.randn(4, 64, generator=g),)


def case_gpt2_block():
    return Block(_gpt2().transformer.h[0]).eval(), (_hidden(17),)


def case_llama_block():
    m = _llama().model
    return Block(m.layers[0], m.rotary_emb).eval(), (_hidden(18),)


def case_bert_attention():
    return Block(_bert().encoder.layer[0].attention).eval(), (_hidden(19),)


def case_vit_attention():
    return Block(_vit().layers[0].attention).eval(), (_hidden(20, n=17),)


CASES: dict[str, Callable[[], tuple[Any, tuple]]] = {
    "gpt2": case_gpt2,
    "llama": case_llama,
    "bert": case_bert,
    "vit": case_vit,
    "encoder": case_encoder,
    "mlp": case_mlp,
    "encoder_1layer": case_encoder_1layer,
    "gpt2_block": case_gpt2_block,
    "llama_block": case_llama_block,
    "bert_attention": case_bert_attention,
    "vit_attention": case_vit_attention,
}

ONE_PROGRAM = ["mlp", "encoder_1layer", "gpt2_block", "llama_block", "bert_attention", "vit_attention"]
"""The models that fit one ANE program."""
PIPELINES = ["gpt2", "llama", "bert", "vit", "encoder"]
"""Whole models: one func that legalize cuts into a pipeline of programs."""
SIM_CASES = ONE_PROGRAM + PIPELINES


@pytest.fixture(scope="session")
def imported_cases():
    """name -> (ImportedModel, module, args, torch outputs), imported once per session."""
    import anec

    cache: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in cache:
            module, args = CASES[name]()
            im = anec.import_torch(module, args)
            cache[name] = (im, module, args, reference(module, args))
        return cache[name]

    return get
