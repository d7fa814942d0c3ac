"""Signal handlers a program opts into, so that SIGTERM and SIGHUP end it as cleanly as an exception.

Importing anec installs nothing. ``anec.signals.install_handlers()`` (the ``anec`` command
calls it; a library user calls it once, from the main thread) makes SIGTERM and SIGHUP run
the registered cleanups (every open :class:`~anec.runtime.Runtime` closes) and raise
``SystemExit(128 + signal)``: ``with`` blocks and ``finally`` clauses run, temporary
directories go away and the exit status tells which signal ended the process. With
``sigint=True`` SIGINT raises ``KeyboardInterrupt`` as Python's own handler does, except
inside the import machinery (see :func:`must_wait`) and once the process is ending (see
:func:`ending`). A signal whose handler the process has
already set (anything but the default) is left alone. Cleanup that must run to its end
(removing a write's temporary directory) runs under :func:`held`: a signal arriving meanwhile
takes effect as the block ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

_CLEANUPS: list[Callable[[], None]] = []
_HELD = 0
"""How many :func:`held` blocks the main thread is in."""
_PENDING: int | None = None
"""The first signal that arrived while :data:`_HELD` (handled when the blocks end)."""


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold off the handlers of :func:`install_handlers` while the block runs: a SIGINT,
    SIGTERM or SIGHUP arriving meanwhile is remembered, and the first one is handled as the
    outermost block ends (raising there). A second Ctrl-C then cannot cut short the removal of
    a temporary directory that the first one started. Outside the main thread (where Python
    never runs signal handlers) it does nothing; so does a signal whose handler is not anec's."""
    global _HELD, _PENDING
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _HELD += 1
    try:
        yield
    finally:
        _HELD -= 1
        if _HELD == 0 and _PENDING is not None:
            signum, _PENDING = _PENDING, None
            handler = signal.getsignal(signum)
            if handler in (exit_on_signal, interrupt_on_signal):
                handler(signum, sys._getframe())


def _hold(signum: int) -> bool:
    """True (and ``signum`` remembered, unless an earlier one is) when a :func:`held` block is
    running."""
    global _PENDING
    if _HELD:
        if _PENDING is None:
            _PENDING = signum
        return True
    return False


def at_exit_signal(cleanup: Callable[[], None]) -> None:
    """Run ``cleanup()`` (once registered, never twice) before a handler installed by
    :func:`install_handlers` ends the process; its exceptions are ignored."""
    if cleanup not in _CLEANUPS:
        _CLEANUPS.append(cleanup)


def must_wait(signum: int, frame: object) -> bool:
    """For a handler that ends the process on ``signum`` by raising: True (and the signal
    handled again a moment later, :func:`_again`) when raising now would leave the process
    unable to end. Both handlers here ask this first. Two places:

    * the import machinery: its module locks' weakref callbacks run there, and an exception
      raised in a callback is printed and ignored;
    * a thread pool starting a worker (``ThreadPoolExecutor._adjust_thread_count``, the new
      thread's start included): raised between the start and the pool's record of the
      thread, the exception leaves a worker that the interpreter's exit waits for and that
      nothing wakes, so the process hangs after its cleanups.
    """
    code = getattr(frame, "f_code", None)
    if code is not None and str(code.co_filename).startswith("<frozen importlib") or _called_from(
            frame, "_adjust_thread_count", os.path.join("concurrent", "futures", "thread.py")):
        _again(signum)
        return True
    return False


def ending(frame: object) -> bool:
    """Whether ``frame`` is the interpreter's exit waiting for threads to end
    (``threading._shutdown``, which joins the thread pools' workers): the program's main has
    returned, and an exception raised there is printed ("Exception ignored ...") and lost.
    Both handlers let the exit go on instead: the work is done, and the process ends in
    moments with the status its main gave."""
    return _called_from(frame, "_shutdown", "threading.py")


def _called_from(frame: object, name: str, file_suffix: str, depth: int = 200) -> bool:
    """Whether ``frame`` or one of its callers runs the function ``name`` of a file whose
    path ends with ``file_suffix``."""
    f = frame
    for _ in range(depth):
        code = getattr(f, "f_code", None)
        if code is None:
            return False
        if getattr(code, "co_name", None) == name and str(code.co_filename).endswith(file_suffix):
            return True
        f = getattr(f, "f_back", None)
    return False


def _again(signum: int) -> None:
    """Handle ``signum`` again a millisecond from now, by a one-shot timer (SIGALRM) whose
    handler calls ``signum``'s and then puts SIGALRM's back. A signal sent to the process at
    once would be handled inside the handler still running, each nested call deferring
    again. Without timers (or a Python-level handler) the signal is sent again."""
    handler = signal.getsignal(signum)
    if not callable(handler) or not hasattr(signal, "setitimer"):
        os.kill(os.getpid(), signum)
        return
    previous = signal.getsignal(signal.SIGALRM)

    def fire(_alarm: int, frame: object) -> None:
        signal.signal(signal.SIGALRM, previous)
        handler(signum, frame)  # type: ignore[operator]

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, 0.001)


def exit_on_signal(signum: int, frame: object) -> None:
    """The SIGTERM/SIGHUP handler: the cleanups, then ``SystemExit(128 + signum)`` (nothing
    once the process is :func:`ending`); held back inside :func:`held`."""
    if ending(frame) or _hold(signum) or must_wait(signum, frame):
        return
    for cleanup in list(_CLEANUPS):
        try:
            cleanup()
        except Exception:  # noqa: BLE001 - best effort: the exit must still happen
            pass
    raise SystemExit(128 + signum)


def interrupt_on_signal(signum: int, frame: object) -> None:
    """The SIGINT handler: Python's KeyboardInterrupt, except inside the import machinery,
    where the interrupt would be printed and ignored by an import lock's weakref callback:
    there the signal is sent again, to land a moment later. Nothing once the process is
    :func:`ending`; held back inside :func:`held`."""
    if ending(frame) or _hold(signum) or must_wait(signum, frame):
        return
    raise KeyboardInterrupt


def install_handlers(*, sigint: bool = False) -> list[str]:
    """Install :func:`exit_on_signal` for SIGTERM and SIGHUP (and, with ``sigint``,
    :func:`interrupt_on_signal` for SIGINT) where the process still has the default handler;
    the names of the signals whose handler it installed. Outside the main thread (where
    Python cannot set handlers) it installs nothing. Calling it again changes nothing."""
    wanted = [("SIGTERM", signal.SIG_DFL, exit_on_signal), ("SIGHUP", signal.SIG_DFL, exit_on_signal)]
    if sigint:
        wanted.append(("SIGINT", signal.default_int_handler, interrupt_on_signal))
    installed: list[str] = []
    for name, default, handler in wanted:
        sig = getattr(signal, name, None)
        if sig is None or signal.getsignal(sig) is not default:
            continue
        try:
            signal.signal(sig, handler)
        except ValueError:  # not the main thread
            break
        installed.append(name)
    return installed
