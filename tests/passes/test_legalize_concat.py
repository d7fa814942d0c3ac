"""ANE-CONCAT is contested: the native reading keeps concat as MIL, the conservative one rewrites it.

Which reading a compile uses is explicit (``--concat rewrite|native|verdict``) and recorded in
the manifest; ``verdict`` (the default) is ``native`` only for this Mac's own target where
``python -m anec.selftest`` found concat accepted and correct, so on Linux, without a verdict
or when cross-compiling, nothing changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from anec import verdict
from anec.cli import main
from anec.compiler import compile_module
from anec.diagnostics import AnecError, ConstraintError, RuntimeFailure
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.runtime import Runtime, native
from anec.ir.weight_binding import random_weights
from tolerances import assert_close

# a concat that feeds a conv (the rewrite turns it into partial convs) and a relu (which no
# rewrite can absorb): natively one concat, conservatively an error
BOTH = """\
func f(%a: fp16[1, 64, 1, 192], %b: fp16[1, 32, 1, 192]) {
  %c = concat(%a, %b, axis=1)
  %w = const(weight="w") : fp16[48, 96, 1, 1]
  %y = conv1x1(%c, %w)
  %r = relu(%c)
  return %y, %r
}
"""

CONV_ONLY = """\
func g(%a: fp16[1, 64, 1, 192], %b: fp16[1, 32, 1, 192]) {
  %c = concat(%a, %b, axis=1)
  %w = const(weight="w") : fp16[48, 96, 1, 1]
  %y = conv1x1(%c, %w)
  return %y
}
"""


@pytest.fixture
def no_mac(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty verdict cache of its own; this machine is not a Mac with an ANE."""
    monkeypatch.setenv("ANEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(verdict, "this_mac_target", lambda: None)
    return tmp_path / "cache"


def _write_verdict(cache: Path, entry: dict) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    (cache / verdict.VERDICT_FILE).write_text(json.dumps({"anec_selftest_verdict": 1,
                                                          "entries": {verdict.machine_key("ane"): entry}}))


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"a": rng.standard_normal((1, 64, 1, 192)).astype(np.float16),
            "b": rng.standard_normal((1, 32, 1, 192)).astype(np.float16)}


@pytest.mark.skipif(not native.available(), reason="the C runtime extension is not built")
@pytest.mark.constraint("ANE-CONCAT")
def test_native_concat_is_kept_and_runs_on_a_sim_that_accepts_it(no_mac: Path, tmp_path: Path) -> None:
    module = parse(BOTH, "both.ir")
    result = compile_module(module, random_seed=0, concat="native")
    art = result.artifacts["f"]
    assert "concat(axis = c_axis, interleave = c_interleave, values = (a, b))" in art.mil_text
    assert not [r for r in result.rewrites if r["constraint"] == "ANE-CONCAT"]
    assert art.manifest.document["concat"] == {"reading": "native", "why": "asked for (--concat native)"}
    x = _inputs()
    ref = interpret(module.funcs["f"], x, random_weights(module, 0), mode="fp32")
    with Runtime("sim", temp_root=tmp_path / "accept", sim_device="concat=accept") as rt:
        out = rt.load(art)(**x)
    # the joined tensor is data movement: bit for bit; the conv over it within the policy
    assert np.array_equal(out["r"], np.maximum(np.concatenate([x["a"], x["b"]], axis=1), 0))
    assert_close(out["y"], ref["y"], "legalize-concat/native-conv:y", ulps=2)
    # the sim's default device is Orion's reading: the device compiler refuses it, naming the id
    with Runtime("sim", temp_root=tmp_path / "reject") as rt, pytest.raises(RuntimeFailure) as info:
        rt.load(art)
    assert "ANE-CONCAT" in str(info.value)


@pytest.mark.constraint("ANE-CONCAT")
def test_without_a_verdict_concat_is_rewritten_or_rejected_as_before(no_mac: Path) -> None:
    result = compile_module(parse(CONV_ONLY, "g.ir"), random_seed=0)
    art = result.artifacts["g"]
    assert "concat(" not in art.mil_text
    assert {r["rule"] for r in result.rewrites if r["constraint"] == "ANE-CONCAT"} \
        == {"split_concat_into_partial_convs"}
    assert art.manifest.document["concat"]["reading"] == "rewrite"
    assert "cross-compiling" in art.manifest.document["concat"]["why"]
    with pytest.raises(ConstraintError) as info:
        compile_module(parse(BOTH, "both.ir"), random_seed=0)
    assert info.value.constraint == "ANE-CONCAT" and "it feeds conv1x1, relu" in str(info.value)
    assert "--concat native" in info.value.hint


def test_an_accepted_verdict_keeps_concat_for_this_macs_target_only(monkeypatch, no_mac: Path) -> None:
    monkeypatch.setattr(verdict, "this_mac_target", lambda: "m4")
    _write_verdict(no_mac, {"reload_verified": [], "concat": "accepted"})
    art = compile_module(parse(CONV_ONLY, "g.ir"), random_seed=0, target="m4").artifacts["g"]
    assert "concat(" in art.mil_text
    assert art.manifest.document["concat"] == {"reading": "native",
                                      "why": "the selftest found concat accepted and correct on this Mac"}
    # another target from this Mac is cross-compiling: conservative
    other = compile_module(parse(CONV_ONLY, "g.ir"), random_seed=0, target="m1").artifacts["g"]
    assert "concat(" not in other.mil_text and "this Mac is m4" in other.manifest.document["concat"]["why"]
    # an explicit --concat rewrite wins over the verdict
    forced = compile_module(parse(CONV_ONLY, "g.ir"), random_seed=0, target="m4", concat="rewrite")
    assert "concat(" not in forced.artifacts["g"].mil_text


@pytest.mark.parametrize("entry", [
    {"concat": "rejected"},
    {"concat": "accepted but wrong"},
    {"concat": "accepted "},                # not a verdict the selftest writes
    {"concat": ["accepted"]},
    {"concat": None},
])
def test_any_other_verdict_keeps_concat_conservative(monkeypatch, no_mac: Path, entry: dict) -> None:
    monkeypatch.setattr(verdict, "this_mac_target", lambda: "m4")
    _write_verdict(no_mac, entry)
    art = compile_module(parse(CONV_ONLY, "g.ir"), random_seed=0, target="m4").artifacts["g"]
    assert "concat(" not in art.mil_text and art.manifest.document["concat"]["reading"] == "rewrite"


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"entries": {"K": "accepted"}}', b"\xff\xfe",
                                     b'{"entries": {"other machine": {"concat": "accepted"}}}'])
def test_a_forged_verdict_file_is_ignored(monkeypatch, no_mac: Path, content: bytes) -> None:
    monkeypatch.setattr(verdict, "this_mac_target", lambda: "m4")
    no_mac.mkdir(parents=True)
    (no_mac / verdict.VERDICT_FILE).write_bytes(content.replace(b"K", verdict.machine_key("ane").encode()))
    assert verdict.cached_concat("ane") is None
    assert verdict.concat_reading("m4")[0] == "rewrite"


def test_a_symlinked_verdict_file_is_not_followed(monkeypatch, no_mac: Path, tmp_path: Path) -> None:
    monkeypatch.setattr(verdict, "this_mac_target", lambda: "m4")
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"entries": {verdict.machine_key("ane"): {"concat": "accepted"}}}))
    no_mac.mkdir(parents=True)
    (no_mac / verdict.VERDICT_FILE).symlink_to(real)
    assert verdict.concat_reading("m4")[0] == "rewrite"


def test_anec_compile_says_which_reading_it_used(no_mac: Path, tmp_path: Path) -> None:
    src = tmp_path / "both.ir"
    src.write_text(BOTH)
    runner = CliRunner()
    ok = runner.invoke(main, ["compile", str(src), "-o", str(tmp_path / "out"), "--random-weights", "0",
                              "--concat", "native"])
    assert ok.exit_code == 0, ok.output
    assert "concat: native (asked for (--concat native))" in ok.output
    manifest = json.loads((tmp_path / "out" / "f" / "manifest.json").read_text())
    assert manifest["concat"]["reading"] == "native"
    bad = runner.invoke(main, ["compile", str(src), "-o", str(tmp_path / "out2"), "--random-weights", "0"])
    assert bad.exit_code == 1
    assert "concat: rewrite (cross-compiling" in bad.output and "[ANE-CONCAT]" in bad.output


@pytest.mark.skipif(not native.available(), reason="the C runtime extension is not built")
@pytest.mark.parametrize("axis", [1, 3])
@pytest.mark.constraint("ANE-CONCAT")
def test_a_native_concat_of_three_unequal_pieces_is_the_inputs_joined_bit_for_bit(no_mac: Path, tmp_path: Path,
                                                                                  axis: int) -> None:
    c = (16, 8, 24) if axis == 1 else (16, 16, 16)
    s = (64, 64, 64) if axis == 1 else (64, 32, 96)
    args = ", ".join(f"%p{i}: fp16[1, {c[i]}, 1, {s[i]}]" for i in range(3))
    out_c, out_s = (sum(c), 64) if axis == 1 else (16, sum(s))
    text = (f"func h({args}) {{\n  %j = concat(%p0, %p1, %p2, axis={axis}) : fp16[1, {out_c}, 1, {out_s}]\n"
            "  %r = relu(%j)\n  return %r\n}\n")
    art = compile_module(parse(text, "h.ir"), random_seed=0, concat="native").artifacts["h"]
    assert "values = (p0, p1, p2)" in art.mil_text
    rng = np.random.default_rng(axis)
    x = {f"p{i}": rng.standard_normal((1, c[i], 1, s[i])).astype(np.float16) for i in range(3)}
    with Runtime("sim", temp_root=tmp_path, sim_device="concat=accept") as rt:
        got = rt.load(art)(**x)["r"]
    assert np.array_equal(got, np.maximum(np.concatenate([x["p0"], x["p1"], x["p2"]], axis=axis), 0))


@pytest.mark.parametrize("system,machine,chip,target", [
    ("linux", "x86_64", None, None),
    ("darwin", "x86_64", "Apple M2 Pro", None),     # Rosetta Python: no ANE
    ("darwin", "arm64", "Apple M2 Pro", "m2"),
    ("darwin", "arm64", "Apple M9", None),          # no profile: treated as cross-compiling
])
def test_this_macs_target_is_its_chips_profile(monkeypatch, system, machine, chip, target) -> None:
    import anec.machine

    monkeypatch.setattr(verdict.sys, "platform", system)
    monkeypatch.setattr(verdict.platform, "machine", lambda: machine)
    monkeypatch.setattr(anec.machine, "detect_chip", lambda: chip)
    assert verdict.this_mac_target() == target


def test_anec_check_judges_concat_with_the_reading_compile_would_use(no_mac: Path, tmp_path: Path) -> None:
    src = tmp_path / "both.ir"
    src.write_text(BOTH)
    runner = CliRunner()
    native_ = runner.invoke(main, ["check", str(src), "--concat", "native"])
    assert native_.exit_code == 0, native_.output
    assert "concat: native" in native_.output and "verdict: ANE-legal on m4" in native_.output
    default = runner.invoke(main, ["check", str(src)])
    assert default.exit_code == 1
    assert "concat: rewrite (cross-compiling" in default.output and "[ANE-CONCAT]" in default.output


def test_a_target_made_native_by_hand_says_so(no_mac: Path) -> None:
    from anec.targets import get_target

    tgt = get_target("m4").replace(concat="native")
    art = compile_module(parse(CONV_ONLY, "g.ir"), random_seed=0, target=tgt).artifacts["g"]
    assert "concat(" in art.mil_text
    assert art.manifest.document["concat"] == {"reading": "native", "why": "the target's concat field is native"}
    with pytest.raises(AnecError, match="unknown concat reading 'nativ'") as info:
        compile_module(parse(CONV_ONLY, "g.ir"), random_seed=0, concat="nativ")
    assert "did you mean 'native'?" in info.value.hint
