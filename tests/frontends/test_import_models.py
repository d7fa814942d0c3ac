"""The acceptance models imported with ``anec.import_torch`` agree with torch.

Every model runs through the reference interpreter (fp32 and fp16 modes:
the intended math, and the device's fp16 storage) against the torch module in
fp32; the models that fit one ANE program today are also compiled and run on
the sim backend. Required per output: for the interpreter, max relative
error <= 2e-2 and cosine >= 0.999 (see conftest.metrics); for the sim, the
tolerance policy (tests/tolerances.py, check ids import/<model>:<output>:...).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontends.conftest import CASES, ONE_PROGRAM, PIPELINES, SIM_CASES, assert_close
from tolerances import assert_close as tol_close  # noqa: E402

INTERP = [(name, mode) for name in CASES for mode in ("fp32", "fp16")]


@pytest.mark.parametrize("name,mode", INTERP, ids=[f"{n}-{m}" for n, m in INTERP])
def test_interpreter_matches_torch(imported_cases, name, mode):
    im, _, args, ref = imported_cases(name)
    outs = im.runner(backend="interp", mode=mode)(*args)
    assert_close(outs, ref, im.output_names, f"{name} interp {mode}")


SIM_VS_TORCH_ULPS = 8
"""The sim against torch in fp32, in fp16 ulps (tests/tolerances.py; worst measured 3.0, bert)."""


@pytest.mark.parametrize("name", SIM_CASES)
def test_sim_matches_torch(imported_cases, name):
    """Every output within SIM_VS_TORCH_ULPS of torch's, through the tolerance policy."""
    im, _, args, ref = imported_cases(name)
    with im.runner(backend="sim") as run:
        outs = run(*args)
    assert len(outs) == len(ref) == len(im.output_names)
    for out, want, oname in zip(outs, ref, im.output_names):
        tol_close(out, want, f"import/{name}:{oname}:sim-vs-torch", SIM_VS_TORCH_ULPS)


def test_sim_cases_fit_one_program(imported_cases):
    from anec.passes.legalize import blob_count

    for name in ONE_PROGRAM:
        im = imported_cases(name)[0]
        assert blob_count(im.func)[0] <= 15, name


@pytest.mark.parametrize("name", PIPELINES)
def test_whole_models_compile_into_pipelines(imported_cases, name):
    from anec.compiler import compile_module
    from anec.mil.multi_program import PipelineArtifact

    im = imported_cases(name)[0]
    art = compile_module(im.module, weights=im.weights).artifacts["main"]
    assert isinstance(art, PipelineArtifact) and len(art.stages) >= 2, name


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "vit"])
def test_whole_models_are_one_func_with_host_embeddings(imported_cases, name):
    im, module, args, _ = imported_cases(name)
    assert list(im.module.funcs) == ["main"]
    assert im.input_names == [n for n in ("input_ids", "attention_mask", "pixel_values")
                              if n in im.input_names]
    if name == "vit":
        assert im.host_steps == []
    else:
        (step,) = im.host_steps
        assert step["kind"] == "embedding" and step["input"] == "input_ids"
        assert step["weight"] in im.weights
    # the IR references state_dict keys, not copies
    keys = set(module.state_dict())
    ir_keys = {n.attrs["weight"] for n in im.func.nodes if n.op == "const" and "weight" in n.attrs}
    assert ir_keys and all(k in keys or k.startswith("anec.") for k in ir_keys)


def test_layout_costs_two_transposes_per_model(imported_cases):
    """Every activation stays in the ANE layout from the entry to the output: one
    transpose where the input enters the channel layout and one at the output."""
    for name in ("gpt2", "llama", "bert", "encoder", "gpt2_block", "llama_block"):
        im = imported_cases(name)[0]
        per_output = len([o for o in im.outputs if o["kind"] == "device"])
        assert im.stats["transposes"] <= 1 + per_output, (name, im.stats)
    vit = imported_cases("vit")[0]
    assert vit.stats["transposes"] == 1  # the last hidden state (the patch embedding is a strided conv)


def test_linear_layers_become_conv1x1(imported_cases):
    im = imported_cases("gpt2_block")[0]
    ops = [n.op for n in im.func.nodes]
    assert ops.count("conv1x1") == 4 and "matmul" in ops  # c_attn, c_proj, c_fc, mlp c_proj; attention
    convs = [n for n in im.func.nodes if n.op == "conv1x1"]
    assert all(n.operands[0].type.shape[0] == 1 and n.operands[0].type.shape[2] == 1 for n in convs)


def test_gqa_keys_are_not_repeated(imported_cases):
    im = imported_cases("llama_block")[0]
    mms = [n for n in im.func.nodes if n.op == "matmul"]
    assert len(mms) == 2
    # scores: [KV, G, L, S] with the key/value heads broadcast over the G query heads
    assert mms[0].operands[1].type.shape[-3] == 1
    assert not any(n.op == "add" and n.operands[1].producer is not None
                   and n.operands[1].producer.op == "const" and "zeros" in n.operands[1].name
                   for n in im.func.nodes)


def test_fp16_interpreter_is_the_sims_oracle(imported_cases):
    """The sim executes the MIL the IR becomes; the fp16 interpreter, running the func as the
    device computes it (range-safe norms), is its oracle: within a few fp16 ulps (legalize's
    reduce_mean -> reduce_sum(x * 1/N) rounds once more than the interpreter's mean)."""
    im, _, args, _ = imported_cases("encoder_1layer")
    with im.runner(backend="sim") as run:
        feed = run.prepare(run.bind(args, {}))
        sim = run.program(feed)
    interp = im.runner(backend="interp", mode="fp16").program(feed)
    for k in sim:
        tol_close(sim[k], interp[k], f"import/encoder_1layer:{k}:fp16-interp", 4)
