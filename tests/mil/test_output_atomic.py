"""A compile output is all or nothing: readers see the complete previous output or the complete
new one, temporary directories are never taken and are cleaned up, concurrent compiles to one
``-o`` take turns, and a compile killed (SIGKILL) at any moment leaves nothing ``anec run``
accepts that differs from a complete compile.

The kill test runs ANEC_KILL_TRIALS compiles (default 12); the documented long run takes 100
(about 6 minutes on 2 cores)::

    ANEC_KILL_TRIALS=100 .venv/bin/python -m pytest tests/mil/test_output_atomic.py -q -k kill -s
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.compiler import compile_module
from anec.diagnostics import ArtifactError
from anec.ir.graph import Module
from anec.ir.parser import parse
from anec.fsutil import is_temp_name, write_tree_atomic
from anec.hashing import sha256
from anec.mil.artifact import BLOB_MAX_BYTES, OUTPUT_INDEX, Artifact
from anec.mil.output import load_artifact, write_output
from anec.mil.beneath import Beneath
from anec.mil.manifest import MANIFEST_MAX_BYTES

ROOT = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("ANEC_KILL_TRIALS", "12"))
N_FUNCS = 40


def many_funcs(n: int = N_FUNCS) -> str:
    """``n`` small funcs, one weight each."""
    return "".join(f"""func f{i:02d}(%x: fp32[1, 8, 1, 4]) {{
  %xh = cast(%x, dtype=fp16)
  %w = const(weight="f{i:02d}.w") : fp16[8, 8, 1, 1]
  %h = conv1x1(%xh, %w)
  %a = relu(%h)
  %y = cast(%a, dtype=fp32)
  return %y
}}
""" for i in range(n))


def _art_key(art: Artifact) -> tuple:
    return art.mil_text, tuple(sorted(art.blobs.items())), json.dumps(art.manifest.document, sort_keys=True)


def _reference(out: Path) -> dict[str, tuple]:
    return {f: _art_key(load_artifact(out, f)) for f in sorted(p.name for p in out.iterdir() if p.is_dir())}


def _accepted(out: Path, funcs) -> dict[str, tuple]:
    """Func -> what ``anec run OUT --func F`` (load_artifact) takes; funcs it refuses are left out."""
    got = {}
    for f in funcs:
        try:
            got[f] = _art_key(load_artifact(out, f))
        except ArtifactError:
            pass
    return got


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(n for n in os.listdir(parent) if n.startswith(f".{name}."))


# ---- replacing a whole output ----------------------------------------------------------------


def test_an_output_is_replaced_as_a_whole(tmp_path):
    out = tmp_path / "out"
    compile_module(parse(many_funcs(3), "a.ir"), random_seed=0, out_dir=out)
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f00", "f01", "f02"]
    index = json.loads((out / OUTPUT_INDEX).read_text())
    assert index["format"] == "anec-output/1"
    assert index["funcs"] == {f: sha256((out / f / "manifest.json").read_bytes()) for f in ("f00", "f01", "f02")}
    compile_module(parse(many_funcs(1), "b.ir"), random_seed=1, out_dir=out)
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f00"]  # exactly the funcs of the last compile
    assert _leftovers(tmp_path, "out") == []  # no temporary directory, no lock file
    with pytest.raises(ArtifactError, match=r"has no func 'f01' \(funcs: f00\)"):
        load_artifact(out, "f01")


def test_keep_funcs_grows_an_output_one_func_at_a_time(tmp_path):
    """``keep_funcs`` (what a model's program cache uses): the new output holds the previous
    funcs (hard links, no copy) plus the new one, still replaced all or nothing."""
    out = tmp_path / "out"
    funcs = parse(many_funcs(3), "a.ir").funcs
    for i, name in enumerate(funcs):
        one = Module()
        one.add_func(funcs[name])
        compile_module(one, random_seed=i, out_dir=out, keep_funcs=True)
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f00", "f01", "f02"]
    assert sorted(json.loads((out / OUTPUT_INDEX).read_text())["funcs"]) == ["f00", "f01", "f02"]
    first = (out / "f00" / "weights" / "w.bin").stat()
    assert first.st_nlink == 1  # the previous trees are gone, the kept files live on
    assert all(load_artifact(out, f).func == f for f in ("f00", "f01", "f02"))
    before = load_artifact(out, "f00").blobs
    one = Module()
    one.add_func(funcs["f00"])
    compile_module(one, random_seed=9, out_dir=out, keep_funcs=True)  # a kept func is replaced by a new one
    assert load_artifact(out, "f00").blobs != before and load_artifact(out, "f02").func == "f02"
    compile_module(one, random_seed=9, out_dir=out)  # without keep_funcs: exactly this compile's funcs
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f00"]
    assert _leftovers(tmp_path, "out") == []


def test_foreign_directories_and_links_are_never_replaced(tmp_path):
    module = parse(many_funcs(1), "a.ir")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(ArtifactError, match=r"refusing to replace '.*mine': it holds 'notes\.txt'"):
        compile_module(module, random_seed=0, out_dir=mine)
    assert os.listdir(mine) == ["notes.txt"]
    real = tmp_path / "real"
    compile_module(module, random_seed=0, out_dir=real)
    os.symlink(real, tmp_path / "link")
    with pytest.raises(ArtifactError, match=r"'.*link': it is a symbolic link"):
        compile_module(module, random_seed=1, out_dir=tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArtifactError, match=r"'.*file': it is a file"):
        compile_module(module, random_seed=1, out_dir=tmp_path / "file")


def test_outputs_of_older_versions_load_and_are_replaced(tmp_path):
    """An output without an index (one directory per func, and the temporary directories the
    older per-func writer left behind) still loads, and a new compile replaces it cleanly."""
    out = tmp_path / "out"
    compile_module(parse(many_funcs(2), "a.ir"), random_seed=0, out_dir=out)
    (out / OUTPUT_INDEX).unlink()
    shutil.copytree(out / "f00", out / ".f01.k3j5h2a8.tmp")  # an interrupted write of f01
    assert load_artifact(out, "f01").func == "f01"
    with pytest.raises(ArtifactError, match="has no func"):
        load_artifact(out, ".f01.k3j5h2a8.tmp")
    with pytest.raises(ArtifactError, match="temporary directory"):
        load_artifact(out / ".f01.k3j5h2a8.tmp")
    compile_module(parse(many_funcs(2), "a.ir"), random_seed=1, out_dir=out)
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f00", "f01"]


def test_stale_temporary_directories_are_removed(tmp_path):
    out = tmp_path / "out"
    module = parse(many_funcs(1), "a.ir")
    compile_module(module, random_seed=0, out_dir=out)
    for stale in (".out.anec-tmp-x1y2z3", ".out.ab12cd34.tmp", ".out.ab12cd34.old"):
        shutil.copytree(out, tmp_path / stale)
    (tmp_path / ".out.anec-lock").write_text("")  # a killed writer's lock file
    shutil.copytree(out, tmp_path / ".other.anec-tmp-aaaa")  # another output's: not ours to remove
    for stale in (".out.anec-tmp-x1y2z3", ".out.ab12cd34.tmp"):
        with pytest.raises(ArtifactError, match="temporary directory"):
            load_artifact(tmp_path / stale, "f00")
        with pytest.raises(ArtifactError, match="temporary directory"):
            load_artifact(tmp_path / stale / "f00")
    compile_module(module, random_seed=1, out_dir=out)
    assert sorted(os.listdir(tmp_path)) == [".other.anec-tmp-aaaa", "out"]


def test_a_failed_write_leaves_the_previous_output(tmp_path, monkeypatch):
    from anec import fsutil

    out = tmp_path / "out"
    module = parse(many_funcs(4), "a.ir")
    compile_module(module, random_seed=0, out_dir=out)
    before = _reference(out)
    calls = []
    real = fsutil.write_new_file

    def failing(path, data):
        calls.append(path)
        if len(calls) == 7:  # in the middle of the second func
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(fsutil, "write_new_file", failing)
    with pytest.raises(ArtifactError, match="No space left on device"):
        compile_module(module, random_seed=1, out_dir=out)
    assert _reference(out) == before
    assert _leftovers(tmp_path, "out") == []


def test_an_artifact_directory_may_be_replaced_by_an_output(tmp_path):
    """A single func's artifact (manifest.json at the top, no index) is replaced like an output."""
    module = parse(many_funcs(1), "a.ir")
    compile_module(module, random_seed=0, out_dir=tmp_path / "first")
    out = tmp_path / "out"
    shutil.copytree(tmp_path / "first" / "f00", out)
    assert (out / "manifest.json").is_file() and not (out / OUTPUT_INDEX).exists()
    compile_module(module, random_seed=1, out_dir=out)
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f00"]


def test_every_entry_of_an_older_output_is_checked_before_it_is_replaced(tmp_path):
    """An output without an index is replaced only if every entry is a func directory with a
    manifest or a temporary directory: a foreign file after them is still refused."""
    module = parse(many_funcs(2), "a.ir")
    out = tmp_path / "out"
    compile_module(module, random_seed=0, out_dir=out)
    (out / OUTPUT_INDEX).unlink()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ArtifactError, match=r"refusing to replace '.*out': it holds 'notes\.txt'") as e:
        compile_module(module, random_seed=1, out_dir=out)
    assert e.value.hint == "choose an empty or new output directory"
    shutil.copytree(out / "f00", out / ".f01.k3j5h2a8.tmp")  # sorts first
    with pytest.raises(ArtifactError, match=r"it holds 'notes\.txt'"):
        compile_module(module, random_seed=1, out_dir=out)
    assert (out / "notes.txt").read_text() == "mine"


# ---- keeping the funcs of the previous output --------------------------------------------------


def _compile_func(out: Path, name: str, seed: int = 0) -> None:
    """Compile func ``name`` of many_funcs(3) into ``out``, keeping the funcs already there."""
    one = Module()
    one.add_func(parse(many_funcs(3), "a.ir").funcs[name])
    compile_module(one, random_seed=seed, out_dir=out, keep_funcs=True)


def _files(d: Path) -> dict[str, Path]:
    return {str(p.relative_to(d)): p for p in sorted(d.rglob("*")) if p.is_file()}


def _no_hard_links(*args, **kwargs):
    """os.link on a file system without hard links."""
    raise OSError(errno.EXDEV, "Invalid cross-device link")


def test_kept_funcs_are_the_same_files_not_copies(tmp_path):
    """Every file of a kept func is a hard link of the previous output's file."""
    out = tmp_path / "out"
    _compile_func(out, "f00")
    held = tmp_path / "held"
    held.mkdir()
    for rel, p in _files(out / "f00").items():
        os.link(p, held / rel.replace("/", "_"))
    _compile_func(out, "f01")
    kept = _files(out / "f00")
    assert sorted(kept) == ["manifest.json", "model.mil", "program.ir", "weights/w.bin"]
    for rel, p in kept.items():
        assert os.path.samefile(p, held / rel.replace("/", "_")), rel
    assert load_artifact(out, "f00").func == "f00"


def test_kept_funcs_are_copied_where_hard_links_fail(tmp_path, monkeypatch):
    """No hard links (another file system): a kept func's files are copied, byte for byte."""
    out = tmp_path / "out"
    _compile_func(out, "f00")
    before = {rel: p.read_bytes() for rel, p in _files(out / "f00").items()}
    monkeypatch.setattr(os, "link", _no_hard_links)
    _compile_func(out, "f01")
    assert {rel: p.read_bytes() for rel, p in _files(out / "f00").items()} == before
    assert all(p.stat().st_nlink == 1 for p in _files(out / "f00").values())
    assert load_artifact(out, "f00").func == "f00" and load_artifact(out, "f01").func == "f01"


def test_a_kept_file_is_copied_only_within_the_weight_file_bound(tmp_path, monkeypatch):
    """Copying a kept func reads each file with the weight-file bound (a sparse file past it is refused)."""
    out = tmp_path / "out"
    _compile_func(out, "f00")
    with open(out / "f00" / "big.bin", "wb") as f:
        f.truncate(BLOB_MAX_BYTES + 1)  # sparse: no disk space used
    monkeypatch.setattr(os, "link", _no_hard_links)
    with pytest.raises(ArtifactError) as e:
        _compile_func(out, "f01")
    assert e.value.message == (f"file '{out / 'f00' / 'big.bin'}' is {BLOB_MAX_BYTES + 1} bytes, "
                               f"above the limit of {BLOB_MAX_BYTES} bytes")
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f00"]


def test_a_kept_func_holding_a_link_is_refused(tmp_path):
    """Only plain directories and regular files are kept: a symbolic link is named, with the way out."""
    out = tmp_path / "out"
    _compile_func(out, "f00")
    os.symlink("/etc/passwd", out / "f00" / "extra")
    with pytest.raises(ArtifactError) as e:
        _compile_func(out, "f01")
    assert e.value.message == f"cannot keep '{out / 'f00' / 'extra'}' in the output: it is a symbolic link"
    assert e.value.hint == "recompile that func, or write the output without keeping funcs"
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f00"]


def test_a_kept_func_directory_that_is_a_link_is_refused(tmp_path):
    """The index names a func whose directory is a symbolic link: it is not followed, and the error says so."""
    out = tmp_path / "out"
    _compile_func(out, "f00")
    os.rename(out / "f00", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", out / "f00")
    with pytest.raises(ArtifactError) as e:
        _compile_func(out, "f01")
    assert e.value.message == f"cannot read func directory '{out / 'f00'}' (it is a symbolic link)"


def test_a_file_swapped_for_a_link_while_kept_is_never_followed(tmp_path, monkeypatch):
    """A kept file replaced by a symbolic link after it was inspected: the output holds at most
    that link, never the file outside it points to."""
    out = tmp_path / "out"
    _compile_func(out, "f00")
    (out / "f00" / "extra").write_text("extra")
    secret = tmp_path / "secret"
    secret.write_text("outside")
    real_kind = Beneath.kind

    def swapping_kind(self, name):
        k = real_kind(self, name)
        if name == "extra" and k == "file":
            os.unlink(self.path / name)
            os.symlink(secret, self.path / name)
        return k

    monkeypatch.setattr(Beneath, "kind", swapping_kind)
    _compile_func(out, "f01")
    monkeypatch.undo()
    kept = out / "f00" / "extra"
    assert os.lstat(kept).st_ino != secret.stat().st_ino and secret.stat().st_nlink == 1


def test_keeping_the_funcs_of_an_older_output_indexes_their_manifests(tmp_path):
    """An output without an index: the new index names each kept func with its manifest's sha256."""
    out = tmp_path / "out"
    _compile_func(out, "f00")
    (out / OUTPUT_INDEX).unlink()
    _compile_func(out, "f01")
    funcs = json.loads((out / OUTPUT_INDEX).read_text())["funcs"]
    assert funcs == {f: sha256((out / f / "manifest.json").read_bytes()) for f in ("f00", "f01")}
    assert load_artifact(out, "f00").func == "f00"


def test_a_kept_manifest_of_an_older_output_is_read_within_its_bound(tmp_path):
    """Without an index the kept manifests are read to be indexed, within the manifest bound."""
    out = tmp_path / "out"
    _compile_func(out, "f00")
    (out / OUTPUT_INDEX).unlink()
    with open(out / "f00" / "manifest.json", "r+b") as f:
        f.truncate(MANIFEST_MAX_BYTES + 1)
    with pytest.raises(ArtifactError) as e:
        _compile_func(out, "f01")
    assert e.value.message == (f"manifest '{out / 'f00' / 'manifest.json'}' is {MANIFEST_MAX_BYTES + 1} bytes, "
                               f"above the limit of {MANIFEST_MAX_BYTES} bytes")


def test_a_damaged_output_index_is_named_in_the_error(tmp_path):
    """An index that is not JSON or not the index format: the error names the index file."""
    out = tmp_path / "out"
    compile_module(parse(many_funcs(1), "a.ir"), random_seed=0, out_dir=out)
    index = out / OUTPUT_INDEX
    index.write_text("{not json")
    with pytest.raises(ArtifactError) as e:
        load_artifact(out)
    assert e.value.message.startswith(f"{index}: the output index is not valid JSON (")
    good = sha256((out / "f00" / "manifest.json").read_bytes())
    for damaged in ('{"format": "anec-output/1", "funcs": {"f00": "nope"}}',
                    f'{{"format": "anec-output/1", "funcs": {{"f00": "{good.upper()}"}}}}',
                    f'{{"format": "anec-output/9", "funcs": {{"f00": "{good}"}}}}',
                    f'[{{"format": "anec-output/1", "funcs": {{"f00": "{good}"}}}}]'):
        index.write_text(damaged)
        with pytest.raises(ArtifactError) as e:
            load_artifact(out)
        assert e.value.message == f'{index}: expected {{"format": "anec-output/1", "funcs": {{name: sha256}}}}'
        assert e.value.hint == "the output is damaged or was not written by anec; recompile it"
    index.unlink()
    index.mkdir()
    with pytest.raises(ArtifactError) as e:
        load_artifact(out)
    assert e.value.message == f"cannot read output index '{index}' (it is a directory); expected a regular file"


def test_stale_temporary_directories_with_capital_letters_are_removed(tmp_path):
    """Older writers named their temporary directories with letters of either case."""
    out = tmp_path / "out"
    module = parse(many_funcs(1), "a.ir")
    compile_module(module, random_seed=0, out_dir=out)
    shutil.copytree(out, tmp_path / ".out.AbCdEf12.tmp")
    compile_module(module, random_seed=1, out_dir=out)
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_failed_directory_fsync_fails_the_write(tmp_path, monkeypatch):
    """An output of several directories: an fsync error on any of them fails the write, and the
    previous output stays."""
    from anec import fsutil

    out = tmp_path / "out"
    module = parse(many_funcs(3), "a.ir")
    compile_module(module, random_seed=0, out_dir=out)
    before = _reference(out)

    def failing(path):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fsutil, "fsync_dir", failing)
    with pytest.raises(ArtifactError, match="Input/output error"):
        compile_module(module, random_seed=1, out_dir=out)
    assert _reference(out) == before
    assert _leftovers(tmp_path, "out") == []


def test_write_tree_atomic_makes_nested_directories_and_plain_files(tmp_path):
    """A few files deep in the tree: their directories are made; files are not executable."""
    dest = tmp_path / "tree"
    write_tree_atomic(dest, {"a/b/c.txt": b"deep", "d.txt": b"top"})
    assert (dest / "a" / "b" / "c.txt").read_bytes() == b"deep" and (dest / "d.txt").read_bytes() == b"top"
    old = os.umask(0)
    try:
        write_tree_atomic(dest, {"x.bin": b"1"})
    finally:
        os.umask(old)
    assert (dest / "x.bin").stat().st_mode & 0o777 == 0o666


def test_write_tree_atomic_makes_the_directories_then_starts_the_largest_file_first(tmp_path):
    """Several files: every directory is made first, then the files are written largest first, so
    of two failing files the largest one's error is reported."""
    dest = tmp_path / "tree"
    files = {"a": b"x", "a/b": b"yy", "d": b"zzz", "z" * 300: b"w" * 64}  # 'a' is also a directory
    with pytest.raises(ArtifactError, match=r"cannot write artifact '.*tree': File name too long"):
        write_tree_atomic(dest, files)
    assert not dest.exists() and _leftovers(tmp_path, "tree") == []


def test_write_tree_atomic_never_writes_a_file_twice(tmp_path):
    """A file the completion step names again is refused, not overwritten in place."""
    dest = tmp_path / "tree"
    with pytest.raises(ArtifactError, match=r"cannot write artifact '.*tree': File exists"):
        write_tree_atomic(dest, {"a.txt": b"long text"}, last=lambda tmp: {"a.txt": b"x"})
    assert not dest.exists() and _leftovers(tmp_path, "tree") == []


def test_write_output_replaces_the_previous_funcs_unless_asked_to_keep_them(tmp_path):
    out = tmp_path / "out"
    arts = compile_module(parse(many_funcs(2), "a.ir"), random_seed=0).artifacts
    write_output(out, {"f00": arts["f00"]})
    write_output(out, {"f01": arts["f01"]})
    assert sorted(os.listdir(out)) == [OUTPUT_INDEX, "f01"]


def test_an_artifact_without_weights_is_refused_before_anything_is_touched(tmp_path):
    """The missing weight file is the error, even over a directory that could not be replaced."""
    module = parse(many_funcs(1), "a.ir")
    art = compile_module(module, with_weights=False).artifacts["f00"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(ArtifactError, match="has no weight data"):
        write_output(mine, {"f00": art})
    assert os.listdir(mine) == ["notes.txt"] and _leftovers(tmp_path, "mine") == []


def test_a_weight_file_outside_its_func_directory_is_refused_before_writing(tmp_path):
    """A weight file path climbing out of the func directory: refused, nothing written anywhere."""
    art = compile_module(parse(many_funcs(1), "a.ir"), random_seed=0).artifacts["f00"]
    art.blobs = {**{rel: art.blobs[rel] for rel in art.blobs}, "../../escaped.bin": b"x" * 64}
    with pytest.raises(ArtifactError) as e:
        write_output(tmp_path / "out", {"f00": art})
    assert e.value.message == ("weight file '../../escaped.bin' points outside the artifact directory "
                               "(every component must be a plain name)")
    assert os.listdir(tmp_path) == []


def test_output_files_are_written_through_close_on_exec_descriptors(tmp_path, monkeypatch):
    """No child process started meanwhile inherits a file being written; only weight files
    (mapped once written) are opened for reading too."""
    import fcntl

    seen = []
    real_fsync = os.fsync

    def spy(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            seen.append((os.readlink(f"/proc/self/fd/{fd}"), fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC,
                         fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    compile_module(parse(many_funcs(1), "a.ir"), random_seed=0, out_dir=tmp_path / "out")
    names = sorted(os.path.basename(p) for p, _, _ in seen)
    assert names == sorted([OUTPUT_INDEX, "manifest.json", "model.mil", "program.ir", "w.bin"])
    assert all(cloexec for _, cloexec, _ in seen)
    assert {os.path.basename(p): mode for p, _, mode in seen} == {
        OUTPUT_INDEX: os.O_WRONLY, "manifest.json": os.O_WRONLY, "model.mil": os.O_WRONLY,
        "program.ir": os.O_WRONLY, "w.bin": os.O_RDWR}


def test_the_write_lock_is_a_private_file_while_it_is_held(tmp_path):
    """The lock file next to the destination is readable and writable by its owner only, and gone afterwards."""
    dest = tmp_path / "tree"
    lock = tmp_path / ".tree.anec-lock"
    modes = []

    def last(tmp):
        modes.append(os.lstat(lock).st_mode)
        return {}

    old = os.umask(0)
    try:
        write_tree_atomic(dest, {"a.txt": b"a"}, last)
    finally:
        os.umask(old)
    assert len(modes) == 1 and stat.S_ISREG(modes[0]) and modes[0] & 0o777 == 0o600
    assert sorted(os.listdir(tmp_path)) == ["tree"]


def test_a_write_lock_that_is_a_symbolic_link_is_never_followed(tmp_path):
    """A link where the lock file goes is refused, never opened through (nothing created where it points)."""
    dest = tmp_path / "tree"
    lock = tmp_path / ".tree.anec-lock"
    os.symlink(tmp_path / "missing" / "target", lock)
    with pytest.raises(ArtifactError) as e:
        write_tree_atomic(dest, {"a.txt": b"a"})
    assert e.value.message == f"cannot lock '{lock}': Too many levels of symbolic links"
    assert not dest.exists()


def test_a_write_lock_swapped_for_a_link_while_it_is_taken_is_not_trusted(tmp_path, monkeypatch):
    """The lock file replaced by a link to the very file locked: the lock is not taken as held."""
    import fcntl

    dest = tmp_path / "tree"
    lock = tmp_path / ".tree.anec-lock"
    real_flock = fcntl.flock

    def swapping_flock(fd, op):
        if not lock.is_symlink():
            os.rename(lock, tmp_path / "moved-lock")
            os.symlink(tmp_path / "moved-lock", lock)
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", swapping_flock)
    with pytest.raises(ArtifactError, match="Too many levels of symbolic links"):
        write_tree_atomic(dest, {"a.txt": b"a"})
    assert not dest.exists()


def test_stale_files_and_links_of_a_write_are_removed_without_following_them(tmp_path):
    """A stale temporary name that is a file, or a link to a directory: the name is removed, the
    directory it points to is left alone."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    (tmp_path / ".tree.ab12cd34.tmp").write_text("stale")
    os.symlink(elsewhere, tmp_path / ".tree.anec-tmp-link")
    write_tree_atomic(tmp_path / "tree", {"a.txt": b"a"})
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "tree"]
    assert (elsewhere / "keep.txt").read_text() == "keep"


def test_a_stale_directory_that_cannot_be_removed_does_not_stop_the_write(tmp_path, monkeypatch):
    """Removing the leftovers of killed writes is best effort."""
    stuck = tmp_path / ".tree.anec-tmp-stuck"
    stuck.mkdir()
    real_rmdir = os.rmdir

    def rmdir(path, *args, **kwargs):
        if os.fspath(path) == str(stuck):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
        real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir)
    write_tree_atomic(tmp_path / "tree", {"a.txt": b"a"})
    assert (tmp_path / "tree" / "a.txt").read_bytes() == b"a"
    assert stuck.is_dir()


def test_the_temporary_directory_has_a_short_random_name_and_mkdirs_mode(tmp_path):
    """``.<name>.anec-tmp-`` and 8 hex digits, made with the mode a plain mkdir gives, which the
    destination keeps."""
    names = []

    def last(tmp):
        names.append(tmp.name)
        return {}

    old = os.umask(0o022)
    try:
        write_tree_atomic(tmp_path / "tree", {"a.txt": b"a"}, last)
    finally:
        os.umask(old)
    assert len(names) == 1 and re.fullmatch(r"\.tree\.anec-tmp-[0-9a-f]{8}", names[0])
    assert (tmp_path / "tree").stat().st_mode & 0o7777 == 0o755


def test_a_taken_temporary_name_is_skipped_and_a_hundred_give_up(tmp_path, monkeypatch):
    import secrets

    (tmp_path / ".tree.anec-tmp-taken").mkdir()
    draws = []

    def token_hex(n):
        draws.append(n)
        return "taken" if len(draws) == 1 else "fresh"

    monkeypatch.setattr(secrets, "token_hex", token_hex)
    monkeypatch.setattr("anec.fsutil._remove_stale", lambda dest: None)  # keep the taken name
    write_tree_atomic(tmp_path / "tree", {"a.txt": b"a"})
    assert draws == [4, 4] and (tmp_path / "tree" / "a.txt").read_bytes() == b"a"
    draws.clear()
    monkeypatch.setattr(secrets, "token_hex", lambda n: draws.append(n) or "taken")
    with pytest.raises(ArtifactError) as e:
        write_tree_atomic(tmp_path / "tree", {"a.txt": b"b"})
    assert e.value.message == f"cannot write to '{tmp_path}': no free temporary name"
    assert len(draws) == 100 and (tmp_path / "tree" / "a.txt").read_bytes() == b"a"


def test_a_destination_under_a_file_is_refused_naming_the_parent(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArtifactError) as e:
        write_tree_atomic(tmp_path / "file" / "tree", {"a.txt": b"a"})
    assert e.value.message.startswith(f"cannot create '{tmp_path / 'file'}': ")


def test_a_write_lock_deleted_while_it_is_taken_is_taken_again(tmp_path, monkeypatch):
    """The previous holder deleting the lock file just as it is locked: the lock is taken on the
    new file at the lock path (the one later writers lock), never on the deleted one."""
    import fcntl

    lock = tmp_path / ".tree.anec-lock"
    real_flock = fcntl.flock
    calls = []

    def flock(fd, op):
        calls.append(op)
        if len(calls) == 1:
            os.unlink(lock)
        real_flock(fd, op)

    held = []

    def last(tmp):
        held.append(lock.exists())
        return {}

    monkeypatch.setattr(fcntl, "flock", flock)
    write_tree_atomic(tmp_path / "tree", {"a.txt": b"a"}, last)
    assert len(calls) == 2 and held == [True]
    assert sorted(os.listdir(tmp_path)) == ["tree"]


def test_a_lock_that_cannot_be_taken_fails_the_write_and_closes_its_file(tmp_path, monkeypatch):
    import fcntl

    def flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", flock)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError, match="No locks available"):
        write_tree_atomic(tmp_path / "tree", {"a.txt": b"a"})
    assert len(os.listdir("/proc/self/fd")) == before
    assert not (tmp_path / "tree").exists()


def test_every_directory_of_the_tree_is_fsynced_deepest_first(tmp_path, monkeypatch):
    """Each directory's entries are made durable after those of the directories below it, and
    the parent's once the tree is renamed into it."""
    from anec import fsutil

    synced = []
    real = fsutil.fsync_dir
    monkeypatch.setattr(fsutil, "fsync_dir", lambda d: (synced.append(Path(d)), real(d)))
    write_tree_atomic(tmp_path / "tree", {"a/b/c.txt": b"c"})
    tmp = synced[-2]
    assert is_temp_name(tmp.name) and synced == [tmp / "a" / "b", tmp / "a", tmp, tmp_path]


def test_the_previous_tree_is_moved_aside_to_a_temporary_directory(tmp_path, monkeypatch):
    """Without an atomic exchange the previous tree goes aside under a ``.<name>.anec-tmp-`` name
    (never loaded, removed by the next write) before it is deleted."""
    from anec import fsutil

    dest = tmp_path / "tree"
    write_tree_atomic(dest, {"a.txt": b"a"})
    monkeypatch.setattr(fsutil, "_exchange", lambda a, b: False)
    aside = []
    real = fsutil.discard
    monkeypatch.setattr(fsutil, "discard", lambda p: (aside.append(p), real(p)))
    write_tree_atomic(dest, {"a.txt": b"b"})
    assert len(aside) == 1 and re.fullmatch(r"\.tree\.anec-tmp-[0-9a-f]{8}", aside[0].name)
    assert (dest / "a.txt").read_bytes() == b"b" and sorted(os.listdir(tmp_path)) == ["tree"]


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_reports_its_error_even_if_its_temporary_directory_stays(tmp_path, monkeypatch, error):
    """Removing the temporary directory of a failed write is best effort: the write's own error is
    what is raised."""
    from anec import fsutil

    def failing(path, data):
        raise error

    real_rmdir = os.rmdir

    def rmdir(path, *args, **kwargs):
        if is_temp_name(os.path.basename(os.fspath(path))):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
        real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(fsutil, "write_new_file", failing)
    monkeypatch.setattr(os, "rmdir", rmdir)
    dest = tmp_path / "tree"
    with pytest.raises(ArtifactError if isinstance(error, OSError) else KeyboardInterrupt) as e:
        write_tree_atomic(dest, {"a.txt": b"a"})
    if isinstance(error, OSError):
        assert e.value.message == f"cannot write artifact '{dest}': No space left on device"
    assert not dest.exists()


# ---- concurrent writers and readers -------------------------------------------------------


def _child(ir: Path, out: Path, seed: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("compile_child.py")), str(ir), str(out),
                          str(seed)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    return p


def _snapshot(out: Path) -> set[int] | None:
    """Which reference each func of ``out`` matches, read through one open directory (a
    consistent view even while writers replace ``out``); None if there is no output."""
    try:
        d = Beneath.open(out)
    except ArtifactError:
        return None
    try:
        from anec.mil.output import output_funcs

        funcs = output_funcs(d)
        seeds = set()
        for f, manifest_sha in funcs.items():
            with d.subdir(f) as sub:
                art = Artifact.read(sub, manifest_sha)
            seeds.add(_art_key(art))
        return seeds
    except ArtifactError:
        if d.replaced:
            return None  # replaced while read: this view is being deleted, not partial
        raise
    finally:
        d.close()


def test_concurrent_compiles_take_turns_and_readers_see_whole_outputs(tmp_path):
    ir = tmp_path / "m.ir"
    ir.write_text(many_funcs(8))
    refs = {}
    for seed in (1, 2):
        compile_module(parse(ir.read_text(), str(ir)), random_seed=seed, out_dir=tmp_path / f"ref{seed}")
        refs[seed] = set(_reference(tmp_path / f"ref{seed}").values())
    out = tmp_path / "out"
    stop, seen, bad = threading.Event(), [], []

    def reader():
        while not stop.is_set():
            snap = _snapshot(out)
            if snap is None:
                continue
            match = [s for s, r in refs.items() if snap == r]
            (seen if match else bad).append(match or snap)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(3):
            kids = [_child(ir, out, seed) for seed in (1, 2)]
            for k in kids:
                k.stdin.write("go\n")
                k.stdin.flush()
            for k in kids:
                out_text, err = k.communicate(timeout=300)
                assert k.returncode == 0 and "done" in out_text, err
    finally:
        stop.set()
        t.join()
    assert not bad, f"a reader saw a mixed or partial output: {len(bad)} times"
    assert seen  # the readers did look while the writers ran
    assert _snapshot(out) in refs.values()
    assert _leftovers(tmp_path, "out") == []


# ---- SIGKILL at random points ---------------------------------------------------------------


def test_kill_at_random_points_never_leaves_a_partial_output(tmp_path):
    """SIGKILL a 40-func compile at random moments (over no output, and over a complete
    previous one): whatever ``anec run`` then accepts is exactly a complete compile (all funcs
    from the previous output or all from the new one), temporary directories are refused,
    and the next compile cleans everything up."""
    ir = tmp_path / "m.ir"
    ir.write_text(many_funcs())
    module = parse(ir.read_text(), str(ir))
    compile_module(module, random_seed=1, out_dir=tmp_path / "old")
    child = _child(ir, tmp_path / "new", 2)  # how long a compile takes in a fresh process
    start = time.perf_counter()
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "done"
    duration = time.perf_counter() - start
    child.communicate(timeout=60)
    old, new = _reference(tmp_path / "old"), _reference(tmp_path / "new")
    funcs = sorted(new)
    assert len(funcs) == N_FUNCS and all(old[f] != new[f] for f in funcs)
    rng = random.Random(11)
    outcomes = {"none": 0, "old": 0, "new": 0, "temp dirs left": 0}
    nxt = None
    for trial in range(TRIALS):
        work = tmp_path / f"t{trial}"
        work.mkdir()
        out = work / "out"
        if trial % 2:
            shutil.copytree(tmp_path / "old", out)
        child = nxt or _child(ir, out, 2)
        nxt = _child(ir, tmp_path / f"t{trial + 1}" / "out", 2) if trial + 1 < TRIALS else None
        child.stdin.write("go\n")
        child.stdin.flush()
        time.sleep(rng.uniform(0, 1.2 * duration))
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
        got = _accepted(out, funcs)
        if not got:
            outcomes["none"] += 1
        else:
            assert sorted(got) == funcs, f"trial {trial}: anec run accepts only {len(got)} of {N_FUNCS} funcs"
            which = [name for name, ref in (("old", old), ("new", new)) if got == ref]
            assert which, f"trial {trial}: the output mixes funcs of two compiles or differs from both"
            assert which[0] == "new" or trial % 2, f"trial {trial}: an output appeared that nobody completed"
            outcomes[which[0]] += 1
        temps = [n for n in os.listdir(work) if is_temp_name(n)]
        outcomes["temp dirs left"] += bool(temps)
        for n in temps:
            with pytest.raises(ArtifactError, match="temporary directory"):
                load_artifact(work / n, funcs[0])
        if trial % 4 == 0:  # the CLI accepts or refuses the same way
            result = CliRunner().invoke(main, ["run", str(out), "--func", funcs[0], "--backend", "sim",
                                               "--random-inputs", "0"])
            assert (result.exit_code == 0) == bool(got), result.output
        compile_module(module, random_seed=2, out_dir=out)  # a later compile repairs and cleans up
        assert _accepted(out, funcs) == new
        assert sorted(os.listdir(work)) == ["out"]
        shutil.rmtree(work)
    print(f"\n{TRIALS} kills of a {N_FUNCS}-func compile ({duration:.2f} s): {outcomes}")
    if TRIALS >= 10:
        assert outcomes["new"] + outcomes["old"] > 0 and outcomes["none"] + outcomes["old"] > 0
