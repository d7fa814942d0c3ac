"""``python -m anec.selftest`` on the sim: it must pass, and each check must be able to fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from anec import selftest, verdict
from anec.selftest import checks, programs
from anec.runtime import Program, native

pytestmark = pytest.mark.skipif(not native.available(), reason="the C runtime extension is not built")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report() -> dict:
    return selftest.run_selftest(backend="auto", target="m4", seed=0)


def _check(report: dict, cid: str) -> dict:
    return next(c for c in report["checks"] if c["id"] == cid)


def test_selftest_passes_on_the_sim(report: dict) -> None:
    assert report["driver"] == "sim"
    assert [c["id"] for c in report["checks"]] == [
        "legalized", "unlegalized", "concat", "binding", "min-surface", "reload", "shared", "state", "dialect",
        "fp16-range", "spatial", "compressed", "int8-activations"]
    failed = [(c["id"], c["lines"]) for c in report["checks"] if not c["passed"]]
    assert not failed
    assert report["passed"] is True


@pytest.mark.constraint("ANE-SPATIAL-LIMITS")
def test_selftest_numbers(report: dict) -> None:
    leg = _check(report, "legalized")["data"]
    # every ANE-rejected op of the program was rewritten by legalize
    assert {"expand_gelu_tanh", "rsqrt_to_pow", "split_conv_bias", "split_concat_into_partial_convs",
            "lower_reduce_mean"} <= set(leg["rules"])
    assert leg["max_abs_err"] < 0.01 < leg["tolerance"]
    un = _check(report, "unlegalized")["data"]["results"]
    assert all(un[op]["rejected"] and un[op]["code"] == 5 for op in ("gelu", "rsqrt"))
    assert "concat" not in un  # contested: the concat check probes it
    assert un["relu"] == {"rejected": False, "ran": True}
    cc = _check(report, "concat")["data"]
    assert cc["verdict"] == cc["declared"] == "rejected" and cc["raw"]["code"] == 5
    b = _check(report, "binding")["data"]
    assert b["inputs"] == ["alpha", "zeta"] and b["outputs"] == ["ahalf", "zdiff"]
    ms = _check(report, "min-surface")["data"]
    assert ms["tensor_bytes"] == 64 and ms["padded_alloc_bytes"] >= 49152
    assert ms["exact_size"]["failed"] is True and "0x1d" in ms["exact_size"]["message"]
    rl = _check(report, "reload")["data"]
    # the sim's default device: a one-tensor program's compiled data is its BLOBFILE, a packed
    # two-tensor program's is opaque; the data patch and the new object each equal a fresh
    # compile, with no compile
    for strategy in ("data-patch", "new-object"):
        one = rl["probes"][strategy]["one"]
        assert one["verified"] is True and one["compiles"] == 0 and one["vs_fresh"] == 0.0
        assert one["change"] > 0.5
        assert rl["probes"][strategy]["packed"] == {"files": 1, "data_patchable": False, "verified": None}
    assert rl["verdict"] == ["data-patch", "new-object"] == rl["declared"]
    assert rl["auto"]["reload-auto-one"] == {"strategy": "data-patch", "compiles": 0, "equals_fresh": True}
    assert rl["auto"]["reload-auto-dense"] == {"strategy": "recompile", "compiles": 1, "equals_fresh": True}
    sh = _check(report, "shared")["data"]
    assert sh["one tensor"]["compiles"] == 1 and sh["one tensor"]["cache_hits"] == 1  # a new object
    assert sh["two tensors"]["compiles"] == 2 and sh["two tensors"]["cache_hits"] == 0  # opaque data: compiled
    assert all(sh[k]["same_mil"] and sh[k]["first_unchanged"] for k in ("one tensor", "two tensors"))
    assert _check(report, "dialect")["data"]["accepted"] == ["ios18", "ios16"]
    sp = _check(report, "spatial")["data"]
    # the sim refuses what anec assumes the device refuses (ANE-SPATIAL-LIMITS)
    assert sp["beyond_kernel"] == 17 and sp["beyond_compiled"] is False
    assert max(sp["max_abs_err"].values()) < 0.01
    i8 = _check(report, "int8-activations")["data"]
    assert i8["verdict"] == "accepted" and i8["roundings"] == [checks.ANEC_ROUNDING] and i8["max_abs_err"] < 0.01
    cp = _check(report, "compressed")["data"]
    assert cp["int8_form"] == "affine"
    assert {k: v["verdict"] for k, v in cp["probes"].items()} == {
        "int8 (constexpr_affine_dequantize)": "accepted", "int8 (constexpr_blockwise_shift_scale)": "accepted",
        "lut4 (constexpr_lut_to_dense)": "accepted", "lut6 (constexpr_lut_to_dense)": "accepted",
        "sparse50 (constexpr_sparse_to_dense)": "accepted",
        "sparse50+int8 (constexpr_sparse_blockwise_shift_scale)": "accepted",
        "sparse50+lut4 (constexpr_lut_to_sparse)": "accepted"}
    assert max(v["max_abs_err"] for v in cp["probes"].values()) < 0.05


def test_render_is_a_pasteable_report(report: dict) -> None:
    text = selftest.render(report)
    lines = text.splitlines()
    assert lines[0] == "anec selftest 0.1.0: driver sim (backend auto), target m4, seed 0"
    assert "PASS  binding       inputs and outputs bind in alphabetical order of MIL names" in lines
    assert lines[-1] == "13/13 checks passed"


@pytest.mark.constraint("ANE-INPUT-RESIDENT")
def test_state_check_fails_when_rows_written_in_place_do_not_reach_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device that does not see rows written between calls (here: the writes dropped) fails."""
    c = checks.Check("state", "")
    checks.check_state(checks.CheckEnv("sim", "m4", 0), c)
    assert c.passed and c.data["equal_to_whole"] == c.data["steps"] == 16, c.lines
    monkeypatch.setattr(Program, "write_input_slice", lambda self, name, value, axis, start: None)
    c = checks.Check("state", "")
    checks.check_state(checks.CheckEnv("sim", "m4", 0), c)
    assert not c.passed
    assert c.data["equal_to_whole"] == 1  # only the first call, before any row was written


def test_binding_check_fails_when_buffers_are_bound_in_declaration_order(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Program.evaluate_raw

    def declaration_order(self, inputs, outputs):  # what a device binding by position would do
        real(self, inputs[::-1], outputs)

    monkeypatch.setattr(Program, "evaluate_raw", declaration_order)
    c = checks.Check("binding", "")
    checks.check_binding(checks.CheckEnv("sim", "m4", 0), c)
    assert not c.passed
    assert c.data["max_abs_err"]["device level:zdiff"] > 1.0


def test_compressed_check_fails_when_a_form_decompresses_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device decompressing otherwise than the MIL says (here: the reference's int8 and
    sparse weights off by 10%) is caught as wrong values."""
    from anec.mil import artifact

    real = artifact.decompress_parts

    def off(parts):
        d = real(parts)
        off = parts[0][0].part.format in ("int8", "sparse50")
        return (d.astype(np.float32) * 1.1).astype(np.float16) if off else d

    monkeypatch.setattr(artifact, "decompress_parts", off)
    c = checks.Check("compressed", "")
    checks.check_compressed(checks.CheckEnv("sim", "m4", 0), c)
    assert not c.passed
    verdicts = {k: v["verdict"] for k, v in c.data["probes"].items()}
    assert verdicts["int8 (constexpr_affine_dequantize)"] == "accepted but wrong"
    assert verdicts["sparse50 (constexpr_sparse_to_dense)"] == "accepted but wrong"
    assert verdicts["lut4 (constexpr_lut_to_dense)"] == "accepted"


@pytest.mark.constraint("ANE-COMPRESSED-WEIGHTS")
def test_compressed_check_fails_when_the_targets_int8_form_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device that rejects the affine op (the default form) fails the check and names the
    other form; one that rejects only the blockwise op passes with that reported."""
    from anec.diagnostics import RuntimeFailure
    from anec.runtime import Runtime

    real = Runtime.load

    def reject(op):
        def load(self, art, *a, **k):
            if f"= {op}(" in art.mil_text:
                raise RuntimeFailure("InvalidMILProgram", code=5)
            return real(self, art, *a, **k)
        return load

    monkeypatch.setattr(Runtime, "load", reject("constexpr_affine_dequantize"))
    c = checks.Check("compressed", "")
    checks.check_compressed(checks.CheckEnv("sim", "m4", 0), c)
    assert not c.passed
    assert any("--compress-form blockwise" in line for line in c.lines)
    monkeypatch.setattr(Runtime, "load", reject("constexpr_blockwise_shift_scale"))
    c = checks.Check("compressed", "")
    checks.check_compressed(checks.CheckEnv("sim", "m4", 0), c)
    assert c.passed, c.lines
    assert c.data["probes"]["int8 (constexpr_blockwise_shift_scale)"]["verdict"] == "rejected"
    # ANE-COMPRESSED-SPARSE is a hypothesis: a device that rejects the sparse op is reported, not failed
    monkeypatch.setattr(Runtime, "load", reject("constexpr_sparse_to_dense"))
    c = checks.Check("compressed", "")
    checks.check_compressed(checks.CheckEnv("sim", "m4", 0), c)
    assert c.passed, c.lines
    assert c.data["probes"]["sparse50 (constexpr_sparse_to_dense)"]["verdict"] == "rejected"


@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_the_rounding_probe_tells_every_two_roundings_apart() -> None:
    x = np.resize(np.asarray(programs.INT8_ROUND_X, np.float32), (1, 64, 1, programs.N))
    modes = checks.int8_roundings(x, programs.ROUND_SCALE)
    assert len(modes) == 6 and checks.ANEC_ROUNDING in modes
    for name, y in modes.items():
        assert checks.rounding_matches(x, programs.ROUND_SCALE, y) == [name]
    from anec.ir.act_quant import fake_quant

    assert np.array_equal(modes[checks.ANEC_ROUNDING], fake_quant(x, programs.ROUND_SCALE))


def _int8_device(monkeypatch: pytest.MonkeyPatch, rounding: str | None) -> None:
    """Runtime.load on a device that rejects quantize (``rounding`` None) or rounds it ``rounding``."""
    from anec.diagnostics import RuntimeFailure
    from anec.runtime import Runtime

    real = Runtime.load

    def load(self, art, *a, **k):
        if "= quantize(" not in art.mil_text:
            return real(self, art, *a, **k)
        if rounding is None:
            raise RuntimeFailure("InvalidMILProgram", code=5)
        prog = real(self, art, *a, **k)
        if "eye" not in art.mil_text:
            return prog
        return lambda x: {"y": checks.int8_roundings(x, programs.ROUND_SCALE)[rounding].astype(np.float32)}

    monkeypatch.setattr(Runtime, "load", load)


@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_int8_activation_check_fails_when_the_device_rounds_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    _int8_device(monkeypatch, "half away from zero, fp16 quotient")
    c = checks.Check("int8-activations", "")
    checks.check_int8_activations(checks.CheckEnv("sim", "m4", 0), c)
    assert not c.passed and c.data["roundings"] == ["half away from zero, fp16 quotient"]
    assert any("differ by one step" in line for line in c.lines)


@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_int8_activation_check_reports_a_device_that_rejects_the_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    _int8_device(monkeypatch, None)
    c = checks.Check("int8-activations", "")
    checks.check_int8_activations(checks.CheckEnv("sim", "m4", 0), c)
    assert c.passed and c.data["verdict"] == "rejected"
    assert any("do not compile with --activations int8" in line for line in c.lines)


def test_reload_check_fails_when_the_runtime_reloads_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Program, "reload_weights", lambda self, weights: None)
    c = checks.Check("reload", "")
    checks.check_reload(checks.CheckEnv("sim", "m4", 0), c)
    assert not c.passed
    assert not any(a["equals_fresh"] for a in c.data["auto"].values())


@pytest.mark.parametrize("device,verdict,packed", [
    # a model object keeps the weights of its compile: the same-object patch is stale,
    # a new object loads the new data
    ("load=memory", ["new-object"], None),
    # ... and new objects get the weights last compiled for their identifier: only recompiles
    ("load=memory-shared", [], None),
    ("data=file", ["data-patch", "new-object"], True),  # a packed file kept as data: patched too
    ("data=file,load=memory", ["new-object"], True),
    ("load=weights", ["data-patch", "new-object"], None),
])
@pytest.mark.constraint("ANE-NEW-OBJECT-LOAD", "ANE-SAME-OBJECT-PATCH")
def test_reload_probe_finds_what_each_device_allows(monkeypatch: pytest.MonkeyPatch, device, verdict, packed) -> None:
    monkeypatch.setenv("ANEC_SIM_DEVICE", device)
    c = checks.Check("reload", "")
    checks.check_reload(checks.CheckEnv("sim", "m4", 0), c)
    assert c.passed, c.lines  # whatever the device allows, the runtime's choice equals a fresh compile
    assert c.data["verdict"] == verdict == c.data["declared"]
    for strategy in ("data-patch", "new-object"):
        probe = c.data["probes"][strategy]
        assert probe["packed"]["verified"] is (packed if strategy in verdict else (None if packed is None else False))
        if strategy not in verdict:  # a stale reload, caught: the outputs did not change at all
            assert probe["one"]["verified"] is False and probe["one"]["change"] == 0.0
    auto = {a["strategy"] for a in c.data["auto"].values()}
    assert auto == ({verdict[0], "recompile"} if verdict else {"recompile"})
    assert all(a["equals_fresh"] and a["compiles"] == (a["strategy"] == "recompile") for a in c.data["auto"].values())


@pytest.mark.parametrize("device,found", [("", "rejected"), ("concat=reject", "rejected"),
                                          ("load=memory,concat=accept", "accepted")])
@pytest.mark.constraint("ANE-CONCAT")
def test_concat_probe_gives_each_sim_reading_its_verdict(monkeypatch: pytest.MonkeyPatch, device, found) -> None:
    monkeypatch.setenv("ANEC_SIM_DEVICE", device)
    c = checks.Check("concat", "")
    checks.check_concat(checks.CheckEnv("sim", "m4", 0), c)
    assert c.passed, c.lines
    assert c.data["verdict"] == found == c.data["declared"]
    if found == "accepted":
        assert c.data["raw"] == {"rejected": False, "exact": True}
        assert c.data["program"]["right"] and c.data["program"]["max_abs_err"] <= c.data["program"]["tolerance"]
    else:
        assert c.data["raw"]["rejected"] and "concat" in c.data["raw"]["message"] and c.data["program"] is None


@pytest.mark.parametrize("broken", ["raw", "program"])
@pytest.mark.constraint("ANE-CONCAT")
def test_concat_probe_finds_a_concat_that_is_accepted_but_wrong(monkeypatch: pytest.MonkeyPatch, broken) -> None:
    monkeypatch.setenv("ANEC_SIM_DEVICE", "concat=accept")
    if broken == "raw":  # a device whose concat swaps its inputs
        monkeypatch.setattr(checks, "_joined", lambda a, b: np.concatenate([b, a], axis=1))
    else:  # a device whose concat is right in raw MIL but not in anec's program
        real = checks._reference
        monkeypatch.setattr(checks, "_reference", lambda g, x, s: {"y": real(g, x, s)["y"] + 1.0})
    c = checks.Check("concat", "")
    checks.check_concat(checks.CheckEnv("sim", "m4", 0), c)
    assert c.data["verdict"] == "accepted but wrong"
    assert not c.passed  # the sim declares concat accepted (and right): the disagreement is reported
    assert any("accepted but wrong" in line for line in c.lines)


def test_the_concat_verdict_is_cached_with_the_reload_verdict(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANEC_CACHE_DIR", str(tmp_path / "cache"))
    report = {"driver": "ane", "target": "m4",
              "checks": [{"id": "reload", "data": {"verdict": []}},
                         {"id": "concat", "data": {"verdict": "accepted"}}]}
    verdict.save_verdict(report)
    assert verdict.cached_concat("ane") == "accepted" and verdict.cached_concat("sim") is None
    assert verdict.cached_verdict("ane") == []
    monkeypatch.setattr(verdict, "this_mac_target", lambda: "m4")
    assert verdict.concat_reading("m4")[0] == "native"
    assert verdict.concat_reading("m5")[0] == "rewrite"
    monkeypatch.setattr(verdict, "__version__", "9.9.9")  # another anec does not see it
    assert verdict.cached_concat("ane") is None and verdict.concat_reading("m4")[0] == "rewrite"


def test_the_verdict_is_cached_per_machine_and_read_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANEC_CACHE_DIR", str(tmp_path / "cache"))
    assert verdict.cached_verdict("ane") is None
    report = {"driver": "ane", "target": "m4",
              "checks": [{"id": "reload", "data": {"verdict": ["data-patch"]}},
                         {"id": "dialect", "data": {"accepted": ["ios18"]}}]}
    path = verdict.save_verdict(report)
    assert path == tmp_path / "cache" / "selftest-verdict.json"
    assert verdict.cached_verdict("ane") == ["data-patch"]
    assert verdict.cached_verdict("sim") is None  # per driver
    report["checks"][0]["data"]["verdict"] = ["new-object"]  # a machine where only a new object works
    verdict.save_verdict(report)
    assert verdict.cached_verdict("ane") == ["new-object"]
    report["checks"][0]["data"]["verdict"] = ["data-patch"]
    verdict.save_verdict(report)
    from anec import runtime

    assert runtime._verdict_for("ane") == ["data-patch"]
    # another machine, OS or anec version does not see it
    monkeypatch.setattr(verdict, "__version__", "9.9.9")
    assert verdict.cached_verdict("ane") is None


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"entries": []}', b"\xff\xfe",
                                     b'{"entries": {"K": {"reload_verified": ["rewrite-and-pray"]}}}'])
def test_a_hostile_verdict_file_verifies_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content) -> None:
    monkeypatch.setenv("ANEC_CACHE_DIR", str(tmp_path))
    (tmp_path / "selftest-verdict.json").write_bytes(content.replace(b"K", verdict.machine_key("ane").encode()))
    assert verdict.cached_verdict("ane") is None


def test_a_symlinked_verdict_file_is_not_followed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANEC_CACHE_DIR", str(tmp_path))
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"entries": {verdict.machine_key("ane"): {"reload_verified": ["data-patch"]}}}))
    (tmp_path / "selftest-verdict.json").symlink_to(real)
    assert verdict.cached_verdict("ane") is None


def test_unlegalized_check_fails_when_an_op_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    real = programs.raw_mil
    # a device that accepts gelu: its program compiles like the control
    monkeypatch.setattr(checks, "raw_mil", lambda op, d: real("relu" if op == "gelu" else op, d))
    c = checks.Check("unlegalized", "")
    checks.check_unlegalized(checks.CheckEnv("sim", "m4", 0), c)
    assert not c.passed
    assert any(line.startswith("gelu: ACCEPTED") for line in c.lines)


def test_min_surface_check_fails_when_small_surfaces_give_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    def garbage(self, inputs, outputs):
        for o in outputs:
            o[...] = 7.0

    monkeypatch.setattr(Program, "evaluate_raw", garbage)
    c = checks.Check("min-surface", "")
    checks.check_min_surface(checks.CheckEnv("sim", "m4", 0), c)
    assert not c.passed
    assert "WRONG" in c.lines[1]


def test_a_crashing_check_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(env, c):
        raise ValueError("boom")

    monkeypatch.setattr(checks, "CHECKS", [("x", "crashes", boom), checks.CHECKS[3]])
    rep = selftest.run_selftest("sim", "m4", 0)
    assert [c["passed"] for c in rep["checks"]] == [False, True]
    assert rep["checks"][0]["lines"] == ["crashed: ValueError: boom"]
    assert rep["passed"] is False


@pytest.mark.parametrize("target", ["m1", "m2", "m3", "m5"])
def test_selftest_passes_for_every_target_profile(target: str) -> None:
    rep = selftest.run_selftest(backend="sim", target=target, seed=1)
    assert rep["target"] == target
    assert [c["id"] for c in rep["checks"] if not c["passed"]] == []
    un = _check(rep, "unlegalized")["data"]
    assert un["dialect"] == "ios18"  # every chip: the references run program(1.3) on M1 Pro/Max too


def test_raw_mil_dialects() -> None:
    old, new = programs.raw_mil("concat", "ios16"), programs.raw_mil("concat", "ios18")
    assert old.startswith("program(1.0)") and "func main<ios16>" in old
    assert 'tensor<int32, []> c_axis = const()[name = tensor<string, []>("c_axis"), val = tensor<int32, []>(1)];' in old
    assert new.startswith("program(1.3)") and "func main<ios18>" in new
    assert 'int32 c_axis = const()[name = string("c_axis"), val = int32(1)];' in new


def test_cli_json_and_exit_status() -> None:
    r = CliRunner().invoke(selftest.main, ["--json", "--backend", "sim", "--seed", "3"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["passed"] and rep["seed"] == 3 and rep["driver"] == "sim"
    assert all(isinstance(c["data"]["seconds"], float) for c in rep["checks"])


def test_cli_ane_on_linux_is_a_clear_error() -> None:
    r = CliRunner().invoke(selftest.main, ["--backend", "ane"])
    assert r.exit_code == 2
    assert "AppleNeuralEngine.framework not found" in r.output


def test_python_dash_m() -> None:
    r = subprocess.run([sys.executable, "-m", "anec.selftest", "--backend", "sim"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("13/13 checks passed")
    assert np.all([line.startswith("PASS") for line in r.stdout.splitlines() if line[:4] in ("PASS", "FAIL")])


# ---- the reload check against the fake of the macOS framework ---------------------------------------

FAKE_CDEF = """
typedef enum { FK_LOAD_DATA, FK_LOAD_WEIGHTS, FK_LOAD_MEMORY, FK_LOAD_MEMORY_SHARED } fk_reading;
void fk_init(const char *root);
void fk_shutdown(void);
void fk_set_device(fk_reading reading, int hex_content);
size_t fk_nviolations(void);
const char *fk_violation(size_t i);
"""


@pytest.fixture(scope="module")
def fake_native(tmp_path_factory: pytest.TempPathFactory):
    """The C runtime with the ane driver bound to tests/ane_protocol/fake_apple.c (a test-only
    cffi build, as `make ane-protocol-test` links it): (ffi, lib)."""
    import importlib.util
    import shutil

    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("a C compiler is needed to build the runtime against the fake")
    from cffi import FFI

    csrc = ROOT / "csrc"
    sources = sorted(str(f) for f in csrc.glob("*.c") if not f.name.startswith("fuzz_"))
    sources.append(str(ROOT / "tests" / "ane_protocol" / "fake_apple.c"))
    ffi = FFI()
    ffi.cdef((csrc / "anec_rt.cdef.h").read_text("utf-8") + FAKE_CDEF)
    ffi.set_source("_anec_fake_native", '#include "anec_rt.h"\n#include "fake_apple.h"', sources=sources,
                   include_dirs=[str(csrc), str(ROOT / "tests" / "ane_protocol")],
                   define_macros=[("ANEC_ANE_TESTING", None)], libraries=["m", "pthread", "dl"],
                   extra_compile_args=["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-fno-strict-aliasing"])
    build = tmp_path_factory.mktemp("fake-native")
    so = ffi.compile(tmpdir=str(build), verbose=False)
    spec = importlib.util.spec_from_file_location("_anec_fake_native", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


# (reading, hexId covers the weight values) -> the verdict the probes must find (fake_apple.h)
FAKE_READINGS = [
    ("FK_LOAD_DATA", 0, ["data-patch", "new-object"]),
    ("FK_LOAD_WEIGHTS", 1, ["data-patch", "new-object"]),
    ("FK_LOAD_MEMORY", 0, ["new-object"]),
    ("FK_LOAD_MEMORY_SHARED", 0, []),
    ("FK_LOAD_MEMORY_SHARED", 1, ["new-object"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("reading,hex_content,verdict", FAKE_READINGS)
@pytest.mark.constraint("ANE-SAME-OBJECT-PATCH")
def test_the_reload_check_on_the_fake_finds_what_each_reading_allows(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_native, reading, hex_content, verdict) -> None:
    """The Python reload check, run on the ane driver against the fake of the macOS framework
    under each reading of the evidence: each probe finds exactly the strategies that reading
    honours, and with that verdict the runtime's own reloads equal a fresh compile."""
    ffi, lib = fake_native
    monkeypatch.setattr(native, "ffi", ffi)
    monkeypatch.setattr(native, "lib", lib)
    monkeypatch.setenv("ANEC_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "nstmp"
    root.mkdir()
    lib.fk_init(str(root).encode())
    try:
        lib.fk_set_device(getattr(lib, reading), hex_content)
        lib.anec_process_reset_budget(b"ane")
        env = checks.CheckEnv("ane", "m4", 0)
        assert env.driver == "ane"
        c = checks.Check("reload", "")
        checks.check_reload(env, c)
        violations = [ffi.string(lib.fk_violation(i)).decode() for i in range(lib.fk_nviolations())]
    finally:
        lib.fk_shutdown()
    assert not violations
    assert c.passed, c.lines
    assert c.data["verdict"] == verdict, c.lines
    for strategy in ("data-patch", "new-object"):
        one = c.data["probes"][strategy]["one"]
        assert one["verified"] is (strategy in verdict) and one["compiles"] == 0
        assert c.data["probes"][strategy]["packed"]["verified"] is None  # two tensors: opaque data on the fake
    assert {a["strategy"] for a in c.data["auto"].values()} == ({verdict[0], "recompile"} if verdict else {"recompile"})
