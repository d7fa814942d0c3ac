"""The mutation report's kept results (tests/mutation/results.json) and how a run merges into them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402


def _module(mutants, results, sha="a"):
    """A module as load_py returns it, from {name: status} of the mutants that ran."""
    rows = [{"name": n, "status": s, "lines": [f"+{n}"]} for n, s in sorted(results.items()) if s != "killed"]
    return {"mutants": mutants, "run": len(results), "killed": sum(s == "killed" for s in results.values()),
            "sha256": sha, "results": results, "rows": rows}


def _kept(mod):
    return {k: mod[k] for k in ("mutants", "run", "killed", "sha256", "rows")}


def test_a_full_run_replaces_the_kept_module():
    kept = {"m.py": _kept(_module(4, {"a": "killed", "b": "survived", "c": "killed", "d": "killed"}))}
    fresh = {"m.py": _module(5, {"a": "killed", "b": "killed", "c": "killed", "d": "killed", "e": "no tests"}, "b")}
    out = report.merge_py(kept, fresh)
    assert out["m.py"] == {"mutants": 5, "run": 5, "killed": 4, "sha256": "b",
                           "rows": [{"name": "e", "status": "no tests", "lines": ["+e"]}]}


def test_a_partial_run_updates_the_mutants_it_ran_in_a_fully_kept_module():
    kept = {"m.py": _kept(_module(4, {"a": "killed", "b": "survived", "c": "survived", "d": "killed"}))}
    # b is killed by a new test; d (killed when kept) survives now; c was not run again
    fresh = {"m.py": _module(4, {"b": "killed", "d": "survived"}, "b")}
    out = report.merge_py(kept, fresh)["m.py"]
    assert (out["mutants"], out["run"], out["killed"], out["sha256"]) == (4, 4, 2, "a")
    assert [(r["name"], r["status"]) for r in out["rows"]] == [("c", "survived"), ("d", "survived")]
    assert kept["m.py"]["killed"] == 2 and len(kept["m.py"]["rows"]) == 2  # the kept dict is not changed


def test_a_module_run_in_part_before_is_replaced_and_a_run_of_nothing_keeps_it():
    kept = {"m.py": _kept(_module(4, {"a": "survived"}))}
    fresh = {"m.py": _module(4, {"a": "killed", "b": "survived"})}
    out = report.merge_py(kept, fresh)
    assert (out["m.py"]["run"], out["m.py"]["killed"], len(out["m.py"]["rows"])) == (2, 1, 1)
    assert report.merge_py(out, {"m.py": _module(4, {})}) == out
    assert report.merge_py({}, {"n.py": _module(3, {})})["n.py"]["run"] == 0  # shown as not run


def test_equivalents_are_decided_when_the_report_is_written(monkeypatch):
    monkeypatch.setattr(report, "PY_EQUIVALENT", {"x": ("+same", "why"), "y": ("+moved", "why")})
    mods = {"m.py": {"mutants": 3, "run": 3, "killed": 1, "sha256": "a",
                     "rows": [{"name": "x", "status": "survived", "lines": ["-old", "+same"]},
                              {"name": "y", "status": "survived", "lines": ["-old", "+other"]}]}}
    rows = {r["name"]: r for r in report.classify_py(mods)}
    assert rows["x"]["status"] == "equivalent" and rows["x"]["reason"] == "why"
    assert rows["y"]["status"] == "survived" and "+moved" in rows["y"]["stale"]
    counts = report.py_counts(mods, list(rows.values()))["m.py"]
    assert report._row("m.py", counts) == "| m.py | 3 | 3 | 1 | 1 | 0 | 1 | 50.0% ✗ |"


def test_the_report_is_written_from_kept_results_alone(tmp_path):
    kept = {"format": report.RESULTS_FORMAT, "scopes": ["interp"], "runs": [["interp:all", 600.0, "2"]],
            "python": {"anec/ir/interp.py": {"mutants": 2, "run": 2, "killed": 1, "sha256": "0" * 64,
                                             "rows": [{"name": "anec.ir.interp.x_f__mutmut_1", "status": "survived",
                                                       "lines": ["-a = 1", "+a = 2"]}]}},
            "c": {"seconds": None, "mutants": {}}}
    res = tmp_path / "results.json"
    res.write_text(json.dumps(kept))
    out = tmp_path / "REPORT.md"
    assert report.main(["--py", str(tmp_path / "none"), "--c", str(tmp_path / "none.json"), "--results", str(res),
                        "--notes", str(tmp_path / "none.md"), "-o", str(out)]) == 0
    text = out.read_text()
    assert "| anec/ir/interp.py † | 2 | 2 | 1 | 1 | 0 | 0 | 50.0% ✗ |" in text  # the source differs from "0"*64
    assert "- `anec.ir.interp.x_f__mutmut_1` [survived]" in text and "  +a = 2" in text
    assert "- mutmut `interp:all`, 2 worker(s): 10.0 min" in text
    assert json.loads(res.read_text())["python"] == kept["python"]


def test_the_kept_results_are_consistent():
    doc = json.loads((HERE / "results.json").read_text(encoding="utf-8"))
    assert doc["format"] == report.RESULTS_FORMAT
    root = HERE.parent.parent
    for module, mod in doc["python"].items():
        assert (root / module).is_file(), module
        assert 0 <= mod["killed"] <= mod["run"] <= mod["mutants"], module
        assert mod["run"] - mod["killed"] == len(mod["rows"]), module
        assert all(r["status"] in ("survived", "no tests", "suspicious") for r in mod["rows"]), module
    ids = {m.id for m in report.MUTANTS}
    assert set(doc["c"]["mutants"]) <= ids
