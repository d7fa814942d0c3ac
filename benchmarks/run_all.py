"""Run every benchmark in this directory (``bench_*.py``) one after another.

Each benchmark writes its own results file under ``benchmarks/results/`` (or
``$ANEC_BENCH_RESULTS``); this script only sequences them and reports which
failed. Usage::

    python benchmarks/run_all.py                    # all benchmarks
    python benchmarks/run_all.py compile            # only bench_compile.py
    python benchmarks/run_all.py --quick [NAME...]  # each benchmark's smoke run

A results file is only worth quoting from a quiet machine: each one says in its
first lines when the load average showed other work (benchmarks/harness.py).
Before each benchmark the script waits (at most 5 minutes) for the load the
previous one left to decay, so that its start figure shows only other work.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="benchmarks to run (compile, passes, ...); all when none")
    ap.add_argument("--quick", action="store_true", help="each benchmark's smoke run (its --quick)")
    args = ap.parse_args(argv)
    scripts = sorted(HERE.glob("bench_*.py"))
    if args.names:
        wanted = {a.removeprefix("bench_").removesuffix(".py") for a in args.names}
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in wanted]
        if not scripts:
            print(f"no benchmark matches {args.names}", file=sys.stderr)
            return 2
    failed = []
    for script in scripts:
        waited = harness.settle()  # the last benchmark's own load decays before the next one starts
        t0 = time.perf_counter()
        print(f"== {script.name}" + (f" (waited {waited:.0f} s for the load to settle)" if waited >= 1 else ""),
              flush=True)
        rc = subprocess.call([sys.executable, str(script), *(["--quick"] if args.quick else [])], cwd=HERE.parent)
        print(f"== {script.name}: {'ok' if rc == 0 else f'FAILED ({rc})'} "
              f"in {time.perf_counter() - t0:.1f} s", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
