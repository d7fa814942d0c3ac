"""Signal handlers a program opts into, so that SIGTERM and SIGHUP end it as cleanly as an exception.

Importing anec installs nothing. ``anec.signals.install_handlers()`` (the ``anec`` command
calls it; a library user calls it once, from the main thread) makes SIGTERM and SIGHUP run
the registered cleanups (every open :class:`~anec.runtime.Runtime` closes) and raise
``SystemExit(128 + signal)``: ``with`` blocks and ``finally`` clauses run, temporary
directories go away and the exit status tells which signal ended the process. With
``sigint=True`` SIGINT raises ``KeyboardInterrupt`` as Python's own handler does, except
inside the import machinery (see :func:`must_wait`). A signal whose handler the process has
already set (anything but the default) is left alone.
"""

from __future__ import annotations

import os
import signal
from typing import Callable

_CLEANUPS: list[Callable[[], None]] = []


def at_exit_signal(cleanup: Callable[[], None]) -> None:
    """Run ``cleanup()`` (once registered, never twice) before a handler installed by
    :func:`install_handlers` ends the process; its exceptions are ignored."""
    if cleanup not in _CLEANUPS:
        _CLEANUPS.append(cleanup)


def must_wait(signum: int, frame: object) -> bool:
    """For a handler that ends the process on ``signum`` by raising: True (and the signal sent
    again, to be handled a moment later) when it interrupted the import machinery. Its module
    locks' weakref callbacks run there, and an exception raised in a callback is printed and
    ignored, so the process would not end. Both handlers here ask this first."""
    code = getattr(frame, "f_code", None)
    if code is not None and code.co_filename.startswith("<frozen importlib"):
        os.kill(os.getpid(), signum)
        return True
    return False


def exit_on_signal(signum: int, frame: object) -> None:
    """The SIGTERM/SIGHUP handler: the cleanups, then ``SystemExit(128 + signum)``."""
    if must_wait(signum, frame):
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
    there the signal is sent again, to land a moment later."""
    if must_wait(signum, frame):
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
