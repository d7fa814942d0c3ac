"""The sim's repeated-column shortcut on a 64-bit hash collision.

A narrow pointwise conv (a decode block) computes each distinct input column once
(csrc/sim_exec.c, distinct_columns): columns are grouped by an FNV-1a-64 hash over all
their elements, and two columns with equal hashes are compared element by element before
one is taken for the other. The compare is the only guard against a collision, which random
inputs never produce, so the columns below are built to collide: equal in their first 8 rows
(the rows the shortcut hashes first) and different after them, with equal hashes over all
14 rows. They were found by lattice reduction: FNV-1a's step (h ^ x) * P is h + e * P for an
e the element chooses, so two columns collide when their steps' differences d_i satisfy
sum d_i * P^(n - i) = 0 mod 2^64, and a short such vector (|d_i| < 1400, here n = 6) lies in
reach of 16-bit elements. The test checks the collision itself, so the values cannot drift.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests.runtime import milkit as mk

SIM_EXEC = Path(__file__).resolve().parents[2] / "csrc" / "sim_exec.c"

# the sim's start value (csrc/sim_exec.c, distinct_columns: FNV-1a's 64-bit offset basis without
# its last digit, which hashes as well) and the FNV-1a 64-bit prime; the collision depends on the
# start value (it sets the states the steps XOR into), so the first test reads both from the source
FNV_OFFSET = 1469598103934665603
FNV_PRIME = 1099511628211

# fp16 bit patterns, row by row (the conv's input channels)
COL0 = [0x439C, 0x4162, 0xC2A9, 0xBE7C, 0xC353, 0xB640, 0x3F46, 0xB8B9,
        0x378C, 0xC39B, 0xC0D4, 0x40B4, 0xB917, 0xBE96]
COL1 = [0x439C, 0x4162, 0xC2A9, 0xBE7C, 0xC353, 0xB640, 0x3F46, 0xB8B9,
        0x359E, 0x4FDF, 0x5EA4, 0x4379, 0xDE3A, 0xBE12]


def fnv1a64(elements: list[int]) -> int:
    """The sim's column hash: FNV-1a over the elements' bit patterns, one element a step."""
    h = FNV_OFFSET
    for e in elements:
        h = ((h ^ e) * FNV_PRIME) % (1 << 64)
    return h


def test_the_two_columns_collide_in_fnv1a64_and_differ_after_row_8():
    # the hash these columns were built for is the sim's: same start value, same prime
    src = SIM_EXEC.read_text(encoding="utf-8")
    assert re.search(rf"h\[j\] = {FNV_OFFSET}ull;", src) and re.search(rf"\* {FNV_PRIME}ull;", src)
    assert fnv1a64(COL0) == fnv1a64(COL1)
    assert COL0[:8] == COL1[:8] and COL0[8:] != COL1[8:]
    assert fnv1a64(COL0[:8]) == fnv1a64(COL1[:8])  # the first-rows hash cannot tell them apart
    x = np.array([COL0, COL1], np.uint16).view(np.float16)
    assert np.isfinite(x).all() and (x != 0).all()


def test_colliding_columns_are_not_merged_identity_conv_is_bit_exact(rt):
    """A 1x1 conv with identity weights returns its input bit for bit (every product is x * 1
    plus zeros, exact in fp32, and x is an fp16 value); with the colliding columns side by
    side (and each again, as a decode block repeats columns), every output column must be
    its own input column, on the first runs (weights not yet packed) and after packing."""
    k = len(COL0)
    cols = np.array([COL0, COL1, COL1, COL0], np.uint16).T  # [K, N]: columns 0 and 3, 1 and 2 equal
    x = cols.view(np.float16).reshape(1, k, 1, cols.shape[1])
    w = np.eye(k, dtype=np.float16).reshape(k, k, 1, 1)
    body = [mk.const_blob("w", "fp16", w.shape, "w.bin"),
            mk.op("y", "fp16", x.shape, "conv", weight="w", x="x")]
    prog = rt.compile(mk.program([("x", "fp16", x.shape)], body, ["y"]), {"@model_path/weights/w.bin": mk.blobfile(w)})
    try:
        for _ in range(3):
            y = prog(x=x)["y"]
            np.testing.assert_array_equal(y.view(np.uint16), x.view(np.uint16))
    finally:
        prog.close()
