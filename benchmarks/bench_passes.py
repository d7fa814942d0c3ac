"""Front-end scaling: parse + verify + the optimizing pipeline on generated IR of 1k..100k nodes.

What a user waits for before any MIL is written: ``parse`` of the text,
``verify``, and the ``optimize`` pipeline (dce, fuse-casts, dce,
annotate-sram, legalize, with the manager verifying after every pass). The
generated program is a chain of layer-norm-like blocks of 14 statements, each
exercising one rewrite of every kind (conv bias, gelu, reduce_mean, rsqrt,
neg, a foldable fp16 -> fp32 -> fp16 cast pair and a dead node), sharing three
weights so the program stays within the BLOBFILE budget.

Each size runs in a fresh subprocess. ``--baseline REV`` also measures the
code of an older commit (extracted with ``git archive`` into a temporary
directory) on the sizes given by ``--baseline-sizes``, so a speed-up is
measured in one run on one machine rather than quoted.

Usage (writes benchmarks/results/passes.json and passes.md)::

    PYTHONPATH=. python benchmarks/bench_passes.py [--sizes 1000,10000,100000]
        [--baseline REV --baseline-sizes 1000,2000,4000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def generate(n_nodes: int) -> str:
    """IR text of about ``n_nodes`` statements (see the module docstring)."""
    lines = [
        "func big(%x: fp32[1, 64, 1, 32]) {",
        "  %xh = cast(%x, dtype=fp16)",
        '  %w = const(weight="w") : fp16[64, 64, 1, 1]',
        '  %b = const(weight="b") : fp16[1, 64, 1, 1]',
        '  %g1 = const(weight="g") : fp16[1, 64, 1, 1]',
        "  %eps = const(value=1e-05) : fp16[]",
    ]
    cur, i, count = "xh", 0, 6
    while count < n_nodes:
        p = f"b{i}_"
        block = [
            f"%{p}h = conv1x1(%{cur}, %w, bias=%b)",
            f'%{p}g = gelu(%{p}h, mode="tanh")',
            f"%{p}m = reduce_mean(%{p}g, axes=[1], keep_dims=true)",
            f"%{p}d = sub(%{p}g, %{p}m)",
            f"%{p}s = mul(%{p}d, %{p}d)",
            f"%{p}v = reduce_mean(%{p}s, axes=[1], keep_dims=true)",
            f"%{p}ve = add(%{p}v, %eps)",
            f"%{p}r = rsqrt(%{p}ve)",
            f"%{p}n = mul(%{p}d, %{p}r)",
            f"%{p}f32 = cast(%{p}n, dtype=fp32)",
            f"%{p}f16 = cast(%{p}f32, dtype=fp16)",
            f"%{p}ng = neg(%{p}f16)",
            f"%{p}o = mul(%{p}ng, %g1)",
            f"%{p}dead = relu(%{p}o)",
        ]
        lines += ["  " + s for s in block]
        count += len(block)
        cur, i = f"{p}o", i + 1
    lines += [f"  %y = cast(%{cur}, dtype=fp32)", "  return %y", "}"]
    return "\n".join(lines) + "\n"


# ---- one measurement (run in a subprocess: python bench_passes.py --one N) -----------


def measure_one(n: int, verify_each: bool = True) -> dict:
    from anec.ir.parser import parse
    from anec.ir.verifier import verify
    from anec.passes.base import PassContext
    from anec.passes.manager import run_pipeline
    from anec.passes.pipelines import OPTIMIZE

    text = generate(n)
    c0, t0 = time.process_time(), time.perf_counter()
    module = parse(text)
    c1, t1 = time.process_time(), time.perf_counter()
    verify(module)
    t2 = time.perf_counter()
    ctx = PassContext.default()
    if not verify_each:
        ctx.verify_each = False
    run_pipeline(module, OPTIMIZE, ctx)
    c3, t3 = time.process_time(), time.perf_counter()
    per_pass: dict[str, float] = {}
    for _, name, seconds in ctx.timings:
        per_pass[name] = per_pass.get(name, 0.0) + seconds
    nodes = len(module.func().nodes)
    return {
        "nodes_in": n, "nodes_out": nodes, "parse_s": t1 - t0, "verify_s": t2 - t1,
        "pipeline_s": t3 - t2, "passes_s": per_pass,
        "pipeline_verify_s": (t3 - t2) - sum(per_pass.values()),
        "total_s": t3 - t0,
        # CPU seconds of this process: what the code costs, whatever else the machine runs
        "cpu_parse_s": c1 - c0, "cpu_pipeline_s": c3 - c1, "cpu_total_s": c3 - c0,
    }


def run_sizes(sizes: list[int], anec_root: Path, budget: float,
              verify_each: bool = True) -> list[dict]:
    out = []
    for n in sizes:
        env = dict(os.environ, PYTHONPATH=str(anec_root))
        start = time.perf_counter()
        flags = [] if verify_each else ["--no-verify-each"]
        try:
            proc = subprocess.run([sys.executable, __file__, "--one", str(n), *flags], env=env,
                                  capture_output=True, text=True, timeout=budget)
        except subprocess.TimeoutExpired:
            out.append({"nodes_in": n, "skipped": f"over the {budget:.0f} s budget"})
            print(f"  {n}: over the {budget:.0f} s budget, stopped", flush=True)
            break
        if proc.returncode != 0:
            raise SystemExit(f"size {n} failed:\n{proc.stderr}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        out.append(row)
        print(f"  {n}: total {row['total_s']:.2f} s (wall {time.perf_counter() - start:.1f} s)",
              flush=True)
    return out


def _growth(rows: list[dict]) -> str:
    done = [r for r in rows if "skipped" not in r]
    if len(done) < 2:
        return "n/a"
    a, b = done[0], done[-1]
    ratio = (b["total_s"] / b["nodes_in"]) / (a["total_s"] / a["nodes_in"])
    return f"x{ratio:.2f} per node from {a['nodes_in']} to {b['nodes_in']} nodes (1.0 = linear)"


def _table(rows: list[dict]) -> list[str]:
    lines = ["| nodes | parse s | verify s | dce+fuse+sram s | legalize s | re-verify s | "
             "total s | us/node |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['nodes_in']} | skipped: {r['skipped']} | | | | | | |")
            continue
        p = r["passes_s"]
        small = p.get("dce", 0) + p.get("fuse-casts", 0) + p.get("annotate-sram", 0)
        lines.append(
            f"| {r['nodes_in']} | {r['parse_s']:.2f} | {r['verify_s']:.2f} | {small:.2f} | "
            f"{p.get('legalize', 0):.2f} | {r['pipeline_verify_s']:.2f} | {r['total_s']:.2f} | "
            f"{1e6 * r['total_s'] / r['nodes_in']:.0f} |")
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--baseline", metavar="REV", help="also measure this commit's anec/")
    ap.add_argument("--baseline-sizes", default="1000,2000,4000")
    ap.add_argument("--budget", type=float, default=900.0, help="seconds per size")
    ap.add_argument("--no-verify-each", action="store_true",
                    help="(with --one) verify once after the pipeline, not after every pass")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, verify_each=not args.no_verify_each)))
        return 0

    sizes = [int(s) for s in args.sizes.split(",")]
    print("current tree:", flush=True)
    current = run_sizes(sizes, ROOT, args.budget)
    print("current tree, verify_each off:", flush=True)
    once = run_sizes(sizes, ROOT, args.budget, verify_each=False)
    baseline = None
    if args.baseline:
        rev = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "archive", rev, "anec"], cwd=ROOT,
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            print(f"baseline {rev}:", flush=True)
            rows = run_sizes([int(s) for s in args.baseline_sizes.split(",")], Path(tmp),
                             args.budget)
        baseline = {"rev": rev, "rows": rows}

    result = {
        "benchmark": "passes", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python "
                   f"{platform.python_version()}",
        "pipeline": "parse + verify + optimize (dce, fuse-casts, dce, annotate-sram, legalize)",
        "current": current, "current_verify_once": once, "baseline": baseline,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    _write(RESULTS / "passes.json", json.dumps(result, indent=2) + "\n")
    md = [f"# Front-end scaling benchmark ({result['date']})", "",
          f"Machine: {result['machine']}.", "",
          f"Measured: {result['pipeline']}, on generated programs of 14-statement blocks "
          "(one rewrite of every kind per block; see `benchmarks/bench_passes.py`). "
          "Each size runs in its own process; times are wall seconds.", "",
          "## Current tree", "",
          "The manager verifies every func after every pass (`verify_each`, the default).", "",
          *_table(current), "", f"Growth: {_growth(current)}.", "",
          "## Current tree, `verify_each` off", "",
          "The input is verified, then each func once after the last pass.", "",
          *_table(once), ""]
    if baseline:
        md += [f"## Baseline {baseline['rev']} (same machine, same run)", "",
               *_table(baseline["rows"]), "", f"Growth: {_growth(baseline['rows'])}.", ""]
        md += ["Speed-up over the baseline in CPU seconds of the measuring process (the machine "
               "is shared, so wall times above vary with its load; CPU time does much less). "
               "total: parse + verify + pipeline; pipeline: verify + the passes with the "
               "manager's verification, what the pass manager owns:", ""]
        for label, rows in (("verify_each on", current), ("verify_each off", once)):
            both = {r["nodes_in"]: r for r in rows if "skipped" not in r}
            for r in baseline["rows"]:
                if "skipped" not in r and r["nodes_in"] in both and "cpu_total_s" in r:
                    c = both[r["nodes_in"]]
                    md.append(f"* {r['nodes_in']} nodes, {label}: total {r['cpu_total_s']:.2f} s -> "
                              f"{c['cpu_total_s']:.2f} s (x{r['cpu_total_s'] / c['cpu_total_s']:.1f}); "
                              f"pipeline {r['cpu_pipeline_s']:.2f} s -> {c['cpu_pipeline_s']:.2f} s "
                              f"(x{r['cpu_pipeline_s'] / c['cpu_pipeline_s']:.1f}).")
        md.append("")
    _write(RESULTS / "passes.md", "\n".join(md))
    print(f"wrote {RESULTS / 'passes.md'}")
    return 0


def _write(path: Path, text: str) -> None:
    from anec.fsutil import write_text_atomic

    write_text_atomic(path, text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
