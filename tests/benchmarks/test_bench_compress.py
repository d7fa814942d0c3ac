"""benchmarks/bench_compress.py's GPT-2 section (benchmarks/compress_gpt2.py) run on a tiny body
(2 layers, d=64): its workers, its rows in compress.json and its tables in compress.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpt2_section_on_a_tiny_body(tmp_path):
    env = {**os.environ, "ANEC_BENCH_RESULTS": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "benchmarks/bench_compress.py", "--quick", "--gpt2-only",
                           "--formats", "int8,lut6,lut4"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads((tmp_path / "compress.json").read_text())
    g = res["gpt2"]
    assert g["shape"]["layers"] == 2 and g["shape"]["d_model"] == 64 and g["shape"]["d_ffn"] == 256
    assert 0.5 < g["shape"]["h_rms"] < 2 and 0.5 < g["shape"]["x_rms"] < 2  # activations of order 1
    acc = g["accuracy"]
    assert list(acc) == ["fp16", "int8", "lut6", "lut4"]
    for fmt, row in acc.items():
        sides = ["vs_fp32"] if fmt == "fp16" else ["vs_fp16", "vs_fp32"]
        for side in sides:
            assert set(row[side]) == {"cosine", "min_position", "kv_cosine"}
            assert all(0 < c <= 1 for c in row[side].values()), (fmt, side, row[side])
            assert row[side]["min_position"] <= row[side]["cosine"] + 1e-9
    assert acc["fp16"]["size"] == 1.0
    # every matrix (4 per layer) compressed, or fallen back along the chain the default gate allows
    assert acc["int8"]["formats"] == {"int8": 8} and 0.5 < acc["int8"]["size"] < 0.52
    assert sum(acc["lut4"]["formats"].values()) == 8
    assert acc["lut4"]["size"] < acc["lut6"]["size"] < acc["int8"]["size"]
    assert acc["int8"]["vs_fp16"]["cosine"] > 0.999
    assert acc["lut4"]["vs_fp16"]["cosine"] < 1  # compared with the uncompressed body, not with itself
    comp = g["compile"]
    assert list(comp) == ["fp16", "int8", "lut6", "lut4"] and comp["fp16"]["over_fp16"] is None
    assert all(comp[f]["over_fp16"]["n"] == 1 and comp[f]["over_fp16"]["median"] > 0
               for f in ("int8", "lut6", "lut4"))
    assert all(r["seconds"] > 0 and {"emit-mil", "write"} <= set(r["stages_s"]) for r in comp.values())

    md = (tmp_path / "compress.md").read_text().splitlines()
    head = md.index("| format | weights | size | cosine vs fp16 | min position vs fp16 | K/V vs fp16 | cosine vs fp32 "
                    "| min position vs fp32 | K/V vs fp32 |")
    rows = [line.split(" | ") for line in md[head + 2:head + 6]]
    assert [r[0] for r in rows] == ["| fp16", "| int8", "| lut6", "| lut4"]
    assert rows[0][3:6] == ["-", "-", "-"] and all(len(r) == 9 for r in rows)
    cosines = [c for r in rows for c in r[3:] if c != "-"]
    assert len(cosines) == 3 + 3 * 6 and all(0 < float(c.rstrip(" |")) <= 1 for c in cosines)
    assert rows[1][1] == "8 int8" and rows[1][2] == f"{acc['int8']['size']:.3f}"
    t = md.index("| format | seconds | over fp16 (per round) | CPU s | emit-mil s | write s |")
    assert [line.split(" | ")[0] for line in md[t + 2:t + 6]] == ["| fp16", "| int8", "| lut6", "| lut4"]
    assert md[t + 3].split(" | ")[2] == f"x{comp['int8']['over_fp16']['median']:.2f}"
    assert "Not run: skipped (--quick)." in md
