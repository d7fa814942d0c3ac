"""The spare weight file of a data-patch program.

A data patch writes the new weight file beside the old one and renames it into
place. The file it replaced is kept as ``<file>.spare`` and the next data patch
writes over it (its pages are reused: nothing is allocated or freed) before
renaming it into place in turn, so a reload loop alternates between two files.
A spare is only ever written when it is a regular file of the right size that no
other name links: never a file another program (or anything outside the
program directory) still reads.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from anec.diagnostics import WeightError
from anec.runtime import Runtime
from tests.runtime.test_rt_reload import CASES, X, blobs_for, keys_of, load, weights

PATCHED = [(f, d) for f, d, s in CASES if s == "data-patch"]


def _weight_file(p) -> str:
    (path,) = [os.path.join(p.dir, "weights", f) for f in os.listdir(os.path.join(p.dir, "weights"))
               if not f.endswith(".spare")]
    return path


def _fresh(tmp_path, w, form, device):
    with Runtime("sim", temp_root=tmp_path / "fresh", sim_device=device) as rt:
        return load(rt, w, form)(x=X)["y"]


def _new(seed, form, src):
    return {k: v.astype(src) for k, v in weights(seed).items() if k in keys_of(form)}


@pytest.mark.parametrize("entry", ["arrays", "blobs"])
@pytest.mark.parametrize("form,device", PATCHED)
def test_each_data_patch_writes_over_the_file_the_one_before_replaced(tmp_path, form, device, entry):
    w0 = weights(0)
    with Runtime("sim", temp_root=tmp_path / "rt", sim_device=device) as rt:
        p = load(rt, w0, form)
        assert p.reload_info["strategy"] == "data-patch"
        path = _weight_file(p)
        spare = path + ".spare"
        assert not os.path.exists(spare)
        for seed in range(1, 5):
            before = os.stat(path).st_ino
            spare_before = os.stat(spare).st_ino if os.path.exists(spare) else None
            new = {**w0, **_new(seed, form, np.float32)}
            if entry == "arrays":
                p.reload_weights(_new(seed, form, np.float16 if seed % 2 else np.float32))
            else:
                p.reload_blobs(blobs_for(new, form))
            # the replaced file is the spare now; the spare (from the second reload on) became the file
            assert os.stat(spare).st_ino == before and os.lstat(spare).st_nlink == 1
            if spare_before is not None:
                assert os.stat(path).st_ino == spare_before
            assert sorted(os.listdir(os.path.dirname(path))) == sorted([os.path.basename(path),
                                                                         os.path.basename(spare)])
            np.testing.assert_array_equal(p(x=X)["y"], _fresh(tmp_path / str(seed), new, form, device))
            p.unload()
            p.load()
            np.testing.assert_array_equal(p(x=X)["y"], _fresh(tmp_path / f"{seed}b", new, form, device))
        assert rt.stats["compiles"] == 1 and rt.stats["reloads_data_patch"] == 4


def test_a_file_another_program_still_links_is_never_kept_as_a_spare(tmp_path):
    """Two programs share one directory (same MIL, same weights). The first reload moves
    p1 onto a private copy made of hard links, so the file it replaces is still p2's:
    it must not become p1's spare, and no later reload of p1 may touch it."""
    w0 = weights(0)
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        p1, p2 = load(rt, w0, "single"), load(rt, w0, "single")
        assert p1.dir == p2.dir and p1.reload_info["strategy"] == "data-patch"
        y0 = p2(x=X)["y"]
        p1.reload_weights(_new(1, "single", np.float32))
        assert p1.dir != p2.dir
        assert not os.path.exists(_weight_file(p1) + ".spare")
        for seed in (2, 3, 4):
            p1.reload_weights(_new(seed, "single", np.float16))
        np.testing.assert_array_equal(p2(x=X)["y"], y0)
        p2.unload()
        p2.load()
        np.testing.assert_array_equal(p2(x=X)["y"], y0)
        np.testing.assert_array_equal(p1(x=X)["y"], _fresh(tmp_path, {**w0, **_new(4, "single", np.float32)},
                                                           "single", ""))


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "size", "directory"])
def test_a_spare_that_is_not_a_private_file_of_the_right_size_is_replaced_not_written(tmp_path, kind):
    w0 = weights(0)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"not yours" * 1000)
    with Runtime("sim", temp_root=tmp_path / "rt", sim_device="data=file") as rt:
        p = load(rt, w0, "packed")
        p.reload_weights(_new(1, "packed", np.float32))
        spare = _weight_file(p) + ".spare"
        size = os.path.getsize(spare)
        os.unlink(spare)
        if kind == "symlink":
            outside.write_bytes(b"\0" * size)  # the right size, behind a link
            os.symlink(outside, spare)
        elif kind == "hardlink":
            outside.write_bytes(b"\0" * size)
            os.link(outside, spare)
        elif kind == "size":
            with open(spare, "wb") as f:
                f.write(b"\0" * (size + 64))
        else:
            os.mkdir(spare)
        kept = outside.read_bytes()
        new = {**w0, **_new(2, "packed", np.float32)}
        if kind == "directory":  # cannot be removed as a file: the reload fails and changes nothing
            y1 = p(x=X)["y"]
            with pytest.raises(Exception, match="old weights stay in use"):
                p.reload_weights(_new(2, "packed", np.float16))
            np.testing.assert_array_equal(p(x=X)["y"], y1)
            return
        p.reload_weights(_new(2, "packed", np.float16))
        assert outside.read_bytes() == kept
        (want,) = blobs_for(new, "packed").values()
        assert open(_weight_file(p), "rb").read() == bytes(want)
        np.testing.assert_array_equal(p(x=X)["y"], _fresh(tmp_path, new, "packed", "data=file"))
        assert os.path.isfile(spare) and not os.path.islink(spare) and os.lstat(spare).st_nlink == 1


def test_a_refused_value_written_into_the_spare_leaves_the_weights_in_use(tmp_path):
    """The refused value is met while the spare is being written over: the file in use,
    the compiled data and the outputs stay as they were."""
    w0 = weights(0)
    with Runtime("sim", temp_root=tmp_path / "rt", sim_device="data=file") as rt:
        p = load(rt, w0, "packed")
        p.reload_weights(_new(1, "packed", np.float32))
        path = _weight_file(p)
        assert os.path.exists(path + ".spare")
        before, y1 = open(path, "rb").read(), p(x=X)["y"]
        bad = _new(2, "packed", np.float32)
        bad["l.b"].flat[3] = np.nan  # the last payload in the file: the others are written first
        with pytest.raises(WeightError, match="non-finite"):
            p.reload_weights(bad)
        assert open(path, "rb").read() == before
        np.testing.assert_array_equal(p(x=X)["y"], y1)
        p.unload()
        p.load()
        np.testing.assert_array_equal(p(x=X)["y"], y1)
        p.reload_weights(_new(3, "packed", np.float16))  # and the next reload works
        np.testing.assert_array_equal(p(x=X)["y"], _fresh(tmp_path, {**w0, **_new(3, "packed", np.float32)},
                                                          "packed", "data=file"))
