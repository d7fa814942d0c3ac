"""Hostile artifacts: every case of the corpus (tests/runtime/hostile.py) is refused with its
expected error, through the runtime and through ``anec run``: no traceback, no hang, and
nothing outside the artifact opened (an audit hook watches the Python side; strace, when
the machine has it, watches the whole process, C runtime included)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.diagnostics import AnecError
from anec.runtime import Runtime

from .hostile import FUNC, SECRET, Case, Hang, build_corpus, child_env, opens_outside, watched

HANG_SECONDS = 20
LEAKS = (SECRET, "root:x:0:0")
"""Content of the files the corpus links to: never in a message."""

@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Case]:
    return build_corpus(tmp_path_factory.mktemp("hostile"))


def _audit_violations(case: Case, events: list[tuple]) -> list[str]:
    """Opens that could reach outside the artifact directory the user named."""
    return opens_outside({os.fspath(case.path.parent if case.path.name == "manifest.json" else case.path)},
                         events)


def _load_once(rt: Runtime, case: Case) -> str | None:
    """The error message of loading (and running) ``case``; None if it loaded and ran."""
    prog = rt.load(case.path, case.func)
    prog(x=np.zeros((1, 8, 1, 4), np.float32))
    return None


def test_corpus_covers_the_hostile_cases(corpus):
    assert len(corpus) >= 50
    names = {c.name for c in corpus}
    for wanted in ("mil_link_passwd", "weight_link_zero", "weights_dir_link", "mil_fifo", "weight_fifo",
                   "manifest_deep", "weight_no_file", "weight_offset_string", "mil_string", "limits_list",
                   "limits_huge", "limits_negative", "logical_output_piece", "mil_not_utf8", "blob_nan",
                   "mil_offset_1e300", "out_func_link", "temp_output"):
        assert wanted in names


def test_runtime_refuses_every_hostile_artifact(corpus):
    problems = []
    with Runtime("sim") as rt:
        good = Case("base", corpus[0].path.parents[1] / "base" / "plain", FUNC, None)
        assert _load_once(rt, good) is None  # and every import is done before the hook records
        for case in corpus:
            try:
                with watched(HANG_SECONDS) as events:  # every file the Python side opens
                    try:
                        msg = _load_once(rt, case)
                    except AnecError as e:
                        msg = str(e)
            except Hang:
                problems.append(f"{case.name}: hung for {HANG_SECONDS} s")
                continue
            except Exception as e:  # noqa: BLE001
                problems.append(f"{case.name}: {type(e).__name__} escaped: {e}")
                continue
            if case.expect is None:
                if msg is not None:
                    problems.append(f"{case.name}: should load, got: {msg}")
            elif msg is None or not re.search(case.expect, msg):
                problems.append(f"{case.name}: expected /{case.expect}/, got: {msg}")
            if msg and any(leak in msg for leak in LEAKS):
                problems.append(f"{case.name}: the message quotes a file outside the artifact: {msg}")
            problems += [f"{case.name}: {v}" for v in _audit_violations(case, events)]
    assert not problems, "\n".join(problems)


def test_anec_run_refuses_every_hostile_artifact(corpus):
    runner = CliRunner()
    problems = []
    for case in corpus:
        args = ["run", str(case.path), "--backend", "sim", "--random-inputs", "0"]
        if case.func:
            args += ["--func", case.func]
        result = runner.invoke(main, args)
        out = result.output
        if "Traceback" in out or not isinstance(result.exception, (SystemExit, type(None))):
            problems.append(f"{case.name}: traceback: {out} {result.exception!r}")
        elif case.expect is None:
            if result.exit_code != 0:
                problems.append(f"{case.name}: should run, exit {result.exit_code}: {out}")
        elif result.exit_code != 1 or not re.search(case.expect, out) or not out.startswith("error: "):
            problems.append(f"{case.name}: exit {result.exit_code}, expected /{case.expect}/, got: {out}")
        if any(leak in out for leak in LEAKS):
            problems.append(f"{case.name}: the output quotes a file outside the artifact")
    assert not problems, "\n".join(problems)


def _strace_works() -> bool:
    if not shutil.which("strace"):
        return False
    try:
        return subprocess.run(["strace", "-qq", "-e", "trace=none", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_OPEN = re.compile(r'^(?:\d+ +)?(open|openat|openat2|creat)\((?:(?:AT_FDCWD|\d+)<([^>]*)>, )?"((?:[^"\\]|\\.)*)", '
                   r'([^,)]*).*\) = (-?\d+)(?:<([^>]*)>)?')


@pytest.mark.skipif(not _strace_works(), reason="strace is not available (or ptrace is not allowed) here")
def test_no_file_outside_the_artifact_is_opened_strace(corpus, tmp_path):
    """The whole process (Python, the C runtime, the sim) under strace -f: no open ever
    resolves outside the corpus's cases, and none reaches the files they link to."""
    cases_file, results_file, log = tmp_path / "cases.json", tmp_path / "results.json", tmp_path / "strace"
    cases_file.write_text(json.dumps([{"name": c.name, "path": str(c.path), "func": c.func} for c in corpus]))
    env = child_env()
    proc = subprocess.run(["strace", "-f", "-ff", "-y", "-qq", "-e", "trace=open,openat,openat2,creat", "-o", str(log),
                           sys.executable, str(Path(__file__).with_name("load_corpus.py")), str(cases_file),
                           str(results_file)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(results_file.read_text())
    problems = [f"{n}: traceback {r['traceback']}" for n, r in results.items() if r["traceback"]]
    for case in corpus:
        msg = results[case.name]["error"]
        if case.expect is not None and (msg is None or not re.search(case.expect, msg)):
            problems.append(f"{case.name}: expected /{case.expect}/, got {msg}")
    corpus_root = corpus[0].path.parents[1]
    cases_dir, outside = corpus_root / "cases", corpus_root / "outside"
    forbidden = {"/etc/passwd", "/dev/zero"}
    opens = 0
    for f in tmp_path.glob("strace*"):
        for line in f.read_text(errors="replace").splitlines():
            m = _OPEN.match(line)
            if not m:
                continue
            opens += 1
            _call, dir_path, arg, _flags, rc, resolved = m.groups()
            target = arg if arg.startswith("/") else os.path.join(dir_path or "", arg)
            if int(rc) < 0:
                continue
            if resolved in forbidden or (resolved or "").startswith(str(outside)):
                problems.append(f"opened outside the artifact: {line}")
            if target.startswith(str(cases_dir)) and not (resolved or "").startswith(str(cases_dir)):
                problems.append(f"an open inside a case resolved elsewhere: {line}")
    assert opens > 100  # the log was parsed (the interpreter alone opens hundreds of files)
    assert not problems, "\n".join(problems)
