"""Thread throughput of the runtime on the sim: N threads on one program and on
N programs, against one thread.

Calls of one program are serialized (each ``prog(x=...)`` copies in, evaluates
and copies out under the program's lock), calls of different programs run in
parallel with the GIL released during the C call (docs/runtime.md). This
measures what that gives, for N = 1, 2, 4 threads:

* one program: N threads call the same program;
* N programs: thread i calls its own program (same MIL, other weights).

Two program sizes: "compute" (conv1x1 512 -> 512 over S = 512, 0.27 GFLOP per
call: the evaluation dominates) and "small" (conv1x1 64 -> 64 over S = 64: the
per-call overhead in Python and C dominates). The runtime uses
``sim_threads=1``, so one evaluation keeps one core busy and any speed-up
comes from the threads alone; it is bounded by the machine's core count.
Throughput = calls / wall time, with the cores the process got meanwhile
(CPU time / wall time); every thread checks its last result against a
sequential run. The configurations take turns in rounds inside one process
(threads are what is measured): each round runs every configuration once, in
an order that alternates between rounds (forward, then reversed), and each
figure is the median (min-max) over the rounds; a ratio to one thread is
taken per round (both met the same machine). The load average is read before
the first round and after the last (benchmarks/harness.py).

Usage (writes benchmarks/results/threads.json and threads.md)::

    PYTHONPATH=. python benchmarks/bench_threads.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402
from anec.runtime import Runtime, native  # noqa: E402

SIZES = {"compute": (512, 512), "small": (64, 64)}  # channels, sequence
THREADS = (1, 2, 4)


def conv_mil(c: int, s: int) -> str:
    t = f"tensor<fp16, [1, {c}, 1, {s}]>"
    w = f"tensor<fp16, [{c}, {c}, 1, 1]>"
    return ("program(1.3)\n{\n"
            f"    func main<ios18>({t} x) {{\n"
            f'        {w} w = const()[name = string("w"), val = {w}(BLOBFILE(path = '
            'string("@model_path/weights/w.bin"), offset = uint64(64)))];\n'
            f'        {t} y = conv(weight = w, x = x)[name = string("y")];\n'
            "    } -> (y);\n}\n")


def blob(arr: np.ndarray) -> bytes:
    """A one-tensor fp16 BLOBFILE (the compiler's own writer)."""
    from anec.mil.blobfile import BlobWriter

    w = BlobWriter()
    w.add(np.ascontiguousarray(arr, dtype=np.float16))
    return w.to_bytes()


def tmp_root() -> str:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="anec-bench-", dir=base)


def run_threads(progs: list, x: np.ndarray, calls_per_thread: int) -> tuple[float, float, list[np.ndarray]]:
    """Start one thread per entry of progs (a program may repeat) together;
    wall time until all made their calls, the process CPU time meanwhile, and
    each thread's last result."""
    start = threading.Barrier(len(progs) + 1)
    last: list[np.ndarray | None] = [None] * len(progs)

    def worker(k: int) -> None:
        p = progs[k]
        start.wait()
        for _ in range(calls_per_thread):
            last[k] = p(x=x)["y"]

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(len(progs))]
    for t in ts:
        t.start()
    start.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    for t in ts:
        t.join()
    return time.perf_counter() - t0, time.process_time() - c0, last  # type: ignore[return-value]


def bench_size(name: str, reps: int, seconds: float) -> list[dict]:
    c, s = SIZES[name]
    rng = np.random.default_rng(0)
    weights = [(rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float16) for _ in range(max(THREADS))]
    x = rng.standard_normal((1, c, 1, s)).astype(np.float16)
    root = tmp_root()
    rows = []
    try:
        with Runtime("sim", sim_threads=1, temp_root=os.path.join(root, "p")) as rt:
            mil = conv_mil(c, s)
            progs = [rt.compile(mil, {"@model_path/weights/w.bin": blob(w)}) for w in weights]
            want = [p(x=x)["y"] for p in progs]  # sequential results
            # calls per thread: about `seconds` of work for one thread
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < 0.2:
                progs[0](x=x)
                n += 1
            per_call = (time.perf_counter() - t0) / n
            calls = max(10, int(seconds / per_call / max(THREADS)))
            configs = [(mode, n) for mode in ("one program", "N programs") for n in THREADS]
            runs: dict[tuple[str, int], list[float]] = {cfg: [] for cfg in configs}
            cores: dict[tuple[str, int], list[float]] = {cfg: [] for cfg in configs}
            for r in range(reps):  # rounds: a change of machine load hits every configuration alike
                for mode, n_threads in harness.round_order(configs, r):
                    chosen = [progs[0]] * n_threads if mode == "one program" else progs[:n_threads]
                    wall, cpu, last = run_threads(chosen, x, calls)
                    expect = [want[0]] * n_threads if mode == "one program" else want[:n_threads]
                    if not all(np.array_equal(a, b) for a, b in zip(last, expect)):
                        raise SystemExit(f"{name} {mode} x{n_threads}: a result differs from the sequential one")
                    runs[mode, n_threads].append(n_threads * calls / wall)
                    cores[mode, n_threads].append(cpu / wall)
            base = runs["one program", 1]
            for mode, n_threads in configs:
                tput = runs[mode, n_threads]
                rows.append({"size": name, "shape": f"conv1x1 {c}->{c}, S={s}", "mode": mode,
                             "threads": n_threads, "calls_per_thread": calls, "calls_per_s": harness.spread(tput),
                             "vs_one_thread": harness.ratio_spread(tput, base),
                             "gflops": harness.spread(t * 2.0 * c * c * s / 1e9 for t in tput),
                             "cores_used": harness.spread(cores[mode, n_threads]), "runs": tput})
            st = rt.stats
            rows.append({"size": name, "evaluations": st["evaluations"], "compiles": st["compiles"]})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


SCHEME = ("every configuration once per round in one process (its threads are what is measured), "
          "alternating order")


def write_md(res: dict) -> list[str]:
    f = harness.fmt
    lines = harness.header(
        "Thread throughput (sim)", res["load_start"], res["load_end"], res["reps"],
        "Runtime with `sim_threads=1` (one core per evaluation); ratios to one thread are per round. "
        "Generated by `benchmarks/bench_threads.py`.", scheme=SCHEME)
    lines += [
        "One program: N threads call the same program (calls are serialized under its lock). "
        "N programs: each thread calls its own program (evaluations run in parallel, GIL released). "
        "Ratio: throughput over one thread calling one program; it cannot exceed the cores the process "
        "gets. Cores used: process CPU time / wall time during the run (what the machine gave it; on a "
        "shared machine, less than its core count).",
        "",
        "| program | mode | threads | calls/s | GFLOP/s | vs one thread | cores used |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        if "mode" not in r:
            continue
        lines.append(f"| {r['shape']} | {r['mode']} | {r['threads']} | {f(r['calls_per_s'], 0)} | "
                     f"{f(r['gflops'])} | {f(r['vs_one_thread'], 2)} | {f(r['cores_used'], 2)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, shorter runs")
    args = ap.parse_args(argv)
    native.require()
    reps, seconds = (2, 0.3) if args.quick else (5, 1.5)
    load_start = harness.load_average()
    rows = [r for name in SIZES for r in bench_size(name, reps, seconds)]
    load_end = harness.load_average()
    res = {**harness.machine(), "load_start": load_start, "load_end": load_end,
           "load_before": (load_start or [0.0])[0], "load_after": (load_end or [0.0])[0], "rounds": reps,
           "reps": reps, "threads": list(THREADS), "rows": rows}
    lines = write_md(res)
    harness.write_results("threads", res, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
