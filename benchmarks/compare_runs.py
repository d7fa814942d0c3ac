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
    python benchmarks/compare_runs.py REV HEAD /tmp/rerun    # against the union of two earlier runs

*Headline* ratios (:data:`HEADLINES`) are those README.md and docs/ quote, and each results file's
first table: each one is a line marked ``*``, and one missing from the rerun is a miss too. The
exit status is 1 when a headline misses (any ratio with ``--all``), 0 when they reproduce, 2 on
bad input. Other ratios are reported with how many reproduce: several are I/O against I/O (a
reload against a raw write and fsync) or per-node growth, whose run-to-run swing can exceed a
few rounds' range.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
from harness import is_spread  # noqa: E402

RESULTS = "benchmarks/results"
REPORT = "reproduce"
"""The name of the report ``--write`` writes (not a benchmark: never read as a run)."""

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
            if f.stem == REPORT:
                continue
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
                for n in names if n.endswith(".json") and n != f"{REPORT}.json"}
    except subprocess.CalledProcessError as e:
        raise BadRun(f"'{where}' is neither a directory nor a git revision with {RESULTS}/ "
                     f"({e.stderr.strip()})") from None
    except json.JSONDecodeError as e:
        raise BadRun(f"a results file of revision '{where}' is not JSON: {e}") from None


def union(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict]]:
    """The ratios of one or more earlier runs, results file -> path -> spread. Over several
    runs a ratio's spread covers all of them (the lowest min, the highest max, the median of
    their medians, their rounds added up), so that the range a rerun is held to includes the
    variation between runs, not only within one. A ratio missing from a run comes from the
    others."""
    out: dict[str, dict[str, dict]] = {}
    for name in sorted({n for r in runs for n in r}):
        spreads: dict[str, list[dict]] = {}
        for run in runs:
            for path, sp in ratios(run.get(name, {})):
                spreads.setdefault(path, []).append(sp)
        out[name] = {path: sp[0] if len(sp) == 1 else
                     {"min": min(float(x["min"]) for x in sp), "max": max(float(x["max"]) for x in sp),
                      "median": statistics.median(float(x["median"]) for x in sp),
                      "n": sum(int(x["n"]) for x in sp)} for path, sp in spreads.items()}
    return out


class BadRun(Exception):
    """A run that cannot be read."""


HEADLINES: dict[str, tuple[str, ...]] = {
    # results file: path patterns (re.fullmatch) of its headline ratios, and where they are quoted
    "compile": (r"/gpt2/anec/(one|per_layer)/coremltools_over_anec",  # compile.md's first table; README
                r"/gpt2/baseline/speedup/(one|per_layer)",            # before/after, README
                r"/coremltools_speedup/(1006|10004)"),  # the scaling table, at the sizes make bench runs
    "passes": (r"/baseline/speedup\[verify_each (on|off),100000\]/cpu_total",),  # README's table
    "compress": (r"/rows\[(int8|lut4|lut6)\]/speedup",                  # README's table and prose
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


@functools.lru_cache(maxsize=None)
def chance_inside(n_old: int, n_new: int) -> float:
    """The probability that the median of ``n_new`` rounds falls within the min-max of ``n_old``
    rounds when every round of both runs comes from one distribution (the same machine, the
    same code): distribution-free, from the ranks, which are then a uniformly random interleaving.
    3 rounds against 3: 0.60; 5 against 5: 0.83. An even ``n_new`` counts the two middle rounds."""
    if n_old < 2 or n_new < 1:
        return 0.0
    total = n_old + n_new
    inside = count = 0
    for xs in itertools.combinations(range(total), n_old):
        ys = [i for i in range(total) if i not in xs]
        lo, hi = ys[(n_new - 1) // 2], ys[n_new // 2]
        count += 1
        inside += xs[0] < lo and xs[-1] > hi
    return inside / count


def tail_probability(chances: list[float], misses: int) -> float:
    """P(at least ``misses`` ratios fall outside) when ratio i falls inside with probability
    ``chances[i]``, independently (a Poisson-binomial tail)."""
    dist = [1.0]  # dist[k]: probability of k misses so far
    for p in chances:
        nxt = [0.0] * (len(dist) + 1)
        for k, q in enumerate(dist):
            nxt[k] += q * p
            nxt[k + 1] += q * (1 - p)
        dist = nxt
    return sum(dist[misses:])


SIGNIFICANCE = 0.01
"""A rerun fails to reproduce when chance alone gives that many misses less often than this."""


def compare(old: dict[str, dict[str, dict]], new: dict[str, Any]) -> list[dict]:
    """One record per ratio of the earlier runs (``old``: :func:`union`'s ratios) found in the
    rerun's results files ``new``: ``file``, ``path``, ``headline``, ``old`` and
    ``new`` (spreads; ``new`` None when the rerun lacks it: only headlines are kept then),
    ``ok``, and ``factor`` (a miss: the rerun's median over the nearer end of the range)."""
    out = []
    for name in sorted(set(old) & set(new)):
        after = dict(ratios(new[name]))
        for path, o in old[name].items():
            head, s = is_headline(name, path), after.get(path)
            if s is None:
                if head:
                    out.append({"file": name, "path": path, "headline": True, "old": o, "new": None,
                                "ok": False, "factor": None, "far": True, "chance": 1.0})
                continue
            m, lo, hi = float(s["median"]), float(o["min"]), float(o["max"])
            end = lo if m < lo else hi
            ok = lo <= m <= hi
            out.append({"file": name, "path": path, "headline": head, "old": o, "new": s, "ok": ok,
                        "factor": None if ok or not end else m / end,
                        "far": not ok and abs(m - end) > hi - lo,
                        "chance": chance_inside(int(o["n"]), int(s["n"]))})
    return out


def _line(r: dict) -> str:
    mark = "*" if r["headline"] else " "
    head = f"{'ok' if r['ok'] else 'MISS'}{mark}".ljust(6)
    where = f"{r['file']}{r['path']}"
    if r["new"] is None:
        return f"{head}{where}: not in the rerun"
    o = r["old"]
    text = (f"{head}{where}: {float(r['new']['median']):.3g} against {float(o['median']):.3g} "
            f"({float(o['min']):.3g}-{float(o['max']):.3g}, {o['n']} rounds)")
    if r["factor"] is not None:
        m, lo = float(r["new"]["median"]), float(o["min"])
        text += f": {r['factor']:.2f}x the {'lower' if m < lo else 'upper'} end" + (
            " (one round: no range, not judged)" if not r["chance"] else ", far" if r["far"] else "")
    return text


def counts(records: list[dict]) -> dict[str, list[int]]:
    """``{"headline": [reproduced, compared], "other": [...]}``."""
    c = {"headline": [0, 0], "other": [0, 0]}
    for r in records:
        k = c["headline" if r["headline"] else "other"]
        k[0] += r["ok"]
        k[1] += 1
    return c


def verdict(records: list[dict]) -> dict:
    """Whether ``records`` reproduce: their misses are no more than chance gives
    (:func:`chance_inside`; P >= SIGNIFICANCE), and none is *far*: further outside the earlier
    range than that range is wide, or missing from the rerun. A shift of the code or of the
    machine shows as far misses, or as more misses than chance. Ratios whose earlier run has a
    range (2 rounds or more) count."""
    tested = [r for r in records if r["chance"] > 0]
    misses = sum(1 for r in tested if not r["ok"])
    far = [r for r in tested if r["far"]]
    expected = sum(1 - r["chance"] for r in tested)
    tail = tail_probability([r["chance"] for r in tested], misses)
    return {"tested": len(tested), "misses": misses, "far": len(far), "expected": expected, "tail": tail,
            "reproduces": tail >= SIGNIFICANCE and not far}


def summary(records: list[dict], every: bool = False) -> list[str]:
    c = counts(records)
    (h_ok, h_n), (o_ok, o_n) = c["headline"], c["other"]
    v = verdict([r for r in records if r["headline"] or every])
    what = "ratios" if every else "headline ratios"
    return [f"{h_ok} of {h_n} headline ratios (*) reproduce within the earlier run's spread",
            f"{o_ok} of {o_n} other ratios reproduce within the earlier run's spread",
            f"{what}: {v['misses']} of {v['tested']} outside, {v['expected']:.1f} expected by chance alone "
            f"(P(>= {v['misses']}) = {v['tail']:.3g}), {v['far']} further out than the range is wide: "
            + ("the rerun reproduces them" if v["reproduces"] else "the rerun does not reproduce them")]


def markdown(records: list[dict], olds: list[dict[str, Any]], new: dict[str, Any], names: list[str]) -> list[str]:
    """The report as a results file: the runs compared, every headline, the other misses."""
    f = harness.fmt

    def run_of(doc: dict) -> str:
        share = doc.get("other_cpu_share")
        return (f"{doc.get('date', '?')}, load {'/'.join(map(str, doc.get('load_start') or [])) or 'n/a'} "
                f"at the start" + (f", other processes {share:.0%} of the CPU" if share is not None else ""))

    lines = ["# Does a rerun reproduce the headline ratios?", "",
             f"`python benchmarks/compare_runs.py {' '.join(names)}`: for each ratio of the earlier "
             f"run{'s' if len(olds) > 1 else ''}, whether the rerun's median falls within the earlier min-max "
             f"over the rounds{' of every earlier run' if len(olds) > 1 else ''}. Headlines (*) are the ratios "
             "README.md and docs/ quote and each results file's first table. A ratio misses by chance alone "
             "with the probability in brackets (every round from one distribution); the rerun reproduces "
             "when its misses are no more than chance gives and none lies further out than the range is wide.",
             "", "| results file | " + " | ".join(f"earlier run ({n})" for n in names[:-1]) + " | rerun |",
             "|---|" + "---|" * len(names)]
    for name in sorted({n for o in olds for n in o} & set(new)):
        lines.append(f"| {name}.md | " + " | ".join(run_of(o[name]) if name in o else "" for o in olds)
                     + f" | {run_of(new[name])} |")
    lines += ["", *summary(records), "", "| ratio | earlier run | rerun | within the earlier range "
              "(chance, same distribution) |", "|---|---|---|---|"]
    for r in records:
        if r["headline"]:
            new_s = f(r["new"], 3, "g") if r["new"] else "not run"
            said = "yes" if r["ok"] else (f"no, {r['factor']:.2f}x the range's end" if r["factor"] else "no") + (
                ", far" if r["far"] else "")
            lines.append(f"| {r['file']}{r['path']} | {f(r['old'], 3, 'g')} | {new_s} | {said} ({r['chance']:.2f}) |")
    misses = [r for r in records if not r["headline"] and not r["ok"]]
    if misses:
        lines += ["", "Other ratios outside the earlier run's range:", "", "```", *map(_line, misses), "```"]
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="RUN",
                    help="earlier runs, then the rerun: each a directory of results files or a git revision; "
                         "with several earlier runs a ratio's range is the union of theirs")
    ap.add_argument("--all", action="store_true", help="every ratio must reproduce, not only the headlines")
    ap.add_argument("--write", action="store_true",
                    help="also write the report as reproduce.md and .json to the results directory")
    args = ap.parse_args(argv)
    try:
        if len(args.runs) < 2:
            raise BadRun("give an earlier run and a rerun")
        olds, new = [load_run(r) for r in args.runs[:-1]], load_run(args.runs[-1])
        old = union(olds)
    except BadRun as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    records = compare(old, new)
    lines = [_line(r) for r in records]
    skipped = sorted(set(old) ^ set(new))
    if skipped:
        lines.append("only in one run: " + ", ".join(skipped))
    print("\n".join(lines + summary(records, args.all)))
    if args.write:
        harness.write_results(REPORT, {"old": args.runs[:-1], "new": args.runs[-1], "ratios": records},
                              markdown(records, olds, new, args.runs))
    return 0 if verdict([r for r in records if r["headline"] or args.all])["reproduces"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
