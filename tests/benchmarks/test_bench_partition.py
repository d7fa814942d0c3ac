"""benchmarks/bench_partition.py run on its --quick sizes (a 2-layer d=128 GPT-2): every worker
runs on the current model code (decode funcs' inputs, the LM head's slivers of the tied
embedding), and the three ways of cutting the model compute the same logits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_partition_benchmark_runs_and_its_variants_agree(tmp_path):
    env = {**os.environ, "ANEC_BENCH_RESULTS": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "benchmarks/bench_partition.py", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    g = json.loads((tmp_path / "partition.json").read_text())["gpt2_small"]
    assert {"whole", "split", "joined"} <= set(g)
    for v in ("whole", "split", "joined"):
        assert g[v]["s_per_token"]["median"] > 0 and g[v]["programs"] >= 1
    for v in ("split", "joined"):
        assert g[v]["logits_max_abs_diff_vs_whole"] < 0.05, (v, g[v]["logits_max_abs_diff_vs_whole"])
    assert (tmp_path / "partition.md").read_text().startswith("# ")
