"""The CLI never prints a traceback (an unexpected exception is a bug report with the version,
exit 3), and SIGINT/SIGTERM/SIGHUP leave no runtime or ``anec run`` temporary directory behind:
the ``anec`` command installs anec's signal handlers, a library user opts in with
``anec.signals.install_handlers()`` and otherwise keeps the process's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import anec
from anec.cli import EXIT_INTERNAL, main

ROOT = Path(__file__).resolve().parents[2]


def _boom(*a, **k):
    raise KeyError("a bug")


def test_an_unexpected_exception_is_a_bug_report(monkeypatch):
    monkeypatch.setattr("anec.ir.ops.format_table", _boom)
    monkeypatch.delenv("ANEC_TRACEBACK", raising=False)
    result = CliRunner().invoke(main, ["ops"])
    assert result.exit_code == EXIT_INTERNAL == 3
    assert "Traceback" not in result.output
    assert "anec: internal error: KeyError: 'a bug'" in result.output
    assert f"This is a bug in anec {anec.__version__}" in result.output
    assert "anec --traceback" in result.output and "ANEC_TRACEBACK=1" in result.output


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_traceback_on_request(monkeypatch, how):
    monkeypatch.setattr("anec.ir.ops.format_table", _boom)
    args = ["--traceback", "ops"] if how == "flag" else ["ops"]
    if how == "env":
        monkeypatch.setenv("ANEC_TRACEBACK", "1")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 3
    assert "Traceback (most recent call last)" in result.output and "KeyError: 'a bug'" in result.output


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(143)])
def test_a_signal_that_python_wrapped_is_a_signal_not_a_bug(monkeypatch, interrupt):
    """Ctrl-C (or the SIGTERM handler's exit) while a class is being created comes out of
    Python as a RuntimeError from ``__set_name__`` caused by it (seen in CI: a SIGINT during an
    import, 'Error calling __set_name__ on 'Field' instance ...'): the CLI ends as the signal
    would have it, not with a bug report."""
    def interrupted(*a, **k):
        class Owner:  # a descriptor whose __set_name__ the signal interrupts
            class Field:
                def __set_name__(self, owner, name):
                    raise interrupt
            options = Field()

    monkeypatch.setattr("anec.ir.ops.format_table", interrupted)
    result = CliRunner().invoke(main, ["ops"])
    assert "internal error" not in result.output
    if isinstance(interrupt, KeyboardInterrupt):
        assert result.exit_code == 1 and "Aborted!" in result.output
    else:
        assert result.exit_code == 143


def test_operating_system_errors_are_user_errors(monkeypatch):
    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", "/some/file")

    monkeypatch.setattr("anec.ir.ops.format_table", denied)
    result = CliRunner().invoke(main, ["ops"])
    assert result.exit_code == 1
    assert result.output == "error: Permission denied (/some/file)\n"


def test_anec_errors_keep_exit_1_and_usage_errors_2(tmp_path):
    result = CliRunner().invoke(main, ["run", str(tmp_path)])
    assert result.exit_code == 1 and result.output.startswith("error: ") and "Traceback" not in result.output
    assert CliRunner().invoke(main, ["run"]).exit_code == 2


# ---- signals -------------------------------------------------------------------------------

SCRIPT = """
import sys, time
import anec.signals
from anec.compiler import compile_module
from anec.ir.parser import parse
from anec.runtime import Runtime
if "--opt-in" in sys.argv:
    anec.signals.install_handlers()
m = parse("func f(%x: fp16[1, 4, 1, 8]) {\\n  %e = relu(%x) : fp16[1, 4, 1, 8]\\n  return %e\\n}\\n", "f.ir")
rt = Runtime("sim")
p = rt.load(compile_module(m, random_seed=0).artifacts["f"])
print(p.dir, flush=True)
time.sleep(60)
"""


def _default_signals() -> None:
    """In the child: the signals under test at their defaults, even when the suite itself runs
    with them ignored (``nohup``, a background job), which the child would inherit."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _env(tmp: Path) -> dict:
    return dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_removes_the_runtime_directories(tmp_path, sig):
    """In a program that opted in (SIGINT needs no opt-in: it is Python's KeyboardInterrupt)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, "--opt-in"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_default_signals,
                            text=True, env=_env(tmp))
    prog_dir = Path(proc.stdout.readline().strip())
    assert prog_dir.is_dir() and prog_dir.parent.parent == tmp
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if sig == signal.SIGINT:  # KeyboardInterrupt: Python ends by the signal after the cleanup
        assert proc.returncode in (-signal.SIGINT, 130, 1), err
    else:
        assert proc.returncode == 128 + sig, err
    assert os.listdir(tmp) == []


HANDLERS = """
import signal, sys
from anec.runtime import Runtime
if sys.argv[1] == "cli":
    from anec.cli import main
    main(["ops"], standalone_mode=False)
else:
    Runtime("sim").close()
print(" ".join("SIG_DFL" if signal.getsignal(s) is signal.SIG_DFL else signal.getsignal(s).__name__
               for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)))
"""


@pytest.mark.parametrize("who", ["runtime", "cli"])
def test_only_the_cli_installs_signal_handlers(tmp_path, who):
    """Opening a Runtime leaves the process's signal handlers alone (a program embedding anec
    keeps its own); the ``anec`` command installs anec's."""
    res = subprocess.run([sys.executable, "-c", HANDLERS, who], capture_output=True, text=True, env=_env(tmp_path),
                         preexec_fn=_default_signals, timeout=120)
    assert res.returncode == 0, res.stderr
    handlers = res.stdout.splitlines()[-1].split()
    if who == "cli":
        assert handlers == ["exit_on_signal", "exit_on_signal", "interrupt_on_signal"]
    else:
        assert handlers == ["SIG_DFL", "SIG_DFL", "default_int_handler"]


def test_without_the_opt_in_sigterm_keeps_its_default_action(tmp_path):
    """A program that did not opt in ends by SIGTERM as it would without anec (no handler ran,
    so its runtime's directory stays: the cost the opt-in exists to avoid)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_default_signals, text=True, env=_env(tmp))
    prog_dir = Path(proc.stdout.readline().strip())
    assert prog_dir.is_dir()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    assert prog_dir.is_dir()


def test_install_handlers_leaves_a_handler_of_the_program_alone(monkeypatch):
    """Only signals still at their default get anec's handler; calling it again changes nothing."""
    import anec.signals as signals

    current = {signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_IGN,
               signal.SIGINT: signal.default_int_handler}
    monkeypatch.setattr(signals.signal, "getsignal", lambda s: current[s])
    monkeypatch.setattr(signals.signal, "signal", lambda s, h: current.__setitem__(s, h))
    assert signals.install_handlers() == ["SIGTERM"]
    assert current == {signal.SIGTERM: signals.exit_on_signal, signal.SIGHUP: signal.SIG_IGN,
                       signal.SIGINT: signal.default_int_handler}
    assert signals.install_handlers(sigint=True) == ["SIGINT"]
    assert current[signal.SIGINT] is signals.interrupt_on_signal
    assert signals.install_handlers(sigint=True) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_anec_run_leaves_no_temporary_directory(tmp_path, sig):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    for _attempt in range(5):  # the run is short: if it ends before the signal lands, try again
        proc = subprocess.Popen([sys.executable, "-m", "anec.cli", "run", str(ROOT / "examples" / "gpt2_mlp.ir"),
                                 "--random-weights", "0", "--random-inputs", "0", "--backend", "sim"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp),
                                preexec_fn=_default_signals)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            names = os.listdir(tmp)
            if any(n.startswith("anec-run-") for n in names) and any(n.startswith("anec-rt-") for n in names):
                break  # compiling or running: both the run's and the runtime's directories exist
            time.sleep(0.005)
        if proc.poll() is None:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        assert "Traceback" not in err
        if proc.returncode == 0:  # finished before the signal arrived: nothing was interrupted
            assert os.listdir(tmp) == []
            continue
        break
    else:
        pytest.fail("anec run always ended before it could be interrupted")
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + sig, err
    else:  # click prints "Aborted!"; the process ends by SIGINT (or with status 1)
        assert proc.returncode in (-signal.SIGINT, 130, 1) and "Aborted!" in err, (proc.returncode, err)
    assert os.listdir(tmp) == []


class _Frame:
    """A stand-in for the frame a signal handler is given."""

    def __init__(self, filename: str, name: str = "<module>") -> None:
        self.f_code = type("Code", (), {"co_filename": filename, "co_name": name})()
        self.f_back = None


def test_a_signal_inside_the_import_machinery_is_sent_again_not_raised_there(monkeypatch):
    """An exception raised in an import lock's weakref callback is printed and ignored (the
    process would go on): there the handler sends the signal again instead; anywhere else it
    runs the cleanups (the runtime registers: close every open runtime) and ends the process
    through SystemExit."""
    import anec.runtime as runtime
    import anec.signals as signals

    sent, closed = [], []
    monkeypatch.setattr(signals, "_again", lambda sig: sent.append((os.getpid(), sig)))
    monkeypatch.setattr(signals, "_CLEANUPS", [])
    monkeypatch.setattr(runtime, "_cleanup", {"registered": False})
    monkeypatch.setattr(runtime, "_close_all", lambda: closed.append(True))
    monkeypatch.setattr(runtime.atexit, "register", lambda fn: None)
    runtime._install_cleanup()  # what opening a Runtime does
    assert signals.exit_on_signal(signal.SIGTERM, _Frame("<frozen importlib._bootstrap>")) is None
    assert sent == [(os.getpid(), signal.SIGTERM)] and closed == []
    with pytest.raises(SystemExit) as e:
        signals.exit_on_signal(signal.SIGTERM, _Frame(str(ROOT / "anec" / "cli" / "group.py")))
    assert e.value.code == 128 + signal.SIGTERM and sent == [(os.getpid(), signal.SIGTERM)]
    assert closed == [True]
    with pytest.raises(SystemExit):
        signals.exit_on_signal(signal.SIGHUP, None)  # no frame: raised at once
    assert closed == [True, True]


def test_an_interrupt_inside_the_import_machinery_is_sent_again(monkeypatch):
    """SIGINT's KeyboardInterrupt, raised in an import lock's weakref callback, would be printed
    ('Exception ignored ... KeyboardInterrupt') and lost: the CLI's handler sends it again
    there, and raises KeyboardInterrupt anywhere else."""
    import anec.signals as signals

    sent = []
    monkeypatch.setattr(signals, "_again", lambda sig: sent.append((os.getpid(), sig)))
    assert signals.interrupt_on_signal(signal.SIGINT, _Frame("<frozen importlib._bootstrap>")) is None
    assert sent == [(os.getpid(), signal.SIGINT)]
    with pytest.raises(KeyboardInterrupt):
        signals.interrupt_on_signal(signal.SIGINT, _Frame(str(ROOT / "anec" / "cli" / "group.py")))
    assert len(sent) == 1


def test_a_deferred_signal_is_handled_once_a_moment_later_by_a_timer():
    """_again: the signal's own handler runs once, about a millisecond later, from a one-shot
    SIGALRM whose previous handler is then put back (not nested in the running handler)."""
    from anec import signals

    got = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    alarm = signal.getsignal(signal.SIGALRM)
    try:
        signals._again(signal.SIGUSR1)
        assert got == [] and signal.getsignal(signal.SIGALRM) is not alarm
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.001)
        assert got == [signal.SIGUSR1] and signal.getsignal(signal.SIGALRM) is alarm
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_a_signal_while_a_pool_starts_a_worker_is_sent_again(monkeypatch):
    """Raised between a ThreadPoolExecutor's start of a worker and its record of it, an
    interrupt would leave a worker that the interpreter's exit waits for forever; the
    handlers send the signal again instead (to land a moment later), as inside an import."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from anec import signals

    frames = []
    start = threading.Thread.start

    def spy(self):
        frames.append(sys._getframe())  # the frame a signal handler would get here
        start(self)

    monkeypatch.setattr(threading.Thread, "start", spy)
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()
    sent = []
    monkeypatch.setattr(signals, "_again", sent.append)
    assert signals.must_wait(signal.SIGINT, frames[0]) and sent == [signal.SIGINT]
    signals.interrupt_on_signal(signal.SIGINT, frames[0])  # returns instead of raising
    assert sent == [signal.SIGINT, signal.SIGINT]
    # anywhere else the handler raises at once
    assert not signals.must_wait(signal.SIGINT, sys._getframe())
    with pytest.raises(KeyboardInterrupt):
        signals.interrupt_on_signal(signal.SIGINT, sys._getframe())
    assert sent == [signal.SIGINT, signal.SIGINT]


ENDING_SCRIPT = """
import os, signal, sys, time
from concurrent.futures import ThreadPoolExecutor
from anec import signals

signals.install_handlers(sigint=True)
pool = ThreadPoolExecutor(1)

def late():  # still running when main returns: the exit waits for it, then the signal lands
    time.sleep(0.3)
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    time.sleep(0.3)

pool.submit(late)
print("main done", flush=True)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_exit_waits_for_a_pool_is_not_a_traceback(sig):
    """A signal that lands after main returned, while the interpreter's exit joins a thread
    pool's workers, used to raise inside threading's shutdown, which printed 'Exception
    ignored ... Traceback' to the user. The handlers let the exit finish instead."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", ENDING_SCRIPT, sig], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.stdout == "main done\n"
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr


def test_ending_is_the_exit_waiting_for_threads():
    """signals.ending: true inside threading._shutdown's callers only."""
    from anec import signals

    assert signals.ending(_Frame("/usr/lib/python3/threading.py", "_shutdown"))
    assert not signals.ending(_Frame("/usr/lib/python3/threading.py", "join"))
    assert not signals.ending(sys._getframe())
