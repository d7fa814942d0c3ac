"""What the benchmarks share: rounds of worker processes, their spread, and the machine's load.

A comparison is only as good as the machine both sides met. So a benchmark that compares
two things runs each side as its own process (a *worker*: the benchmark script itself,
called with ``--worker ...``, printing one JSON object as its last line of output), in
rounds whose order alternates (round 1: A B C, round 2: C B A, ...), and reports every
figure as median with min and max over the rounds. The load average is read before the
first round and after the last, and the share of the machine's CPU time that other processes
used over the whole run is measured from /proc/stat (:func:`other_cpu_share`); a results
file written while the machine was busy says so in its first lines (:func:`header`).

    rounds = run_rounds({"anec": [..argv..], "torch": [..argv..]}, n_rounds=3)
    spread([r["ms"] for r in rounds["anec"]])      # {"min": .., "median": .., "max": .., "n": 3}
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("ANEC_BENCH_RESULTS") or ROOT / "benchmarks" / "results")
"""Where results files go: benchmarks/results, or ``$ANEC_BENCH_RESULTS`` (for a smoke run that must
not replace the committed results)."""

BUSY_PER_CORE = 0.25
"""A 1-minute load average above this many runnable processes per core, before the first round or
after the last (the benchmark's own process counts about 1), marks the run as made under load."""


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (empty where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return []


def machine() -> dict[str, Any]:
    return {"machine": platform.machine(), "cores": os.cpu_count(), "system": platform.system(),
            "python": platform.python_version()}


def busy(load: Sequence[float], own_processes: float = 1.0) -> bool:
    """Whether a load average shows other work than the benchmark's own (about ``own_processes``)."""
    cores = os.cpu_count() or 1
    return bool(load) and load[0] - own_processes > BUSY_PER_CORE * cores


def cpu_now() -> tuple[float, float, float] | None:
    """(busy CPU seconds of the whole machine, CPU seconds of this process and of the children
    it waited for, monotonic seconds); None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    if len(ticks) < 8 or fields[0] != "cpu":
        return None
    t = os.times()
    busy_ticks = sum(ticks) - ticks[3] - ticks[4]
    return busy_ticks / os.sysconf("SC_CLK_TCK"), t.user + t.system + t.children_user + t.children_system, \
        time.monotonic()


_START = cpu_now()
"""The machine's and this process's CPU time when the benchmark (which imports this) started."""


def other_cpu_share(start: tuple[float, float, float] | None = None) -> float | None:
    """The share (0-1 of every core) of the machine's CPU time that anything other than this
    process and its workers used since ``start`` (by default since this module was imported,
    i.e. the benchmark's start): the machine's busy time from /proc/stat minus this process's
    and its waited-for workers' CPU time. Unlike the load average at the two ends, it covers
    the whole run and does not count the benchmark's own threads. None without /proc/stat."""
    start = start or _START
    end = cpu_now()
    if start is None or end is None or end[2] <= start[2]:
        return None
    other = (end[0] - start[0]) - (end[1] - start[1])
    return round(max(0.0, other / ((end[2] - start[2]) * (os.cpu_count() or 1))), 3)


def under_load(load_start: Sequence[float], load_end: Sequence[float], share: float | None,
               own_threads: float = 1.0) -> bool:
    """Whether a run shared the machine: the load at its start shows other work, or other
    processes used more than BUSY_PER_CORE of the CPU time during it (``share``,
    :func:`other_cpu_share`); where that share could not be measured, the load at its end shows
    more than ``own_threads``, the runnable threads the benchmark itself keeps busy."""
    during = share > BUSY_PER_CORE if share is not None else busy(load_end, own_threads)
    return busy(load_start) or during


def settle(max_wait: float = 300.0, step: float = 5.0) -> float:
    """Wait until the 1-minute load average no longer shows more than one runnable process
    (:func:`busy`), at most ``max_wait`` seconds: the load a previous benchmark's own threads
    left decays over a minute or two, and a results file judges the load at its start. Returns
    the seconds waited."""
    t0 = time.monotonic()
    while busy(load_average()) and time.monotonic() - t0 < max_wait:
        time.sleep(step)
    return time.monotonic() - t0


def worker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: this checkout first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


def _shown(argv: Sequence[str]) -> str:
    """A worker's command line for an error: a long argument keeps its head and its tail
    (a script's file name is at the end of its path)."""
    return " ".join(a if len(a) < 80 else f"{a[:30]}...{a[-40:]}" for a in argv)


def _status(rc: int) -> str:
    """A worker's exit status: its code, or the signal that ended it (SIGKILL with nothing on
    stderr is most often the kernel's out-of-memory killer)."""
    if rc >= 0:
        return str(rc)
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        return str(rc)
    return f"killed by {name}" + (", most likely out of memory" if name == "SIGKILL" else "")


def run_worker(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 3600) -> dict:
    """Run one worker process; its result is the JSON object on its last line of output."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=worker_env(env), capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {_shown(argv)} failed ({_status(proc.returncode)}):\n{proc.stderr[-4000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise RuntimeError(f"worker {_shown(argv)} printed no result")
    out = json.loads(lines[-1])
    out.setdefault("process_s", round(time.perf_counter() - t0, 3))
    return out


def round_order(names: Sequence[str], r: int) -> list[str]:
    """The order of round ``r`` (0-based): forward in even rounds, reversed in odd ones."""
    return list(names) if r % 2 == 0 else list(names)[::-1]


def run_rounds(sides: Mapping[str, Sequence[str]], n_rounds: int, env: Mapping[str, str] | None = None,
               log: bool = True, timeout: float | None = None,
               envs: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, list[dict]]:
    """``n_rounds`` rounds, each running every side's worker once in its own process; the order
    alternates between rounds (forward, then reversed), so no side always runs first or last.
    ``env`` is added to every worker's environment, ``envs[side]`` to that side's (e.g. a
    ``PYTHONPATH`` naming another checkout of anec).

    With ``timeout``, a worker that runs longer is stopped: its round's result is
    ``{"skipped": why}`` and the side does not run again in later rounds (:func:`done` drops it)."""
    names = list(sides)
    results: dict[str, list[dict]] = {n: [] for n in names}
    stopped: set[str] = set()
    for r in range(n_rounds):
        for name in round_order(names, r):
            if name in stopped:
                continue
            try:
                results[name].append(run_worker(sides[name], {**(env or {}), **((envs or {}).get(name) or {})},
                                                timeout=timeout or 3600))
            except subprocess.TimeoutExpired:
                stopped.add(name)
                results[name].append({"skipped": f"over the {timeout:.0f} s budget"})
            if log:
                print(f"  round {r + 1}/{n_rounds}: {name} {'stopped' if name in stopped else 'done'}", flush=True)
    return results


def done(rounds: Sequence[dict]) -> list[dict]:
    """The rounds of one side that finished (not ``{"skipped": ...}``)."""
    return [r for r in rounds if "skipped" not in r]


def paired_ratio(num: Sequence[dict], den: Sequence[dict], get) -> dict[str, float] | None:
    """Spread of ``get(num[i]) / get(den[i])`` over the rounds ``i`` that both sides finished
    (the two ran in the same round, so they met the same machine); None when there is none."""
    pairs = [(get(a), get(b)) for a, b in zip(num, den) if "skipped" not in a and "skipped" not in b]
    return spread(a / b for a, b in pairs) if pairs else None


def spread(values: Iterable[float]) -> dict[str, float]:
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values")
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals), "n": len(vals)}


def is_spread(x: Any) -> bool:
    return isinstance(x, Mapping) and {"min", "median", "max", "n"} <= set(x)


def fmt(s: Mapping[str, float] | float, digits: int = 1, spec: str = "f") -> str:
    """``median (min-max)``; a single round, or a plain number (the same in every round), shows
    its value alone. ``spec`` is the format type (``f``, ``g``, ``e``)."""
    f = f".{digits}{spec}"
    if not is_spread(s):
        return format(s, f)
    if s["n"] == 1:
        return format(s["median"], f)
    return f"{format(s['median'], f)} ({format(s['min'], f)}-{format(s['max'], f)})"


def scale(s: Mapping[str, float] | float, factor: float) -> Any:
    """A spread (or a plain number) times ``factor``: seconds to ms, bytes to MiB."""
    if is_spread(s):
        return {**s, "min": s["min"] * factor, "median": s["median"] * factor, "max": s["max"] * factor}
    return s * factor


def median(s: Mapping[str, float] | float) -> float:
    """The median of a spread, or a plain number itself (for plots and derived figures)."""
    return s["median"] if is_spread(s) else s


def summarize(rounds: Sequence[Any]) -> Any:
    """The results of several rounds (each the same structure: dicts, lists, numbers, strings) as
    one structure of that shape: a number that differs between rounds becomes its
    :func:`spread`; a number equal in every round (a count, a deterministic error), a string or a
    bool stays as it is (the first round's for strings). Dict keys come from the first round;
    lists of one length in every round are summarized element by element."""
    first = rounds[0]
    if isinstance(first, Mapping):
        return {k: summarize([r[k] for r in rounds if isinstance(r, Mapping) and k in r]) for k in first}
    if isinstance(first, list):
        if all(isinstance(r, list) and len(r) == len(first) for r in rounds):
            return [summarize([r[i] for r in rounds]) for i in range(len(first))]
        return first
    if isinstance(first, bool) or not isinstance(first, (int, float)):
        return first
    if all(isinstance(r, (int, float)) and not isinstance(r, bool) and r == first for r in rounds):
        return first
    return spread(rounds)


def ratio_spread(num: Sequence[float], den: Sequence[float]) -> dict[str, float]:
    """Spread of per-round ratios num[i] / den[i] (both sides of a round met the same machine)."""
    if len(num) != len(den):
        raise ValueError("the two sides ran a different number of rounds")
    return spread(a / b for a, b in zip(num, den))


PROCESS_SCHEME = "each side in its own process, alternating order"


def header(title: str, load_start: Sequence[float], load_end: Sequence[float], n_rounds: int,
           what: str, scheme: str = PROCESS_SCHEME, own_threads: float = 1.0) -> list[str]:
    """The first lines of a results file: a warning when the machine was busy, the machine, the
    load average at start and end, the CPU share other processes used during the run, and how
    the figures were taken (``scheme``: how the sides of a round run, by default each in its own
    process, in alternating order). Whether the machine was busy is :func:`under_load`'s
    judgement, with the share measured since the benchmark started."""
    m = machine()
    share = other_cpu_share()
    lines = [f"# {title}", ""]
    if under_load(load_start, load_end, share, own_threads):
        lines += [f"**Run under load** (load average {_fmt_load(load_start)} at the start, "
                  f"{_fmt_load(load_end)} at the end, on {m['cores']} cores"
                  + (f"; other processes used {share:.0%} of the CPU time during the run" if share is not None
                     else "") + "): other work shared the machine, "
                  "so absolute figures are pessimistic; ratios come from sides that ran in alternating "
                  "rounds. Rerun on a quiet machine before quoting a figure.", ""]
    lines += [f"Machine: {m['machine']}, {m['cores']} cores, {m['system']}, Python {m['python']}. "
              f"Load average (1/5/15 min) {_fmt_load(load_start)} at the start, {_fmt_load(load_end)} at the end"
              + (f"; processes other than the benchmark's used {share:.0%} of the machine's CPU time during "
                 "the run (/proc/stat)" if share is not None else "") + ". "
              f"{n_rounds} round{'s' if n_rounds != 1 else ''}, {scheme}; figures are "
              f"median (min-max) over the rounds. {what}", ""]
    return lines


def _fmt_load(load: Sequence[float]) -> str:
    return "/".join(f"{x:.2f}" for x in load) if load else "n/a"


def write_results(name: str, data: dict, lines: list[str]) -> None:
    """<RESULTS>/<name>.json and <name>.md (each written whole, then renamed). The JSON records
    :func:`other_cpu_share` and the date when the benchmark did not."""
    data.setdefault("other_cpu_share", other_cpu_share())
    data.setdefault("date", time.strftime("%Y-%m-%d %H:%M:%S"))
    results = RESULTS
    results.mkdir(parents=True, exist_ok=True)
    for path, text in ((results / f"{name}.json", json.dumps(data, indent=1) + "\n"),
                       (results / f"{name}.md", "\n".join(lines) + "\n")):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
