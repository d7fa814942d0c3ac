"""PyTorch's OpInfo samples of every op the importer maps, on the sim, at x1, x10^2, x10^3.

The sweep itself (which OpInfos, which samples, which inputs are scaled, how a run is
classified) is tests/frontends/opinfo_sweep.py; ``python tests/frontends/opinfo_sweep.py``
prints its table. Here: no sample crashes, none is silently wrong (a result outside the
tolerance where torch's fp32 answer fits fp16), and every match is recorded in
tests/tolerances.json under ``opinfo-sweep/x<magnitude>``. The samples measured silently
wrong before the range-safe rewrite of the normalizations are listed, with their cause, in
:data:`KNOWN_SILENTLY_WRONG`. ``ANEC_OPINFO_SAMPLES=3`` runs the acceptance sweep.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tolerances import assert_close

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch's OpInfo database imports it

from tests.frontends import opinfo_sweep as S  # noqa: E402

SAMPLES = int(os.environ.get("ANEC_OPINFO_SAMPLES", "1"))
"""Samples per OpInfo here: 1 keeps the sweep near 2 minutes of CPU (each sample is a
torch.export, a decomposition and a compile: about 0.6 s); the sweep's default and the
acceptance run (docs/torch.md) is ANEC_OPINFO_SAMPLES=3."""

KNOWN_SILENTLY_WRONG: dict[tuple[str, int, float], str] = {}
"""(OpInfo, sample, magnitude) known to be silently wrong, and why. Empty: every sample the
sweep ran at x1, x10^2 and x10^3 matches torch, is refused, or is flagged by the fp16 range
analysis (a sum of squares beyond fp16, fixed by the range-safe rewrite, was the cause of 41
of the 50 before it). The test fails on any silently wrong sample not listed here, and on an
entry here that no longer is one."""


SHARDS = 4
"""The sweep runs in this many shards (every SHARDS-th OpInfo), so that parallel workers can
share it (``make test`` splits the tests between its workers and an idle worker takes work
from the other's end: ``--dist worksteal``); each shard's runs pass every test below."""


@pytest.fixture(scope="module", params=[pytest.param(k, id=f"shard{k}") for k in range(SHARDS)])
def runs(request: pytest.FixtureRequest) -> list[S.Run]:
    return S.sweep(samples=SAMPLES, picked=S.swept_opinfos()[request.param::SHARDS])


def test_the_swept_ops_come_from_the_importer_table():
    picked = {name for name, _ in S.swept_opinfos()}
    # named after a table op, decomposing into table ops, and never one needing an op the table lacks
    assert {"add", "var", "linalg.vector_norm", "softmax", "where"} <= picked
    assert {"nn.functional.rms_norm", "nn.functional.layer_norm", "nn.functional.silu"} <= picked
    assert not {"log", "sin", "cumsum", "sort", "nn.functional.log_softmax"} & picked
    assert all(op.startswith("aten.") for op in S.table()) and "aten.add.Tensor" in S.table()


def test_the_classifier_tells_wrong_from_right():
    want = [np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8), np.arange(8)]
    assert S.compare([w.copy() for w in want], want)[0] == "match"
    off = want[0].copy()
    off[7, 7] *= 1.02  # 3.0 -> 3.06: 20 fp16 ulps of the largest value
    outcome, detail, max_abs, max_rel, _ = S.compare([off, want[1]], want)
    assert outcome == "silently wrong" and "output 0" in detail
    assert max_abs == pytest.approx(abs(want[0][7, 7]) * 0.02, rel=1e-3) and 0 < max_rel < 0.02
    nan = want[0].copy()
    nan[0, 0] = np.nan
    assert S.compare([nan, want[1]], want)[0] == "silently wrong"
    assert S.compare([want[0], want[1] + (np.arange(8) == 5)], want)[0] == "silently wrong"
    assert S.compare([want[0]], want)[0] == "silently wrong"


def test_out_of_fp16_range_is_not_run():
    assert S._out_of_range([np.array([1.0, -65504.0], np.float32)]) is False
    assert S._out_of_range([np.array([1.0, 65520.0], np.float32)]) is True
    assert S._out_of_range([np.array([np.inf, 1.0], np.float32)]) is False  # inf must then be matched


def _report(runs: list[S.Run], outcome: str) -> list[str]:
    return [f"{r.where()}: max abs error {r.max_abs:.3g}, max rel error {r.max_rel:.3g}: {r.detail}"
            for r in runs if r.outcome == outcome]


def test_no_sample_crashes(runs):
    print("\n" + S.text_table(runs))
    crashes = _report(runs, "crash")
    assert not crashes, f"{len(crashes)} crashes:\n" + "\n".join(crashes)


def test_no_sample_is_silently_wrong(runs):
    wrong = {(r.op, r.index, r.magnitude): r for r in runs if r.outcome == "silently wrong"}
    unexpected = [f"{r.where()}: max abs error {r.max_abs:.3g}, max rel error {r.max_rel:.3g}: {r.detail}"
                  for key, r in wrong.items() if key not in KNOWN_SILENTLY_WRONG]
    assert not unexpected, f"{len(unexpected)} silently wrong:\n" + "\n".join(unexpected)
    ran = {(r.op, r.index, r.magnitude) for r in runs}
    fixed = [key for key in KNOWN_SILENTLY_WRONG if key in ran and key not in wrong]
    assert not fixed, f"no longer silently wrong, remove from KNOWN_SILENTLY_WRONG: {fixed}"
    if wrong:
        print(f"\n{len(wrong)} known silently wrong (KNOWN_SILENTLY_WRONG):")
        print("\n".join(f"  {r.where()}: max abs {r.max_abs:.3g}, max rel {r.max_rel:.3g}: "
                         f"{KNOWN_SILENTLY_WRONG[k]}" for k, r in wrong.items()))


def test_matches_are_recorded(runs):
    """Every matching float output, through the project's tolerance rule and record."""
    matched = [r for r in runs if r.outcome == "match"]
    assert matched
    for m in S.MAGNITUDES:
        assert any(r.magnitude == m for r in matched), f"nothing matched at x{m:g}"
    for r in matched:
        for k, (g, w) in enumerate(zip(r.got, r.want)):
            if w.dtype.kind == "f" and w.size:
                assert_close(g, w, S.check_id(r.magnitude), S.ULPS, f"{r.where()} output {k}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"{r.where()} output {k}")
        assert math.isfinite(r.worst_ulps) and r.worst_ulps <= S.ULPS


def test_host_reductions_of_a_0d_tensor_import_and_run():
    """max(dim) / argmax / argmin / topk of a 0-d tensor (OpInfo max.reduction_with_dim's
    third sample): dim 0 is the tensor itself; the host step's shape was a modulo by 0."""
    import anec

    class M(torch.nn.Module):
        def forward(self, x):
            v, i = x.max(0)
            return v, i, torch.argmax(x, 0), torch.argmin(x, -1, keepdim=True), *torch.topk(x, 1)

    x = torch.tensor(2.5)
    want = [t.numpy() for t in M()(x)]
    im = anec.import_torch(M().eval(), (x,))
    with im.runner(backend="sim") as run:
        got = run(x)
    assert [np.shape(g) for g in got] == [w.shape for w in want] == [()] * 6
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
