"""The data patch from arrays (``anec_reload_arrays``): for a data-patch program C
builds the new weight file straight from the arrays, checking and converting each
payload as it writes it. It must give the bytes the Python path gives, refuse
exactly what it refuses (with the same message), and change nothing when it
refuses."""

from __future__ import annotations

import os

import numpy as np
import pytest

import anec.runtime.program as program_mod
from anec.diagnostics import RuntimeFailure, WeightError
from anec.ir.types import FP16_MAX
from anec.runtime import Runtime
from tests.runtime.test_rt_reload import CASES, X, blobs_for, keys_of, load, weights

PATCHED = [(f, d) for f, d, s in CASES if s == "data-patch"]


def _no_python_files(*_a, **_k):
    raise AssertionError("the new weight file was built in Python")


@pytest.mark.parametrize("src", [np.float16, np.float32])
@pytest.mark.parametrize("form,device", PATCHED)
def test_a_data_patch_program_reloads_from_the_arrays(tmp_path, monkeypatch, src, form, device):
    w0 = weights(0)
    w1 = {k: v.astype(src) for k, v in weights(1).items() if k in keys_of(form)}
    with Runtime("sim", temp_root=tmp_path / "a", sim_device=device) as rt:
        p = load(rt, w0, form)
        monkeypatch.setattr(program_mod, "changed_blobs", _no_python_files)
        p.reload_weights(w1)
        y1 = p(x=X)["y"]
        st = rt.stats
        assert st["reloads_data_patch"] == 1 and st["blobs_patched"] == 1 and st["compiles"] == 1
        p.reload_weights(w1)  # the same arrays again: compared, nothing written
        assert rt.stats["blobs_patched"] == 1 and rt.stats["reloads"] == 2
    with Runtime("sim", temp_root=tmp_path / "b", sim_device=device) as fresh:
        want = load(fresh, {**w0, **{k: v.astype(np.float32) for k, v in w1.items()}}, form)(x=X)["y"]
    np.testing.assert_array_equal(y1, want)


def test_other_strategies_and_other_dtypes_build_the_file_in_python(tmp_path, monkeypatch):
    calls = []
    real = program_mod.changed_blobs
    monkeypatch.setattr(program_mod, "changed_blobs", lambda *a: calls.append(1) or real(*a))
    w1 = weights(1)
    with Runtime("sim", temp_root=tmp_path / "a") as rt:
        load(rt, weights(0), "files").reload_weights(w1)  # recompile
        assert len(calls) == 1
    with Runtime("sim", temp_root=tmp_path / "b", sim_device="data=file") as rt:
        p = load(rt, weights(0), "packed")
        p.reload_weights({k: v.astype(np.float64) for k, v in w1.items()})  # C converts fp16/fp32 only
        assert len(calls) == 2
        p.reload_weights({k: v.astype(np.float16) for k, v in weights(2).items()})
        assert len(calls) == 2


def _state(p):
    files = sorted(os.listdir(os.path.join(p.dir, "weights")))
    return files, p(x=X)["y"]


NON_FINITE = "weight 'l.w2' has a non-finite value \\(NaN or Inf\\) at flat index 5"


@pytest.mark.parametrize("src,value,err", [
    (np.float16, np.nan, NON_FINITE), (np.float32, np.nan, NON_FINITE),
    (np.float16, -np.inf, NON_FINITE), (np.float32, -np.inf, NON_FINITE),
    (np.float32, 65505.0, "weight 'l.w2' has values beyond the fp16 range"),  # rounds to 65504, still refused
])
def test_a_refused_value_names_its_key_and_changes_nothing(tmp_path, src, value, err):
    with Runtime("sim", temp_root=tmp_path, sim_device="data=file") as rt:
        p = load(rt, weights(0), "packed")
        before = _state(p)
        w1 = {k: v.astype(src) for k, v in weights(1).items()}
        w1["l.w2"].flat[5] = value  # l.w1 before it in the file is new and valid: written, then refused
        with pytest.raises(WeightError, match=err):
            p.reload_weights(w1)
        files, y = _state(p)
        assert files == before[0]  # no temp file left
        np.testing.assert_array_equal(y, before[1])
        assert rt.stats["reloads"] == 0
        w1["l.w2"].flat[5] = FP16_MAX  # the extreme itself is in range
        p.reload_weights(w1)
        assert rt.stats["reloads_data_patch"] == 1


def test_of_two_refused_keys_the_first_given_is_named(tmp_path):
    with Runtime("sim", temp_root=tmp_path, sim_device="data=file") as rt:
        p = load(rt, weights(0), "packed")
        w1 = weights(1)
        w1["l.w2"].flat[1] = np.nan
        w1["l.w1"].flat[2] = np.inf
        with pytest.raises(WeightError, match="'l.w1'.*flat index 2"):
            p.reload_weights(w1)
        with pytest.raises(WeightError, match="'l.w2'.*flat index 1"):
            p.reload_weights({"l.w2": w1["l.w2"], "l.w1": w1["l.w1"]})


def test_an_unchanged_tensor_with_a_refused_value_is_refused(tmp_path):
    """65504.5 in fp32 rounds to the 65504 the file holds: still beyond the range."""
    with Runtime("sim", temp_root=tmp_path, sim_device="data=file") as rt:
        w0 = weights(0)
        w0["l.w1"].flat[0] = FP16_MAX
        p = load(rt, w0, "packed")
        w = {k: v.copy() for k, v in w0.items()}
        w["l.w1"].flat[0] = 65504.5
        with pytest.raises(WeightError, match="beyond the fp16 range"):
            p.reload_weights(w)


def test_the_c_entry_point_refuses_arrays_that_do_not_match_the_program(tmp_path):
    with Runtime("sim", temp_root=tmp_path / "a", sim_device="data=file") as rt:
        p = load(rt, weights(0), "packed")
        path = next(iter(blobs_for(weights(0), "packed")))
        w1 = weights(1)["l.w1"].astype(np.float16)
        with pytest.raises(RuntimeFailure, match="no const of this program reads .* at offset 65"):
            p._native.reload_arrays(path, [(65, w1)])
        with pytest.raises(RuntimeFailure, match="does not match the array given for it"):
            p._native.reload_arrays(path, [(64, w1[:8])])
        with pytest.raises(RuntimeFailure, match="is not the weight file of this program"):
            p._native.reload_arrays("@model_path/weights/other.bin", [(64, w1)])
        with pytest.raises(RuntimeFailure, match="is not the weight file"):
            p._native.reload_arrays("@model_path/../weight.bin", [(64, w1)])
        assert p._native.reload_arrays(path, [(64, w1)]) is None
        with pytest.raises(RuntimeFailure, match="overlaps another blob"):
            p._native.reload_arrays(path, [(64, w1), (64, w1)])  # one blob given twice
    with Runtime("sim", temp_root=tmp_path / "b") as rt:
        p = load(rt, weights(0), "packed")  # recompile on this device
        with pytest.raises(RuntimeFailure, match="does not reload by data patch"):
            p._native.reload_arrays(path, [(64, w1)])


def test_the_c_entry_point_reports_the_refused_array(tmp_path):
    with Runtime("sim", temp_root=tmp_path, sim_device="data=file") as rt:
        p = load(rt, weights(0), "packed")
        path = next(iter(blobs_for(weights(0), "packed")))
        from tests.runtime.test_rt_reload import _packed_offsets
        offs = _packed_offsets()
        w = {k: np.ascontiguousarray(v.astype(np.float32)) for k, v in weights(1).items()}
        w["l.w2"].flat[7] = 1e6
        b = np.ascontiguousarray(w["l.b"].T)
        got = p._native.reload_arrays(path, [(offs["l.w1"], w["l.w1"]), (offs["l.w2"], w["l.w2"]),
                                             (offs["l.b"], b)])
        assert got == 1
        assert rt.stats["reloads"] == 0


def test_a_change_past_the_compared_head_of_a_tensor_is_written(tmp_path):
    """The compare looks at each payload's head first; a tensor that changes only at
    its last element must still be seen as changed (the rest is compared too)."""
    from tests.runtime import milkit as mk

    shape = (1, 64, 1, 64)  # 4096 elements: more than the head C compares first
    mil = mk.program([("x", "fp16", shape)], [mk.const_blob("w", "fp16", shape, "w.bin"),
                                                 mk.op("y", "fp16", shape, "mul", x="x", y="w")], ["y"])
    manifest = {"func": "f", "weights": [{"key": "w", "file": "weights/w.bin", "path": "@model_path/weights/w.bin",
                                          "offset": 64, "dtype": "fp16", "shape": list(shape), "perm": None,
                                          "slice": None}]}
    w = np.full(shape, 0.5, np.float16)
    x = np.ones(shape, np.float16)
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.compile(mil, {"@model_path/weights/w.bin": mk.blobfile(w)}, manifest=manifest)
        assert p.reload_info["strategy"] == "data-patch"
        w2 = w.copy()
        w2.flat[-1] = 3.0
        p.reload_weights({"w": w2.astype(np.float32)})
        y = p(x=x)["y"]
        assert y.flat[-1] == 3.0 and y.flat[0] == 0.5
        assert rt.stats["blobs_patched"] == 1
