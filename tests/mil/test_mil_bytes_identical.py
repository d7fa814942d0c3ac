"""What ``anec compile`` writes is byte-identical to the recorded reference.

tests/mil/golden/emitted_bytes.json holds the sha256 of every file the
compiler writes (MIL text, BLOBFILEs, manifests, program.ir, the output index)
for every example, with and without packed weights, and for a GPT-2-shaped
graph (d=768, 12 heads, 2 layers, fp16 weights from a safetensors file) as one
func (a pipeline of programs) and as per-layer funcs. It was recorded with the
code before the compile path was made faster (memory-mapped weights, one copy
into the BLOBFILE, parallel hashing and writing); regenerate it with
``python -m tests.mil.emitted_bytes tests/mil/golden/emitted_bytes.json`` only
when a change of the output is intended.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.mil.emitted_bytes import record

GOLDEN = Path(__file__).parent / "golden" / "emitted_bytes.json"


def test_every_written_byte_matches_the_reference():
    want = json.loads(GOLDEN.read_text())
    got = record()
    assert sorted(got) == sorted(want)
    for case in want:
        assert got[case].keys() == want[case].keys(), case
        changed = [f for f in want[case] if got[case][f] != want[case][f]]
        assert not changed, f"{case}: {changed}"
    assert sum(len(files) for files in want.values()) > 100
