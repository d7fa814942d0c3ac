"""Reading beneath an artifact directory: each refusal says what the entry is, what was
expected and (for links) what to do, word for word; the hostile-artifact corpus checks
that everything is refused, these tests check what the user reads."""

from __future__ import annotations

import os

import pytest

from anec.diagnostics import ArtifactError
from anec.mil.beneath import Beneath


@pytest.fixture
def art(tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "w.bin").write_bytes(b"x" * 8)
    (tmp_path / "outside.bin").write_bytes(b"y")
    os.symlink(tmp_path / "outside.bin", tmp_path / "weights" / "link.bin")
    os.symlink(tmp_path / "weights", tmp_path / "linked_dir")
    os.mkfifo(tmp_path / "weights" / "pipe.bin")
    (tmp_path / "plain").write_bytes(b"z")
    with Beneath.open(tmp_path) as b:
        yield b, tmp_path


def refusal(fn, *args, **kw) -> ArtifactError:
    with pytest.raises(ArtifactError) as e:
        fn(*args, **kw)
    return e.value


def test_a_linked_file_is_refused_with_the_fix(art):
    b, root = art
    e = refusal(b.read, "weights/link.bin", 100, what="weight file")
    assert e.args[0] == f"cannot read weight file '{root / 'weights/link.bin'}' (it is a symbolic link)"
    assert e.hint == "artifact files are never followed through links; copy the real files into the artifact directory"


def test_a_linked_directory_on_the_way_is_named(art):
    b, root = art
    e = refusal(b.read, "linked_dir/w.bin", 100, what="weight file")
    assert e.args[0] == f"cannot read weight file '{root / 'linked_dir/w.bin'}' ('linked_dir' is a symbolic link)"
    e = refusal(b.subdir, "linked_dir")
    assert e.args[0] == f"cannot read directory '{root / 'linked_dir'}' (it is a symbolic link)"


def test_the_wrong_kind_of_entry_says_what_was_expected(art):
    b, root = art
    e = refusal(b.read, "weights", 100, what="MIL file")
    assert e.args[0] == f"cannot read MIL file '{root / 'weights'}' (it is a directory); expected a regular file"
    assert e.hint is None
    e = refusal(b.subdir, "plain")
    assert e.args[0] == f"cannot read directory '{root / 'plain'}' (it is a file); expected a directory"
    e = refusal(b.read, "plain/w.bin", 100)
    assert e.args[0] == f"cannot read file '{root / 'plain/w.bin'}' ('plain' is a file); expected a directory"


def test_a_fifo_is_refused_as_what_it_is(art):
    b, root = art
    e = refusal(b.read, "weights/pipe.bin", 100, what="weight file")
    assert e.args[0] == f"cannot read weight file '{root / 'weights/pipe.bin'}' (it is a FIFO); expected a regular file"


def test_a_missing_entry_says_so(art):
    b, root = art
    e = refusal(b.read, "weights/none.bin", 100, what="weight file")
    assert e.args[0] == f"cannot read weight file '{root / 'weights/none.bin'}': it is missing"


def test_names_are_sorted(art):
    b, root = art
    assert b.names() == sorted(os.listdir(root))
    with b.subdir("weights") as sub:
        assert sub.names() == ["link.bin", "pipe.bin", "w.bin"]


def test_a_socket_is_refused_as_what_it_is(tmp_path):
    import socket

    (tmp_path / "weights").mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "weights" / "sock.bin"))
        with Beneath.open(tmp_path) as b:
            e = refusal(b.read, "weights/sock.bin", 100, what="weight file")
    assert e.args[0] == (f"cannot read weight file '{tmp_path / 'weights/sock.bin'}' (it is a socket); "
                         "expected a regular file")


def _failing(real, errno_, names):
    """``real`` (an os function), raising OSError(errno_) for the entry names in ``names``."""
    def call(name, *args, **kw):
        if name in names:
            raise OSError(errno_, os.strerror(errno_))
        return real(name, *args, **kw)
    return call


def test_a_read_error_names_the_file_and_the_system_message(art, monkeypatch):
    import errno

    b, root = art
    monkeypatch.setattr(os, "open", _failing(os.open, errno.EIO, {"w.bin"}))
    e = refusal(b.read, "weights/w.bin", 100, what="weight file")
    assert e.args[0] == f"cannot read weight file '{root / 'weights/w.bin'}': Input/output error"


def test_an_entry_that_vanishes_while_it_is_refused_is_a_special_file(art, monkeypatch):
    """The open is refused as a link or a non-file would be, then the entry cannot be looked
    at either (it was replaced or removed in between): it is named a special file."""
    import errno

    b, root = art
    monkeypatch.setattr(os, "open", _failing(os.open, errno.ELOOP, {"w.bin"}))
    monkeypatch.setattr(os, "stat", _failing(os.stat, errno.ENOENT, {"w.bin"}))
    e = refusal(b.read, "weights/w.bin", 100, what="weight file")
    assert e.args[0] == (f"cannot read weight file '{root / 'weights/w.bin'}' (it is a special file); "
                         "expected a regular file")


def test_a_directory_that_cannot_be_listed_says_why(art, monkeypatch):
    import errno

    b, root = art

    def listdir(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "listdir", listdir)
    e = refusal(b.names)
    assert e.args[0] == f"cannot list '{root}': Input/output error"
