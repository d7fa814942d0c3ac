"""Delta reload: new weights without a compile, validated before anything changes."""

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


def ffn_program():
    """y = w2 @ relu(w1 @ x) * scale + b, weights in three files; b stored transposed (perm)."""
    body = [mk.const_blob("w1", "fp16", (32, 16, 1, 1), "w1.bin"),
            mk.const_blob("w2", "fp16", (16, 32, 1, 1), "w2.bin"),
            mk.const_blob("b", "fp16", (1, 16, 1, 1), "b.bin"),
            mk.op("h", "fp16", (1, 32, 1, 8), "conv", weight="w1", x="x"),
            mk.op("r", "fp16", (1, 32, 1, 8), "relu", x="h"),
            mk.op("o", "fp16", S, "conv", weight="w2", x="r"),
            mk.op("y", "fp16", S, "add", x="o", y="b")]
    mil = mk.program([("x", "fp16", S)], body, ["y"])
    manifest = {
        "func": "ffn",
        "weights": [
            {"key": "l.w1", "file": "weights/w1.bin", "path": "@model_path/weights/w1.bin", "offset": 64,
             "dtype": "fp16", "shape": [32, 16, 1, 1], "perm": None, "slice": None},
            {"key": "l.w2", "file": "weights/w2.bin", "path": "@model_path/weights/w2.bin", "offset": 64,
             "dtype": "fp16", "shape": [16, 32, 1, 1], "perm": None, "slice": None},
            {"key": "l.b", "file": "weights/b.bin", "path": "@model_path/weights/b.bin", "offset": 64,
             "dtype": "fp16", "shape": [1, 16, 1, 1], "perm": [1, 0], "slice": None},
        ],
    }
    return mil, manifest


def weights(seed):
    r = np.random.default_rng(seed)
    return {"l.w1": (r.standard_normal((32, 16, 1, 1)) / 4).astype(np.float32),
            "l.w2": (r.standard_normal((16, 32, 1, 1)) / 6).astype(np.float32),
            "l.b": r.standard_normal((16, 1)).astype(np.float32)}


def blobs_for(w):
    return {"@model_path/weights/w1.bin": mk.blobfile(w["l.w1"].astype(np.float16)),
            "@model_path/weights/w2.bin": mk.blobfile(w["l.w2"].astype(np.float16)),
            "@model_path/weights/b.bin": mk.blobfile(w["l.b"].T.reshape(1, 16, 1, 1).astype(np.float16))}


def load(rt, w):
    mil, manifest = ffn_program()
    return rt.compile(mil, blobs_for(w), manifest=manifest)


X = RNG.standard_normal(S).astype(np.float16)


def test_reload_is_bit_identical_to_a_fresh_compile_and_compiles_nothing(tmp_path):
    w0, w1 = weights(0), weights(1)
    with Runtime("sim", temp_root=tmp_path / "a") as rt:
        p = load(rt, w0)
        y0 = p(x=X)["y"]
        p.reload_weights(w1)
        y1 = p(x=X)["y"]
        st = rt.stats
        assert st["compiles"] == 1 and st["reloads"] == 1 and st["blobs_patched"] == 3
        assert st["unloads"] == 1 and st["loads"] == 2
    with Runtime("sim", temp_root=tmp_path / "b") as fresh:
        y_fresh = load(fresh, w1)(x=X)["y"]
    assert not np.array_equal(y0, y1)
    np.testing.assert_array_equal(y1, y_fresh)


def test_only_changed_files_are_rewritten(fresh_rt):
    w0 = weights(0)
    p = load(fresh_rt, w0)
    w2_path = os.path.join(p.dir, "weights", "w2.bin")
    w2_inode = os.stat(w2_path).st_ino
    new = dict(w0)
    new["l.w1"] = w0["l.w1"] * 2
    p.reload_weights(new)  # w2 and b unchanged
    assert fresh_rt.stats["blobs_patched"] == 1
    assert os.stat(w2_path).st_ino == w2_inode
    p.reload_weights({"l.w1": new["l.w1"]})  # nothing changes at all
    assert fresh_rt.stats["blobs_patched"] == 1 and fresh_rt.stats["reloads"] == 2


def test_weights_are_baked_until_the_next_load(fresh_rt):
    w0, w1 = weights(0), weights(1)
    p = load(fresh_rt, w0)
    y0 = p(x=X)["y"]
    with open(os.path.join(p.dir, "weights", "w1.bin"), "wb") as f:
        f.write(blobs_for(w1)["@model_path/weights/w1.bin"])
    np.testing.assert_array_equal(p(x=X)["y"], y0)  # patching files changes nothing
    p.unload()
    p.load()
    assert not np.array_equal(p(x=X)["y"], y0)  # ... until the weights are loaded again


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


def test_reload_of_a_shared_directory_leaves_the_other_program_alone(fresh_rt):
    w0, w1 = weights(0), weights(1)
    p1, p2 = load(fresh_rt, w0), load(fresh_rt, w0)
    assert p1.dir == p2.dir
    y0 = p2(x=X)["y"]
    p1.reload_weights(w1)
    assert p1.dir != p2.dir and fresh_rt.stats["compiles"] == 1
    np.testing.assert_array_equal(p2(x=X)["y"], y0)
    p2.unload()
    p2.load()
    np.testing.assert_array_equal(p2(x=X)["y"], y0)
    assert not np.array_equal(p1(x=X)["y"], y0)


def test_reload_of_an_unloaded_program_applies_at_load(fresh_rt):
    p = load(fresh_rt, weights(0))
    p.unload()
    p.reload_weights(weights(1))
    p.load()
    with Runtime("sim") as other:
        np.testing.assert_array_equal(p(x=X)["y"], load(other, weights(1))(x=X)["y"])


def _fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def _rss_kb() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:  # pragma: no cover - non-Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_1000_reloads_do_not_leak(tmp_path):
    # program dirs on tmpfs when there is one: this test is about leaks, not about fsync latency
    root = tempfile.mkdtemp(dir="/dev/shm") if os.path.isdir("/dev/shm") else str(tmp_path)
    with Runtime("sim", temp_root=os.path.join(root, "p")) as rt:
        _reload_loop(rt)
    shutil.rmtree(root, ignore_errors=True)


def _reload_loop(fresh_rt):
    mil, manifest = ffn_program()
    p = fresh_rt.compile(mil, blobs_for(weights(0)), manifest=manifest)
    sets = [blobs_for(weights(s)) for s in range(4)]
    for i in range(50):  # warm up allocator and page cache
        p.reload_blobs(sets[i % 4])
    fds, rss = _fds(), _rss_kb()
    for i in range(1000):
        p.reload_blobs(sets[i % 4])
    p(x=X)
    assert _fds() == fds
    assert _rss_kb() - rss < 4096, "RSS grew by more than 4 MiB over 1000 reloads"
    st = fresh_rt.stats
    assert st["reloads"] == 1050 and st["compiles"] == 1
    leftovers = [f for f in os.listdir(os.path.join(p.dir, "weights")) if ".tmp." in f]
    assert leftovers == []
