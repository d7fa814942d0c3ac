"""Does a rerun of the benchmarks reproduce the ratios of an earlier run, within their spread?

Every results file (``benchmarks/results/*.json``) keeps each figure measured over rounds as a
spread (``{"min", "median", "max", "n"}``, benchmarks/harness.py). A *ratio* is a spread whose
key, or the key of a mapping or list holding it, names one: ``speedup`` or ``*_speedup``, ``ratio`` or ``*_ratio``,
``*_over_*``, ``over_*``, ``*_vs_*`` or ``vs_*`` (anec against a reference, one phase against
another; ``phase_vs_torch/optimizer_s`` is one). For every ratio found at the same
place in both runs, the rerun's median is checked against the earlier run's range: inside
``[min, max]`` it reproduces; outside, the line shows by how much (the rerun's median over the
nearer end of the range). Figures that are not ratios (seconds, bytes, tokens/s) depend on the
machine's state and are not compared.

Usage (after ``make bench`` into a scratch directory, against the committed results)::

    ANEC_BENCH_RESULTS=/tmp/rerun make bench
    python benchmarks/compare_runs.py HEAD /tmp/rerun        # a git revision or a directory each

*Headline* ratios (:data:`HEADLINES`) are those README.md and docs/ quote, and each results file's
first table: each one is a line marked ``*``, and one missing from the rerun is a miss too. The
exit status is 1 when a headline misses (any ratio with ``--all``), 0 when they reproduce, 2 on
bad input. Other ratios are reported with how many reproduce: several are I/O against I/O (a
reload against a raw write and fsync) or per-node growth, whose run-to-run swing can exceed a
few rounds' range.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from harness import is_spread  # noqa: E402

RESULTS = "benchmarks/results"

RATIO = re.compile(r"^(speedup|.*_speedup|ratio|.*_ratio|.*_over_.*|over_.*|.*_vs_.*|vs_.*)$")
"""Keys whose spreads are ratios."""


def ratios(doc: Any, path: str = "", inside: bool = False) -> Iterator[tuple[str, dict]]:
    """``(path, spread)`` of every ratio in a results document, in document order. ``inside``:
    a key above names a ratio. A list's items are named by their identifying fields
    (:data:`ROW_IDS`: ``variant`` and ``nodes_in``, ``kernel`` and ``threads``) when they have
    any, else by their index, so that a row keeps its path when rows are added."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            p = f"{path}/{k}"
            named = inside or bool(RATIO.match(str(k)))
            if is_spread(v):
                if named:
                    yield p, v
            else:
                yield from ratios(v, p, named)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            ids = [str(v[f]) for f in ROW_IDS if isinstance(v, dict) and isinstance(v.get(f), (str, int, float))]
            yield from ratios(v, f"{path}[{','.join(ids) if ids else i}]", inside)


ROW_IDS = ("name", "format", "model", "kernel", "kind", "variant", "weight_grads", "activations", "size", "shape",
           "mode", "nodes_in", "nodes", "threads")
"""Fields that name a row of a list (together, in this order)."""


def load_run(where: str) -> dict[str, Any]:
    """Results file name -> document: from a directory, or from a git revision's
    benchmarks/results/ (``HEAD``, a commit)."""
    d = Path(where)
    if d.is_dir():
        out = {}
        for f in sorted(d.glob("*.json")):
            try:
                out[f.stem] = json.loads(f.read_text("utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise BadRun(f"{f} cannot be read: {e}") from None
        return out
    try:
        names = subprocess.run(["git", "ls-tree", "--name-only", f"{where}:{RESULTS}"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.split()
        return {n[:-5]: json.loads(subprocess.run(["git", "show", f"{where}:{RESULTS}/{n}"], cwd=ROOT, check=True,
                                                  capture_output=True, text=True).stdout)
                for n in names if n.endswith(".json")}
    except subprocess.CalledProcessError as e:
        raise BadRun(f"'{where}' is neither a directory nor a git revision with {RESULTS}/ "
                     f"({e.stderr.strip()})") from None
    except json.JSONDecodeError as e:
        raise BadRun(f"a results file of revision '{where}' is not JSON: {e}") from None


class BadRun(Exception):
    """A run that cannot be read."""


HEADLINES: dict[str, tuple[str, ...]] = {
    # results file: path patterns (re.fullmatch) of its headline ratios, and where they are quoted
    "compile": (r"/gpt2/anec/(one|per_layer)/coremltools_over_anec",  # compile.md's first table; README
                r"/gpt2/baseline/speedup/(one|per_layer)",            # before/after, README
                r"/coremltools_speedup/(1006|10004)"),  # the scaling table, at the sizes make bench runs
    "passes": (r"/baseline/speedup\[verify_each (on|off),100000\]/cpu_total",),  # README: x3.2, x3.3
    "compress": (r"/rows\[(int8|lut4|lut6)\]/speedup",                  # README: x32.5, x24.4, x16.9
                 r"/gpt2/compile/(int8|lut4|lut6)/over_fp16"),          # docs/compression.md
    "large": (r"/models\[(0\.6b|1b)\]/decode_anec_over_transformers",),  # README, docs/models.md
    "training": (r"/variants\[[^]]+\]/vs_torch",                         # training.md's first table
                 r"/variants\[[^]]+\]/phase_vs_torch/\w+"),           # each host phase vs torch's work
    "import": (r"/paired/anec_over_coremltools", r"/paired/import_compile_over_coremltools"),
    "models": (r"/gpt2/sim_over_transformers",),
    "partition": (r"/gpt2_small/joined/s_per_token_over_whole",),  # docs/models.md: the joined head
    "runtime": (r"/reload/strategies/[\w-]+/ratio_fp16_vs_raw_write_fsync",  # runtime.md's first table
                r"/reload/strategies/[\w-]+/ratio_reload_weights_vs_compile"),
    "threads": (r"/rows\[compute,[^]]*,N programs,(2|4)\]/vs_one_thread",),  # docs/runtime.md: scaling
}
"""The ratios a results file leads with or the docs quote (see the module docstring)."""


def is_headline(name: str, path: str) -> bool:
    return any(re.fullmatch(p, path) for p in HEADLINES.get(name, ()))


def compare(old: dict[str, Any], new: dict[str, Any], every: bool = False) -> tuple[list[str], int, dict]:
    """The report's lines, the number of misses that fail the check (headlines; every ratio with
    ``every``) and the counts ``{"headline": [reproduced, compared], "other": [...]}``."""
    lines, failing = [], 0
    counts = {"headline": [0, 0], "other": [0, 0]}
    for name in sorted(set(old) & set(new)):
        after = dict(ratios(new[name]))
        for path, o in ratios(old[name]):
            head = is_headline(name, path)
            kind, mark = ("headline", "*") if head else ("other", " ")
            s = after.get(path)
            if s is None:
                if head:
                    counts[kind][1] += 1
                    failing += 1
                    lines.append(f"MISS{mark} {name}{path}: not in the rerun")
                continue
            m = float(s["median"])
            lo, hi = float(o["min"]), float(o["max"])
            counts[kind][1] += 1
            where = f"{name}{path}: {m:.3g} against {float(o['median']):.3g} ({lo:.3g}-{hi:.3g}, {o['n']} rounds)"
            if lo <= m <= hi:
                counts[kind][0] += 1
                lines.append(f"ok{mark}   {where}")
                continue
            failing += head or every
            end = lo if m < lo else hi
            lines.append(f"MISS{mark} {where}: {m / end:.2f}x the {'lower' if m < lo else 'upper'} end"
                         if end else f"MISS{mark} {where}")
    skipped = sorted(set(old) ^ set(new))
    if skipped:
        lines.append("only in one run: " + ", ".join(skipped))
    return lines, failing, counts


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="the earlier run: a directory of results files or a git revision")
    ap.add_argument("new", help="the rerun: a directory of results files or a git revision")
    ap.add_argument("--all", action="store_true", help="every ratio must reproduce, not only the headlines")
    args = ap.parse_args(argv)
    try:
        lines, failing, counts = compare(load_run(args.old), load_run(args.new), every=args.all)
    except BadRun as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    (h_ok, h_n), (o_ok, o_n) = counts["headline"], counts["other"]
    print(f"{h_ok} of {h_n} headline ratios (*) reproduce within the earlier run's spread")
    print(f"{o_ok} of {o_n} other ratios reproduce within the earlier run's spread")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
