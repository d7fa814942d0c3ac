"""Runtime objects from several threads and in any collection order.

Each test reproduces a way users hold the runtime (a thread pool serving one
model, a training loop reloading weights on one thread while another
evaluates, a model left open in a reference cycle, a forked worker) and checks
the contract of docs/runtime.md ("Threads, lifetimes and fork"): every result
equals the one a sequential run gives, an evaluation sees the old or the new
weights and never a mix, closing and collecting in any order is safe and
later calls fail with a clear RuntimeFailure.

The expected outputs come from sequential runs on a separate runtime (the sim
is deterministic: a result does not depend on the thread count), and those
are checked against numpy once, through the tolerance policy
(tests/tolerances.py). Neighbouring weight sets give outputs that differ in
every element by O(1), so a reload that does nothing, or an evaluation that
sees another set, is noticed.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from anec.diagnostics import RuntimeFailure
from anec.runtime import Runtime, native
from tests.runtime import milkit as mk
from tolerances import assert_close

ROOT = Path(__file__).resolve().parents[2]
C, S = 48, 96                      # channels, sequence: x is [1, C, 1, S]
XS = (1, C, 1, S)
FORMS = {"patch": "data-patch", "recompile": "recompile"}


def affine(form: str) -> tuple[str, dict]:
    """MIL + manifest of y = conv(w, x) (+ b).

    "patch": w alone, one BLOBFILE holding one tensor (reloads by data patch
    on the sim); "recompile": w and b in two BLOBFILEs; "packed": w and b in
    one BLOBFILE (recompile, or data patch on a device that keeps a packed
    file as its compiled data: sim_device="data=file")."""
    files = {"w": ("w.bin", 64), "b": ("b.bin", 64)}
    if form == "packed":
        files = {"w": ("wb.bin", 64), "b": ("wb.bin", B_OFFSET)}
    body = [mk.const_blob("w", "fp16", (C, C, 1, 1), *files["w"]),
            mk.op("y" if form == "patch" else "h", "fp16", XS, "conv", weight="w", x="x")]
    entries = [_entry("w", files["w"], (C, C, 1, 1))]
    if form != "patch":
        body += [mk.const_blob("b", "fp16", (1, C, 1, 1), *files["b"]), mk.op("y", "fp16", XS, "add", x="h", y="b")]
        entries.append(_entry("b", files["b"], (1, C, 1, 1)))
    return mk.program([("x", "fp16", XS)], body, ["y"]), {"func": form, "weights": entries}


B_OFFSET = 64 + 64 + C * C * 2 + (-(64 + 64 + C * C * 2)) % 64  # b's metadata in the packed file


def _entry(key: str, file_offset: tuple[str, int], shape) -> dict:
    file, offset = file_offset
    return {"key": key, "file": f"weights/{file}", "path": f"@model_path/weights/{file}", "offset": offset,
            "dtype": "fp16", "shape": list(shape), "perm": None, "slice": None}


def weight_set(k: int | tuple[int, int]) -> dict[str, np.ndarray]:
    """Weight set k, or (kw, kb): w of set kw and b of set kb. Set 2j+1 is set
    2j negated with the opposite bias, so the outputs of two neighbouring sets
    differ in every element."""
    kw, kb = (k, k) if isinstance(k, int) else k
    w = (np.random.default_rng(100 + kw // 2).standard_normal((C, C, 1, 1)) / np.sqrt(C)).astype(np.float16)
    b = np.full((1, C, 1, 1), 8.0 + kb // 2, np.float16)
    return {"w": -w if kw % 2 else w, "b": -b if kb % 2 else b}


def weights_of(form: str, k: int | tuple[int, int]) -> dict[str, np.ndarray]:
    """Weight set k by checkpoint key, for Program.reload_weights."""
    ws = weight_set(k)
    return {"w": ws["w"]} if form == "patch" else ws


def state_key(form: str, k: int | tuple[int, int]) -> tuple[int, int]:
    """(kw, kb) of the weights a program of `form` computes with (a "patch"
    program has no b)."""
    kw, kb = (k, k) if isinstance(k, int) else k
    return (kw, 0) if form == "patch" else (kw, kb)


def blobs(form: str, ws: dict[str, np.ndarray]) -> dict[str, bytes]:
    if form == "packed":
        return {"@model_path/weights/wb.bin": mk.blobfile(ws["w"], ws["b"])}
    out = {"@model_path/weights/w.bin": mk.blobfile(ws["w"])}
    if form == "recompile":
        out["@model_path/weights/b.bin"] = mk.blobfile(ws["b"])
    return out


def load(rt: Runtime, form: str, k: int | tuple[int, int]):
    mil, manifest = affine(form)
    return rt.compile(mil, blobs(form, weight_set(k)), manifest=manifest)


def x_input(i: int) -> np.ndarray:
    return np.random.default_rng(1000 + i).standard_normal(XS).astype(np.float16)


def numpy_reference(form: str, k: int | tuple[int, int], x: np.ndarray) -> np.ndarray:
    ws = weight_set(k)
    y = np.einsum("oc,bcs->bos", ws["w"][:, :, 0, 0].astype(np.float32), x[:, :, 0, :].astype(np.float32))
    y = y.astype(np.float16).astype(np.float32)[:, :, None, :]
    if form == "recompile":
        y = y + ws["b"].astype(np.float32)
    return y


class Expected:
    """Sequential results, computed once per (form, weights, input) on a
    runtime of their own (one thread, one call at a time): what every
    concurrent result must equal."""

    def __init__(self) -> None:
        self._root = tempfile.mkdtemp(prefix="anec-expected-")
        self._rt = Runtime("sim", temp_root=self._root, sim_threads=1)
        self._progs: dict[tuple, object] = {}
        self._memo: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()

    def __call__(self, form: str, k: int | tuple[int, int], i: int) -> np.ndarray:
        ws = state_key(form, k)
        with self._lock:
            if (form, ws, i) not in self._memo:
                if (form, ws) not in self._progs:
                    native.reset_process_budget("sim")
                    self._progs[form, ws] = load(self._rt, form, ws)
                self._memo[form, ws, i] = self._progs[form, ws](x=x_input(i))["y"]
            return self._memo[form, ws, i]

    def close(self) -> None:
        self._rt.close()
        os.rmdir(self._root)


@pytest.fixture(scope="module")
def expected():
    e = Expected()
    yield e
    e.close()


def shm_root(tmp_path: Path) -> str:
    """Program directories on tmpfs when there is one (these tests are about
    threads, not fsync latency)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return tempfile.mkdtemp(prefix="anec-thr-", dir="/dev/shm")
    return str(tmp_path / "programs")


@pytest.fixture
def root(tmp_path):
    r = shm_root(tmp_path)
    yield r
    shutil.rmtree(r, ignore_errors=True)


def fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


# ---- the reference ---------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS)
def test_sequential_results_match_numpy(expected, form):
    for k in (0, 1):
        for i in range(3):
            y = expected(form, k, i)
            mk.assert_order_one(y, f"{form} weights {k} input {i}")
            assert_close(y, numpy_reference(form, k, x_input(i)), f"rt-threads/sequential:{form}:y:numpy", 2,
                         f"weights {k} input {i}")
    # neighbouring weight sets differ in every element: a mix of them is never one of them
    assert np.all(expected(form, 0, 0) != expected(form, 1, 0))
    assert mk.rms(expected(form, 0, 0).astype(np.float64) - expected(form, 1, 0)) >= 0.1


# ---- concurrent calls --------------------------------------------------------------------------

@pytest.mark.parametrize("n_threads", [2, 4])
def test_threads_calling_one_program_get_the_sequential_results(root, expected, n_threads):
    calls = 40
    with Runtime("sim", temp_root=root) as rt:
        p = load(rt, "patch", 0)
        start = threading.Barrier(n_threads)

        def worker(t: int) -> list[tuple[int, np.ndarray]]:
            start.wait()
            return [(i, p(x=x_input(i))["y"]) for i in ((t * 7 + c) % 8 for c in range(calls))]

        with ThreadPoolExecutor(n_threads) as ex:
            results = [r for f in [ex.submit(worker, t) for t in range(n_threads)] for r in f.result()]
        wrong = [i for i, y in results if not np.array_equal(y, expected("patch", 0, i))]
        assert not wrong, f"{len(wrong)} of {len(results)} concurrent results differ from the sequential ones"
        assert p.stats["evaluations"] == n_threads * calls == rt.stats["evaluations"]


def test_distinct_programs_evaluate_in_parallel_with_their_own_weights(root, expected):
    with Runtime("sim", temp_root=root) as rt:
        progs = [(form, k, load(rt, form, k)) for form in FORMS for k in (0, 1, 2)]
        start = threading.Barrier(len(progs))

        def worker(form, k, p):
            start.wait()
            return [(form, k, i, p(x=x_input(i))["y"]) for i in range(12)]

        with ThreadPoolExecutor(len(progs)) as ex:
            futs = [ex.submit(worker, *fkp) for fkp in progs]
            results = [r for f in futs for r in f.result()]
        assert all(np.array_equal(y, expected(form, k, i)) for form, k, i, y in results)
        assert rt.stats["evaluations"] == len(results)


def test_the_gil_is_released_during_an_evaluation(root):
    """While one thread is inside a long evaluation, another thread keeps
    running Python (and its own short evaluations)."""
    big = (1, 512, 1, 8192)
    mil = mk.program([("x", "fp16", big)], [mk.const_blob("w", "fp16", (512, 512, 1, 1), "w.bin"),
                                           mk.op("y", "fp16", big, "conv", weight="w", x="x")], ["y"])
    w = (np.random.default_rng(0).standard_normal((512, 512, 1, 1)) / 23).astype(np.float16)
    with Runtime("sim", temp_root=root, sim_threads=1) as rt:
        long_p = rt.compile(mil, {"@model_path/weights/w.bin": mk.blobfile(w)})
        short_p = load(rt, "patch", 0)
        xb = np.ones(big, np.float16)
        long_p(x=xb)
        windows: list[tuple[float, float]] = []
        done = threading.Event()

        def long_call():
            for _ in range(3):
                t0 = time.perf_counter()
                long_p(x=xb)
                windows.append((t0, time.perf_counter()))
            done.set()

        t = threading.Thread(target=long_call)
        stamps = []
        x = x_input(0)
        t.start()
        while not done.is_set():
            short_p(x=x)
            stamps.append(time.perf_counter())
        t.join()
        # stamps strictly inside the middle half of a long call: impossible if that call held the GIL
        inside = [s for a, b in windows for s in stamps if a + (b - a) / 4 < s < b - (b - a) / 4]
        assert inside, f"no short call finished during the long calls ({windows}, {len(stamps)} short calls)"


# ---- reload vs evaluation ----------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS)
def test_an_evaluation_never_sees_a_mix_of_old_and_new_weights(root, expected, form):
    reloads = 31  # odd: the program ends with other weights than it started with
    with Runtime("sim", temp_root=root) as rt:
        p = load(rt, form, 0)
        assert p.reload_info["strategy"] == FORMS[form]
        want = {k: expected(form, k, 0) for k in (0, 1)}
        stop = threading.Event()

        def evaluate() -> list[np.ndarray]:
            seen = []
            while not stop.is_set():
                seen.append(p(x=x_input(0))["y"])
            return seen

        with ThreadPoolExecutor(2) as ex:
            futs = [ex.submit(evaluate) for _ in range(2)]
            for r in range(reloads):
                native.reset_process_budget("sim")  # a recompile reload spends one compile
                p.reload_weights(weights_of(form, (r + 1) % 2))
            stop.set()
            seen = [y for f in futs for y in f.result()]
        mixed = [y for y in seen if not (np.array_equal(y, want[0]) or np.array_equal(y, want[1]))]
        assert not mixed, f"{len(mixed)} of {len(seen)} evaluations saw neither the old nor the new weights"
        mk.assert_reloaded(want[0], p(x=x_input(0))["y"], want[reloads % 2], f"{reloads} reloads by {form}")
        st = p.stats
        assert st["reloads"] == reloads and st[f"reloads_{FORMS[form].replace('-', '_')}"] == reloads


@pytest.mark.parametrize("form,device", [("recompile", ""), ("packed", ""), ("packed", "data=file")])
def test_reload_weights_of_different_keys_from_two_threads_keeps_both(root, expected, form, device):
    """reload_weights patches the program's current files: two threads changing
    different tensors (of one file, or of two) must both land."""
    for trial in range(6):
        with Runtime("sim", temp_root=os.path.join(root, str(trial)), sim_device=device) as rt:
            p = load(rt, form, 0)
            assert p.reload_info["strategy"] == ("data-patch" if device else "recompile")
            new = weight_set(1)
            start = threading.Barrier(2)

            def go(key):
                start.wait()
                p.reload_weights({key: new[key]})

            with ThreadPoolExecutor(2) as ex:
                for f in [ex.submit(go, key) for key in ("w", "b")]:
                    f.result()
            mk.assert_reloaded(expected("recompile", 0, 0), p(x=x_input(0))["y"], expected("recompile", 1, 0),
                               f"trial {trial}")


def test_program_dir_stays_readable_while_reloads_move_the_program(root):
    """A recompile reload moves the program to a new directory (and removes
    the old one), a data patch of a shared directory to a private copy: a
    reader of prog.dir on another thread always gets a whole path under the
    runtime's root, never the bytes of a freed string."""
    with Runtime("sim", temp_root=root, compile_budget=100000) as rt:
        p = load(rt, "recompile", 0)
        q = load(rt, "patch", 0)
        q_twin = load(rt, "patch", 0)  # shares q's directory until q's first reload
        assert q.dir == q_twin.dir
        stop = threading.Event()

        def read(prog) -> list[str]:
            bad = []
            while not stop.is_set():
                try:
                    d = prog.dir
                except UnicodeDecodeError as e:  # the bytes of a freed string
                    bad.append(repr(e))
                    continue
                if not d.startswith(root + os.sep):
                    bad.append(d)
            return bad

        with ThreadPoolExecutor(2) as ex:
            futs = [ex.submit(read, prog) for prog in (p, q)]
            for r in range(100):
                native.reset_process_budget("sim")
                p.reload_weights(weights_of("recompile", (r + 1) % 2))
                if r < 10:
                    q.reload_weights(weights_of("patch", (r + 1) % 2))
            stop.set()
            assert [f.result() for f in futs] == [[], []]
        assert q.dir != q_twin.dir and all(os.path.isdir(x.dir) for x in (p, q, q_twin))


def test_runtime_stats_while_other_threads_load_and_close(root):
    """stats lists the reload strategy of every open program: a program closed
    by another thread meanwhile is left out, not an error."""
    with Runtime("sim", temp_root=root) as rt:
        stop = threading.Event()
        errors: list[str] = []

        def poll():
            while not stop.is_set():
                try:
                    st = rt.stats
                except RuntimeFailure as e:
                    errors.append(str(e))
                    continue
                if not 0 <= st["programs_live"] <= 2:
                    errors.append(f"programs_live = {st['programs_live']}")

        t = threading.Thread(target=poll)
        t.start()
        try:
            for _ in range(300):
                load(rt, "patch", 0).close()
        finally:
            stop.set()
            t.join()
        assert errors == []
        assert rt.stats["programs_live"] == 0 and rt.stats["reload_strategy"] == {}


# ---- close and collection order --------------------------------------------------------------

class Holder:
    """What a user's model object looks like: it holds a runtime and its programs."""

    def __init__(self, rt: Runtime, progs: list) -> None:
        self.rt = rt
        self.progs = progs


def program_dirs(root: str) -> list[str]:
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def _open_model(root: str) -> Holder:
    rt = Runtime("sim", temp_root=root)
    return Holder(rt, [load(rt, form, k) for form in FORMS for k in (0, 1)])


@pytest.mark.parametrize("cycle", ["self_ref", "dict", "traceback", "program_to_holder", "runtime_to_programs"])
def test_runtime_and_programs_collected_in_one_garbage_cycle(root, expected, cycle):
    gc.collect()  # garbage left by earlier tests of this worker first: its descriptors must not close below
    fd0 = fds()
    m = _open_model(root)
    assert np.array_equal(m.progs[0](x=x_input(0))["y"], expected("patch", 0, 0))
    assert len(program_dirs(root)) == 4
    if cycle == "self_ref":
        m.self_ref = m
    elif cycle == "dict":
        d = {"rt": m.rt, "progs": m.progs}
        d["self"] = d
        m.d = d
        del d
    elif cycle == "runtime_to_programs":
        m.rt.programs = m.progs  # runtime -> programs -> runtime
    elif cycle == "program_to_holder":
        for p in m.progs:
            p.owner = m
        del p
    else:  # a model left open when a script raises: the traceback's frame holds it
        def script(model):
            local_model = model  # noqa: F841 - held by the frame
            raise ValueError("the script fails")

        try:
            script(m)
        except ValueError as e:
            m.err = e  # model -> exception -> traceback -> frame -> model
    del m
    gc.collect()
    assert program_dirs(root) == []  # the runtime's finalizer closed it
    assert fds() == fd0


@pytest.mark.parametrize("order", ["runtime_first", "programs_first"])
def test_finalizers_in_either_order_then_use_the_survivors(root, order):
    """Finalizers of one garbage cycle run in any order; run them by hand in
    each order, then use what the other side still holds."""
    m = _open_model(root)
    if order == "runtime_first":
        m.rt.__del__()
        for p in m.progs:
            with pytest.raises(RuntimeFailure, match="closed"):
                p(x=x_input(0))
            p.__del__()
    else:
        for p in m.progs:
            p.__del__()
        assert m.rt.stats["programs_live"] == 0
        m.rt.__del__()
    assert program_dirs(root) == []
    del m
    gc.collect()  # the real finalizers run again: every release is idempotent


def test_runtime_close_with_live_programs_then_using_them(root, expected):
    rt = Runtime("sim", temp_root=root)
    p, q = load(rt, "patch", 0), load(rt, "recompile", 1)
    assert rt.stats["programs_live"] == 2
    rt.close()
    assert rt.closed and p.closed and q.closed and program_dirs(root) == []
    for call in (lambda: p(x=x_input(0)), lambda: p.reload_weights(weights_of("patch", 1)), lambda: q.load(),
                 lambda: q.unload(), lambda: p.stats, lambda: p.dir, lambda: p.reload_info,
                 lambda: p.reload_blobs(blobs("patch", weight_set(1))),
                 lambda: p.evaluate_raw([np.zeros(C * S, np.float16)], [np.zeros(C * S, np.float16)])):
        with pytest.raises(RuntimeFailure, match=r"program '(patch|recompile)' is closed \(its runtime was closed\)"):
            call()
    for call in (lambda: rt.stats, lambda: rt.load("nowhere"), lambda: rt.compile(affine("patch")[0])):
        with pytest.raises(RuntimeFailure, match="the runtime is closed"):
            call()
    # the C handles too: a clean status, not freed memory
    assert native.lib.anec_run(p._native.ptr) == native.lib.ANEC_ESTATE
    assert "closed (its runtime was closed)" in native.last_error()
    p.close(), q.close(), rt.close(), rt.close()  # idempotent, in any order
    with rt:
        pass


def test_program_close_races_with_calls_on_other_threads(root, expected):
    """A program closed while other threads call it: each call returns the
    right result or fails with a clear RuntimeFailure."""
    for trial in range(5):
        with Runtime("sim", temp_root=os.path.join(root, str(trial))) as rt:
            p = load(rt, "patch", 0)
            start = threading.Barrier(3)

            def worker():
                start.wait()
                out = []
                for _ in range(30):
                    try:
                        out.append(p(x=x_input(0))["y"])
                    except RuntimeFailure as e:
                        out.append(str(e))
                return out

            with ThreadPoolExecutor(2) as ex:
                futs = [ex.submit(worker) for _ in range(2)]
                start.wait()
                p.close()
                results = [r for f in futs for r in f.result()]
            for r in results:
                assert (isinstance(r, str) and "program 'patch' is closed" in r) or \
                    np.array_equal(r, expected("patch", 0, 0))
            assert rt.stats["programs_live"] == 0


def test_idempotent_closes_in_every_order(root):
    rt = Runtime("sim", temp_root=root)
    p = load(rt, "patch", 0)
    p.close()
    p.close()
    assert rt.stats["programs_live"] == 0
    q = load(rt, "patch", 1)
    with q:
        pass
    q.close()
    rt.close()
    rt.close()
    p.close()
    q.close()
    # and the C level
    lib = native.lib
    lib.anec_program_close(p._native.ptr)
    lib.anec_runtime_shutdown(rt._native.ptr)
    lib.anec_runtime_shutdown(rt._native.ptr)
    assert program_dirs(root) == []


# ---- fork ---------------------------------------------------------------------------------------

FORK_SCRIPT = r"""
import os, sys, threading
import numpy as np
from anec.diagnostics import RuntimeFailure
from anec.runtime import Runtime, native
from tests.runtime.test_rt_threads import load, program_dirs, weights_of, x_input

root = sys.argv[1]
rt = Runtime("sim", temp_root=root)
p = load(rt, "patch", 0)
want = p(x=x_input(0))["y"]
dirs = program_dirs(root)
stop = threading.Event()

def busy():  # the parent keeps evaluating while it forks
    while not stop.is_set():
        p(x=x_input(0))

t = threading.Thread(target=busy)
t.start()
pid = os.fork()
if pid == 0:
    code = 0
    checks = [lambda: p(x=x_input(0)), lambda: rt.load(root), lambda: rt.stats, lambda: p.stats,
              lambda: p.reload_weights(weights_of("patch", 1)), lambda: p.dir]
    for i, call in enumerate(checks):
        try:
            call()
            code |= 1
        except RuntimeFailure as e:
            if "after fork()" not in e.message or "open a new Runtime" not in str(e.hint):
                code |= 2
                print("child:", e, file=sys.stderr)
    # the C API says ANEC_ESTATE, and never waits for a lock the parent's threads held
    lib, ffi = native.lib, native.ffi
    io = ffi.new("anec_io[]", 1)
    if lib.anec_call(p._native.ptr, io, 1, io, 1) != lib.ANEC_ESTATE or "fork()" not in native.last_error():
        code |= 4
    st = ffi.new("struct anec_stats *")
    if lib.anec_stats(rt._native.ptr, st) != lib.ANEC_ESTATE or lib.anec_program_stats(p._native.ptr, st) != lib.ANEC_ESTATE:
        code |= 8
    if ffi.string(lib.anec_program_dir(p._native.ptr)) != b"":
        code |= 16
    # a new runtime in the child works
    with Runtime("sim", temp_root=root + "-child") as crt:
        if not np.array_equal(load(crt, "patch", 0)(x=x_input(0))["y"], want):
            code |= 32
    # closing and dropping the parent's objects here touches nothing of the parent
    p.close(); rt.close()
    del p, rt
    import gc; gc.collect()
    sys.stdout.flush()
    os._exit(code)
stop.set()
t.join()
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status), status
child = os.WEXITSTATUS(status)
print("child exit", child)
assert program_dirs(root) == dirs, (program_dirs(root), dirs)
for d in dirs:
    assert os.path.isfile(os.path.join(root, d, "model.mil"))
assert np.array_equal(p(x=x_input(0))["y"], want)
p.reload_weights(weights_of("patch", 1))
assert np.array_equal(p(x=x_input(0))["y"], -want)
rt.close()
assert program_dirs(root) == []
print("parent ok")
sys.exit(child)
"""


def test_fork_child_gets_a_clear_error_and_the_parent_keeps_working(root, tmp_path):
    """Run in a fresh interpreter: forking the test process itself (pytest and
    its threads) is not what a user does."""
    env = dict(os.environ)
    # ROOT/tests: this module imports tolerances as the test session does
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT), str(ROOT / "tests")) if p)
    proc = subprocess.run([sys.executable, "-c", FORK_SCRIPT, os.path.join(root, "fork")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "parent ok" in proc.stdout, proc.stdout + proc.stderr
    assert "child exit 0" in proc.stdout
