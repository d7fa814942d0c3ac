"""Reading beneath an artifact directory: each refusal says what the entry is, what was
expected and (for links) what to do, word for word; the hostile-artifact corpus checks
that everything is refused, these tests check what the user reads."""

from __future__ import annotations

import os
import stat

import pytest

from anec.diagnostics import ArtifactError
from anec.mil.beneath import Beneath, check_rel, kind_of


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


@pytest.mark.parametrize("rel", ["/etc/passwd", "a\\b", "a\0b", "", 3])
def test_a_path_that_is_not_relative_is_named_as_such(rel):
    """Absolute paths, backslashes, NUL bytes, the empty path and non-strings (a number
    from a manifest) are not relative paths inside the directory."""
    e = refusal(check_rel, rel, "weight file")
    assert e.args[0] == f"weight file {rel!r} is not a relative path inside the artifact directory"


@pytest.mark.parametrize("rel", ["a//b", "a/", "./a", "a/./b", "../a", "a/.."])
def test_a_path_with_a_component_that_is_not_a_name_points_outside(rel):
    """Empty, '.' and '..' components are refused, and the message says every component
    must be a plain name."""
    e = refusal(check_rel, rel)
    assert e.args[0] == (f"artifact path {rel!r} points outside the artifact directory "
                         "(every component must be a plain name)")


def test_a_refused_path_is_named_as_what_the_caller_reads(art):
    """read and subdir name a refused path with the caller's word for it."""
    b, _ = art
    e = refusal(b.read, "../outside.bin", 100, what="weight file")
    assert e.args[0].startswith("weight file '../outside.bin' points outside")
    e = refusal(b.read, "/etc/passwd", 100)
    assert e.args[0] == "file '/etc/passwd' is not a relative path inside the artifact directory"
    e = refusal(b.subdir, "/etc", what="stage directory")
    assert e.args[0] == "stage directory '/etc' is not a relative path inside the artifact directory"
    e = refusal(b.subdir, "/etc")
    assert e.args[0] == "directory '/etc' is not a relative path inside the artifact directory"


def test_a_linked_directory_deeper_on_the_way_is_named_by_its_path(art):
    """A link met below the first component is named by the path up to it."""
    b, root = art
    os.symlink(root / "weights", root / "weights" / "again")
    e = refusal(b.read, "weights/again/w.bin", 100, what="weight file")
    assert e.args[0] == (f"cannot read weight file '{root / 'weights/again/w.bin'}' "
                         "('weights/again' is a symbolic link)")


def test_kind_names_a_link_without_following_it(art):
    """kind() says what the entry itself is: a link to a directory is a symbolic link."""
    b, _ = art
    assert b.kind("linked_dir") == "symbolic link"
    assert b.kind("weights") == "directory"
    assert b.kind("plain") == "file"
    assert b.kind("none") is None


def test_kind_takes_one_name_only(art):
    """kind() looks at entries of this directory only, not at paths below it."""
    b, root = art
    e = refusal(b.kind, "weights/w.bin")
    assert e.args[0] == f"'weights/w.bin' is not a name of an entry of '{root}'"


def test_an_entry_that_cannot_be_inspected_says_why(art, monkeypatch):
    import errno

    b, root = art
    monkeypatch.setattr(os, "stat", _failing(os.stat, errno.EIO, {"plain"}))
    e = refusal(b.kind, "plain")
    assert e.args[0] == f"cannot inspect '{root / 'plain'}': Input/output error"


def test_a_device_is_refused_as_what_it_is():
    """/dev/null is a character device: refused (without blocking) as a device."""
    with Beneath.open("/dev") as b:
        e = refusal(b.read, "null", 100, what="MIL file")
    assert e.args[0] == "cannot read MIL file '/dev/null' (it is a device); expected a regular file"


def test_the_kinds_of_entry_no_directory_entry_made_here_can_show():
    """Block devices are devices; a mode of no known type is a special file."""
    assert kind_of(stat.S_IFBLK | 0o660) == "device"
    assert kind_of(stat.S_IFCHR | 0o666) == "device"
    assert kind_of(0o644) == "special file"


def test_a_missing_artifact_says_to_compile_first(tmp_path):
    e = refusal(Beneath.open, tmp_path / "none")
    assert e.args[0] == f"artifact '{tmp_path / 'none'}' does not exist"
    assert e.hint == "compile first: anec compile model.ir -o DIR"


def test_an_artifact_that_cannot_be_opened_says_why(tmp_path):
    """Any other failure to open the directory gives the system's reason."""
    p = tmp_path / ("x" * 300)
    e = refusal(Beneath.open, p)
    assert e.args[0] == f"cannot open '{p}': File name too long"


def test_a_file_is_not_a_directory_even_without_o_directory(art, monkeypatch):
    """Where the platform has no O_DIRECTORY, the opened file is checked and refused."""
    import anec.mil.beneath as beneath

    _, root = art
    monkeypatch.setattr(beneath, "_O_DIR", os.O_RDONLY | beneath._O_CLOEXEC)
    e = refusal(Beneath.open, root / "plain")
    assert e.args[0] == f"'{root / 'plain'}' is not a directory"
