"""A hypothesis state machine over the runtime's lifecycle, driven from threads.

Rules: open a runtime, load a program, call programs, reload weights, close
a program or a runtime, drop objects (plain, in a reference cycle, or held by
the traceback of an exception) and collect. Every rule that touches programs
dispatches its work through a pool of worker threads against the same shared
Runtime/Program objects (concurrent calls of one program, calls racing a
reload, two reloads of different tensors, calls racing a close), then waits
for all of it, so the checks after each step see a quiet runtime:

- every result equals the sequential result for the weights in effect (for
  work racing a reload: for the weights before or after it, never a mix),
  computed once by a sequential run on a runtime of its own;
- a call on a closed program (or on a program of a closed runtime) fails
  with a RuntimeFailure saying so, never a crash;
- no leak: ``programs_live`` equals the open programs of the model,
  ``dirs_live`` the program directories on disk, a closed or collected
  runtime leaves no directory behind, and over the whole run the open file
  descriptors come back to their count and RSS stays flat.

About 1000 steps in total (ANEC_THREAD_STEPS overrides, e.g. for a longer
local run).
"""

from __future__ import annotations

import gc
import os
import sys
import shutil
import tempfile
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from anec.diagnostics import RuntimeFailure
from anec.runtime import Runtime, native
from tests.runtime.test_rt_threads import Expected, fds, load, state_key, weights_of, x_input

FORMS = ("patch", "recompile", "packed")
N_SETS = 4            # weight sets 0..3 (w and b chosen independently)
N_INPUTS = 4
MAX_RUNTIMES = 2
MAX_PROGRAMS = 6
WORKERS = 4
STEPS = int(os.environ.get("ANEC_THREAD_STEPS", "1000"))
STEPS_PER_EXAMPLE = 25
CLOSED = "closed"     # the result of a call that failed because its program is closed

sets = st.integers(0, N_SETS - 1)
picks = st.integers(0, 10_000)  # an index into whatever is live; shrinks towards the first


@dataclass(eq=False)
class RtModel:
    rt: Runtime | None
    root: str
    open: bool = True
    progs: list["ProgModel"] = field(default_factory=list)


@dataclass(eq=False)
class ProgModel:
    prog: object | None
    rtm: RtModel
    form: str
    weights: tuple[int, int]
    open: bool = True


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _subdirs(root: str) -> list[str]:
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


class Run:
    """What the machines of one test share: the sequential results, the
    temp root and the step count."""

    expected: Expected
    base: str
    steps = 0
    rules: Counter = Counter()


class ThreadedRuntimeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="anec-sm")
        self.rts: list[RtModel] = []
        self.progs: list[ProgModel] = []
        self.dropped_roots: list[str] = []
        self.n_rt = 0

    # ---- helpers ----------------------------------------------------------------------
    def _live_rts(self) -> list[RtModel]:
        return [m for m in self.rts if m.rt is not None]

    def _open_rts(self) -> list[RtModel]:
        return [m for m in self.rts if m.rt is not None and m.open]

    def _pick(self, items: list, i: int):
        return items[i % len(items)]

    def _want(self, pm: ProgModel, i: int, weights=None) -> np.ndarray:
        return Run.expected(pm.form, weights or pm.weights, i)

    def _check(self, pm: ProgModel, i: int, res: list) -> None:
        """Results of _call on a program the model says is open or closed."""
        for y in res:
            if pm.open:
                assert not isinstance(y, str), f"an open program failed: {y}"
                assert np.array_equal(y, self._want(pm, i)), f"{pm.form} {pm.weights} input {i}"
            else:
                assert isinstance(y, str), "a closed program answered"

    def _call(self, prog, i: int, n: int = 3):
        """n calls of prog on input i from one worker: results, or CLOSED."""
        out = []
        for _ in range(n):
            try:
                out.append(prog(x=x_input(i))["y"])
            except RuntimeFailure as e:
                assert "is closed" in e.message, e.message
                out.append(CLOSED)
        return out

    def _run(self, tasks: list) -> list:
        """Run the tasks on the pool, all starting together (a barrier) when
        there are workers for all; wait for all, re-raise the first error."""
        start = threading.Barrier(len(tasks)) if len(tasks) <= WORKERS else None

        def together(fn, *args):
            if start is not None:
                start.wait(timeout=60)
            return fn(*args)

        futs = [self.pool.submit(together, fn, *args) for fn, *args in tasks]
        wait(futs)
        return [f.result() for f in futs]

    def _step(self) -> None:
        Run.steps += 1
        Run.rules[sys._getframe(1).f_code.co_name] += 1

    # ---- rules --------------------------------------------------------------------------
    @initialize()
    def fresh_budget(self) -> None:
        native.reset_process_budget("sim")

    @precondition(lambda self: len(self._live_rts()) < MAX_RUNTIMES)
    @rule(device=st.sampled_from(["", "data=file"]))
    def open_runtime(self, device: str) -> None:
        self._step()
        self.n_rt += 1
        root = tempfile.mkdtemp(prefix=f"rt{self.n_rt}-", dir=Run.base)
        self.rts.append(RtModel(Runtime("sim", temp_root=root, sim_threads=1, sim_device=device), root))

    @precondition(lambda self: self._open_rts() and sum(p.open for p in self.progs) < MAX_PROGRAMS)
    @rule(r=picks, form=st.sampled_from(FORMS), kw=sets, kb=sets)
    def load_program(self, r: int, form: str, kw: int, kb: int) -> None:
        self._step()
        native.reset_process_budget("sim")
        rtm = self._pick(self._open_rts(), r)
        pm = ProgModel(load(rtm.rt, form, (kw, kb)), rtm, form, state_key(form, (kw, kb)))
        rtm.progs.append(pm)
        self.progs.append(pm)
        assert np.array_equal(pm.prog(x=x_input(0))["y"], self._want(pm, 0))

    @precondition(lambda self: self.progs)
    @rule(calls=st.lists(st.tuples(picks, st.integers(0, N_INPUTS - 1)), min_size=1, max_size=WORKERS))
    def call_concurrently(self, calls: list[tuple[int, int]]) -> None:
        """Calls of one or several programs (the same program from several
        threads when picks repeat), results as in a sequential run."""
        self._step()
        chosen = [(self._pick(self.progs, p), i) for p, i in calls]
        results = self._run([(self._call, pm.prog, i) for pm, i in chosen])
        for (pm, i), res in zip(chosen, results):
            self._check(pm, i, res)

    @precondition(lambda self: len(self.progs) > 1)
    @rule(rounds=st.integers(1, 3))
    def call_every_program_at_once(self, rounds: int) -> None:
        """Every program (open or closed, on every runtime) called at once, one
        worker each: distinct programs evaluate in parallel with their own
        weights."""
        self._step()
        chosen = [(pm, i % N_INPUTS) for i, pm in enumerate(self.progs)]
        for _ in range(rounds):
            results = self._run([(self._call, pm.prog, i, 2) for pm, i in chosen])
            for (pm, i), res in zip(chosen, results):
                self._check(pm, i, res)

    @precondition(lambda self: any(p.open for p in self.progs))
    @rule(p=picks, kw=sets, kb=sets, callers=st.integers(1, WORKERS - 1))
    def reload_while_calling(self, p: int, kw: int, kb: int, callers: int) -> None:
        """A reload races calls of the same program: each call sees the old or
        the new weights, never a mix; calls after it see the new ones."""
        self._step()
        native.reset_process_budget("sim")
        pm = self._pick([q for q in self.progs if q.open], p)
        old, new = pm.weights, state_key(pm.form, (kw, kb))
        tasks = [(self._call, pm.prog, 1, 4) for _ in range(callers)]
        tasks.append((pm.prog.reload_weights, weights_of(pm.form, (kw, kb))))
        results = self._run(tasks)
        allowed = [self._want(pm, 1, old), self._want(pm, 1, new)]
        for res in results[:-1]:
            for y in res:
                assert not isinstance(y, str)
                assert any(np.array_equal(y, a) for a in allowed), f"{pm.form}: a mix of {old} and {new}"
        pm.weights = new
        assert np.array_equal(pm.prog(x=x_input(2))["y"], self._want(pm, 2))

    @precondition(lambda self: any(p.open and p.form != "patch" for p in self.progs))
    @rule(p=picks, kw=sets, kb=sets)
    def reload_two_tensors_from_two_threads(self, p: int, kw: int, kb: int) -> None:
        """Two threads reload w and b of one program (one file or two) while a
        third calls it: both reloads land; each call sees a state of a
        sequential order of the two reloads."""
        self._step()
        native.reset_process_budget("sim")
        pm = self._pick([q for q in self.progs if q.open and q.form != "patch"], p)
        (ow, ob), new_w, new_b = pm.weights, weights_of(pm.form, kw)["w"], weights_of(pm.form, kb)["b"]
        results = self._run([(pm.prog.reload_weights, {"w": new_w}), (pm.prog.reload_weights, {"b": new_b}),
                             (self._call, pm.prog, 3, 4)])
        allowed = [self._want(pm, 3, s) for s in {(ow, ob), (kw, ob), (ow, kb), (kw, kb)}]
        for y in results[2]:
            assert any(np.array_equal(y, a) for a in allowed), f"{pm.form}: a state no sequential order gives"
        pm.weights = (kw, kb)
        assert np.array_equal(pm.prog(x=x_input(0))["y"], self._want(pm, 0))

    @precondition(lambda self: any(p.open for p in self.progs))
    @rule(p=picks, callers=st.integers(0, WORKERS - 1))
    def close_program_while_calling(self, p: int, callers: int) -> None:
        self._step()
        pm = self._pick([q for q in self.progs if q.open], p)
        results = self._run([(self._call, pm.prog, 0, 4) for _ in range(callers)] + [(pm.prog.close,)])
        for res in results[:-1]:
            for y in res:
                assert isinstance(y, str) or np.array_equal(y, self._want(pm, 0))
        pm.open = False
        with pytest.raises(RuntimeFailure, match="is closed"):
            pm.prog(x=x_input(0))
        pm.prog.close()  # idempotent

    def _busy_rts(self) -> list[RtModel]:
        return [m for m in self._open_rts() if any(pm.open for pm in m.progs)]

    @precondition(lambda self: self._busy_rts())
    @rule(r=picks, callers=st.integers(0, WORKERS - 1))
    def close_runtime_while_calling(self, r: int, callers: int) -> None:
        """Runtime.close() with live programs (some in use on other threads):
        they are closed first, and later calls fail cleanly."""
        self._step()
        rtm = self._pick(self._busy_rts(), r)
        busy = [pm for pm in rtm.progs if pm.open][:callers]
        results = self._run([(self._call, pm.prog, 0, 4) for pm in busy] + [(rtm.rt.close,)])
        for pm, res in zip(busy, results):
            for y in res:
                assert isinstance(y, str) or np.array_equal(y, self._want(pm, 0))
        rtm.open = False
        for pm in rtm.progs:
            pm.open = False
            if pm.prog is not None:
                with pytest.raises(RuntimeFailure, match=r"closed \(its runtime was closed\)"):
                    pm.prog(x=x_input(0))
        with pytest.raises(RuntimeFailure, match="the runtime is closed"):
            rtm.rt.stats
        rtm.rt.close()
        assert _subdirs(rtm.root) == []

    @precondition(lambda self: any(p.prog is not None for p in self.progs))
    @rule(p=picks, cycle=st.booleans())
    def drop_program(self, p: int, cycle: bool) -> None:
        """del a program (open or not; in a cycle with itself or not) and collect."""
        self._step()
        pm = self._pick([q for q in self.progs if q.prog is not None], p)
        if cycle:
            pm.prog.self_ref = pm.prog
        pm.prog = None
        pm.open = False
        self.progs.remove(pm)
        gc.collect()

    def _droppable_rts(self) -> list[RtModel]:
        return [m for m in self._live_rts() if not m.open or m.progs]

    @precondition(lambda self: self._droppable_rts())
    @rule(r=picks, how=st.sampled_from(["plain", "cycle", "holder_cycle", "traceback"]))
    def drop_runtime_and_programs(self, r: int, how: str) -> None:
        """Drop a runtime (closed, or with programs, open or not) with its
        programs at once, the way models are left behind: plainly, in
        reference cycles, or held by the traceback of an exception; then
        collect."""
        self._step()
        rtm = self._pick(self._droppable_rts(), r)
        held = [pm.prog for pm in rtm.progs if pm.prog is not None]
        holder = {"rt": rtm.rt, "progs": held}
        if how == "cycle":  # runtime <-> programs, and each program -> holder -> runtime
            rtm.rt.self_ref = rtm.rt
            rtm.rt.programs = held
            for i in range(len(held)):  # (a loop variable would keep the last program alive)
                held[i].owner = holder
        elif how == "holder_cycle":
            holder["self"] = holder
        elif how == "traceback":
            def script(model):
                raise ValueError("the script fails")

            try:
                script(holder)
            except ValueError as e:
                holder["error"] = e  # holder -> exception -> traceback -> frame -> holder
        for pm in rtm.progs:
            pm.prog = None
            pm.open = False
            if pm in self.progs:
                self.progs.remove(pm)
        rtm.rt = None
        rtm.progs = []
        del holder, held
        gc.collect()
        assert _subdirs(rtm.root) == [], "a collected runtime left program directories behind"
        self.rts.remove(rtm)
        self.dropped_roots.append(rtm.root)

    # ---- invariants (after every step: every worker is idle) -----------------------------
    @invariant()
    def counters_match_the_model(self) -> None:
        for rtm in self._open_rts():
            st_ = rtm.rt.stats
            assert st_["programs_live"] == sum(pm.open for pm in rtm.progs), st_
            assert st_["dirs_live"] == len(_subdirs(rtm.root)), (st_["dirs_live"], _subdirs(rtm.root))
            assert set(st_["reload_strategy"]) <= {pm.form for pm in rtm.progs if pm.open}
        for rtm in self.rts:
            if not rtm.open:
                assert _subdirs(rtm.root) == []
        for root in self.dropped_roots:
            assert _subdirs(root) == []

    def teardown(self) -> None:
        self.pool.shutdown(wait=True)
        for rtm in self._live_rts():
            rtm.rt.close()
            assert _subdirs(rtm.root) == []
        self.rts.clear()
        self.progs.clear()
        gc.collect()


def _run(max_examples: int) -> None:
    run_state_machine_as_test(ThreadedRuntimeMachine, settings=settings(
        max_examples=max_examples, stateful_step_count=STEPS_PER_EXAMPLE, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


@pytest.mark.slow
def test_runtime_lifecycle_from_threads_state_machine(tmp_path):
    base = tempfile.mkdtemp(prefix="anec-sm-", dir="/dev/shm") if os.access("/dev/shm", os.W_OK) \
        else str(tmp_path / "sm")
    os.makedirs(base, exist_ok=True)
    Run.base, Run.steps, Run.rules = base, 0, Counter()
    Run.expected = Expected()
    threads0 = threading.active_count()
    # A gc.collect() walks every object of the process: in a whole-suite run (torch, the OpInfo
    # database) that made each of the machine's collections cost up to a second. The objects
    # that exist before the run are set aside (gc.freeze); whatever the run creates, its
    # reference cycles included, is collected as before.
    gc.collect()
    gc.freeze()
    try:
        _run(4)  # warm-up: the allocator, numpy and hypothesis reach their working size
        gc.collect()
        fd0, rss0 = fds(), _rss_kb()
        while Run.steps < STEPS:
            _run(5)
        gc.collect()
        assert fds() == fd0, "file descriptors leaked"
        grown = _rss_kb() - rss0
        print(f"RSS grew by {grown} KiB")
        if "libasan" not in os.environ.get("LD_PRELOAD", ""):  # ASan keeps freed memory in quarantine
            assert grown < 16 * 1024, f"RSS grew by {grown} KiB over {Run.steps} steps"
        assert threading.active_count() == threads0
        assert all(_subdirs(os.path.join(base, d)) == [] for d in _subdirs(base))
    finally:
        gc.unfreeze()
        Run.expected.close()
        shutil.rmtree(base, ignore_errors=True)
    print(f"{Run.steps} steps: {dict(Run.rules)}")
