"""fsutil.replace_file_at, the one atomic file writer (replace_file and the run folder of
``anec train`` write through it): a new temporary file next to the entry, fsynced and renamed
over it; a link there is replaced, never followed; a failed write leaves the entry and no
temporary file."""

from __future__ import annotations

import os
import stat

import pytest

from anec import fsutil


def _dir(path):
    return os.open(path, os.O_RDONLY)


def test_a_link_at_the_name_is_replaced_not_followed(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"keep")
    (tmp_path / "run.json").symlink_to(target)
    fd = _dir(tmp_path)
    try:
        fsutil.replace_file_at(fd, "run.json", lambda f: f.write(b"new"))
    finally:
        os.close(fd)
    assert not (tmp_path / "run.json").is_symlink() and (tmp_path / "run.json").read_bytes() == b"new"
    assert target.read_bytes() == b"keep"
    assert sorted(os.listdir(tmp_path)) == ["elsewhere.txt", "run.json"]


def test_a_failed_write_leaves_the_entry_and_no_temporary_file(tmp_path):
    (tmp_path / "log.jsonl").write_bytes(b"old")

    def failing(f):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        fsutil.replace_file(tmp_path / "log.jsonl", failing)
    assert os.listdir(tmp_path) == ["log.jsonl"] and (tmp_path / "log.jsonl").read_bytes() == b"old"


def test_modes_private_by_default_kept_or_given(tmp_path):
    """replace_file makes a file private to the user unless keep_mode takes the replaced
    file's permissions; replace_file_at creates with the mode given (the umask applying)."""
    p = tmp_path / "model.ir"
    fsutil.write_text_atomic(p, "a")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    os.chmod(p, 0o640)
    fsutil.write_text_atomic(p, "b", keep_mode=True)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640 and p.read_text() == "b"
    umask = os.umask(0o022)
    try:
        fd = _dir(tmp_path)
        try:
            fsutil.replace_file_at(fd, "loss.png", lambda f: f.write(b"png"), mode=0o666)
        finally:
            os.close(fd)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "loss.png").st_mode) == 0o644


def test_a_killed_writes_temporary_file_is_named_as_one(tmp_path, monkeypatch):
    """The temporary file is ``.<name>.XXXXXXXX.tmp`` (what is_temp_name and the cleanup of a
    run folder recognize); a taken name is skipped."""
    import secrets

    (tmp_path / ".a.txt.00000000.tmp").write_bytes(b"taken")
    draws = iter(["00000000", "0000beef"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(draws))
    seen = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b, **kw: (seen.append(a), real(a, b, **kw))[1])
    fsutil.replace_file(tmp_path / "a.txt", lambda f: f.write(b"a"))
    assert seen == [".a.txt.0000beef.tmp"] and fsutil.is_temp_name(seen[0])
    assert (tmp_path / "a.txt").read_bytes() == b"a"
