"""Write the mutation report (tools/mutation/REPORT.md) from the kept results and the last runs.

    python tools/mutation/report.py --py build/mutate --c build/mutate/c-results.json -o tools/mutation/REPORT.md

The results behind the report are kept in the repository (``results.json`` beside this file),
so a report can be written again, and a run added to it, on any machine: a full mutmut run of
the whole project takes hours. Each report merges the kept results with the runs found in
``--py`` (mutmut's working copies, ``py-<scope>/mutants/**.meta``) and ``--c`` (``cmutate.py``'s
JSON), then writes both the report and the merged ``results.json``.

Merging, per Python module: a run that tested every mutant of a module replaces what was kept;
a run of some of its mutants updates those (a survivor killed by a new test, named in
``make mutate-py MUTANTS=...``; the rest of a module whose run was cut short) and keeps the rest.
C mutants are kept by id; a run replaces the ids it ran.
Kept per module: the number of mutants, the names of those killed (``{function: "1-4,7"}``;
results kept before names were, as a number), the others with their status and changed lines,
and the SHA-256 of the source the mutants were generated from; a module whose source has
changed since is marked in the report.

A mutant is *killed* (a test failed, crashed or timed out), *survived*, *equivalent* (survived,
and ``equivalent.py`` says why no test can tell it from the original) or *no tests* (no selected
test calls the function: counted as surviving). The survivor rate of a module is (survived + no
tests) / mutants, equivalents left out of both. An ``equivalent.py`` entry whose recorded change
no longer matches the mutant is reported as stale, and the mutant counts as a survivor.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from anec.fsutil import write_text_atomic  # noqa: E402
from c_mutants import MUTANTS  # noqa: E402
from equivalent import C_EQUIVALENT, OPEN_NOTES, PY_EQUIVALENT  # noqa: E402
from stage import SCOPES  # noqa: E402

# mutmut's exit-code meanings (mutmut/stats.py)
KILLED = {1, 3, 36, 24, -24, 152, 255, -11, -9, 37}
SURVIVED = {0}
NO_TESTS = {5, 33}
GOAL = 0.10
RESULTS_FORMAT = 1


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


def _status(code: int | None) -> str:
    if code is None:
        return "not run"
    if code in KILLED:
        return "killed"
    if code in SURVIVED:
        return "survived"
    if code in NO_TESTS:
        return "no tests"
    return "suspicious"


def _sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def load_py(scope_dir: Path) -> dict[str, dict]:
    """The modules of one scope's working copy (build/mutate/py-<scope>): module ->
    {"mutants", "sha256", "results": {name: status of the mutants that ran}, "not_run": {names},
    "rows": [...]} where rows are the mutants that ran and were not killed, with their changed lines."""
    mutants = scope_dir / "mutants"
    out: dict[str, dict] = {}
    for meta in sorted(mutants.glob("anec/**/*.py.meta")):
        module = str(meta.relative_to(mutants))[: -len(".meta")]
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        results = {name: _status(code) for name, code in codes.items()}
        if not results:
            continue  # nothing to mutate (a module of imports)
        out[module] = {"mutants": len(results), "sha256": _sha256(scope_dir / module),
                       "results": {n: s for n, s in results.items() if s != "not run"},
                       "not_run": {n for n, s in results.items() if s == "not run"}}
    survivors = [(n, m) for m, mod in out.items() for n, s in mod["results"].items() if s != "killed"]
    diffs = _py_diffs(scope_dir, survivors)
    for mod in out.values():
        mod["rows"] = [{"name": n, "status": s, "lines": changed_lines(diffs.get(n, ""))}
                       for n, s in sorted(mod["results"].items()) if s != "killed"]
    return out


def pack_names(names) -> dict[str, str]:
    """Mutant names -> {function: "1-4,7"} (mutmut names a mutant ``<function>__mutmut_<n>``)."""
    by_func: dict[str, list[int]] = defaultdict(list)
    for name in names:
        func, _, n = name.rpartition("__mutmut_")
        by_func[func].append(int(n))
    out = {}
    for func, ns in sorted(by_func.items()):
        ns.sort()
        spans, start = [], ns[0]
        for prev, cur in zip(ns, ns[1:] + [None]):
            if cur != prev + 1:
                spans.append(str(start) if start == prev else f"{start}-{prev}")
                start = cur
        out[func] = ",".join(spans)
    return out


def unpack_names(packed: dict[str, str]) -> set[str]:
    out = set()
    for func, spans in packed.items():
        for span in spans.split(","):
            lo, _, hi = span.partition("-")
            out.update(f"{func}__mutmut_{n}" for n in range(int(lo), int(hi or lo) + 1))
    return out


def killed_count(mod: dict) -> int:
    """Kills kept by name plus those kept only as a number (results from before names were kept)."""
    return len(unpack_names(mod["killed"])) + mod.get("killed_unnamed", 0)


def run_count(mod: dict) -> int:
    return killed_count(mod) + len(mod["rows"])


def merge_py(kept: dict[str, dict], fresh: dict[str, dict]) -> dict[str, dict]:
    """The kept modules updated by a run's: a run of every mutant of a module replaces it; any
    other run updates the mutants it ran, the rest kept as they were. When the run's code
    generates mutants the kept results do not name, or another number of them (functions
    changed or renamed since), the kept results of mutants it no longer generates are dropped
    and those it generates without a result are not run (the module keeps its † until a full
    run)."""
    out = {m: {**v, "rows": list(v["rows"])} for m, v in kept.items()}
    for module, new in fresh.items():
        ran = new["results"]
        old = out.get(module)
        if old is not None and not ran:
            continue  # mutants generated, none run: keep what was kept
        by_name = {r["name"]: r for r in new["rows"]}
        if old is None or len(ran) == new["mutants"] or run_count(old) == 0:  # start again from this run
            old = {"mutants": new["mutants"], "sha256": new["sha256"], "killed": {}, "rows": [],
                   "not_run": pack_names(new["not_run"])}
        killed = unpack_names(old["killed"])
        rows = {r["name"]: r for r in old["rows"]}
        unnamed = old.get("killed_unnamed", 0)
        full = run_count(old) == old["mutants"]
        current = set(ran) | set(new["not_run"])  # every mutant of the code this run generated
        kept_names = killed | set(rows) | unpack_names(old.get("not_run", {}))
        renamed = not unnamed and (old["mutants"] != new["mutants"] or not kept_names <= current)
        if renamed:  # functions changed since: results kept for mutants no longer generated are gone
            killed &= current
            rows = {n: r for n, r in rows.items() if n in current}
        for name, status in ran.items():
            known = name in killed or name in rows
            killed.discard(name)
            rows.pop(name, None)
            if not known and unnamed and full:
                unnamed -= 1  # one of the kills kept without a name
            if status == "killed":
                killed.add(name)
            else:
                rows[name] = by_name[name]
        not_run = unpack_names(old.get("not_run", {})) - set(ran)
        if renamed:  # a mutant with no kept result (new, or of a changed function) is not run
            not_run = current - killed - set(rows)
        out[module] = {"mutants": new["mutants"] if renamed else old["mutants"], "sha256": old["sha256"],
                       "killed": pack_names(killed),
                       **({"killed_unnamed": unnamed} if unnamed else {}),
                       **({"not_run": pack_names(not_run)} if not_run else {}),
                       "rows": [rows[n] for n in sorted(rows)]}
    return out


def classify_py(modules: dict[str, dict]) -> list[dict]:
    """Rows of the mutants that were not killed, with status "equivalent" where equivalent.py says so."""
    rows = []
    for module, mod in sorted(modules.items()):
        for kept in mod["rows"]:
            r = {**kept, "module": module}
            eq = PY_EQUIVALENT.get(r["name"]) if r["status"] in ("survived", "no tests") else None
            if eq:
                want, reason = eq
                if want.strip() in r["lines"]:
                    r["status"], r["reason"] = "equivalent", reason
                else:
                    r["stale"] = f"equivalent.py records `{want.strip()}`"
            rows.append(r)
    return rows


def py_counts(modules: dict[str, dict], rows: list[dict]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for module, mod in modules.items():
        counts[module] = defaultdict(int, {"killed": killed_count(mod), "not run": mod["mutants"] - run_count(mod)})
    for r in rows:
        counts[r["module"]][r["status"]] += 1
    return counts


def merge_c(kept: dict, path: Path) -> dict:
    """Kept C results ({"seconds", "mutants": {id: record}}) updated by cmutate.py's JSON at ``path``."""
    out = {"seconds": kept.get("seconds"),
           "mutants": {k: dict(v, detail=_relative(v.get("detail", ""))) for k, v in kept.get("mutants", {}).items()}}
    if kept.get("count") is not None:
        out["count"] = kept["count"]
    if path.exists():
        doc = json.loads(path.read_text())
        for mid, res in doc["mutants"].items():
            out["mutants"][mid] = {k: res.get(k, "") for k in ("file", "what", "status", "detail", "seconds")}
            out["mutants"][mid]["detail"] = _relative(out["mutants"][mid]["detail"])
        if doc.get("seconds") is not None:
            out["seconds"] = doc["seconds"]
            out.pop("count", None)
            if doc.get("count") is not None:
                out["count"] = doc["count"]
    by_id = {m.id for m in MUTANTS}
    out["mutants"] = {k: v for k, v in sorted(out["mutants"].items()) if k in by_id}  # removed since
    return out


def _relative(detail: str) -> str:
    """A failure detail with the paths of the checkout it ran in made project-relative (C test
    programs print their sources' absolute paths)."""
    return re.sub(r"(?<![\w.])/[^\s:|]*?/(?=(?:tests|csrc|build)/)", "", detail)


def classify_c(kept: dict) -> list[dict]:
    by_id = {m.id: m for m in MUTANTS}
    rows = []
    for mid, res in kept["mutants"].items():
        m = by_id[mid]
        r = {"module": res["file"], "name": mid, "what": res["what"], "detail": _relative(res.get("detail", "")),
             "status": {"timeout": "killed"}.get(res["status"], res["status"]), "seconds": res.get("seconds"),
             "lines": [*(f"-{ln.strip()}" for ln in m.old.strip("\n").splitlines()),
                       *(f"+{ln.strip()}" for ln in m.new.strip("\n").splitlines())]}
        if r["status"] == "survived" and mid in C_EQUIVALENT:
            r["status"], r["reason"] = "equivalent", C_EQUIVALENT[mid]
        rows.append(r)
    return rows


def table(counts: dict[str, dict[str, int]], group, changed: set[str] = frozenset()) -> list[str]:
    agg: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for module, c in counts.items():
        for k, v in c.items():
            agg[group(module)][k] += v
    out = ["| module | mutants | run | killed | survived | no tests | equivalent | survivor rate |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    tot: dict[str, int] = defaultdict(int)
    for mod in sorted(agg):
        a = agg[mod]
        for k, v in a.items():
            tot[k] += v
        mark = " †" if any(group(m) == mod for m in changed) else ""
        out.append(_row(mod + mark, a))
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


def render(py_counts_: dict[str, dict[str, int]], py_rows: list[dict], c_rows: list[dict],
           py_runs: list[tuple[str, float, str]], c_seconds: float | None,
           scopes_run: list[str] | None = None, notes: str = "", changed: set[str] = frozenset(),
           c_count: int | None = None) -> str:
    lines = [
        "# Mutation testing report",
        "",
        "Written by `make mutate` (`tools/mutation/report.py`, from the results kept in",
        "`tools/mutation/results.json` and the last runs); do not edit by hand. How the runs work and",
        "how to read this: `tools/mutation/README.md`.",
        "",
        f"Goal: at most {GOAL:.0%} survivors per module (survived + no tests, over the mutants that are",
        "not equivalent). A ✗ marks a module over the goal.",
        "",
    ]
    lines += ["Columns: *mutants* generated, *run* (tested in the runs behind this report: a module with",
              "run < mutants was not fully run, and its rate covers only the mutants that ran).", ""]
    if changed:
        lines += ["A † marks a module whose source has changed since the mutants behind its row were",
                  f"generated ({', '.join(f'`{m}`' for m in sorted(changed))}): its row is for the earlier code.", ""]
    if scopes_run is not None:
        missing = [f"`{sc}` ({', '.join(SCOPES[sc][0])})" for sc in SCOPES if sc not in scopes_run]
        if missing:
            lines += [f"mutmut scopes with no run behind this report (no mutants generated): {', '.join(missing)}.", ""]
    if py_runs or c_seconds is not None:
        lines += ["Measured run times (wall clock, on the shared 2-core machine):", ""]
        for scope, secs, jobs in py_runs:
            lines.append(f"- mutmut `{scope}`, {jobs} worker(s): {secs / 60:.1f} min")
        if c_seconds is not None:
            of = f"all {c_count}" if c_count is not None else "all of them (the count was not recorded)"
            lines.append(f"- C mutants, the last run of {of}, one at a time: {c_seconds / 60:.1f} min")
        lines.append("")
    per_file: dict[str, list] = defaultdict(list)
    for r in c_rows:
        per_file[r["module"]].append(r.get("seconds"))
    timed = {f: secs for f, secs in per_file.items() if all(isinstance(x, (int, float)) for x in secs)}
    if timed:
        lines += ["C mutants per file, the sum of each mutant's last run (build and tests; the unmutated",
                  "baseline run before them not included):", ""]
        lines += [f"- `{f}` ({len(secs)}): {sum(secs) / 60:.1f} min" for f, secs in sorted(timed.items())] + [""]
    if notes.strip():
        lines += ["Notes on the runs (from `tools/mutation/notes.md`, written by whoever ran them):", "",
                  notes.strip(), ""]
    if py_counts_:
        lines += ["## Python (mutmut)", "", "By area:", ""] + table(py_counts_, group_of, changed)
        lines += ["", "By file:", ""] + table(py_counts_, lambda m: m, changed) + [""]
    if c_rows:
        c_counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in c_rows:
            c_counts[r["module"]][r["status"]] += 1
        lines += ["## C (scripted mutants, `tools/mutation/c_mutants.py`)", ""] + table(c_counts, lambda m: m) + [""]
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
                lines += ["  " + ln for ln in r["lines"]] + ["  ```", ""]
        eq = [r for r in rows if r["status"] == "equivalent"]
        if eq:
            lines += [f"## {title} equivalent mutants ({len(eq)})", ""]
            for r in eq:
                ch = "; ".join(f"`{c}`" for c in r["lines"])
                lines.append(f"- `{r['name']}` {ch}: {r['reason']}")
            lines.append("")
    killed_c = [r for r in c_rows if r["status"] == "killed"]
    if killed_c:
        lines += ["## C mutants killed, and by what", "", "| mutant | what | first failure |", "|---|---|---|"]
        for r in killed_c:
            lines.append(f"| `{r['name']}` | {r['what']} | {r['detail'].replace('|', '/')[:160]} |")
        lines.append("")
    return "\n".join(lines)


def read_runs(path: Path) -> list[tuple[str, float, str]]:
    """``py-runs``: one line per `make mutate-py`: scope, seconds, workers."""
    runs = []
    if path.exists():
        for ln in path.read_text().splitlines():
            parts = ln.split()
            if len(parts) == 3:
                runs.append((parts[0], float(parts[1]), parts[2]))
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--py", default="build/mutate", help="the directory of mutmut's working copies (py-<scope>)")
    ap.add_argument("--c", default="build/mutate/c-results.json", help="cmutate.py's results")
    ap.add_argument("--results", default=str(HERE / "results.json"), help="the kept results (read and rewritten)")
    ap.add_argument("--notes", default=str(HERE / "notes.md"), help="free-text notes on the runs, copied in")
    ap.add_argument("-o", "--out", default=str(HERE / "REPORT.md"))
    ap.add_argument("--not-run", nargs="+", metavar="MODULE",
                    help="print the kept names of the mutants of MODULE (anec/mil/artifact.py) that have not run, "
                         "to continue a run that was cut short (make mutate-py MUTANTS=...), and write nothing")
    args = ap.parse_args(argv)
    results_path = Path(args.results)
    kept = json.loads(results_path.read_text()) if results_path.exists() else {}
    if kept and kept.get("format") != RESULTS_FORMAT:
        raise SystemExit(f"{results_path}: results format {kept.get('format')!r}, this report reads {RESULTS_FORMAT}")
    modules = kept.get("python", {})
    if args.not_run:
        names = []
        for module in args.not_run:
            if module not in modules:
                raise SystemExit(f"{results_path}: no results kept for {module}")
            names += sorted(unpack_names(modules[module].get("not_run", {})))
        print(" ".join(names))  # one line: make splits a recipe at a newline in MUTANTS
        return 0
    scopes_run = set(kept.get("scopes", []))
    runs = [tuple(r) for r in kept.get("runs", [])]
    py_dir = Path(args.py).resolve()
    for scope_dir in sorted(py_dir.glob("py-*/")):
        if (scope_dir / "mutants").is_dir():
            modules = merge_py(modules, load_py(scope_dir))
            scopes_run.add(scope_dir.name[len("py-"):])
    runs += [r for r in read_runs(py_dir / "py-runs") if r not in runs]
    modules = {m: v for m, v in modules.items() if (ROOT / m).is_file()}  # modules removed since
    c_kept = merge_c(kept.get("c", {}), Path(args.c))
    if not modules and not c_kept["mutants"]:
        raise SystemExit("no mutation results: run `make mutate-py` and/or `make mutate-c` first")
    py_rows = classify_py(modules)
    c_rows = classify_c(c_kept)
    changed = {m for m, v in modules.items() if v.get("sha256") != _sha256(ROOT / m)}
    notes_file = Path(args.notes)
    notes = notes_file.read_text(encoding="utf-8") if notes_file.exists() else ""
    text = render(py_counts(modules, py_rows), py_rows, c_rows, runs, c_kept["seconds"],
                  sorted(scopes_run), notes, changed, c_kept.get("count"))
    doc = {"format": RESULTS_FORMAT, "scopes": sorted(scopes_run), "runs": [list(r) for r in runs],
           "python": {m: modules[m] for m in sorted(modules)}, "c": c_kept}
    write_text_atomic(results_path, json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(args.out, text + "\n")
    print(f"wrote {args.out} and {results_path}: {sum(v['mutants'] for v in modules.values())} Python "
          f"and {len(c_rows)} C mutants")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
