"""Delta reload: new weights reach the device through a verified strategy,
validated before anything changes, never silently stale.

The sim bakes weights at compile like the device (docs/runtime.md): its
device switches model every reading of the public evidence, and each test
runs on the ones that matter.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile

import numpy as np
import pytest

from anec.diagnostics import RuntimeFailure, WeightError
from anec.runtime import Runtime, native
from tests.runtime import milkit as mk

S = (1, 16, 1, 8)
RNG = np.random.default_rng(7)
X = RNG.standard_normal(S).astype(np.float16)

SHAPES = {"l.w1": (32, 16, 1, 1), "l.w2": (16, 32, 1, 1), "l.b": (1, 16, 1, 1)}


def ffn_program(form: str = "files"):
    """y = w2 @ relu(w1 @ x) + b; b stored transposed (perm).

    form "files": three BLOBFILEs; "packed": one BLOBFILE holding the three
    tensors; "single": only w1 (one BLOBFILE, one tensor), y = w1 @ x summed."""
    if form == "single":
        body = [mk.const_blob("w1", "fp16", SHAPES["l.w1"], "w1.bin"),
                mk.op("h", "fp16", (1, 32, 1, 8), "conv", weight="w1", x="x"),
                mk.op("y", "fp16", (1, 32, 1, 8), "relu", x="h")]
        mil = mk.program([("x", "fp16", S)], body, ["y"])
        return mil, {"func": "ffn", "weights": [_entry("l.w1", "weights/w1.bin", 64)]}
    if form == "packed":
        offs = _packed_offsets()
        files = {k: ("weight.bin", offs[k]) for k in SHAPES}
    else:
        files = {"l.w1": ("w1.bin", 64), "l.w2": ("w2.bin", 64), "l.b": ("b.bin", 64)}
    body = [mk.const_blob("w1", "fp16", SHAPES["l.w1"], files["l.w1"][0], files["l.w1"][1]),
            mk.const_blob("w2", "fp16", SHAPES["l.w2"], files["l.w2"][0], files["l.w2"][1]),
            mk.const_blob("b", "fp16", SHAPES["l.b"], files["l.b"][0], files["l.b"][1]),
            mk.op("h", "fp16", (1, 32, 1, 8), "conv", weight="w1", x="x"),
            mk.op("r", "fp16", (1, 32, 1, 8), "relu", x="h"),
            mk.op("o", "fp16", S, "conv", weight="w2", x="r"),
            mk.op("y", "fp16", S, "add", x="o", y="b")]
    mil = mk.program([("x", "fp16", S)], body, ["y"])
    entries = [_entry(k, f"weights/{f}", off, perm=[1, 0] if k == "l.b" else None) for k, (f, off) in files.items()]
    return mil, {"func": "ffn", "weights": entries}


def _entry(key, file, offset, perm=None):
    return {"key": key, "file": file, "path": f"@model_path/{file}", "offset": offset, "dtype": "fp16",
            "shape": list(SHAPES[key]), "perm": perm, "slice": None}


def _packed_offsets():
    offs, o = {}, 64
    for k in ("l.w1", "l.w2", "l.b"):
        offs[k] = o
        o += 64 + int(np.prod(SHAPES[k])) * 2
        o += (-o) % 64
    return offs


def weights(seed):
    r = np.random.default_rng(seed)
    return {"l.w1": (r.standard_normal((32, 16, 1, 1)) / 4).astype(np.float32),
            "l.w2": (r.standard_normal((16, 32, 1, 1)) / 6).astype(np.float32),
            "l.b": r.standard_normal((16, 1)).astype(np.float32)}


def blobs_for(w, form="files"):
    if form == "single":
        return {"@model_path/weights/w1.bin": mk.blobfile(w["l.w1"].astype(np.float16))}
    t = {"l.w1": w["l.w1"].astype(np.float16), "l.w2": w["l.w2"].astype(np.float16),
         "l.b": w["l.b"].T.reshape(1, 16, 1, 1).astype(np.float16)}
    if form == "packed":
        return {"@model_path/weights/weight.bin": mk.blobfile(t["l.w1"], t["l.w2"], t["l.b"])}
    return {"@model_path/weights/w1.bin": mk.blobfile(t["l.w1"]),
            "@model_path/weights/w2.bin": mk.blobfile(t["l.w2"]),
            "@model_path/weights/b.bin": mk.blobfile(t["l.b"])}


def load(rt, w, form="files"):
    mil, manifest = ffn_program(form)
    return rt.compile(mil, blobs_for(w, form), manifest=manifest)


def keys_of(form):
    return ["l.w1"] if form == "single" else list(SHAPES)


# (program form, sim device switches, the strategy the runtime must pick)
CASES = [
    ("files", "", "recompile"),                  # several BLOBFILEs: data is opaque
    ("packed", "", "recompile"),                 # one file, three tensors: opaque on the evidenced device
    ("packed", "data=file", "data-patch"),       # ... unless the device keeps a packed file as data
    ("packed", "data=file,load=weights", "data-patch"),
    ("single", "", "data-patch"),                # one tensor: data == the BLOBFILE (ANE-DATA-IS-BLOBFILE)
    ("single", "load=weights", "data-patch"),    # ANE-LOAD-REREADS-WEIGHTS
    ("single", "load=memory", "new-object"),     # an object keeps its first weights: only a new object helps
    ("packed", "data=file,load=memory", "new-object"),
    ("single", "load=memory-shared", "recompile"),  # ... and new objects get the identifier's: only a compile
]


@pytest.mark.parametrize("form,device,strategy", CASES)
@pytest.mark.constraint("ANE-NEW-OBJECT-LOAD")
def test_reload_equals_a_fresh_compile_with_the_strategy_the_device_allows(tmp_path, form, device, strategy):
    w0, w1 = weights(0), weights(1)
    w1 = {k: w1[k] for k in keys_of(form)}
    with Runtime("sim", temp_root=tmp_path / "a", sim_device=device) as rt:
        p = load(rt, w0, form)
        assert p.reload_info["strategy"] == strategy
        assert rt.stats["reload_strategy"] == {"ffn": strategy}
        # twice each: the sim packs a narrow conv's weight at a program's second run since
        # load, and a reload must not leave it on the old weight's panel
        y0 = p(x=X)["y"]
        np.testing.assert_array_equal(p(x=X)["y"], y0)
        p.reload_weights(w1)
        y1 = p(x=X)["y"]
        np.testing.assert_array_equal(p(x=X)["y"], y1)
        st = rt.stats
        assert st["reloads"] == 1 and st["blobs_patched"] == len(blobs_for(weights(1), form))
        assert st["compiles"] == (2 if strategy == "recompile" else 1)
        assert st["reloads_data_patch"] == (strategy == "data-patch")
        assert st["reloads_new_object"] == (strategy == "new-object")
        assert st["reloads_recompile"] == (strategy == "recompile")
    with Runtime("sim", temp_root=tmp_path / "b", sim_device=device) as fresh:
        y_fresh = load(fresh, {**w0, **w1}, form)(x=X)["y"]
    assert not np.array_equal(y0, y1)
    np.testing.assert_array_equal(y1, y_fresh)


@pytest.mark.parametrize("device", ["", "load=memory"])
@pytest.mark.constraint("ANE-BAKED-WEIGHTS", "ANE-LOAD-REREADS-WEIGHTS")
def test_weights_are_baked_at_compile(fresh_rt, tmp_path, device):
    """Rewriting weights/ and loading again changes nothing (ANE-BAKED-WEIGHTS)."""
    w0, w1 = weights(0), weights(1)
    with Runtime("sim", temp_root=tmp_path / device.replace("=", "_"), sim_device=device) as rt:
        p = load(rt, w0)
        y0 = p(x=X)["y"]
        for path, data in blobs_for(w1).items():
            with open(os.path.join(p.dir, path.split("/", 1)[1]), "wb") as f:
                f.write(data)
        np.testing.assert_array_equal(p(x=X)["y"], y0)
        p.unload()
        p.load()
        np.testing.assert_array_equal(p(x=X)["y"], y0)


@pytest.mark.constraint("ANE-LOAD-REREADS-WEIGHTS")
def test_a_device_that_rereads_weights_sees_rewritten_files(tmp_path):
    """The optimistic reading (Orion's paper): the sim can model it, and the runtime never relies on it."""
    w0, w1 = weights(0), weights(1)
    with Runtime("sim", temp_root=tmp_path, sim_device="load=weights") as rt:
        p = load(rt, w0)
        y0 = p(x=X)["y"]
        for path, data in blobs_for(w1).items():
            with open(os.path.join(p.dir, path.split("/", 1)[1]), "wb") as f:
                f.write(data)
        p.unload()
        p.load()
        assert not np.array_equal(p(x=X)["y"], y0)


@pytest.mark.constraint("ANE-BAKED-WEIGHTS")
def test_an_unverified_data_patch_can_be_stale_which_is_why_it_must_be_verified(tmp_path):
    """On a device whose model object keeps the weights of its compile
    (load=memory), a forced data patch changes nothing: exactly what
    `python -m anec.selftest` probes for. The runtime's own choice there is
    a new model object, which the reading honours."""
    w0, w1 = weights(0), weights(1)
    with Runtime("sim", temp_root=tmp_path, sim_device="load=memory") as rt:
        assert "data-patch" not in rt.reload_verified and "new-object" in rt.reload_verified
        p = load(rt, w0, "single")
        y0 = p(x=X)["y"]
        p.reload_blobs(blobs_for(w1, "single"), strategy="data-patch")
        np.testing.assert_array_equal(p(x=X)["y"], y0)  # stale
        p.reload_blobs(blobs_for(weights(2), "single"))     # the runtime's own choice: a new object
        assert not np.array_equal(p(x=X)["y"], y0)
        assert rt.stats["reloads_new_object"] == 1 and rt.stats["compiles"] == 1


# Per sim reading: which forced strategy reaches the device (the others leave the
# old output in place), and what the sim declares verified must be exactly those.
READINGS = {
    "load=data": {"data-patch": True, "new-object": True, "recompile": True},
    "load=weights": {"data-patch": True, "new-object": True, "recompile": True},
    "load=memory": {"data-patch": False, "new-object": True, "recompile": True},
    "load=memory-shared": {"data-patch": False, "new-object": False, "recompile": True},
}


@pytest.mark.parametrize("device", sorted(READINGS))
@pytest.mark.parametrize("strategy", ["data-patch", "new-object", "recompile"])
@pytest.mark.constraint("ANE-BAKED-WEIGHTS")
def test_every_forced_strategy_under_every_sim_reading_is_fresh_or_exactly_stale(tmp_path, device, strategy):
    """A forced reload either equals a fresh compile with the new weights bit
    for bit, or (where the reading defeats the strategy) leaves the old output
    bit for bit: the two outcomes the selftest's probe tells apart. The sim
    declares verified exactly the strategies its reading honours, and in auto
    mode it never picks one it does not."""
    w0, w1 = weights(0), weights(1)
    with Runtime("sim", temp_root=tmp_path / "a", sim_device=device) as rt:
        declared = {s for s in ("data-patch", "new-object") if s in rt.reload_verified}
        assert declared == {s for s in ("data-patch", "new-object") if READINGS[device][s]}
        p = load(rt, w0, "single")
        y0 = p(x=X)["y"]
        before = rt.stats["compiles"]
        p.reload_blobs(blobs_for(w1, "single"), strategy=strategy)
        y1 = p(x=X)["y"]
        assert rt.stats["compiles"] - before == (strategy == "recompile")
        # the program keeps what it computes with across an unload and a load
        p.unload()
        p.load()
        np.testing.assert_array_equal(p(x=X)["y"], y1)
        auto = p.reload_info["strategy"]
        assert auto == "recompile" or READINGS[device][auto]
    with Runtime("sim", temp_root=tmp_path / "b", sim_device=device) as fresh:
        y_fresh = load(fresh, {**w0, "l.w1": w1["l.w1"]}, "single")(x=X)["y"]
    assert not np.array_equal(y0, y_fresh)
    np.testing.assert_array_equal(y1, y_fresh if READINGS[device][strategy] else y0)


def test_nothing_verified_falls_back_to_recompile_and_says_why(tmp_path):
    w0, w1 = weights(0), weights(1)
    with Runtime("sim", temp_root=tmp_path, reload_verified=[]) as rt:
        assert rt.reload_verified == ["recompile", "inputs"]
        p = load(rt, w0, "single")
        info = p.reload_info
        assert info["strategy"] == "recompile" and info["data_patchable"]
        assert "not verified" in info["why"] and "anec.selftest" in info["why"]
        p.reload_weights({"l.w1": w1["l.w1"]})
        assert rt.stats["compiles"] == 2 and rt.stats["reloads_recompile"] == 1


@pytest.mark.parametrize("form,device", [("files", ""), ("single", ""), ("packed", "data=file")])
def test_a_reload_that_changes_nothing_costs_nothing(tmp_path, form, device):
    w0 = weights(0)
    with Runtime("sim", temp_root=tmp_path, sim_device=device) as rt:
        p = load(rt, w0, form)
        d = p.dir
        before = rt.stats
        p.reload_weights({k: w0[k] for k in keys_of(form)})
        st = rt.stats
        assert st["reloads"] == 1 and st["blobs_patched"] == 0
        assert (st["compiles"], st["unloads"], st["loads"]) == (before["compiles"], before["unloads"], before["loads"])
        assert p.dir == d


def test_only_changed_files_are_rewritten(fresh_rt):
    w0 = weights(0)
    p = load(fresh_rt, w0)
    new = dict(w0)
    new["l.w1"] = w0["l.w1"] * 2
    p.reload_weights(new)  # w2 and b unchanged
    assert fresh_rt.stats["blobs_patched"] == 1 and fresh_rt.stats["reloads"] == 1
    p.reload_weights({"l.w1": new["l.w1"]})  # nothing changes at all
    assert fresh_rt.stats["blobs_patched"] == 1 and fresh_rt.stats["reloads"] == 2
    with Runtime("sim") as other:
        np.testing.assert_array_equal(p(x=X)["y"], load(other, new)(x=X)["y"])


@pytest.mark.parametrize("bad,err", [
    ({"l.w1": np.zeros((16, 16, 1, 1))}, "has shape \\[16, 16, 1, 1\\]"),
    ({"l.w2": np.full((16, 32, 1, 1), np.nan)}, "non-finite"),
    ({"l.b": np.full((16, 1), 1e6)}, "fp16 range"),
    ({"l.w3": np.zeros(3)}, "unknown weight 'l.w3'"),
])
def test_bad_weights_rejected_and_old_weights_keep_working(fresh_rt, bad, err):
    p = load(fresh_rt, weights(0))
    y0 = p(x=X)["y"]
    with pytest.raises(WeightError, match=err):
        p.reload_weights(bad)
    np.testing.assert_array_equal(p(x=X)["y"], y0)
    assert fresh_rt.stats["reloads"] == 0 and fresh_rt.stats["unloads"] == 0


def test_unknown_key_suggests_a_close_one(fresh_rt):
    p = load(fresh_rt, weights(0))
    with pytest.raises(WeightError) as ei:
        p.reload_weights({"l.w11": np.zeros(1)})
    assert "did you mean 'l.w1'" in (ei.value.hint or "")


def test_c_level_validation_of_raw_blobs(fresh_rt):
    p = load(fresh_rt, weights(0))
    y0 = p(x=X)["y"]
    good = blobs_for(weights(1))
    cases = {
        "non-finite": {"@model_path/weights/w1.bin": mk.blobfile(np.full((32, 16, 1, 1), np.inf, np.float16))},
        "needs 1024 bytes": {"@model_path/weights/w1.bin": mk.blobfile(np.zeros((16, 16, 1, 1), np.float16))},
        "sentinel": {"@model_path/weights/w1.bin": good["@model_path/weights/w1.bin"][:64] + bytes(64)
                     + good["@model_path/weights/w1.bin"][128:]},
        "not a weight file of this program": {"@model_path/weights/other.bin": good["@model_path/weights/w1.bin"]},
        "version": {"@model_path/weights/w1.bin": b"\x01\0\0\0\x03" + good["@model_path/weights/w1.bin"][5:]},
        "outside the file": {"@model_path/weights/w1.bin": good["@model_path/weights/w1.bin"][:200]},
    }
    for msg, blobs in cases.items():
        # a valid file first: a half-applied reload must not happen either
        with pytest.raises(RuntimeFailure, match=msg) as ei:
            p.reload_blobs({"@model_path/weights/w2.bin": good["@model_path/weights/w2.bin"], **blobs})
        assert ei.value.code in (native.lib.ANEC_EWEIGHTS, native.lib.ANEC_EINVAL)
        np.testing.assert_array_equal(p(x=X)["y"], y0)
    assert fresh_rt.stats["reloads"] == 0


@pytest.mark.parametrize("form,device,compiles", [("files", "", 2), ("single", "", 1)])
def test_reload_of_a_shared_directory_leaves_the_other_program_alone(tmp_path, form, device, compiles):
    w0, w1 = weights(0), weights(1)
    with Runtime("sim", temp_root=tmp_path, sim_device=device) as rt:
        p1, p2 = load(rt, w0, form), load(rt, w0, form)
        assert p1.dir == p2.dir
        y0 = p2(x=X)["y"]
        p1.reload_weights({k: w1[k] for k in keys_of(form)})
        assert p1.dir != p2.dir and rt.stats["compiles"] == compiles
        np.testing.assert_array_equal(p2(x=X)["y"], y0)
        p2.unload()
        p2.load()
        np.testing.assert_array_equal(p2(x=X)["y"], y0)
        assert not np.array_equal(p1(x=X)["y"], y0)


@pytest.mark.parametrize("form", ["files", "single"])
def test_reload_of_an_unloaded_program_applies_at_load(fresh_rt, form):
    p = load(fresh_rt, weights(0), form)
    p.unload()
    w1 = {k: weights(1)[k] for k in keys_of(form)}
    p.reload_weights(w1)
    p.load()
    with Runtime("sim") as other:
        np.testing.assert_array_equal(p(x=X)["y"], load(other, {**weights(0), **w1}, form)(x=X)["y"])


@pytest.mark.parametrize("verified,compiles", [(None, 1), ([], 2)])
def test_a_cache_hit_with_other_weights_is_patched_or_compiled_never_stale(tmp_path, verified, compiles):
    """Same MIL and weight paths, other weights: the clone starts with the donor's
    compiled data; it is patched (verified) or compiled, never left stale."""
    w0, w1 = weights(0), weights(1)
    with Runtime("sim", temp_root=tmp_path, reload_verified=verified) as rt:
        p = load(rt, w0, "single")
        q = load(rt, w1, "single")
        assert rt.stats["compiles"] == compiles and rt.stats["cache_hits"] == 2 - compiles
        with Runtime("sim") as other:
            np.testing.assert_array_equal(q(x=X)["y"], load(other, w1, "single")(x=X)["y"])
        assert not np.array_equal(q(x=X)["y"], p(x=X)["y"])


@pytest.mark.parametrize("strategy", ["data-patch", "recompile"])
def test_the_cache_identity_of_a_reloaded_program_is_its_new_weights(tmp_path, strategy):
    """A reload does not hash the new weights; the cache computes their identity
    when a lookup needs it: the same weights hit, other weights never do
    (nothing verified here: a hit with other weights would compile). Once the
    key was compiled with other weights too, no clone is trusted without
    new-object verified (a framework that keeps weights per identifier could
    give a never-compiled clone the last compiled ones): later loads compile."""
    w0, w1 = weights(0), weights(1)
    per_reload = strategy == "recompile"  # compiles a reload costs
    with Runtime("sim", temp_root=tmp_path, reload_verified=[]) as rt, Runtime("sim") as other:
        p = load(rt, w0, "single")
        p.reload_blobs(blobs_for(w1, "single"), strategy=strategy)
        assert rt.stats["compiles"] == 1 + per_reload
        q = load(rt, w1, "single")  # p's new weights: a hit, unless the recompile mixed the key
        hit = not per_reload
        assert rt.stats["compiles"] == 1 + 2 * per_reload and rt.stats["cache_hits"] == hit
        np.testing.assert_array_equal(q(x=X)["y"], load(other, w1, "single")(x=X)["y"])
        r = load(rt, w0, "single")  # p's old weights: no longer a hit
        assert rt.stats["compiles"] == 2 + 2 * per_reload and rt.stats["cache_hits"] == hit
        np.testing.assert_array_equal(r(x=X)["y"], load(other, w0, "single")(x=X)["y"])
        q.reload_blobs(blobs_for(w0, "single"), strategy=strategy)
        q.close()
        p.reload_blobs(blobs_for(w0, "single"), strategy=strategy)
        p.close()
        r.close()
        s = load(rt, w0, "single")  # the key is mixed now (r): compiled, never a stale clone
        t = load(rt, w1, "single")
        assert rt.stats["compiles"] == 4 + 4 * per_reload and rt.stats["cache_hits"] == hit
        np.testing.assert_array_equal(s(x=X)["y"], load(other, w0, "single")(x=X)["y"])
        np.testing.assert_array_equal(t(x=X)["y"], load(other, w1, "single")(x=X)["y"])


@pytest.mark.constraint("ANE-DATA-IS-BLOBFILE")
def test_a_cache_hit_of_a_multi_tensor_program_with_other_weights_compiles(fresh_rt):
    p = load(fresh_rt, weights(0))
    q = load(fresh_rt, weights(1))
    assert fresh_rt.stats["compiles"] == 2 and fresh_rt.stats["cache_hits"] == 0
    assert not np.array_equal(q(x=X)["y"], p(x=X)["y"])
    r = load(fresh_rt, weights(0))  # identical weights: a real cache hit
    assert fresh_rt.stats["compiles"] == 2 and fresh_rt.stats["cache_hits"] == 1
    np.testing.assert_array_equal(r(x=X)["y"], p(x=X)["y"])


@pytest.mark.constraint("ANE-COMPILE-BUDGET")
def test_recompile_reloads_stop_at_the_process_budget_with_a_clear_error(tmp_path):
    with Runtime("sim", compile_budget=3, temp_root=tmp_path) as rt:
        p = load(rt, weights(0))
        p.reload_weights(weights(1))
        p.reload_weights(weights(2))
        y = p(x=X)["y"]
        with pytest.raises(RuntimeFailure) as ei:
            p.reload_weights(weights(3))
        assert ei.value.constraint == "ANE-COMPILE-BUDGET"
        assert "reloads by compiling again" in ei.value.message and "--pack-weights" in ei.value.message
        np.testing.assert_array_equal(p(x=X)["y"], y)  # the old weights stay in use


def _fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def _rss_kb() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:  # pragma: no cover - non-Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_1000_data_patch_reloads_do_not_leak(tmp_path):
    # program dirs on tmpfs when there is one: this test is about leaks, not about fsync latency
    root = tempfile.mkdtemp(dir="/dev/shm") if os.path.isdir("/dev/shm") else str(tmp_path)
    with Runtime("sim", temp_root=os.path.join(root, "p"), sim_device="data=file") as rt:
        _reload_loop(rt)
    shutil.rmtree(root, ignore_errors=True)


def _reload_loop(rt):
    mil, manifest = ffn_program("packed")
    p = rt.compile(mil, blobs_for(weights(0), "packed"), manifest=manifest)
    assert p.reload_info["strategy"] == "data-patch"
    sets = [blobs_for(weights(s), "packed") for s in range(1, 5)]
    for i in range(50):  # warm up allocator and page cache
        p.reload_blobs(sets[i % 4])
    fds, rss = _fds(), _rss_kb()
    for i in range(1000):
        p.reload_blobs(sets[i % 4])
    p(x=X)
    assert _fds() == fds
    assert _rss_kb() - rss < 4096, "RSS grew by more than 4 MiB over 1000 reloads"
    st = rt.stats
    assert st["reloads"] == 1050 and st["compiles"] == 1 and st["reloads_data_patch"] == 1050
    leftovers = [f for f in os.listdir(os.path.join(p.dir, "weights")) if ".tmp." in f]
    assert leftovers == [] and [f for f in os.listdir(p.dir) if ".tmp." in f] == []


# ---- pipelines: every strategy reaches every stage it touches ---------------------------------------

def _residual_chain() -> str:
    """4 conv+relu layers and a residual add of the input: y = h3 + x. Cut into stages,
    x is read by the first and the last stage (a pipeline input written to two stages)."""
    from tests.passes.test_partition import chain

    return chain(4).replace("  return %h3\n", "  %y = add(%h3, %x)\n  return %y\n")


def _chain_pipeline(seed_weights, weights_as_inputs=()):
    """The residual chain cut into one stage per BLOBFILE weight (each stage's weight is
    one BLOBFILE with one tensor, so its compiled data is that file), and its x."""
    from anec.compiler import compile_module
    from anec.ir.parser import parse
    from anec.targets import get_target
    from anec.ir.weight_binding import random_weights

    m = parse(_residual_chain(), "c.ir")
    store = random_weights(m, seed_weights)
    kw = {"weights_as_inputs": list(weights_as_inputs)} if weights_as_inputs else {}
    art = compile_module(m, weights=store, target=get_target("m4").replace(max_blob_tensors=1), **kw).artifacts["f"]
    x = np.random.default_rng(3).standard_normal(m.funcs["f"].inputs[0].type.shape).astype(np.float32)
    return art, store, x


@pytest.mark.parametrize("device,strategy", [("load=data", "data-patch"), ("load=memory", "new-object"),
                                             ("load=memory-shared", "recompile")])
def test_a_pipeline_reload_reaches_each_touched_stage_by_the_verified_strategy(tmp_path, device, strategy):
    """Each stage reloads by the strategy its device reading verified; the pipeline's
    output changes and equals a fresh compile with the new weights bit for bit."""
    art, s0, x = _chain_pipeline(0)
    _, s1, _ = _chain_pipeline(1)
    new = {"l1.w": s1["l1.w"], "l3.w": s1["l3.w"]}
    with Runtime("sim", temp_root=tmp_path / "a", sim_device=device) as rt:
        p = rt.load(art)
        assert len(p.stages) == 4 and {s.reload_info["strategy"] for s in p.stages} == {strategy}
        y0 = p(x=x)["y"]
        before = rt.stats
        p.reload_weights(new)
        y1 = p(x=x)["y"]
        st = rt.stats
        key = {"data-patch": "reloads_data_patch", "new-object": "reloads_new_object",
               "recompile": "reloads_recompile"}[strategy]
        assert st[key] - before[key] == 2  # the two stages holding l1.w and l3.w
        assert st["compiles"] - before["compiles"] == (2 if strategy == "recompile" else 0)
    from anec.compiler import compile_module  # the same func with the new weights, compiled fresh
    from anec.ir.parser import parse
    from anec.targets import get_target
    fresh_art = compile_module(parse(_residual_chain(), "c.ir"), weights={**s0, **new},
                               target=get_target("m4").replace(max_blob_tensors=1)).artifacts["f"]
    with Runtime("sim", temp_root=tmp_path / "b", sim_device=device) as fresh:
        y_fresh = fresh.load(fresh_art)(x=x)["y"]
    assert not np.array_equal(y0, y1)
    np.testing.assert_array_equal(y1, y_fresh)


def test_a_weights_as_inputs_pipeline_reload_writes_the_surfaces_of_each_stage(tmp_path):
    """Two of the chain's weights compiled as inputs (the others as BLOBFILEs cut it into
    two stages, each reading one weight input): a reload of those is a surface write in
    each stage (no compile, no load); the output changes and equals a fresh pipeline
    with the new weights bit for bit."""
    art, s0, x = _chain_pipeline(0, weights_as_inputs=["l1.w", "l3.w"])
    _, s1, _ = _chain_pipeline(1)
    new = {"l1.w": s1["l1.w"], "l3.w": s1["l3.w"]}
    assert len(art.stages) == 2 and [w["key"] for w in art.manifest.document["weight_inputs"]] == ["l1.w", "l3.w"]
    with Runtime("sim", temp_root=tmp_path / "a") as rt:
        p = rt.load(art)
        y0 = p(x=x)["y"]
        before = rt.stats
        p.reload_weights(new)
        y1 = p(x=x)["y"]
        st = rt.stats
        assert st["compiles"] == before["compiles"] and st["loads"] == before["loads"]
        assert st["reloads_inputs"] - before["reloads_inputs"] == 1
    from anec.compiler import compile_module
    from anec.ir.parser import parse
    from anec.targets import get_target
    fresh_art = compile_module(parse(_residual_chain(), "c.ir"), weights={**s0, **new},
                               weights_as_inputs=["l1.w", "l3.w"],
                               target=get_target("m4").replace(max_blob_tensors=1)).artifacts["f"]
    with Runtime("sim", temp_root=tmp_path / "b") as fresh:
        y_fresh = fresh.load(fresh_art)(x=x)["y"]
    assert not np.array_equal(y0, y1)
    np.testing.assert_array_equal(y1, y_fresh)
