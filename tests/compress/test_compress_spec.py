"""The --compress SPEC, the accuracy gate and its report, and what compression leaves alone."""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.compress import Gate, decide, get_format, parse_spec, quantize_linear
from anec.diagnostics import AnecError
from anec.ir.printer import print_module
from anec.ir.weight_binding import resolve_weights


def _formats(art) -> dict[str, str]:
    return {c["key"]: c["format"] for c in art.manifest.document["compression"]}


def test_first_matching_glob_wins_and_only_conv_and_matmul_weights_are_compressed(small):
    store = resolve_weights(small, None, 0)
    art = compile_module(small, store, compress="lut4:blk.1.*,int8:blk.*,lut6:*").artifacts["f"]
    assert _formats(art) == {"blk.1.w": "lut4", "blk.0.w": "int8", "head.w": "lut6"}
    norm = next(w for w in art.manifest.document["weights"] if w["key"] == "norm.g")
    assert norm["dtype"] == "fp16" and "part" not in norm


def test_spec_errors_name_the_item():
    with pytest.raises(AnecError, match="unknown compression format 'int7'") as e:
        parse_spec("int7:*")
    assert "int8" in (e.value.hint or "")
    with pytest.raises(AnecError, match="lut5"):
        parse_spec("lut5")
    with pytest.raises(AnecError, match="names no format"):
        parse_spec(":h.*")
    with pytest.raises(AnecError, match="needs a SPEC"):
        parse_spec("  ")


def test_default_and_explicit_fallback_chains():
    spec = parse_spec("lut4:a.*,int8:*,lut2>lut6:b.*")
    assert [f.name for f in spec.rules[0].chain] == ["lut4", "int8", "fp16"]
    assert [f.name for f in spec.rules[1].chain] == ["int8", "fp16"]
    assert [f.name for f in spec.rules[2].chain] == ["lut2", "lut6", "fp16"]


def test_a_tensor_failing_the_gate_falls_back_and_the_report_says_why(small):
    """lut4 keeps a normal tensor to ~0.1 relative L2, int8 to ~0.01: under a 0.05 gate lut4
    falls back to int8, under 1e-4 everything to fp16, each step with its reason."""
    store = resolve_weights(small, None, 0)
    art = compile_module(small, store, compress="lut4", compress_gate=Gate(max_rel_l2=0.05)).artifacts["f"]
    r = {c["key"]: c for c in art.manifest.document["compression"]}["blk.0.w"]
    assert (r["requested"], r["format"]) == ("lut4", "int8")
    assert [f["format"] for f in r["fallbacks"]] == ["lut4"]
    assert "relative L2 error" in r["fallbacks"][0]["reason"] and "> 0.05" in r["fallbacks"][0]["reason"]
    art = compile_module(small, store, compress="lut4", compress_gate=Gate(max_rel_l2=1e-4)).artifacts["f"]
    r = {c["key"]: c for c in art.manifest.document["compression"]}["blk.0.w"]
    assert r["format"] == "fp16" and [f["format"] for f in r["fallbacks"]] == ["lut4", "int8"]
    dense = next(e for e in art.manifest.document["weights"] if e["key"] == "blk.0.w")
    assert dense["dtype"] == "fp16" and "part" not in dense  # stored as it is


def test_the_gate_measures_the_worst_channel(small):
    """A channel of tiny weights next to large ones: one lut4 table for the tensor spends no
    entry on it (its values collapse to one entry), which the tensor-wide error hides and the
    worst channel's does not."""
    store = dict(resolve_weights(small, None, 0))
    w = np.array(store["blk.0.w"], dtype=np.float32)
    w[5] *= 1e-3
    store["blk.0.w"] = w.astype(np.float16)
    r = {c["key"]: c for c in compile_module(small, store, compress="lut4").artifacts["f"].manifest.document["compression"]}
    assert r["blk.0.w"]["format"] == "int8"
    assert "channel 5" in r["blk.0.w"]["fallbacks"][0]["reason"]


def test_the_gate_thresholds_can_be_set(small):
    store = resolve_weights(small, None, 0)
    strict = parse_spec("lut4", Gate(max_rel_l2=1e-6))
    lax = parse_spec("lut1", Gate(max_rel_l2=1.0, max_rel_abs=1.0))
    g = small.funcs["f"]
    assert {d.fmt.name for d in decide(g, strict, store, "ios18").values()} == {"fp16"}
    assert {d.fmt.name for d in decide(g, lax, store, "ios18").values()} == {"lut1"}


def test_grouped_luts_fall_back_in_ios16_and_when_channels_do_not_split(small):
    store = resolve_weights(small, None, 0)
    art = compile_module(small, store, compress="lut4/g8>fp16", dialect="ios16").artifacts["f"]
    assert set(_formats(art).values()) == {"fp16"}
    art = compile_module(small, store, compress="lut4/g24>int8").artifacts["f"]
    rep = {c["key"]: c for c in art.manifest.document["compression"]}
    assert rep["blk.1.w"]["format"] == "int8"  # 32 channels do not split into groups of 24
    assert "groups of 24" in rep["blk.1.w"]["fallbacks"][0]["reason"]
    assert rep["blk.0.w"]["format"] == "int8"  # nor 64

def test_compression_leaves_the_module_alone_and_is_byte_stable(small):
    store = resolve_weights(small, None, 0)
    before = print_module(small)
    a = compile_module(small, store, compress="lut4,int8:head.*").artifacts["f"]
    b = compile_module(small, store, compress="lut4,int8:head.*").artifacts["f"]
    assert print_module(small) == before
    assert a.mil_text == b.mil_text
    assert {k: bytes(a.blobs[k]) for k in a.blobs} == {k: bytes(b.blobs[k]) for k in b.blobs}


def test_the_mil_depends_on_the_decisions_not_the_values(small):
    """Two weight sets that both pass the gate give the same MIL (new payloads only): what a
    reload with the recorded scheme relies on."""
    a = compile_module(small, resolve_weights(small, None, 0), compress="int8").artifacts["f"]
    b = compile_module(small, resolve_weights(small, None, 1), compress="int8").artifacts["f"]
    assert a.mil_text == b.mil_text
    assert bytes(a.blobs["weights/w_q.bin"]) != bytes(b.blobs["weights/w_q.bin"])


def test_compressed_weights_shrink_the_artifact(small):
    store = resolve_weights(small, None, 0)
    dense = compile_module(small, store).artifacts["f"].weight_bytes()
    int8 = compile_module(small, store, compress="int8").artifacts["f"].weight_bytes()
    lut4 = compile_module(small, store, compress="lut4>fp16").artifacts["f"].weight_bytes()
    norm = 32 * 2
    assert int8 - norm <= 0.52 * (dense - norm)
    assert lut4 - norm <= 0.28 * (dense - norm)


def test_a_zero_channel_quantizes_to_zero():
    w = np.zeros((2, 3, 1, 1), np.float16)
    w[1] = 0.5
    q, s, _ = quantize_linear(w, 0, get_format("int8"))
    assert np.all(q[0] == 0) and np.all(np.isfinite(s.astype(np.float32)))
    assert np.all(q[1] == 127)


@pytest.mark.constraint("ANE-COMPRESSED-STREAMING")
def test_auto_picks_what_the_target_streams(small):
    """ANE-COMPRESSED-STREAMING: auto is lut4 -> int8 -> fp16 where int8 streams (m4), lut4 ->
    fp16 on m1; an explicit format the target does not stream is kept, with a warning."""
    store = resolve_weights(small, None, 0)
    strict = Gate(max_rel_l2=0.05)  # lut4 (~0.1) fails: the next format of the chain shows
    m4 = compile_module(small, store, compress="auto", compress_gate=strict).artifacts["f"]
    assert set(_formats(m4).values()) == {"int8"}
    m1 = compile_module(small, store, target="m1", compress="auto", compress_gate=strict).artifacts["f"]
    assert set(_formats(m1).values()) == {"fp16"}
    assert set(_formats(compile_module(small, store, target="m1", compress="auto").artifacts["f"]).values()) == {"lut4"}
    warned = compile_module(small, store, target="m1", compress="int8").artifacts["f"].manifest.document["compression"]
    assert all(r["format"] == "int8" and "ANE-COMPRESSED-STREAMING" in r["warning"] for r in warned)
    assert not any("warning" in r for r in m4.manifest.document["compression"])
    with pytest.raises(AnecError, match="auto is a chain of its own"):
        parse_spec("lut4>auto")


def test_core_ml_export_refuses_a_compressed_artifact(small, tmp_path):
    pytest.importorskip("coremltools")
    from anec.frontends import CoreMLExportError
    from anec.frontends.coreml import export_coreml

    compile_module(small, resolve_weights(small, None, 0), compress="int8", out_dir=tmp_path / "out")
    with pytest.raises(CoreMLExportError, match="compressed weights"):
        export_coreml(tmp_path / "out", tmp_path / "f.mlpackage")
    assert not (tmp_path / "f.mlpackage").exists()


def test_large_grouped_luts_take_the_binned_path_and_stay_better_than_one_table():
    """Channel groups of a large tensor have nearly all values distinct: above EXACT_DISTINCT
    the groups are solved on 1024-bin histograms and refined by Lloyd steps. Each group's
    tables must still beat one table for the whole tensor, and the bytes stay stable."""
    from anec.compress import palettize as cz
    from anec.compress import compress_tensor

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((512, 512, 1, 1)) * rng.uniform(0.2, 2, (512, 1, 1, 1)) * 0.02).astype(np.float16)
    blocks = [w[i * 16:(i + 1) * 16] for i in range(32)]
    assert sum(np.unique(b).size for b in blocks) > cz.EXACT_DISTINCT
    grouped = compress_tensor(w, get_format("lut4/g16"), 0)
    single = compress_tensor(w, get_format("lut4"), 0)
    assert grouped.rel_l2 < single.rel_l2
    again = compress_tensor(w.copy(), get_format("lut4/g16"), 0)
    assert again.parts["lut"].tobytes() == grouped.parts["lut"].tobytes()
    assert np.array_equal(again.parts["indices"], grouped.parts["indices"])


def test_the_int8_form_is_the_targets_and_can_be_picked(small, tmp_path):
    """ANE-COMPRESSED-WEIGHTS: int8 is written as constexpr_affine_dequantize by default (the
    demonstrated form), as constexpr_blockwise_shift_scale when asked for; an unknown form
    is a clear error, and the CLI takes --compress-form."""
    from click.testing import CliRunner

    from anec.cli import main
    from anec.diagnostics import AnecError
    from anec.targets import TARGETS

    assert {t.int8_form for t in TARGETS.values()} == {"affine"}
    store = resolve_weights(small, None, 0)
    default = compile_module(small, store, compress="int8").artifacts["f"].mil_text
    block = compile_module(small, store, compress="int8", compress_form="blockwise").artifacts["f"].mil_text
    assert default.count("= constexpr_affine_dequantize(") == 3 and "blockwise" not in default
    assert block.count("= constexpr_blockwise_shift_scale(") == 3 and "affine_dequantize" not in block
    ios16 = compile_module(small, store, compress="int8", compress_form="blockwise", dialect="ios16")
    assert ios16.artifacts["f"].mil_text.count("= constexpr_affine_dequantize(") == 3  # ios16 has no other
    with pytest.raises(AnecError, match=r"(?s)unknown --compress-form 'blockwize'.*did you mean 'blockwise'"):
        compile_module(small, store, compress="int8", compress_form="blockwize")
    ir = tmp_path / "small.ir"
    from tests.compress.conftest import SMALL_IR

    ir.write_text(SMALL_IR)
    r = CliRunner().invoke(main, ["mil", str(ir), "--compress", "int8", "--compress-form", "blockwise"])
    assert r.exit_code == 0, r.output
    assert r.output.count("= constexpr_blockwise_shift_scale(") == 3
    r = CliRunner().invoke(main, ["mil", str(ir), "--compress", "int8"])
    assert r.exit_code == 0 and r.output.count("= constexpr_affine_dequantize(") == 3


def test_4_bit_and_per_block_formats_parse_fall_back_and_say_why(small):
    """int4 falls back to int8 by default; ios16 has no 4-bit or per-block form; a block that
    does not divide the input channels is refused per weight, with the reason."""
    spec = parse_spec("int4/b16")
    assert [f.name for f in spec.rules[0].chain] == ["int4/b16", "int8", "fp16"]
    assert get_format("uint4-affine/b8").storage == "uint4" and get_format("int8/b32").block == 32
    with pytest.raises(AnecError, match="unknown compression format 'int4/b0'"):
        get_format("int4/b0")
    store = resolve_weights(small, None, 0)
    res = compile_module(small, store, compress="int4/b16", dialect="ios16").artifacts["f"]
    fb = {r["key"]: r for r in res.manifest.document["compression"]}
    assert {r["format"] for r in fb.values()} == {"int8"}
    assert "no 4-bit or per-block form" in fb["blk.0.w"]["fallbacks"][0]["reason"]
    res = compile_module(small, store, compress="int4/b32>fp16").artifacts["f"]  # 48 and 64 inputs
    fb = {r["key"]: r for r in res.manifest.document["compression"]}
    assert fb["blk.0.w"]["format"] == "fp16" and "48 input channels do not split into blocks of 32" in \
        fb["blk.0.w"]["fallbacks"][0]["reason"]
    assert fb["blk.1.w"]["format"] == "int4/b32"
    assert "= constexpr_blockwise_shift_scale(" in res.mil_text


def test_4_bit_payloads_count_half_a_byte_per_weight(small):
    store = resolve_weights(small, None, 0)
    art = compile_module(small, store, compress="int4/b16>fp16").artifacts["f"]
    r = {c["key"]: c for c in art.manifest.document["compression"]}["blk.1.w"]  # [32, 64]: 4 blocks per channel
    assert r["bytes"] == 32 * 64 // 2 + 32 * 4 * 2
    payload = {e["part"]["role"]: e for e in art.manifest.document["weights"]
               if e.get("part") and e["part"]["of"] == r["const"]}
    assert payload["q"]["dtype"] == "int4"


def test_weights_are_decided_on_the_cores_with_the_decisions_of_one_thread(small, monkeypatch):
    """decide() spreads the weights over the anec-cores threads (the kernels release the
    GIL); each weight's chain runs whole on one thread, so the decisions, their errors and
    the fallbacks are those of a serial run, in the graph's order."""
    import threading

    import anec.compress.decisions as D
    import anec.thread_pools as P

    store = resolve_weights(small, None, 0)
    spec = parse_spec("lut4:blk.1.*,int8:blk.*,lut6:*", Gate(max_rel_l2=0.05))
    g = small.funcs["f"]
    threads: list[str] = []
    real = D.compress_tensor

    def recording(*args, **kw):
        threads.append(threading.current_thread().name)
        return real(*args, **kw)

    monkeypatch.setattr(D, "compress_tensor", recording)
    monkeypatch.setattr(P.os, "cpu_count", lambda: 2)
    spread = decide(g, spec, store, "ios18")
    assert threads and all(t.startswith("anec-cores") for t in threads)
    monkeypatch.setattr(P.os, "cpu_count", lambda: 1)
    threads.clear()
    serial = decide(g, spec, store, "ios18")
    assert set(threads) == {threading.current_thread().name}
    assert list(spread) == list(serial)
    for i, d in spread.items():
        s = serial[i]
        assert (d.key, d.fmt.name, d.fallbacks) == (s.key, s.fmt.name, s.fallbacks)
        assert d.compressed is None or (d.compressed.rel_l2 == s.compressed.rel_l2 and all(
            np.array_equal(d.compressed.parts[k], s.compressed.parts[k]) for k in d.compressed.parts))
