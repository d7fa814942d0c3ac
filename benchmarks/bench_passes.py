"""Front-end scaling: parse + verify + the optimizing pipeline on generated IR of 1k..100k nodes.

What a user waits for before any MIL is written: ``parse`` of the text,
``verify``, and the ``optimize`` pipeline (dce, fuse-casts, dce, range-safe,
annotate-sram, legalize, with the manager verifying after every pass), each
tree run as its own ``compile_module`` runs them: this tree verifies the input
once (``run_pipeline(..., verify_input=False)`` after ``verify``), a tree whose
``run_pipeline`` verified it again (52ef36e) does so here too. The
generated program is a chain of layer-norm-like blocks of 14 statements, each
exercising one rewrite of every kind (conv bias, gelu, reduce_mean, rsqrt,
neg, a foldable fp16 -> fp32 -> fp16 cast pair and a dead node), sharing three
weights so the program stays within the BLOBFILE budget.

Each (variant, size) runs in a fresh process, once per round, the order
alternating between rounds (benchmarks/harness.py); figures are median
(min-max) over the rounds. ``--baseline REV`` also measures the code of an
older commit (extracted with ``git archive`` into a temporary directory) on
the sizes given by ``--baseline-sizes``, in the same rounds, so a speed-up is
measured per round on one machine rather than quoted.

Usage (writes benchmarks/results/passes.json and passes.md)::

    PYTHONPATH=. python benchmarks/bench_passes.py [--sizes 1000,10000,100000] [--rounds 3]
        [--baseline REV --baseline-sizes 1000,2000,4000] [--quick]
"""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402  (no anec import: a worker imports the anec/ its PYTHONPATH names)


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
    if "verify_input" in inspect.signature(run_pipeline).parameters:
        run_pipeline(module, OPTIMIZE, ctx, verify_input=False)  # as compile_module runs it: verified above
    else:  # a tree whose compile_module let run_pipeline verify the input again (e.g. 52ef36e)
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
        "small_passes_s": sum(per_pass.get(k, 0.0) for k in ("dce", "fuse-casts", "annotate-sram")),
        "total_s": t3 - t0,
        # CPU seconds of this process: what the code costs, whatever else the machine runs
        "cpu_parse_s": c1 - c0, "cpu_pipeline_s": c3 - c1, "cpu_total_s": c3 - c0,
    }


def _summary(n: int, rounds: list[dict]) -> dict:
    """One size's rounds as one row: median (min-max) of every time, or why it was skipped."""
    finished = harness.done(rounds)
    if not finished:
        return {"nodes_in": n, "skipped": rounds[-1]["skipped"] if rounds else "not run"}
    row = harness.summarize(finished)
    if len(finished) < len(rounds):
        row["stopped"] = f"{len(rounds) - len(finished)} round(s) {rounds[-1]['skipped']}"
    return row


def _per_node(r: dict) -> float:
    return r["total_s"] / r["nodes_in"]


def _growth(rounds: dict[int, list[dict]]) -> str:
    """Per-node time of the largest size over the smallest, per round (the same round met the same
    machine), as median (min-max)."""
    sizes = [n for n, rs in rounds.items() if harness.done(rs)]
    if len(sizes) < 2:
        return "n/a"
    a, b = min(sizes), max(sizes)
    g = harness.paired_ratio(rounds[b], rounds[a], _per_node)
    return f"x{harness.fmt(g, 2)} per node from {a} to {b} nodes (1.0 = linear)"


def _table(rows: list[dict]) -> list[str]:
    f = harness.fmt
    lines = ["| nodes | parse s | verify s | dce+fuse+sram s | range-safe s | legalize s | re-verify s | "
             "total s | us/node |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r.get('nodes_in')} | skipped: {r['skipped']} | | | | | | | |")
            continue
        p = r["passes_s"]
        # a tree older than the range-safe pass does not run it
        range_safe = f(p["range-safe"], 2) if "range-safe" in p else "not run"
        lines.append(
            f"| {r['nodes_in']} | {f(r['parse_s'], 2)} | {f(r['verify_s'], 2)} | {f(r['small_passes_s'], 2)} | "
            f"{range_safe} | {f(p.get('legalize', 0), 2)} | {f(r['pipeline_verify_s'], 2)} | {f(r['total_s'], 2)} | "
            f"{f(harness.scale(r['total_s'], 1e6 / r['nodes_in']), 0)} |"
            + (f" ({r['stopped']})" if r.get("stopped") else ""))
    return lines


BASELINE = "52ef36e"
"""The commit before the front-end work that benchmarks/results/passes.md's speed-up is measured against."""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--baseline", metavar="REV",
                    help=f"also measure this commit's anec/ (default {BASELINE}, the commit the "
                         "results file's speed-up is quoted against; '' to skip; --quick skips it unless given)")
    ap.add_argument("--baseline-sizes", default="1000,10000,100000")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every (variant, size) process")
    ap.add_argument("--budget", type=float, default=900.0, help="seconds per size")
    ap.add_argument("--quick", action="store_true", help="sizes 500 and 1000 (and so the baseline), 2 rounds: "
                    "a smoke run")
    ap.add_argument("--no-verify-each", action="store_true",
                    help="(with --one) verify once after the pipeline, not after every pass")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, verify_each=not args.no_verify_each)))
        return 0
    if args.baseline is None:
        args.baseline = "" if args.quick else BASELINE
    if args.quick:
        args.sizes = args.baseline_sizes = "500,1000"
        args.rounds = min(args.rounds, 2)

    sizes = [int(s) for s in args.sizes.split(",")]
    base_sizes = [int(s) for s in args.baseline_sizes.split(",")] if args.baseline else []
    me = str(Path(__file__).relative_to(ROOT))
    sides: dict[str, list[str]] = {}
    envs: dict[str, dict[str, str]] = {}
    for n in sizes:
        sides[f"current/{n}"] = [me, "--one", str(n)]
        sides[f"once/{n}"] = [me, "--one", str(n), "--no-verify-each"]
    load_start = harness.load_average()
    with tempfile.TemporaryDirectory() as tmp:
        rev = None
        if args.baseline:
            rev = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout.strip()
            archive = subprocess.run(["git", "archive", rev, "anec"], cwd=ROOT,
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            for n in base_sizes:
                sides[f"baseline/{n}"] = [me, "--one", str(n)]
                envs[f"baseline/{n}"] = {"PYTHONPATH": tmp}  # that anec/ only
        # every (variant, size) process once per round, in alternating order
        rounds = harness.run_rounds(sides, args.rounds, timeout=args.budget, envs=envs)
    load_end = harness.load_average()
    by = {v: {n: rounds[f"{v}/{n}"] for n in (base_sizes if v == "baseline" else sizes)}
          for v in ("current", "once", *(["baseline"] if rev else []))}
    current = [_summary(n, rs) for n, rs in by["current"].items()]
    once = [_summary(n, rs) for n, rs in by["once"].items()]
    baseline = None
    speedups = []
    if rev:
        baseline = {"rev": rev, "rows": [_summary(n, rs) for n, rs in by["baseline"].items()]}
        for label, v in (("verify_each on", "current"), ("verify_each off", "once")):
            for n in base_sizes:
                if n not in by[v]:
                    continue
                tot = harness.paired_ratio(by["baseline"][n], by[v][n], lambda r: r["cpu_total_s"])
                pipe = harness.paired_ratio(by["baseline"][n], by[v][n], lambda r: r["cpu_pipeline_s"])
                if tot:
                    speedups.append({"nodes_in": n, "variant": label, "cpu_total": tot, "cpu_pipeline": pipe})
        baseline["speedup"] = speedups

    result = {
        "benchmark": "passes", "date": time.strftime("%Y-%m-%d %H:%M:%S"), **harness.machine(),
        "load_start": load_start, "load_end": load_end, "rounds": args.rounds,
        "pipeline": "parse + verify + optimize (dce, fuse-casts, dce, range-safe, annotate-sram, legalize)",
        "current": current, "current_verify_once": once, "baseline": baseline,
        "growth": {v: _growth(by[v]) for v in by}, "raw": rounds,
    }
    f = harness.fmt
    md = harness.header(
        "Front-end scaling benchmark", load_start, load_end, args.rounds,
        f"Measured: {result['pipeline']}, on generated programs of 14-statement blocks "
        "(one rewrite of every kind per block; see `benchmarks/bench_passes.py`); every (variant, size) "
        "runs in its own process once per round. Times are wall seconds.")
    md += ["## Current tree", "",
           "The manager verifies every func after every pass (`verify_each`, the default).", "",
           *_table(current), "", f"Growth: {result['growth']['current']}.", "",
           "## Current tree, `verify_each` off", "",
           "The input is verified, then each func once after the last pass.", "",
           *_table(once), ""]
    if baseline:
        md += [f"## Baseline {baseline['rev']} (same machine, same rounds)", "",
               "The baseline's own `optimize` pipeline (range-safe \"not run\": that tree has no such pass).",
               "", *_table(baseline["rows"]), "", f"Growth: {result['growth']['baseline']}.", ""]
        md += ["Speed-up over the baseline in CPU seconds of the measuring process, per round (the "
               "baseline's process over this tree's in the same round), median (min-max): total: "
               "parse + verify + pipeline; pipeline: verify + the passes with the manager's "
               "verification, what the pass manager owns:", ""]
        for sp in speedups:
            md.append(f"* {sp['nodes_in']} nodes, {sp['variant']}: total x{f(sp['cpu_total'])}; "
                      f"pipeline x{f(sp['cpu_pipeline'])}.")
        md.append("")
    harness.write_results("passes", result, md)
    print(f"wrote {harness.RESULTS / 'passes.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
