"""A write that a signal interrupts anywhere leaves the destination as it was (or whole and new)
and no temporary file or directory: the writer threads are stopped before the temporary
directory is removed, a signal that lands just after the temporary entry is made or while the
previous tree is removed is cleaned up after, and the cleanup itself runs to its end under
:func:`anec.signals.held` (a second Ctrl-C lands once it is done)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from anec import fsutil, signals
from anec.fsutil import replace_file, write_tree_atomic


@pytest.fixture
def anec_sigint():
    """anec's SIGINT handler (what the ``anec`` command installs) for the test."""
    old = signal.signal(signal.SIGINT, signals.interrupt_on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class _Slow:
    """A streamed file whose writer interrupts the main thread (``ring``), then keeps writing
    for a while; ``running`` counts the writers still inside ``write_to``."""

    running = 0
    lock = threading.Lock()

    def __init__(self, ring: bool) -> None:
        self.size, self.ring = (1 if ring else 1 << 10), ring  # the smallest is started last

    def write_to(self, f) -> None:
        with _Slow.lock:
            _Slow.running += 1
        try:
            if self.ring:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                time.sleep(0.3)
            f.write(b"x" * self.size)
        finally:
            with _Slow.lock:
                _Slow.running -= 1

    def written(self, fd: int) -> None:
        pass


def test_an_interrupt_while_files_are_written_stops_the_writers_first(tmp_path, anec_sigint):
    """Ctrl-C while the writer threads write and the caller waits for them: by the time
    KeyboardInterrupt leaves the write, no writer is still inside the temporary directory (a
    file it creates after the removal would keep the directory), and nothing is left next to
    the destination."""
    files = {f"f{i}.bin": _Slow(ring=(i == 0)) for i in range(12)}
    with pytest.raises(KeyboardInterrupt):
        write_tree_atomic(tmp_path / "out", files)
    assert _Slow.running == 0
    assert os.listdir(tmp_path) == []


def test_an_interrupt_just_after_the_temporary_directory_is_made(tmp_path, anec_sigint, monkeypatch):
    real = fsutil._temp_dir

    def made_then_interrupted(dest):
        p = real(dest)
        signal.raise_signal(signal.SIGINT)  # lands before the caller has the name
        return p

    write_tree_atomic(tmp_path / "out", {"a.txt": b"old"})
    monkeypatch.setattr(fsutil, "_temp_dir", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_tree_atomic(tmp_path / "out", {"a.txt": b"new"})
    assert os.listdir(tmp_path) == ["out"] and (tmp_path / "out" / "a.txt").read_bytes() == b"old"


def test_an_interrupt_while_the_previous_tree_is_removed(tmp_path, anec_sigint, monkeypatch):
    """The new tree is in place; the previous one, half removed when Ctrl-C landed, goes too."""
    write_tree_atomic(tmp_path / "out", {f"{i}.txt": b"old" for i in range(5)})
    real = fsutil.discard

    def half_then_interrupted(path):
        os.unlink(os.path.join(path, "0.txt"))
        signal.raise_signal(signal.SIGINT)
        real(path)

    monkeypatch.setattr(fsutil, "discard", half_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_tree_atomic(tmp_path / "out", {"a.txt": b"new"})
    assert os.listdir(tmp_path) == ["out"] and os.listdir(tmp_path / "out") == ["a.txt"]


def test_a_second_interrupt_during_the_cleanup_lands_after_it(tmp_path, anec_sigint, monkeypatch):
    """Two Ctrl-Cs: the first ends the write, the second arrives while its temporary directory
    is removed and is raised once that is done."""
    real = fsutil._remove_stale
    calls = []

    def again_during_cleanup(dest):
        calls.append(dest)
        if len(calls) == 2:  # the first call cleans up before the write, the second after it
            signal.raise_signal(signal.SIGINT)
        real(dest)

    def last(tmp):
        (tmp / "partial.txt").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(fsutil, "_remove_stale", again_during_cleanup)
    with pytest.raises(KeyboardInterrupt):
        write_tree_atomic(tmp_path / "out", {"a.txt": b"a"}, last)
    assert len(calls) == 2 and os.listdir(tmp_path) == []


def test_an_interrupt_just_after_a_temporary_file_is_made(tmp_path, anec_sigint, monkeypatch):
    real = fsutil._temp_file

    def made_then_interrupted(*args):
        got = real(*args)
        signal.raise_signal(signal.SIGINT)  # held until the cleanup knows the name
        return got

    (tmp_path / "f").write_bytes(b"old")
    monkeypatch.setattr(fsutil, "_temp_file", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        replace_file(tmp_path / "f", lambda f: f.write(b"new"))
    assert os.listdir(tmp_path) == ["f"] and (tmp_path / "f").read_bytes() == b"old"


# ---- the write lock ----------------------------------------------------------------------------


def test_an_interrupt_as_the_lock_is_taken_leaves_no_lock_file(tmp_path, anec_sigint, monkeypatch):
    real = fsutil._same_file

    def interrupted(path, fd):
        signal.raise_signal(signal.SIGINT)  # after the flock, before the write knows it holds it
        return real(path, fd)

    monkeypatch.setattr(fsutil, "_same_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_tree_atomic(tmp_path / "out", {"a.txt": b"a"})
    assert os.listdir(tmp_path) == []


def test_an_interrupt_as_the_lock_is_given_back_leaves_no_lock_file(tmp_path, anec_sigint, monkeypatch):
    real = os.unlink

    def interrupted(path, *args, **kwargs):
        if str(path).endswith(".anec-lock"):
            signal.raise_signal(signal.SIGINT)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_tree_atomic(tmp_path / "out", {"a.txt": b"a"})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["out"] and os.listdir(tmp_path / "out") == ["a.txt"]


def test_abandon_leaves_a_lock_file_another_writer_holds(tmp_path):
    import fcntl

    lock = fsutil._WriteLock(tmp_path / "out")
    other = os.open(lock.path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        lock.abandon()
        assert lock.path.exists()
    finally:
        os.close(other)
    lock.abandon()  # nobody holds it now: an unused lock file goes
    assert not lock.path.exists()


# ---- held ---------------------------------------------------------------------------------------


def test_held_raises_the_interrupt_as_the_outermost_block_ends(anec_sigint):
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with signals.held():
            with signals.held():
                signal.raise_signal(signal.SIGINT)
                steps.append("inner")
            steps.append("outer")
        steps.append("after")  # never reached
    assert steps == ["inner", "outer"] and signals._HELD == 0 and signals._PENDING is None


def test_held_handles_the_first_of_several_signals_once(monkeypatch):
    got = []
    monkeypatch.setattr(signals, "_CLEANUPS", [lambda: got.append("cleanup")])
    old_term = signal.signal(signal.SIGTERM, signals.exit_on_signal)
    old_int = signal.signal(signal.SIGINT, signals.interrupt_on_signal)
    try:
        with pytest.raises(SystemExit) as e:
            with signals.held():
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGINT)
                got.append("body")
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
    assert e.value.code == 128 + signal.SIGTERM and got == ["body", "cleanup"]
    assert signals._PENDING is None


def test_held_without_a_signal_and_outside_the_main_thread_changes_nothing(anec_sigint):
    with signals.held():
        pass
    seen = []

    def worker():
        with signals.held():
            seen.append(signals._HELD)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [0] and signals._HELD == 0
