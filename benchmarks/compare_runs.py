"""Does a rerun of the benchmarks reproduce the ratios of an earlier run, within their spread?

Every results file (``benchmarks/results/*.json``) keeps each figure measured over rounds as a
spread (``{"min", "median", "max", "n"}``, benchmarks/harness.py). A *ratio* is a spread whose
key, or the key of a mapping or list holding it, names one: ``speedup``, ``ratio`` or ``*_ratio``,
``*_over_*``, ``over_*``, ``*_vs_*`` or ``vs_*`` (anec against a reference, one phase against
another; ``phase_vs_torch/optimizer_s`` is one). For every ratio found at the same
place in both runs, the rerun's median is checked against the earlier run's range: inside
``[min, max]`` it reproduces; outside, the line shows by how much (the rerun's median over the
nearer end of the range). Figures that are not ratios (seconds, bytes, tokens/s) depend on the
machine's state and are not compared.

Usage (after ``make bench`` into a scratch directory, against the committed results)::

    ANEC_BENCH_RESULTS=/tmp/rerun make bench
    python benchmarks/compare_runs.py HEAD /tmp/rerun        # a git revision or a directory each

Exit status: 0 when every ratio found in both runs reproduces, 1 otherwise, 2 on bad input.
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

RATIO = re.compile(r"^(speedup|ratio|.*_ratio|.*_over_.*|over_.*|.*_vs_.*|vs_.*)$")
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


def compare(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], int]:
    """The report's lines and the number of ratios that did not reproduce."""
    lines, misses = [], 0
    for name in sorted(set(old) & set(new)):
        before = dict(ratios(old[name]))
        for path, s in ratios(new[name]):
            o = before.get(path)
            if o is None:
                continue
            m = float(s["median"])
            lo, hi = float(o["min"]), float(o["max"])
            ok = lo <= m <= hi
            where = f"{name}{path}: {m:.3g} against {float(o['median']):.3g} ({lo:.3g}-{hi:.3g}, {o['n']} rounds)"
            if ok:
                lines.append(f"ok    {where}")
            else:
                misses += 1
                end = lo if m < lo else hi
                lines.append(f"MISS  {where}: {m / end:.2f}x the {'lower' if m < lo else 'upper'} end"
                             if end else f"MISS  {where}")
    skipped = sorted(set(old) ^ set(new))
    if skipped:
        lines.append("only in one run: " + ", ".join(skipped))
    return lines, misses


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="the earlier run: a directory of results files or a git revision")
    ap.add_argument("new", help="the rerun: a directory of results files or a git revision")
    args = ap.parse_args(argv)
    try:
        lines, misses = compare(load_run(args.old), load_run(args.new))
    except BadRun as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    compared = sum(1 for line in lines if line.startswith(("ok", "MISS")))
    print("\n".join(lines))
    print(f"{compared - misses} of {compared} ratios reproduce within the earlier run's spread")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
