"""Whole models as one func per bucket, partitioned by the compiler.

The acceptance case: the GPT-2-small body (12 layers, d=768, S=64, random
weights built here) as ONE func compiles for m4 into a pipeline, runs on the
sim, matches the reference interpreter in fp16 mode (through the tolerance
policy, tests/tolerances.py) and computes exactly what the per-layer
program set (the hand split of earlier versions, kept as building blocks)
computes: the cut points only move fp16 values between programs, so the
stages do the same fp16 arithmetic in the same order.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.ir.builder import Builder
from anec.ir.interp import interpret
from anec.models.common import ModelError
from anec.models.layout import causal_mask
from anec.models.programs import ProgramCache
from anec.models.generate import CausalLM, decoder_frontend
from anec.models.hf import load_checkpoint
from anec.runtime import Runtime
from tests.models.conftest import BACKEND
from tests.models.synthetic import GPT2_SMALL, random_weights, shape_checkpoint
from tolerances import assert_close
BODY_ULPS = 8
"""Allowed error of the sim's GPT-2-small body against the fp16 interpreter (fp16 ulps; measured 3.5)."""


@pytest.fixture(scope="module")
def gpt2_small(tmp_path_factory):
    return decoder_frontend(shape_checkpoint(tmp_path_factory.mktemp("gpt2-small"), GPT2_SMALL,
                                             ["transformer.wte.weight"]), 49152)


def test_gpt2_small_body_as_one_func_matches_the_interpreter_and_the_per_layer_programs(gpt2_small):
    fe, s, n_layer = gpt2_small, 64, 12
    body = fe.prefill(s)
    blocks = [g for i in range(n_layer) for g in (fe.attn(i, s), fe.mlp(i, s))]
    weights = random_weights(fe, [body])
    res = compile_module(Builder.module(body), weights=weights, target="m4")
    art = res.artifacts[body.name]
    stages = art.manifest.document["stages"]
    # 144 layer weights + the causal mask, at most 15 BLOBFILE tensors per program
    assert len(stages) == 11 < len(blocks)
    assert all(e["weights"] <= e["blob_cap"] <= 15 for e in stages)
    assert any(e["same_as"] is not None for e in stages), "identical layers should give identical stages"

    x = np.random.default_rng(1).standard_normal((1, 768, 1, s)).astype(np.float32)
    with Runtime(backend=BACKEND) as rt:
        prog = rt.load(art)
        got = prog(x=x)
        st = prog.stats
        # surfaces are sized per stage: an edge between stages of two sizes (into and out of
        # the MLP stages, whose 3072-channel hidden needs 4x the others) is a copy, every
        # other edge binds the producer's surface
        size = [e["surface_bytes"] for e in stages]
        edges = [(i["from"]["stage"], k) for k, e in enumerate(stages) for i in e["inputs"] if "stage" in i["from"]]
        copied = sum(size[a] != size[b] for a, b in edges)
        assert st["calls"] == 1 and st["copied_edges"] == copied and st["zero_copy_edges"] == len(edges) - copied
        assert 0 < copied < len(edges) // 2
    assert sorted(got) == sorted(["h"] + [f"L{i}_{kv}" for i in range(n_layer) for kv in "kv"])

    ref = interpret(body, {"x": x}, weights, mode="fp16")
    for name in got:
        assert_close(got[name], np.asarray(ref[name]).reshape(got[name].shape),
                     "models/gpt2-small-body:interp-fp16", BODY_ULPS, name)

    split = ProgramCache(weights.__getitem__, backend=BACKEND)
    try:
        h = x
        for i in range(n_layer):
            o = split.get(fe.attn_name(i, s), lambda: fe.attn(i, s))(x=h)
            np.testing.assert_array_equal(got[f"L{i}_k"], o["k"])
            np.testing.assert_array_equal(got[f"L{i}_v"], o["v"])
            h = split.get(fe.mlp_name(i, s), lambda: fe.mlp(i, s))(x=o["h"])["h"]
        assert split.stats()["programs"] == 2 * n_layer
    finally:
        split.close()
    np.testing.assert_array_equal(got["h"], h)


@pytest.mark.parametrize("t", [None, 64])
def test_tiny_models_whole_funcs_equal_the_per_layer_programs(gpt2_dir, llama_dir, t):
    """Prefill and decode of both decoders: one pipeline call vs 2 programs per layer, on the sim."""
    for path in (gpt2_dir, llama_dir):
        fe = decoder_frontend(load_checkpoint(path), 49152)
        w, c = fe.width, fe.cfg
        rng = np.random.default_rng(2)
        x = rng.standard_normal((1, c.d_model, 1, w)).astype(np.float32)
        extra = fe.position_inputs(np.arange(5, 5 + w), w)
        cache = {}
        if t is not None:
            mask = np.zeros((1, 1, w, t), np.float16)
            mask[..., 40:] = -1e4
            cache = {"mask": mask, "mask_new": causal_mask(w)}  # W real columns: the causal new block
            for i in range(c.n_layer):
                for kv in "kv":
                    cache[f"L{i}_{kv}c"] = rng.standard_normal((1, c.n_kv_head, t, c.head_dim)).astype(np.float16)
        whole_name = fe.prefill_name(w) if t is None else fe.decode_name(w, t)
        programs = ProgramCache(fe.weight, backend=BACKEND)
        try:
            got = programs.get(whole_name, lambda: fe.program(whole_name))(x=x, **extra, **cache)
            h = x
            for i in range(c.n_layer):
                name = fe.attn_name(i, w, t)
                per = {} if t is None else {"kc": cache[f"L{i}_kc"], "vc": cache[f"L{i}_vc"], "mask": cache["mask"],
                                            "mask_new": cache["mask_new"]}
                o = programs.get(name, lambda: fe.program(name))(x=h, **extra, **per)
                np.testing.assert_array_equal(got[f"L{i}_k"], o["k"])
                np.testing.assert_array_equal(got[f"L{i}_v"], o["v"])
                h = programs.get(fe.mlp_name(i, w), lambda: fe.mlp(i, w))(x=o["h"])["h"]
        finally:
            programs.close()
        np.testing.assert_array_equal(got["h"], h)


def test_a_generation_runs_one_call_per_step(gpt2_dir):
    """Prefill, decode and the LM head: three programs, one call each per step."""
    lm = CausalLM(decoder_frontend(load_checkpoint(gpt2_dir), 49152), backend=BACKEND)
    try:
        lm.generate([5, 17, 300], max_new_tokens=4)
        progs = lm.programs.programs
        assert sorted(progs) == sorted(lm.program_names(3, lm.fe.buckets[0]))
        calls = {name: (p.stats["calls"] if hasattr(p, "stages") else p.stats["evaluations"])
                 for name, p in progs.items()}
        st = lm.stats()
        assert st["funcs"] == 3 and st["programs"] == 2 + 2 + 1  # two layers cut apart in each bucket func
    finally:
        lm.close()
    w = lm.fe.width
    assert calls == {lm.fe.prefill_name(w): 1, lm.fe.decode_name(w, w): 3, lm.fe.lm_head_name(w): 4}


def test_layer_code_builds_every_layer_under_its_prefix(llama_dir):
    fe = decoder_frontend(load_checkpoint(llama_dir), 49152)
    g = fe.decode(fe.width, 2 * fe.width)
    names = g.value_names()
    assert [v.name for v in g.inputs] == ["x", "cos", "sin", "mask", "mask_new", "L0_kc", "L0_vc", "L1_kc", "L1_vc"]
    assert g.output_names() == ["h", "L0_k", "L0_v", "L1_k", "L1_v"]
    assert {"L0_q", "L1_q", "L0_ra", "L1_rm", "rot"} <= names and "causal" not in names
    consts = [n for n in g.nodes if n.op == "const"]
    # one node per generated weight (the rotation: the new-block mask is the mask_new input)
    # and per scalar value, shared by both layers
    assert sum(n.attrs.get("weight", "").startswith("anec.") for n in consts) == 1
    scalars = [n.attrs["value"] for n in consts if "value" in n.attrs]
    assert len(scalars) == len(set(scalars)) and not any(n.result.name.startswith("L") for n in consts
                                                         if "value" in n.attrs)
    with pytest.raises(ModelError, match="no such layer"):
        fe.program("L2_mlp_s128")
    assert fe.program("L1_attn_d128_t256").name == "L1_attn_d128_t256"
