"""The mutation report's kept results (tools/mutation/results.json) and how a run merges into them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2] / "tools" / "mutation"
sys.path.insert(0, str(HERE))

import report  # noqa: E402


def _module(mutants, results, sha="a"):
    """A module as load_py returns it, from {name: status} of the mutants that ran."""
    rows = [{"name": n, "status": s, "lines": [f"+{n}"]} for n, s in sorted(results.items()) if s != "killed"]
    not_run = {f"f__mutmut_{i}" for i in range(1, mutants + 1)} - set(results)
    return {"mutants": mutants, "sha256": sha, "results": results, "not_run": not_run, "rows": rows}


def _status(mod):
    """name -> status of a kept module's named mutants, and its (killed, run) counts."""
    named = {n: "killed" for n in report.unpack_names(mod["killed"])}
    named.update({r["name"]: r["status"] for r in mod["rows"]})
    return named, (report.killed_count(mod), report.run_count(mod))


def test_names_pack_into_ranges_per_function():
    names = ["f__mutmut_1", "f__mutmut_2", "f__mutmut_3", "f__mutmut_7", "xǁCǁg__mutmut_10"]
    assert report.pack_names(names) == {"f": "1-3,7", "xǁCǁg": "10"}
    assert report.unpack_names(report.pack_names(names)) == set(names)
    assert report.pack_names([]) == {}


def test_a_full_run_replaces_the_kept_module():
    kept = report.merge_py({}, {"m.py": _module(4, {"f__mutmut_1": "killed", "f__mutmut_2": "survived"})})
    kept["m.py"]["killed_unnamed"] = 5
    fresh = {"m.py": _module(3, {"f__mutmut_1": "killed", "f__mutmut_2": "killed", "f__mutmut_3": "no tests"}, "b")}
    out = report.merge_py(kept, fresh)["m.py"]
    assert out == {"mutants": 3, "sha256": "b", "killed": {"f": "1-2"},
                   "rows": [{"name": "f__mutmut_3", "status": "no tests", "lines": ["+f__mutmut_3"]}]}


def test_runs_in_parts_add_up_by_name():
    """A run cut short, then the rest of its mutants on another machine: the kept results
    are the union, the later run deciding a mutant both ran."""
    first = report.merge_py({}, {"m.py": _module(4, {"f__mutmut_1": "killed", "f__mutmut_2": "survived"})})
    assert _status(first["m.py"])[1] == (1, 2)
    second = report.merge_py(first, {"m.py": _module(4, {"f__mutmut_2": "killed", "f__mutmut_3": "survived",
                                                         "f__mutmut_4": "killed"}, "b")})
    named, counts = _status(second["m.py"])
    assert named == {"f__mutmut_1": "killed", "f__mutmut_2": "killed", "f__mutmut_3": "survived",
                     "f__mutmut_4": "killed"}
    assert counts == (3, 4) and second["m.py"]["sha256"] == "a"  # only a full run vouches for new code
    assert _status(first["m.py"])[1] == (1, 2)  # the kept dict is not changed
    assert report.unpack_names(first["m.py"]["not_run"]) == {"f__mutmut_3", "f__mutmut_4"}
    assert "not_run" not in second["m.py"]  # every mutant has run
    assert report.merge_py(second, {"m.py": _module(4, {})}) == second  # a run of nothing keeps it
    assert report.run_count(report.merge_py({}, {"n.py": _module(3, {})})["n.py"]) == 0  # shown as not run


def test_a_run_of_changed_functions_drops_the_mutants_they_no_longer_have():
    """A fully kept module whose function g changed (2 mutants before, 3 now) and f lost one:
    a run of g's mutants replaces g's results, f's vanished mutant is dropped, and nothing is
    counted twice; the sha256 stays the old one (only a full run vouches for new code)."""
    def module(names, results, sha):
        rows = [{"name": n, "status": s, "lines": [f"+{n}"]} for n, s in sorted(results.items()) if s != "killed"]
        return {"mutants": len(names), "sha256": sha, "results": results, "not_run": set(names) - set(results),
                "rows": rows}

    before = ["f__mutmut_1", "f__mutmut_2", "f__mutmut_3", "g__mutmut_1", "g__mutmut_2"]
    kept = report.merge_py({}, {"m.py": module(before, {n: "killed" for n in before[:-1]} | {"g__mutmut_2": "survived"},
                                               "a")})
    now = ["f__mutmut_1", "f__mutmut_2", "g__mutmut_1", "g__mutmut_2", "g__mutmut_3", "h__mutmut_1"]
    out = report.merge_py(kept, {"m.py": module(now, {"g__mutmut_1": "killed", "g__mutmut_2": "killed",
                                                      "g__mutmut_3": "survived"}, "b")})["m.py"]
    named, counts = _status(out)
    assert named == {"f__mutmut_1": "killed", "f__mutmut_2": "killed", "g__mutmut_1": "killed",
                     "g__mutmut_2": "killed", "g__mutmut_3": "survived"}
    assert counts == (4, 5) and out["mutants"] == 6 and out["sha256"] == "a"
    assert report.unpack_names(out["not_run"]) == {"h__mutmut_1"}
    # the same number of mutants: nothing is dropped (a run of survivors after a new test)
    again = report.merge_py({"m.py": out}, {"m.py": module(now, {"h__mutmut_1": "killed"}, "b")})["m.py"]
    assert _status(again)[1] == (5, 6) and "not_run" not in again


def test_a_run_of_a_renamed_function_drops_the_old_names_at_the_same_count():
    """g renamed to h (as many mutants as before): a run of h's mutants replaces g's kept
    results instead of adding to them, so the module counts its mutants once."""
    def module(names, results):
        rows = [{"name": n, "status": s, "lines": [f"+{n}"]} for n, s in sorted(results.items()) if s != "killed"]
        return {"mutants": len(names), "sha256": "a", "results": results, "not_run": set(names) - set(results),
                "rows": rows}

    before = ["f__mutmut_1", "g__mutmut_1", "g__mutmut_2"]
    kept = report.merge_py({}, {"m.py": module(before, {"f__mutmut_1": "killed", "g__mutmut_1": "killed",
                                                         "g__mutmut_2": "survived"})})
    now = ["f__mutmut_1", "h__mutmut_1", "h__mutmut_2"]
    out = report.merge_py(kept, {"m.py": module(now, {"h__mutmut_1": "killed", "h__mutmut_2": "killed"})})["m.py"]
    named, counts = _status(out)
    assert named == {"f__mutmut_1": "killed", "h__mutmut_1": "killed", "h__mutmut_2": "killed"}
    assert counts == (3, 3) and out["mutants"] == 3 and "not_run" not in out


def test_kills_kept_without_names_give_way_to_named_results():
    """Results kept before names were (a number of kills): in a fully run module, a mutant
    that is not among the named ones was one of those kills."""
    kept = {"m.py": {"mutants": 4, "sha256": "a", "killed": {}, "killed_unnamed": 3,
                     "rows": [{"name": "f__mutmut_2", "status": "survived", "lines": []}]}}
    fresh = {"m.py": _module(4, {"f__mutmut_2": "killed", "f__mutmut_3": "survived"})}
    out = report.merge_py(kept, fresh)["m.py"]
    assert "not_run" not in out  # the kept module was fully run
    named, counts = _status(out)
    assert named == {"f__mutmut_2": "killed", "f__mutmut_3": "survived"}
    assert out["killed_unnamed"] == 2 and counts == (3, 4)
    # the same run over a module not fully run adds to it
    kept["m.py"]["killed_unnamed"] = 1
    out = report.merge_py(kept, fresh)["m.py"]
    assert out["killed_unnamed"] == 1 and _status(out)[1] == (2, 3)


def test_equivalents_are_decided_when_the_report_is_written(monkeypatch):
    monkeypatch.setattr(report, "PY_EQUIVALENT", {"x": ("+same", "why"), "y": ("+moved", "why")})
    mods = {"m.py": {"mutants": 3, "sha256": "a", "killed": {"z": "1"},
                     "rows": [{"name": "x", "status": "survived", "lines": ["-old", "+same"]},
                              {"name": "y", "status": "survived", "lines": ["-old", "+other"]}]}}
    rows = {r["name"]: r for r in report.classify_py(mods)}
    assert rows["x"]["status"] == "equivalent" and rows["x"]["reason"] == "why"
    assert rows["y"]["status"] == "survived" and "+moved" in rows["y"]["stale"]
    counts = report.py_counts(mods, list(rows.values()))["m.py"]
    assert report._row("m.py", counts) == "| m.py | 3 | 3 | 1 | 1 | 0 | 1 | 50.0% ✗ |"


def test_the_report_is_written_from_kept_results_alone(tmp_path):
    kept = {"format": report.RESULTS_FORMAT, "scopes": ["interp"], "runs": [["interp:all", 600.0, "2"]],
            "python": {"anec/ir/interp.py": {"mutants": 2, "sha256": "0" * 64, "killed": {"anec.ir.interp.x_f": "2"},
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
        assert report.run_count(mod) <= mod["mutants"], module
        killed, not_run = report.unpack_names(mod["killed"]), report.unpack_names(mod.get("not_run", {}))
        named = killed | not_run | {r["name"] for r in mod["rows"]}
        assert len(named) == len(killed) + len(not_run) + len(mod["rows"]), module  # no name twice
        if "not_run" in mod:  # named results: they account for every mutant
            assert len(named) + mod.get("killed_unnamed", 0) == mod["mutants"], module
        assert all(r["status"] in ("survived", "no tests", "suspicious") for r in mod["rows"]), module
    ids = {m.id for m in report.MUTANTS}
    assert set(doc["c"]["mutants"]) <= ids


def test_the_mutants_not_run_are_listed_to_continue_a_run(tmp_path, capsys):
    kept = report.merge_py({}, {"anec/m.py": _module(5, {"f__mutmut_1": "killed", "f__mutmut_4": "survived"})})
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"format": report.RESULTS_FORMAT, "python": kept}))
    assert report.main(["--results", str(res), "--not-run", "anec/m.py", "-o", str(tmp_path / "R.md")]) == 0
    assert capsys.readouterr().out.split() == ["f__mutmut_2", "f__mutmut_3", "f__mutmut_5"]
    assert not (tmp_path / "R.md").exists()


def test_the_mutants_not_run_of_several_modules_are_one_line(tmp_path, capsys):
    """make splits a recipe at a newline in MUTANTS: the names of every module go on one line."""
    kept = report.merge_py({}, {"anec/a.py": _module(2, {"f__mutmut_1": "killed"}),
                                "anec/b.py": _module(3, {"f__mutmut_2": "killed"})})
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"format": report.RESULTS_FORMAT, "python": kept}))
    assert report.main(["--results", str(res), "--not-run", "anec/a.py", "anec/b.py"]) == 0
    assert capsys.readouterr().out == "f__mutmut_2 f__mutmut_1 f__mutmut_3\n"


def test_every_c_mutant_names_code_that_is_there_once():
    """Each C mutant replaces a snippet that occurs exactly once in its file: an edit that
    moves or rewrites the code leaves an entry that cmutate.py would refuse (a stale mutant
    tests nothing); this finds it when the code changes, not at the next mutation run."""
    import c_mutants

    root = HERE.parents[1]
    matches = [(m.id, m.file, (root / m.file).read_text("utf-8").count(m.old)) for m in c_mutants.MUTANTS]
    stale = [row for row in matches if row[2] != 1]
    assert not stale, f"(mutant, file, matches) not matching once: {stale}"
