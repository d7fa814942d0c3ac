"""benchmarks/bench_large.py on its --quick model (4 layers, hidden 256), 2 rounds: every phase
runs once per round in its own process, its figures are spreads over the rounds, the decode
ratio against transformers is taken per round, and the greedy tokens agree."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_large_benchmark_runs_rounds_and_reports_spreads(tmp_path):
    env = {**os.environ, "ANEC_BENCH_RESULTS": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "benchmarks/bench_large.py", "--quick", "--rounds", "2"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads((tmp_path / "large.json").read_text())
    assert res["rounds"] == 2
    (row,) = res["models"]
    assert "failed" not in row, row.get("failed")
    for phase in ("export", "compile", "generate"):
        rss = row[phase]["peak_rss"]
        assert isinstance(rss, int) or (rss["n"] == 2 and 0 < rss["min"] <= rss["median"] <= rss["max"]), rss
    tps = row["generate"]["tokens_per_s"]
    assert tps["n"] == 2 and tps["min"] > 0
    assert len(row["generate"]["tokens_per_round"]) == 2
    if importlib.util.find_spec("transformers") is not None:
        ratio = row["decode_anec_over_transformers"]
        assert ratio["n"] == 2 and ratio["min"] > 0
        a, b = row["generate"]["tokens_per_round"], row["transformers"]["tokens_per_round"]
        assert a[0] == a[1] == b[0] == b[1], (a, b)  # a 4-layer model's logit gaps are wide enough
    md = (tmp_path / "large.md").read_text()
    assert "2 rounds" in md and "| quick |" in md
