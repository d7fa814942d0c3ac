"""select-native: each canonical core-op spatial form becomes exactly one target op.

For every form (tests/passes/spatial_forms.py, written from the forms' specification)
across kernel, stride, padding, dilation, groups, ceil-mode padding and align_corners:
the selected program holds one target op with the expected attributes, the interpreter
gives the same result on the core-op form and on the selected one, and forms that differ
from the specification in any detail are left alone. Limits give the constraint id.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import ConstraintError, VerifyError
from anec.ir.interp import interpret
from anec.ir.ops import SPATIAL_LIMITS, TARGET_OPS
from anec.ir.parser import parse
from anec.ir.verifier import verify
from anec.passes import Legalize, PassContext, SelectNative, run_passes
from tests.passes import spatial_forms as sf

CASES = {
    "conv3x3-pad1": sf.conv(),
    "conv3x3-stride2": sf.conv(s=(2, 2), p=(1, 1, 1, 1), h=7, wd=8),
    "conv-asym-pad-stride": sf.conv(k=(2, 3), s=(2, 1), p=(0, 1, 2, 1)),
    "conv-dilated": sf.conv(k=(3, 3), d=(2, 2), p=(2, 2, 2, 2), h=7, wd=7),
    "conv-dilated-mixed": sf.conv(k=(2, 3), d=(3, 1), p=(1, 0, 1, 1), s=(1, 2), h=8, wd=7),
    "conv-bias": sf.conv(bias=True),
    "conv1x1-stride2": sf.conv(k=(1, 1), s=(2, 2), p=(0, 0, 0, 0), h=6, wd=6),
    "conv1d-k5": sf.conv(k=(1, 5), s=(1, 2), p=(0, 0, 2, 2), h=1, wd=11),
    "conv1d-k1-stride": sf.conv(k=(1, 1), s=(1, 3), p=(0, 0, 0, 0), h=1, wd=10),
    "depthwise3x3": sf.conv(cin=4, cout=4, groups=4, s=(2, 2)),
    "depthwise-bias": sf.conv(cin=3, cout=3, groups=3, k=(3, 2), p=(1, 1, 0, 1), bias=True),
    "depthwise-mult2": sf.conv(cin=2, cout=4, groups=2),
    "grouped2": sf.conv(cin=4, cout=6, groups=2, k=(2, 2), p=(0, 1, 1, 0)),
    "grouped-as-concat": sf.conv(cin=3, cout=3, groups=3, depthwise_form=False),
    "convT-s2": sf.conv_transpose(),
    "convT-s1": sf.conv_transpose(s=(1, 1), p=(0, 1)),
    "convT-outpad": sf.conv_transpose(s=(2, 2), p=(1, 1), op=(1, 1)),
    "convT-s3-k2": sf.conv_transpose(k=(2, 2), s=(3, 2), p=(0, 0)),
    "convT-dilated": sf.conv_transpose(k=(2, 3), s=(2, 1), p=(1, 1), d=(2, 1)),
    "convT-1d": sf.conv_transpose(h=1, k=(1, 4), s=(1, 2), p=(0, 1)),
    "convT-grouped": sf.conv_transpose(cin=4, cout=6, groups=2, k=(2, 3), s=(2, 1), p=(0, 1)),
    "convT-depthwise": sf.conv_transpose(cin=3, cout=3, groups=3, s=(1, 1), p=(1, 1)),
    "maxpool3s2p1": sf.max_pool(),
    "maxpool2s2": sf.max_pool(k=(2, 2), s=(2, 2), p=(0, 0, 0, 0), h=6, wd=6),
    "maxpool-ceil": sf.max_pool(k=(2, 2), s=(2, 2), p=(0, 1, 0, 1), h=5, wd=5),
    "maxpool1d": sf.max_pool(h=1, k=(1, 3), s=(1, 1), p=(0, 0, 1, 1)),
    "avgpool-include": sf.avg_pool(),
    "avgpool-exclude": sf.avg_pool(count_include_pad=False),
    "avgpool2s2": sf.avg_pool(k=(2, 2), s=(2, 2), p=(0, 0, 0, 0), h=6, wd=4),
    "avgpool1d": sf.avg_pool(h=1, k=(1, 4), s=(1, 4), p=(0, 0, 0, 0), wd=8),
    "upsample-nearest": sf.upsample_nearest(),
    "upsample-nearest-1d": sf.upsample_nearest(h=1, sc=(1, 4)),
    "bilinear-x2": sf.upsample_bilinear(),
    "bilinear-align": sf.upsample_bilinear(align=True, size=(5, 7)),
    "bilinear-odd": sf.upsample_bilinear(size=(7, 10), h=3, wd=4),
}


def _selected(form: sf.Form, target: str = "m4"):
    module = parse(form.text, "form.ir")
    verify(module)
    g = module.funcs["f"]
    ctx = PassContext.default(target, weights=form.weights)
    run_passes(g, [SelectNative()], ctx)
    return module, g, ctx


def _x(form: sf.Form, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(form.x_shape).astype(np.float16)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_form_becomes_one_target_op(name):
    form = CASES[name]
    _, g, ctx = _selected(form)
    ops = [n.op for n in g.nodes if n.op != "const"]
    native = [n for n in g.nodes if n.op in TARGET_OPS]
    assert [n.op for n in native] == [form.native], ops
    node = native[0]
    for key, want in form.attrs.items():
        assert node.attrs[key] == want, (key, node.attrs)
    # what is left: the weight consts it reads, and the bias add (ANE-CONV-BIAS)
    rest = [op for op in ops if op not in TARGET_OPS]
    assert rest == (["reshape", "add"] if "bias" in name else []), ops
    assert node.results[0].name == "y" or "bias" in name
    assert [r["rule"] for r in ctx.rewrites if r["constraint"] is None] != []


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_incremental_check_alone_accepts_each_selection(name):
    """select-native is a tracked pass: what it changed, as the graph recorded it, passes the
    incremental check without falling back to a full verify (which agrees)."""
    from anec.ir import verifier

    form = CASES[name]
    g = parse(form.text, "form.ir").funcs["f"]
    verify(g)
    changes = g.track_changes()
    SelectNative().run(g, PassContext.default("m4", weights=form.weights))
    g.stop_tracking()
    assert changes.nodes and not changes.everything
    assert verifier._changes_ok(g, changes), name
    verify(g)


@pytest.mark.parametrize("name", sorted(CASES))
def test_interp_agrees_before_and_after_selection(name):
    """interp(core-op form) == interp(selected): the same computation (fp64 references, one
    rounding to fp16 each; the sum order differs, so a few fp16 ulps)."""
    from tolerances import assert_close

    form = CASES[name]
    x = _x(form)
    before = interpret(parse(form.text, "form.ir").funcs["f"], {"x": x}, form.weights)["y"]
    _, g, _ = _selected(form)
    after = interpret(g, {"x": x}, form.weights)["y"]
    assert after.shape == before.shape
    assert_close(after, before, "select-native/interp", ulps=3)


def _mutate(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def test_selection_reads_the_full_weight_once():
    form = CASES["conv3x3-pad1"]
    _, g, _ = _selected(form)
    consts = [n for n in g.nodes if n.op == "const"]
    assert len(consts) == 1 and consts[0].attrs["weight"] == "c.weight"
    assert g.nodes[-1].operands[1] is consts[0].results[0]


NOT_MATCHING = {
    # a kernel position missing (the fold stops early)
    "conv-missing-position": (CASES["conv3x3-pad1"], "add(%v", "sub(%v"),
    # a weight slice at the wrong kernel position
    "conv-wrong-weight-position": (CASES["conv3x3-pad1"], "begin=[0, 0, 0, 1], end=[4, 3, 1, 2]",
                                   "begin=[0, 0, 1, 1], end=[4, 3, 2, 2]"),
    # the input window of a position shifted
    "conv-shifted-window": (CASES["conv3x3-pad1"], "begin=[0, 0, 0, 1], end=[1, 3, 6, 8]",
                            "begin=[0, 0, 1, 1], end=[1, 3, 7, 8]"),
    # max over a zero-padded input is still a max_pool of that padded tensor, but a sum is not
    "maxpool-reduce-sum": (CASES["maxpool3s2p1"], "reduce_max(", "reduce_sum("),
    "maxpool-keep-dims": (CASES["maxpool3s2p1"], "keep_dims=false", "keep_dims=true"),
    "nearest-not-ones": (CASES["upsample-nearest"], "const(value=1.0)", "const(value=2.0)"),
    # a weight slice not flipped
    "convT-not-flipped": (CASES["convT-s2"], "begin=[0, 0, 2, 2], end=[3, 2, 3, 3]",
                          "begin=[0, 0, 0, 0], end=[3, 2, 1, 1]"),
}


@pytest.mark.parametrize("name", sorted(NOT_MATCHING))
def test_variants_that_differ_from_the_forms_are_left_alone(name):
    form, old, new = NOT_MATCHING[name]
    text = _mutate(form.text, old, new)
    module = parse(text, "variant.ir")
    verify(module)
    g = module.funcs["f"]
    x = _x(form)
    before = interpret(g, {"x": x}, form.weights)["y"]
    run_passes(g, [SelectNative()], PassContext.default("m4", weights=form.weights))
    assert not [n.op for n in g.nodes if n.op in TARGET_OPS], [n.op for n in g.nodes]
    assert np.array_equal(interpret(g, {"x": x}, form.weights)["y"], before)


def test_a_pad_of_another_value_stays_and_the_conv_reads_it():
    form = CASES["conv3x3-pad1"]
    text = _mutate(form.text, "value=0.0)", "value=1.0)")
    module = parse(text, "variant.ir")
    g = module.funcs["f"]
    run_passes(g, [SelectNative()], PassContext.default("m4", weights=form.weights))
    assert [n.op for n in g.nodes] == ["const", "pad", "conv"]
    assert g.nodes[-1].attrs["pad"] == [0, 0, 0, 0] and g.nodes[-1].operands[0] is g.nodes[1].results[0]


def test_a_scaled_sum_of_slices_of_another_rank_stays():
    """torch.trapezoid lowers to a scaled sum of slices of a rank-2 value: the same ops as an
    average pool's form, but not NCHW, so it is left as it is (it once raised in the matcher)."""
    text = """func f(%x: fp16[3, 5]) {
  %a = slice(%x, begin=[0, 0], end=[3, 4], stride=[1, 1]) : fp16[3, 4]
  %b = slice(%x, begin=[0, 1], end=[3, 5], stride=[1, 1]) : fp16[3, 4]
  %s = add(%a, %b) : fp16[3, 4]
  %h = const(value=0.5) : fp16[]
  %y = mul(%s, %h) : fp16[3, 4]
  return %y
}
"""
    g = parse(text, "trapezoid.ir").funcs["f"]
    before = [n.op for n in g.nodes]
    run_passes(g, [SelectNative()], PassContext.default("m4"))
    assert [n.op for n in g.nodes] == before


def test_perturbed_bilinear_matrices_stay():
    _, g, _ = _selected(sf.upsample_bilinear(perturb=0.01))
    assert not [n for n in g.nodes if n.op in TARGET_OPS]


def test_an_average_of_another_divisor_is_the_window_sum_times_it():
    """divisor_override (no native average divides by it): one avg_pool (dividing by KH*KW)
    times KH*KW, times the form's own divisor const; interprets as the form did."""
    from tolerances import assert_close

    form = sf.avg_pool(divisor=5)
    _, g, _ = _selected(form)
    ops = [n.op for n in g.nodes if n.op != "const"]
    assert ops == ["avg_pool", "mul", "mul"], ops
    pool = next(n for n in g.nodes if n.op == "avg_pool")
    assert pool.attrs["exclude_padding_from_average"] is False
    x = _x(form)
    before = interpret(parse(form.text, "form.ir").funcs["f"], {"x": x}, form.weights)["y"]
    after = interpret(g, {"x": x}, form.weights)["y"]
    assert_close(after, before, "select-native/interp", ulps=3)


def test_weights_unavailable_keep_the_checked_forms():
    """avg_pool's per-position divisor and bilinear matrices are checked by value: without
    the weights, the forms stay (correct, just not native)."""
    for form in (CASES["avgpool-exclude"], CASES["bilinear-x2"]):
        module = parse(form.text, "form.ir")
        g = module.funcs["f"]
        run_passes(g, [SelectNative()], PassContext.default("m4"))
        assert not [n for n in g.nodes if n.op in TARGET_OPS]


@pytest.mark.constraint("ANE-SPATIAL-LIMITS")
def test_beyond_the_kernel_limit_the_form_stays_and_says_why():
    k = SPATIAL_LIMITS.kernel + 1
    form = sf.conv(cin=1, cout=1, k=(1, k), p=(0, 0, 0, 0), h=1, wd=k + 2)
    _, g, ctx = _selected(form)
    assert not [n for n in g.nodes if n.op in TARGET_OPS]
    notes = [r for r in ctx.rewrites if r["constraint"] == "ANE-SPATIAL-LIMITS"]
    assert notes and f"exceeds {SPATIAL_LIMITS.kernel}" in notes[0]["detail"]


@pytest.mark.parametrize("k,s,wd", [((2, 16), (2, 16), 34), ((1, 17), (1, 17), 34)])
@pytest.mark.constraint("ANE-SPATIAL-LIMITS")
def test_a_patch_embedding_beyond_the_limits_becomes_one_conv1x1_over_the_patches(k, s, wd):
    """kernel == stride beyond ANE-SPATIAL-LIMITS (ViT-B/16's stride 16, a 17-wide kernel):
    the patches are gathered into Cin*KH*KW channels (reshape, transpose, reshape) for one
    conv1x1; the columns no patch reads (34 = 2 * 17, 34 = 2 * 16 + 2) are sliced off."""
    from tolerances import assert_close

    form = sf.conv(cin=3, cout=5, k=k, s=s, p=(0, 0, 0, 0), h=4, wd=wd)
    _, g, ctx = _selected(form)
    ops = [n.op for n in g.nodes if n.op != "const"]
    want = ["reshape", "transpose", "reshape", "conv1x1", "reshape"]
    assert ops == (["slice"] + want if wd % k[1] else want), ops
    conv = next(n for n in g.nodes if n.op == "conv1x1")
    assert conv.operands[1].type.shape == (5, 3 * k[0] * k[1], 1, 1)
    notes = [r for r in ctx.rewrites if r["constraint"] == "ANE-SPATIAL-LIMITS"]
    assert len(notes) == 1 and "patch embedding" in notes[0]["detail"]
    x = _x(form)
    before = interpret(parse(form.text, "form.ir").funcs["f"], {"x": x}, form.weights)["y"]
    after = interpret(g, {"x": x}, form.weights)["y"]
    assert after.shape == before.shape
    assert_close(after, before, "select-native/interp", ulps=3)


def test_padding_as_wide_as_the_kernel_stays():
    """A padded 1x1 conv pads beyond its kernel extent (ANE-SPATIAL-LIMITS): it stays."""
    _, g, ctx = _selected(sf.conv(k=(1, 1), p=(0, 0, 1, 1)))
    assert not [n for n in g.nodes if n.op in TARGET_OPS]
    assert [r["constraint"] for r in ctx.rewrites] == ["ANE-SPATIAL-LIMITS"]


def test_beyond_the_channel_limit_the_form_stays(monkeypatch):
    from dataclasses import replace

    from anec.targets import get_target

    form = CASES["conv3x3-pad1"]
    module = parse(form.text, "form.ir")
    g = module.funcs["f"]
    ctx = PassContext(target=replace(get_target("m4"), max_conv_out_channels=3), weights=form.weights)
    run_passes(g, [SelectNative()], ctx)
    assert not [n for n in g.nodes if n.op in TARGET_OPS]
    assert [r["constraint"] for r in ctx.rewrites] == ["ANE-CONV-CHANNELS"]


def test_user_ir_cannot_write_target_forms():
    text = ("func f(%x: fp16[1, 2, 5, 5]) {\n  %w = const(value=1.0) : fp16[4, 2, 3, 3]\n"
            "  %y = conv(%x, %w, strides=[2, 2])\n  return %y\n}\n")
    with pytest.raises(VerifyError) as e:
        parse(text, "user.ir")
    assert e.value.span.location == "user.ir:3:8"
    assert "target-level form" in str(e.value) and "select-native" in e.value.hint
    module = parse(text, "compiled.ir", target_forms=True)
    verify(module)
    assert module.funcs["f"].outputs[0].type.shape == (1, 4, 2, 2)


def _legalize_error(text: str) -> ConstraintError:
    module = parse(text, "t.ir", target_forms=True)
    verify(module)
    with pytest.raises(ConstraintError) as e:
        run_passes(module.funcs["f"], [Legalize()], PassContext.default("m4"))
    return e.value


@pytest.mark.parametrize("stmt,constraint,where", [
    ("conv(%x, %w, strides=[9, 1])", "ANE-SPATIAL-LIMITS", "stride"),
    ("conv(%x, %w, pad=[3, 0, 0, 0])", "ANE-SPATIAL-LIMITS", "padding"),
    ("conv(%x, %w, dilations=[1, 9])", "ANE-SPATIAL-LIMITS", "dilation"),
    ("max_pool(%x, kernel_sizes=[17, 1])", "ANE-SPATIAL-LIMITS", "kernel"),
    ("conv(%x, %x4)", "ANE-CONV-CONST-WEIGHT", "constant"),
])
@pytest.mark.constraint("ANE-SPATIAL-LIMITS")
def test_legalize_rejects_target_forms_beyond_the_limits(stmt, constraint, where):
    text = ("func f(%x: fp16[1, 2, 20, 20], %x4: fp16[4, 2, 3, 3]) {\n"
            "  %w = const(value=0.5) : fp16[4, 2, 3, 3]\n"
            f"  %y = {stmt}\n  return %y\n}}\n")
    err = _legalize_error(text)
    assert err.constraint == constraint
    assert err.span.location == "t.ir:3:8"
    assert where in str(err)
