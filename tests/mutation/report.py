"""Write the mutation report (tests/mutation/REPORT.md) from the last runs.

    python tests/mutation/report.py --py build/mutate --c build/mutate/c-results.json -o tests/mutation/REPORT.md

Python mutants come from mutmut's results in its working copies (``py-<scope>/mutants/**.meta``),
C mutants from ``cmutate.py``'s JSON. A mutant is *killed* (a test failed, crashed or
timed out), *survived*, *equivalent* (survived, and ``equivalent.py`` says why no test
can tell it from the original) or *no tests* (no selected test calls the function:
counted as surviving). The survivor rate of a module is (survived + no tests) / mutants,
equivalents left out of both. An ``equivalent.py`` entry whose recorded change no longer
matches the mutant is reported as stale, and the mutant counts as a survivor.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from c_mutants import MUTANTS  # noqa: E402
from equivalent import C_EQUIVALENT, OPEN_NOTES, PY_EQUIVALENT  # noqa: E402
from stage import SCOPES  # noqa: E402

# mutmut's exit-code meanings (mutmut/stats.py)
KILLED = {1, 3, 36, 24, -24, 152, 255, -11, -9, 37}
SURVIVED = {0}
NO_TESTS = {5, 33}
GOAL = 0.10


def _py_diffs(py_dir: Path, names: list[tuple[str, str]]) -> dict[str, str]:
    """mutmut's diff of each (name, module) mutant (read from its working copy)."""
    if not names:
        return {}
    cwd = os.getcwd()
    os.chdir(py_dir)
    try:
        from mutmut.mutation.diff_apply import get_diff_for_mutant

        out = {}
        for n, module in names:
            try:
                out[n] = get_diff_for_mutant(n, path=module)
            except Exception as e:  # a mutant of a function that no longer exists
                out[n] = f"(no diff: {type(e).__name__}: {e})"
        return out
    finally:
        os.chdir(cwd)


def changed_lines(diff: str) -> list[str]:
    """The '-'/'+' lines of a unified diff, stripped, without the file headers."""
    return [ln[0] + ln[1:].strip() for ln in diff.splitlines()
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


def load_py(scope_dir: Path) -> list[dict]:
    """The mutants of one scope's working copy (build/mutate/py-<scope>), with their exit codes."""
    rows = []
    mutants = scope_dir / "mutants"
    for meta in sorted(mutants.glob("anec/**/*.py.meta")):
        module = str(meta.relative_to(mutants))[: -len(".meta")]
        data = json.loads(meta.read_text())
        for name, code in sorted(data["exit_code_by_key"].items()):
            rows.append({"module": module, "name": name, "code": code})
    return rows


def classify_py(rows: list[dict], scope_dir: Path) -> list[dict]:
    survivors = [(r["name"], r["module"]) for r in rows if r["code"] in SURVIVED | NO_TESTS]
    diffs = _py_diffs(scope_dir, survivors)
    for r in rows:
        code = r["code"]
        if code is None:
            r["status"] = "not run"
        elif code in KILLED:
            r["status"] = "killed"
        elif code in SURVIVED | NO_TESTS:
            r["status"] = "survived" if code in SURVIVED else "no tests"
            r["diff"] = diffs.get(r["name"], "")
            eq = PY_EQUIVALENT.get(r["name"])
            if eq:
                want, reason = eq
                if want.strip() in changed_lines(r["diff"]):
                    r["status"], r["reason"] = "equivalent", reason
                else:
                    r["stale"] = f"equivalent.py records `{want.strip()}`"
        else:
            r["status"] = "suspicious"
    return rows


def load_c(path: Path) -> tuple[list[dict], float | None]:
    if not path.exists():
        return [], None
    doc = json.loads(path.read_text())
    by_id = {m.id: m for m in MUTANTS}
    rows = []
    for mid, res in sorted(doc["mutants"].items()):
        m = by_id.get(mid)
        if m is None:
            continue  # removed from the list since the run
        r = {"module": res["file"], "name": mid, "what": res["what"], "detail": res.get("detail", ""),
             "status": {"timeout": "killed"}.get(res["status"], res["status"]),
             "diff": "\n".join([*(f"-{ln}" for ln in m.old.strip("\n").splitlines()),
                                *(f"+{ln}" for ln in m.new.strip("\n").splitlines())])}
        if r["status"] == "survived" and mid in C_EQUIVALENT:
            r["status"], r["reason"] = "equivalent", C_EQUIVALENT[mid]
        rows.append(r)
    return rows, doc.get("seconds")


def table(rows: list[dict], group) -> list[str]:
    agg: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        agg[group(r["module"])][r["status"]] += 1
    out = ["| module | mutants | run | killed | survived | no tests | equivalent | survivor rate |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    tot: dict[str, int] = defaultdict(int)
    for mod in sorted(agg):
        a = agg[mod]
        for k, v in a.items():
            tot[k] += v
        out.append(_row(mod, a))
    out.append(_row("**total**", tot))
    return out


def _row(name: str, a: dict[str, int]) -> str:
    n = sum(a.values())
    counted = n - a.get("equivalent", 0) - a.get("not run", 0) - a.get("invalid", 0)
    surv = a.get("survived", 0) + a.get("no tests", 0)
    run = n - a.get("not run", 0)
    rate = f"{100.0 * surv / counted:.1f}%" if counted else "-"
    flag = " ✗" if counted and surv / counted > GOAL else ""
    if run < n:  # a partial run: the rate covers only the mutants that ran
        rate += " (partial)" if run else ""
    return (f"| {name} | {n} | {run} | {a.get('killed', 0)} | {a.get('survived', 0)} | {a.get('no tests', 0)} | "
            f"{a.get('equivalent', 0)} | {rate}{flag} |")


def group_of(module: str) -> str:
    if module.startswith("anec/passes/"):
        return "anec/passes/"
    if module.startswith("anec/mil/"):
        return "anec/mil/"
    return module


def render(py_rows: list[dict], c_rows: list[dict], py_runs: list[tuple[str, float, str]], c_seconds: float | None,
           scopes_run: list[str] | None = None, notes: str = "") -> str:
    lines = [
        "# Mutation testing report",
        "",
        "Written by `make mutate` (`tests/mutation/report.py`); do not edit by hand. How the runs work and",
        "how to read this: `tests/mutation/README.md`.",
        "",
        f"Goal: at most {GOAL:.0%} survivors per module (survived + no tests, over the mutants that are",
        "not equivalent). A ✗ marks a module over the goal.",
        "",
    ]
    lines += ["Columns: *mutants* generated, *run* (tested in the runs behind this report: a module with",
              "run < mutants was not fully run, and its rate covers only the mutants that ran).", ""]
    if scopes_run is not None:
        missing = [f"`{sc}` ({', '.join(SCOPES[sc][0])})" for sc in SCOPES if sc not in scopes_run]
        if missing:
            lines += [f"mutmut scopes with no run behind this report (no mutants generated): {', '.join(missing)}.", ""]
    if py_runs or c_seconds is not None:
        lines += ["Measured run times (wall clock, on the shared 2-core machine):", ""]
        for scope, secs, jobs in py_runs:
            lines.append(f"- mutmut `{scope}`, {jobs} worker(s): {secs / 60:.1f} min")
        if c_seconds is not None:
            lines.append(f"- C mutants ({len(c_rows)}), one at a time: {c_seconds / 60:.1f} min")
        lines.append("")
    if notes.strip():
        lines += ["Notes on the runs (from `build/mutate/notes.md`, written by whoever ran them):", "",
                  notes.strip(), ""]
    if py_rows:
        lines += ["## Python (mutmut)", "", "By area:", ""] + table(py_rows, group_of)
        lines += ["", "By file:", ""] + table(py_rows, lambda m: m) + [""]
    if c_rows:
        lines += ["## C (scripted mutants, `tests/mutation/c_mutants.py`)", ""] + table(c_rows, lambda m: m) + [""]
    for title, rows in (("Python", py_rows), ("C", c_rows)):
        surv = [r for r in rows if r["status"] in ("survived", "no tests")]
        if surv:
            lines += [f"## Open {title} survivors ({len(surv)})", ""]
            for r in surv:
                note = f" ({r['stale']})" if r.get("stale") else ""
                if r["name"] in OPEN_NOTES:
                    note += f". Open: {OPEN_NOTES[r['name']]}"
                what = f": {r['what']}" if r.get("what") else ""
                lines += [f"- `{r['name']}` [{r['status']}]{what}{note}", "", "  ```diff"]
                lines += ["  " + ln for ln in changed_lines(r.get("diff", ""))] + ["  ```", ""]
        eq = [r for r in rows if r["status"] == "equivalent"]
        if eq:
            lines += [f"## {title} equivalent mutants ({len(eq)})", ""]
            for r in eq:
                ch = "; ".join(f"`{c}`" for c in changed_lines(r.get("diff", "")))
                lines.append(f"- `{r['name']}` {ch}: {r['reason']}")
            lines.append("")
    killed_c = [r for r in c_rows if r["status"] == "killed"]
    if killed_c:
        lines += ["## C mutants killed, and by what", "", "| mutant | what | first failure |", "|---|---|---|"]
        for r in killed_c:
            lines.append(f"| `{r['name']}` | {r['what']} | {r['detail'].replace('|', '/')[:160]} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--py", default="build/mutate", help="the directory of mutmut's working copies (py-<scope>)")
    ap.add_argument("--c", default="build/mutate/c-results.json", help="cmutate.py's results")
    ap.add_argument("-o", "--out", default=str(HERE / "REPORT.md"))
    args = ap.parse_args(argv)
    py_dir = Path(args.py).resolve()
    py_rows = []
    scopes_run = []
    for scope_dir in sorted(py_dir.glob("py-*/")):
        if (scope_dir / "mutants").is_dir():
            py_rows += classify_py(load_py(scope_dir), scope_dir)
            scopes_run.append(scope_dir.name[len("py-"):])
    c_rows, c_seconds = load_c(Path(args.c))
    if not py_rows and not c_rows:
        raise SystemExit("no mutation results: run `make mutate-py` and/or `make mutate-c` first")
    runs_file = py_dir / "py-runs"  # one line per `make mutate-py`: scope, seconds, workers
    py_runs = []
    if runs_file.exists():
        for ln in runs_file.read_text().splitlines():
            parts = ln.split()
            if len(parts) == 3:
                py_runs.append((parts[0], float(parts[1]), parts[2]))
    notes_file = py_dir / "notes.md"
    notes = notes_file.read_text(encoding="utf-8") if notes_file.exists() else ""
    text = render(py_rows, c_rows, py_runs, c_seconds, scopes_run, notes)
    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out}: {len(py_rows)} Python and {len(c_rows)} C mutants")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
