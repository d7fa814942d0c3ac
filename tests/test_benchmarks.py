"""The benchmark harness (benchmarks/harness.py) on tiny fake workers, and every benchmark
script's command line. Fast: no benchmark is run here (``make bench`` runs them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402

FAKE = """
import json, os, sys, time
name, log = sys.argv[1], sys.argv[2]
with open(log, "a") as f:
    f.write(name + "\\n")
if name == "slow":
    time.sleep(30)
n = sum(1 for line in open(log) if line.strip() == name)
print("some output before the result")
print(json.dumps({"name": name, "value": {"a": 10.0, "b": 1.0, "c": 4.0}[name] * n, "count": 3,
                  "pythonpath": os.environ.get("PYTHONPATH", ""), "mark": os.environ.get("FAKE_MARK")}))
"""


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE)
    log = tmp_path / "order.log"
    return lambda name: [str(script), name, str(log)], log


def test_rounds_alternate_and_each_side_runs_in_its_own_process(fake):
    argv, log = fake
    rounds = harness.run_rounds({n: argv(n) for n in "abc"}, 4, log=False)
    # forward, reversed, forward, reversed: no side always first or last
    assert log.read_text().split() == list("abc" "cba" "abc" "cba")
    assert [r["value"] for r in rounds["a"]] == [10.0, 20.0, 30.0, 40.0]
    assert all(r["process_s"] > 0 for rs in rounds.values() for r in rs)
    # the worker's environment puts this checkout first on the path
    assert rounds["b"][0]["pythonpath"].split(os.pathsep)[0] == str(ROOT)


def test_per_side_environment(fake):
    argv, _ = fake
    rounds = harness.run_rounds({"a": argv("a"), "b": argv("b")}, 1, log=False,
                                env={"FAKE_MARK": "all"}, envs={"b": {"FAKE_MARK": "b only", "PYTHONPATH": "/x"}})
    assert rounds["a"][0]["mark"] == "all"
    assert rounds["b"][0]["mark"] == "b only" and rounds["b"][0]["pythonpath"] == "/x"


def test_a_side_over_its_budget_is_stopped_and_not_run_again(fake):
    argv, log = fake
    rounds = harness.run_rounds({"a": argv("a"), "slow": argv("slow")}, 3, log=False, timeout=1.0)
    assert rounds["slow"] == [{"skipped": "over the 1 s budget"}]
    assert log.read_text().split().count("slow") == 1
    assert len(harness.done(rounds["a"])) == 3 and harness.done(rounds["slow"]) == []


def test_a_failing_worker_is_an_error_naming_it(tmp_path):
    # a long path (CI's temporary folders are long): the script's name must still show
    (tmp_path / ("d" * 90)).mkdir()
    bad = tmp_path / ("d" * 90) / "bad.py"
    bad.write_text("import sys; sys.exit('it broke')")
    with pytest.raises(RuntimeError, match="(?s)bad.py failed .*it broke"):
        harness.run_worker([str(bad)])


def test_spread_and_its_format():
    s = harness.spread([3.0, 1.0, 2.0, 10.0])
    assert s == {"min": 1.0, "median": 2.5, "max": 10.0, "n": 4}
    assert harness.fmt(s) == "2.5 (1.0-10.0)"
    assert harness.fmt(harness.spread([2.0]), 2) == "2.00"  # one round: the value alone
    assert harness.fmt(7, 0) == "7"  # a number the same in every round
    assert harness.fmt(harness.scale(s, 1000), 0) == "2500 (1000-10000)"
    assert harness.median(s) == 2.5 and harness.median(4.0) == 4.0
    with pytest.raises(ValueError):
        harness.spread([])


def test_ratios_are_taken_per_round():
    # the slow round hits both sides: the per-round ratio stays 2, medians alone would not show it
    a, b = [2.0, 20.0, 4.0], [1.0, 10.0, 2.0]
    assert harness.ratio_spread(a, b) == {"min": 2.0, "median": 2.0, "max": 2.0, "n": 3}
    num = [{"s": 2.0}, {"skipped": "x"}, {"s": 9.0}]
    den = [{"s": 1.0}, {"s": 1.0}, {"s": 3.0}]
    assert harness.paired_ratio(num, den, lambda r: r["s"]) == {"min": 2.0, "median": 2.5, "max": 3.0, "n": 2}
    assert harness.paired_ratio([{"skipped": "x"}], den[:1], lambda r: r["s"]) is None
    with pytest.raises(ValueError):
        harness.ratio_spread([1.0], [1.0, 2.0])


def test_summarize_keeps_the_shape():
    rounds = [{"t": 1.0, "count": 3, "name": "x", "ok": True, "rows": [{"s": 1.0}, {"s": 5.0}], "uneven": [1]},
              {"t": 3.0, "count": 3, "name": "y", "ok": True, "rows": [{"s": 2.0}, {"s": 5.0}], "uneven": [1, 2]}]
    out = harness.summarize(rounds)
    assert out["t"] == {"min": 1.0, "median": 2.0, "max": 3.0, "n": 2}
    assert out["count"] == 3 and out["name"] == "x" and out["ok"] is True
    assert out["rows"] == [{"s": {"min": 1.0, "median": 1.5, "max": 2.0, "n": 2}}, {"s": 5.0}]
    assert out["uneven"] == [1]


def test_header_warns_of_a_busy_machine(monkeypatch):
    monkeypatch.setattr(harness, "other_cpu_share", lambda start=None: None)  # judged by the load average
    cores = os.cpu_count() or 1
    busy = harness.header("T", [cores * 2.0 + 1, 1, 1], [0.1, 0.1, 0.1], 3, "What.")
    assert busy[0] == "# T" and busy[2].startswith("**Run under load**")
    quiet = harness.header("T", [0.5, 0.5, 0.5], [0.9, 0.5, 0.5], 3, "What.")
    assert not any("under load" in line for line in quiet)
    text = "\n".join(quiet)
    assert "0.50/0.50/0.50 at the start, 0.90/0.50/0.50 at the end" in text
    assert "3 rounds, each side in its own process, alternating order" in text
    assert "median (min-max)" in text and "What." in text
    assert "1 round, in one process" in "\n".join(harness.header("T", [], [], 1, "", scheme="in one process"))
    # the end of the run counts too
    assert "Run under load" in harness.header("T", [0.1], [cores * 2.0 + 1], 2, "")[2]


def test_results_are_written_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(harness, "other_cpu_share", lambda start=None: 0.02)
    harness.write_results("x", {"a": 1}, ["# X", "", "line"])
    written = json.loads((tmp_path / "results" / "x.json").read_text())
    assert written.pop("date") and written == {"a": 1, "other_cpu_share": 0.02}
    assert (tmp_path / "results" / "x.md").read_text() == "# X\n\nline\n"
    assert not list((tmp_path / "results").glob("*.tmp"))


SCRIPTS = sorted(p.name for p in BENCH.glob("bench_*.py"))


def test_every_benchmark_is_listed():
    assert {"bench_compile.py", "bench_import.py", "bench_models.py", "bench_partition.py", "bench_passes.py",
            "bench_runtime.py", "bench_threads.py", "bench_training.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS + ["run_all.py"])
def test_help_and_a_quick_mode(script):
    """Every benchmark parses its command line and has a --quick smoke mode."""
    proc = subprocess.run([sys.executable, str(BENCH / script), "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=harness.worker_env())
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout


def test_a_worker_killed_by_a_signal_says_which(tmp_path):
    bad = tmp_path / "killed.py"
    bad.write_text("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    with pytest.raises(RuntimeError, match="killed.py failed .killed by SIGKILL, most likely out of memory"):
        harness.run_worker([str(bad)])


def test_a_benchmark_that_uses_every_core_counts_its_own_threads_at_the_end(monkeypatch):
    monkeypatch.setattr(harness, "other_cpu_share", lambda start=None: None)  # no /proc/stat: the end load
    cores = os.cpu_count() or 1
    end = [cores + 0.4]  # the benchmark's own threads on every core, nothing else
    assert "Run under load" in harness.header("T", [0.1], end, 1, "")[2]
    assert not any("under load" in line for line in harness.header("T", [0.1], end, 1, "", own_threads=cores))
    # other work on top of its own threads still shows, and so does a busy start
    assert "Run under load" in harness.header("T", [0.1], [2.0 * cores + 1], 1, "", own_threads=cores)[2]
    assert "Run under load" in harness.header("T", [cores + 0.4], [0.1], 1, "", own_threads=cores)[2]


def test_compare_runs_checks_each_ratio_of_a_rerun_against_the_earlier_spread(tmp_path):
    """benchmarks/compare_runs.py: a ratio whose rerun median falls in the earlier run's
    [min, max] reproduces, one outside is a MISS with how far; figures that are not ratios are
    not compared; rows are matched by their name, not their position; a spread under a key that
    names a ratio (``phase_vs_torch/optimizer_s``, ``speedup[...]/cpu_total``) is one. A headline
    that misses, or is missing from the rerun, fails the check (exit 1); another ratio fails it
    only with ``--all``."""
    import subprocess
    import sys

    def spread(lo, med, hi):
        return {"min": lo, "median": med, "max": hi, "n": 3}

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    doc = {"rows": [{"format": "int8", "speedup": spread(17.0, 18.0, 19.0), "seconds": spread(1, 2, 3)},
                    {"format": "lut4", "speedup": spread(10.0, 11.0, 12.0)}],
           "a_over_b": spread(0.9, 1.0, 1.1),
           "phase_vs_torch": {"optimizer_s": spread(0.6, 0.7, 0.8)},
           "speedup": [{"variant": "on", "nodes_in": 10, "cpu": spread(2.0, 2.5, 3.0)},
                       {"variant": "on", "nodes_in": 100, "cpu": spread(3.0, 3.2, 3.3)}]}
    (old / "x.json").write_text(json.dumps(doc))
    doc2 = {"rows": [{"format": "lut4", "speedup": spread(9.0, 11.5, 12.5)},  # moved: matched by name
                     {"format": "int8", "speedup": spread(20, 22.0, 23), "seconds": spread(9, 9, 9)}],
            "a_over_b": spread(1.0, 1.05, 1.2),
            "phase_vs_torch": {"optimizer_s": spread(0.9, 0.95, 1.0)},
            "speedup": [{"variant": "on", "nodes_in": 100, "cpu": spread(3.1, 3.2, 3.4)},
                        {"variant": "on", "nodes_in": 10, "cpu": spread(3.1, 3.2, 3.4)}]}
    (new / "x.json").write_text(json.dumps(doc2))
    script = str(Path(harness.__file__).with_name("compare_runs.py"))

    def run(*args):
        return subprocess.run([sys.executable, script, *map(str, args)], capture_output=True, text=True)

    r = run(old, new, "--all")
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("MISS  x/rows[int8]/speedup: 22 against 18") and "1.16x the upper end" in line
               for line in lines), r.stdout
    assert any(line.startswith("ok    x/rows[lut4]/speedup") for line in lines)
    assert any(line.startswith("ok    x/a_over_b") for line in lines)
    assert any(line.startswith("MISS  x/phase_vs_torch/optimizer_s: 0.95 against 0.7") for line in lines)
    assert any(line.startswith("MISS  x/speedup[on,10]/cpu: 3.2 against 2.5") for line in lines), r.stdout
    assert any(line.startswith("ok    x/speedup[on,100]/cpu: 3.2 against 3.2") for line in lines)
    assert not any("seconds" in line for line in lines)
    assert lines[-3:-1] == ["0 of 0 headline ratios (*) reproduce within the earlier run's spread",
                            "3 of 6 other ratios reproduce within the earlier run's spread"]
    # 3 misses of 6 where chance gives 2.4; rows[int8] lies further out than its range is wide
    assert lines[-1].startswith("ratios: 3 of 6 outside, 2.4 expected by chance alone") and "1 further out" in lines[-1]
    assert lines[-1].endswith("the rerun does not reproduce them")
    assert run(old, new).returncode == 0  # x.json has no headline ratios
    same = run(old, old, "--all")
    assert same.returncode == 0 and same.stdout.splitlines()[-2].startswith("6 of 6")

    # compress.json's rows[int8|lut4|lut6]/speedup are headlines (README quotes them)
    (old / "compress.json").write_text(json.dumps({"rows": [{"format": f, "speedup": spread(20, 24, 30)}
                                                            for f in ("int8", "lut4", "lut6")]}))
    (new / "compress.json").write_text(json.dumps({"rows": [{"format": "int8", "speedup": spread(30, 33, 36)},
                                                            {"format": "lut4", "speedup": spread(20, 25, 28)}]}))
    r = run(old, new)
    assert r.returncode == 1, r.stdout
    lines = r.stdout.splitlines()
    assert any(line.startswith("MISS* compress/rows[int8]/speedup: 33 against 24") for line in lines), r.stdout
    assert any(line.startswith("ok*   compress/rows[lut4]/speedup") for line in lines)
    assert "MISS* compress/rows[lut6]/speedup: not in the rerun" in lines
    assert lines[-3] == "1 of 3 headline ratios (*) reproduce within the earlier run's spread"
    assert any(line.startswith("MISS* compress/rows[int8]/speedup") and "far" not in line for line in lines)
    (new / "y.json").write_text("{not json")
    bad = run(old, new)
    assert bad.returncode == 2 and "y.json" in bad.stderr and "Traceback" not in bad.stderr


def test_settle_waits_for_the_load_a_previous_benchmark_left(monkeypatch):
    """run_all waits before each benchmark until the 1-minute load shows no more than one
    runnable process, at most max_wait seconds; a quiet machine is not waited for."""
    cores = os.cpu_count() or 1
    loads = iter([[cores * 0.5 + 2.0], [cores * 0.5 + 1.6], [0.4], [0.4]])
    slept: list[float] = []
    monkeypatch.setattr(harness, "load_average", lambda: next(loads))
    monkeypatch.setattr(harness.time, "sleep", slept.append)
    harness.settle(max_wait=60, step=5)
    assert slept == [5, 5]  # two busy readings, then a quiet one
    monkeypatch.setattr(harness, "load_average", lambda: [0.1])
    slept.clear()
    assert harness.settle() == pytest.approx(0, abs=0.5) and slept == []
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(harness, "load_average", lambda: [cores + 3.0])
    monkeypatch.setattr(harness.time, "monotonic", lambda: next(clock))
    assert harness.settle(max_wait=30, step=5) >= 30 and len(slept) == 2  # gives up after max_wait


def test_the_cpu_other_processes_used_decides_whether_a_run_was_under_load(monkeypatch):
    """Where /proc/stat is readable the header judges the run by the CPU time processes other than
    the benchmark used over the whole run, not by the load average at its end (which counts the
    benchmark's own threads); a busy start still counts."""
    cores = os.cpu_count() or 1
    # the machine was busy for 100 s of a 100 s run on every core; the benchmark used 95% of it
    ticks = iter([(1000.0, 10.0, 500.0), (1000.0 + 100 * cores, 10.0 + 95 * cores, 600.0)])
    monkeypatch.setattr(harness, "cpu_now", lambda: next(ticks))
    start = harness.cpu_now()
    assert harness.other_cpu_share(start) == pytest.approx(0.05)
    monkeypatch.setattr(harness, "other_cpu_share", lambda start=None: 0.05)
    quiet = harness.header("T", [0.1], [cores + 1.5], 3, "", own_threads=1)
    assert not any("under load" in line for line in quiet)
    assert "processes other than the benchmark's used 5% of the machine's CPU time" in "\n".join(quiet)
    assert "Run under load" in harness.header("T", [cores + 1.0], [0.1], 3, "")[2]
    monkeypatch.setattr(harness, "other_cpu_share", lambda start=None: 0.4)
    busy = harness.header("T", [0.1], [0.1], 3, "")[2]
    assert busy.startswith("**Run under load**") and "other processes used 40% of the CPU time" in busy


def test_compare_runs_knows_how_often_chance_alone_misses():
    """With every round of both runs from one distribution, the median of 3 rounds falls within
    the min-max of 3 others 60% of the time (5 and 5: 5/6): a rerun is judged by whether it
    misses more often than that, or far."""
    import compare_runs as cr

    assert cr.chance_inside(3, 3) == pytest.approx(0.6)
    assert cr.chance_inside(5, 5) == pytest.approx(5 / 6)
    assert cr.chance_inside(1, 3) == 0.0  # one round has no range: not tested
    assert cr.tail_probability([0.5, 0.5], 1) == pytest.approx(0.75)
    assert cr.tail_probability([0.6] * 10, 0) == pytest.approx(1.0)

    def rec(ok, far=False, chance=0.6):
        return {"headline": True, "ok": ok, "far": far, "chance": chance, "new": {}}

    assert cr.verdict([rec(True)] * 6 + [rec(False)] * 4)["reproduces"]  # 4 of 10 misses: what chance gives
    assert not cr.verdict([rec(True)] * 2 + [rec(False)] * 18)["reproduces"]  # far more misses than chance
    assert not cr.verdict([rec(True)] * 9 + [rec(False, far=True)])["reproduces"]  # one shift beyond its range


def test_compare_runs_holds_a_rerun_to_the_union_of_several_earlier_runs(tmp_path):
    """With two earlier runs a ratio's range is the union of theirs: a rerun between them
    reproduces, though it lies outside each one's own range."""
    def spread(lo, med, hi):
        return {"min": lo, "median": med, "max": hi, "n": 3}

    runs = {"a": spread(1.0, 1.5, 2.0), "b": spread(3.0, 3.5, 4.0), "new": spread(2.2, 2.5, 2.9)}
    for name, s in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.json").write_text(json.dumps({"a_over_b": s}))
    script = str(Path(harness.__file__).with_name("compare_runs.py"))
    r = subprocess.run([sys.executable, script, *(str(tmp_path / n) for n in ("a", "b", "new")), "--all"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "ok    x/a_over_b: 2.5 against 2.5 (1-4, 6 rounds)"
    alone = subprocess.run([sys.executable, script, str(tmp_path / "a"), str(tmp_path / "new"), "--all"],
                           capture_output=True, text=True)
    assert alone.stdout.startswith("MISS  x/a_over_b: 2.5 against 1.5 (1-2, 3 rounds)")
    one = subprocess.run([sys.executable, script, str(tmp_path / "a")], capture_output=True, text=True)
    assert one.returncode == 2 and "earlier run and a rerun" in one.stderr
