"""Full-size shapes (GPT-2 small, Stories110M, TinyLlama, MiniLM): every bucket func
compiles for the default target into a pipeline whose every program is legal and
within the BLOBFILE budget, with no more programs than the per-layer split of
earlier versions (2 per layer and bucket); the LM head is chunked.

Structure only: the compiler runs every pass and emits MIL without reading weights
(``with_weights=False``; the plan does not depend on weight values), so no large
checkpoint is needed.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors.numpy import save_file

from anec.compiler import compile_module
from anec.ir.builder import Builder
from anec.models.bert import Bert
from anec.models.programs import weight_keys
from anec.passes.legalize import blob_tensors
from anec.models.generate import decoder_frontend
from anec.models.hf import load_checkpoint

SHAPES = {
    "gpt2-small": ({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
                    "n_positions": 1024}, ["transformer.wte.weight"], 16, 4),
    "stories110m": ({"model_type": "llama", "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
                     "num_attention_heads": 12, "num_key_value_heads": 12, "vocab_size": 32000,
                     "max_position_embeddings": 256}, ["model.embed_tokens.weight", "lm_head.weight"], 16, 2),
    "tinyllama": ({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                   "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                   "max_position_embeddings": 2048}, ["model.embed_tokens.weight", "lm_head.weight"], 16, 2),
}


def _ckpt(tmp_path, config, keys):
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({k: np.zeros((1, 1), np.float32) for k in keys}, str(tmp_path / "model.safetensors"))
    return load_checkpoint(tmp_path)


def _compile(graph):
    return compile_module(Builder.module(graph), with_weights=False).artifacts[graph.name].manifest.document


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_decoder_programs_at_full_size(tmp_path, name):
    config, keys, width, head_pieces = SHAPES[name]
    fe = decoder_frontend(_ckpt(tmp_path, config, keys), 49152)
    assert fe.width == width  # d * 16 * 4 bytes >= 49152: the 16-wide decode block
    for g in (fe.prefill(64), fe.decode(width, 256)):
        m = _compile(g)
        stages = m["stages"]
        assert len(stages) <= 2 * fe.cfg.n_layer, g.name  # no more programs than one per layer half
        for e in stages:
            assert e["weights"] <= e["blob_cap"] <= 15, (g.name, e["dir"])
        # packed: every program but the last is full, counting the mask (and RoPE rotation)
        # every attention stage repeats (GPT-2 small: 11 programs for 144 layer weights)
        shared = {k for k in weight_keys(g) if k.startswith("anec.")}
        layer_weights = len(blob_tensors(g)) - len(shared)
        assert len(stages) <= math.ceil(layer_weights / (15 - len(shared))), g.name
        assert m["surface_bytes"] >= 49152
    for g in (fe.attn(0, 64), fe.attn(fe.cfg.n_layer - 1, width, 256), fe.mlp(0, 64)):  # the building blocks
        m = _compile(g)
        assert len(m["weights"]) <= 15, g.name
        assert m["input_alloc_bytes"] >= 49152 and m["output_alloc_bytes"] >= 49152
    m = _compile(fe.lm_head(width))  # one output per vocabulary chunk, none of them split again
    los = m["logical_outputs"]
    assert [lo["name"] for lo in los] == [f"logits_c{i}" for i in range(head_pieces)]
    assert sum(lo["shape"][1] for lo in los) == config["vocab_size"]
    assert all(lo["shape"] == [1, lo["shape"][1], 1, width] and lo["shape"][1] <= 16384 for lo in los)


def test_minilm_programs_at_full_size(minilm_dir):
    bert = Bert(load_checkpoint(minilm_dir))
    assert bert.width == 32 and bert.buckets[-1] == 256
    for s in (32, 256):
        m = _compile(bert.encoder(s))
        assert len(m["stages"]) == math.ceil(96 / 15) < 2 * bert.n_layer  # 16 weights per layer
        assert all(e["weights"] <= e["blob_cap"] <= 15 for e in m["stages"])
    for g in (bert.attn(0, 256), bert.ffn(5, 32)):
        m = _compile(g)
        assert len(m["weights"]) <= 15
    rules = {r["rule"] for r in compile_module(Builder.module(bert.ffn(0, 32)), with_weights=False).rewrites}
    assert "expand_gelu_tanh" in rules  # exact GELU in the IR, tanh on the ANE
