"""Reading a file beneath a directory takes exactly its bytes: one read of the size fstat
gives and a one-byte probe that nothing followed; when a read comes back short or the file
grows meanwhile, the rest is asked for up to one byte past the caller's limit and never
further, and a file that grows past the limit is refused. Also: the directory's descriptor
is closed once, whatever its number."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anec.diagnostics import ArtifactError
from anec.mil.beneath import Beneath, _read_exactly


def _reads(monkeypatch, cap: int | None = None, grow: tuple[Path, bytes] | None = None) -> list[int]:
    """The sizes asked of os.read from now on. ``cap``: the most bytes one read returns (a
    slow device or a network file system reads short); ``grow``: (file, bytes) appended
    just before the first read (a writer still at work on the file)."""
    asked: list[int] = []
    real = os.read

    def read(fd, n):
        if grow is not None and not asked:
            with open(grow[0], "ab") as f:
                f.write(grow[1])
        asked.append(n)
        return real(fd, n if cap is None else min(n, cap))

    monkeypatch.setattr(os, "read", read)
    return asked


@pytest.fixture
def d(tmp_path):
    with Beneath.open(tmp_path) as b:
        yield b


def test_an_empty_file_is_one_probe(d, monkeypatch):
    """An empty file reads as no bytes, with a single one-byte read finding its end."""
    (d.path / "empty").write_bytes(b"")
    asked = _reads(monkeypatch)
    assert d.read("empty", 10) == b""
    assert asked == [1]


def test_a_file_is_one_read_of_its_size_and_a_probe(d, monkeypatch):
    """The common case: the file's size in one read, then one byte that finds its end."""
    (d.path / "w.bin").write_bytes(b"abcdefgh")
    asked = _reads(monkeypatch)
    assert d.read("w.bin", 100) == b"abcdefgh"
    assert asked == [8, 1]


def test_a_file_of_exactly_the_limit_is_read(d):
    """The limit is inclusive: a file of exactly ``limit`` bytes is read."""
    (d.path / "w.bin").write_bytes(b"abcdefgh")
    assert d.read("w.bin", 8) == b"abcdefgh"


def test_short_reads_are_completed_asking_one_byte_past_the_limit(d, monkeypatch):
    """Reads that come back short (3 bytes at a time) still give the whole file; each
    further read asks for what is left up to one byte past the limit (10 + 1 - got)."""
    (d.path / "w.bin").write_bytes(b"abcdefgh")
    asked = _reads(monkeypatch, cap=3)
    assert d.read("w.bin", 10) == b"abcdefgh"
    assert asked == [8, 11 - 3, 11 - 6, 11 - 8]


@pytest.mark.parametrize("limit", [10, 6])  # 6: the file grows to exactly the limit
def test_a_file_that_grows_within_the_limit_is_read_whole(d, monkeypatch, limit):
    """Bytes appended after the size was taken are read too, while the total stays within
    the limit."""
    (d.path / "w.bin").write_bytes(b"abcd")
    _reads(monkeypatch, grow=(d.path / "w.bin", b"ef"))
    assert d.read("w.bin", limit) == b"abcdef"


def test_a_file_that_grows_past_the_limit_is_refused(d, monkeypatch):
    """A file that grows past the limit while it is read is refused, having been read to
    one byte past the limit and no further."""
    (d.path / "w.bin").write_bytes(b"abcd")
    asked = _reads(monkeypatch, grow=(d.path / "w.bin", b"e" * 20))
    with pytest.raises(ArtifactError) as e:
        d.read("w.bin", 6, what="weight file")
    assert e.value.args[0] == (f"weight file '{d.path / 'w.bin'}' grew above the limit of 6 bytes "
                               "while it was read")
    assert asked == [4, 1, 2]


def test_a_stream_past_the_limit_is_refused_one_byte_past_it():
    """A pipe (no size to trust) is read to one byte past the limit, then refused: the rest
    is left unread in the pipe."""
    r, w = os.pipe()
    try:
        os.write(w, b"0123456789abcdef")
        os.close(w)
        with pytest.raises(ArtifactError) as e:
            _read_exactly(r, 0, 6, "stream")
        assert e.value.args[0] == "stream grew above the limit of 6 bytes while it was read"
        assert os.read(r, 100) == b"789abcdef"
    finally:
        os.close(r)


def test_a_stream_within_the_limit_is_read_whole():
    """A pipe of 16 bytes read with a limit of 16 gives its 16 bytes."""
    r, w = os.pipe()
    try:
        os.write(w, b"0123456789abcdef")
        os.close(w)
        assert _read_exactly(r, 0, 16, "stream") == b"0123456789abcdef"
    finally:
        os.close(r)


def test_a_read_error_names_the_file_and_the_system_message(d, monkeypatch):
    """An error from the read itself is an ArtifactError naming the file and the cause."""
    import errno

    (d.path / "w.bin").write_bytes(b"abcd")

    def read(fd, n):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "read", read)
    with pytest.raises(ArtifactError) as e:
        d.read("w.bin", 10, what="weight file")
    assert e.value.args[0] == f"cannot read weight file '{d.path / 'w.bin'}': Input/output error"


def test_closing_twice_is_harmless_and_leaves_no_descriptor(tmp_path):
    """close() may be called again (and the context manager exits after it); afterwards the
    descriptor reads -1, like a closed socket's."""
    b = Beneath.open(tmp_path)
    b.close()
    assert b.fileno == -1
    b.close()
    with b:
        pass
    assert b.fileno == -1


def test_a_directory_on_descriptor_zero_is_closed(tmp_path, monkeypatch):
    """A process started with stdin closed may get the directory as descriptor 0: it is a
    descriptor like any other, closed once."""
    closed: list[int] = []
    monkeypatch.setattr(os, "close", closed.append)
    b = Beneath(0, tmp_path)
    b.close()
    b.close()
    assert closed == [0]
