"""The one tolerance rule for comparing a backend's numbers with a reference.

Every sim-vs-interpreter, sim-vs-numpy and sim-vs-PyTorch comparison in tests/
goes through :func:`assert_close`. Per element ``i`` of an output, with ``r``
the reference and ``g`` the value under test::

    |g_i - r_i| <= ulps * max(2**-10 * |r_i|, ulp16(scale))

``scale`` is the largest finite ``|r|`` of the output and ``ulp16(s)`` the
spacing of fp16 numbers at ``s`` (``2**(floor(log2 s) - 10)``, ``2**-24`` in
the subnormal range). Where values are large (near the output's scale) the
bound is relative: ``2**-10 * |r|`` is one to two fp16 ulps of the element;
where they are small it is absolute, at the fp16 resolution of the output's
own scale, whatever the element's own magnitude. A softmax over 1000 classes whose
largest probability is 0.0042 is therefore checked to a few 3.8e-6, not to
5e-3: an all-zero output fails. Programs that compute in fp32 are measured the
same way in fp32 ulps (``resolution="fp32"``).

Non-finite reference elements must be matched exactly: NaN by NaN, an infinity
by the same infinity; a finite reference element must get a finite value.

Each call names its check (a stable id such as ``differential/classify:out``)
and its allowed error in ``ulps``. ``tests/tolerances.json`` records, per check,
the allowed ``ulps`` and the worst error observed (in the same units); a test
fails when the allowed value it passes differs from the recorded one, so a
loosened tolerance cannot go unnoticed in review. The file is rewritten only
by an explicit run::

    .venv/bin/python -m pytest tests --record-tolerances

(hypothesis is derandomized in that run, so recording the whole suite again
gives the same numbers; a subset may draw other examples. The run updates the
checks it executed, keeps the others, and writes nothing when a test fails).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

RECORD_FILE = Path(__file__).resolve().parent / "tolerances.json"
RECORD_COMMAND = ".venv/bin/python -m pytest tests --record-tolerances"

_observed: dict[str, dict] = {}
"""check -> {"ulps": allowed, "worst_ulps": .., "max_abs_error": ..} of this session."""
_recording = False
_recorded: dict[str, dict] | None = None
_COMBINE = {"worst_ulps": max, "max_abs_error": max, "worst_cosine": min}
"""How two observations of a check's measured values combine; its other keys are allowed errors."""


def ulp16(x) -> np.ndarray:
    """The spacing of fp16 numbers at ``|x|`` (elementwise; 2**-24 at and below the normal range)."""
    return _ulp(x, 10, -14)


def ulp32(x) -> np.ndarray:
    """The spacing of fp32 numbers at ``|x|`` (elementwise; 2**-149 at and below the normal range)."""
    return _ulp(x, 23, -126)


def _ulp(x, mantissa_bits: int, min_exp: int) -> np.ndarray:
    a = np.abs(np.asarray(x, dtype=np.float64))
    e = np.floor(np.log2(np.where(a > 0, a, 2.0**min_exp)))  # 0 has the subnormal spacing
    return np.exp2(np.maximum(e, float(min_exp)) - mantissa_bits)


RESOLUTIONS = {"fp16": (ulp16, 10, "ulps"), "fp32": (ulp32, 23, "fp32_ulps")}
"""Resolution -> (spacing function, mantissa bits, the record's key for the allowed ulps)."""


def set_recording(on: bool) -> None:
    """Called by the root conftest for ``--record-tolerances``."""
    global _recording
    _recording = on


def recorded() -> dict[str, dict]:
    """The checks recorded in tests/tolerances.json (empty if there is no file)."""
    global _recorded
    if _recorded is None:
        try:
            _recorded = json.loads(RECORD_FILE.read_text("utf-8"))["checks"]
        except FileNotFoundError:
            _recorded = {}
    return _recorded


def error_ulps(got: np.ndarray, ref: np.ndarray, resolution: str = "fp16") -> tuple[np.ndarray, np.ndarray]:
    """(|g - r| / unit, unit) per finite reference element, unit = max(2**-10 |r|, ulp16(scale))
    (2**-23 and ulp32 for the fp32 resolution)."""
    ulp, bits, _ = RESOLUTIONS[resolution]
    r = ref.astype(np.float64)
    g = got.astype(np.float64)
    finite = np.isfinite(r)
    scale = float(np.max(np.abs(r[finite]), initial=0.0))
    unit = np.maximum(2.0 ** -bits * np.abs(r), ulp(scale))
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(g - r) / unit, 0.0)
    return err, unit


def check_close(got, ref, ulps: float, label: str = "output", resolution: str = "fp16") -> tuple[float, float]:
    """Raise AssertionError unless ``got`` matches ``ref`` to ``ulps`` (the module's rule).

    Records nothing (tests of the rule itself use it); returns the worst error in
    ulps and the largest absolute error over the finite reference elements.
    ``resolution="fp32"`` measures in fp32 ulps, for programs computing in fp32.
    """
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, f"{label}: shape {got.shape} vs reference {ref.shape}"
    r, g = ref.astype(np.float64), got.astype(np.float64)
    finite_r = np.isfinite(r)
    wrong = (np.isnan(r) != np.isnan(g)) | (np.isinf(r) & (g != r)) | (finite_r & ~np.isfinite(g))
    bad = np.flatnonzero(wrong)
    assert bad.size == 0, (f"{label}: {bad.size} non-finite mismatches, first at flat index {bad[0]}: "
                           f"got {g.flat[bad[0]]!r}, want {r.flat[bad[0]]!r}")
    err, unit = error_ulps(got, ref, resolution)
    worst = float(err.max(initial=0.0))
    max_abs = float(np.max(np.abs(g[finite_r] - r[finite_r]), initial=0.0))
    if worst > ulps:
        i = int(np.argmax(err))
        scale = float(np.max(np.abs(r[finite_r]), initial=0.0))
        raise AssertionError(
            f"{label}: error {worst:.3g} {resolution} ulps > allowed {ulps:g} at flat index {i}: "
            f"got {g.flat[i]!r}, want {r.flat[i]!r} (|err| {abs(g.flat[i] - r.flat[i]):.3g}, "
            f"unit {unit.flat[i]:.3g}, output scale {scale:.3g}, max |err| {max_abs:.3g})")
    return worst, max_abs


def assert_close(got, ref, check: str, ulps: float, what: str = "", resolution: str = "fp16") -> float:
    """Assert ``got`` matches ``ref`` to ``ulps`` (see the module docstring); the worst error in ulps.

    ``check`` is the stable id under which the allowed and the worst observed
    error are recorded; ``what`` is extra context for a failure message.
    """
    worst, max_abs = check_close(got, ref, ulps, f"{check}{': ' + what if what else ''}", resolution)
    key = RESOLUTIONS[resolution][2]
    _note(check, {key: ulps}, {"worst_ulps": (worst, "max"), "max_abs_error": (max_abs, "max")})
    return worst


def _note(check: str, allowed: dict, worst: dict) -> None:
    """Remember the worst values of ``check`` this session; compare ``allowed`` with the record.

    ``worst`` maps a key to (value, "max" | "min"): how two observations combine.
    """
    seen = _observed.get(check)
    if seen is None:
        _observed[check] = {**allowed, **{k: v for k, (v, _) in worst.items()}}
    else:
        for k, v in allowed.items():
            assert seen[k] == v, f"check {check!r} is used with two tolerances: {k}={seen[k]} and {v}"
        for k, (v, how) in worst.items():
            seen[k] = max(seen[k], v) if how == "max" else min(seen[k], v)
    if _recording:
        return
    rec = recorded().get(check)
    if rec is None:
        raise AssertionError(f"check {check!r} is not recorded in {RECORD_FILE.name}; "
                             f"record it with: {RECORD_COMMAND}")
    for k, v in allowed.items():
        if rec.get(k) != v:
            shown = {key: val for key, val in rec.items() if key not in allowed}
            raise AssertionError(
                f"check {check!r} allows {k}={v:g} but {RECORD_FILE.name} records {k}={rec.get(k)} "
                f"(observed {shown}); a changed tolerance must be re-recorded: {RECORD_COMMAND}")


def observed() -> dict[str, dict]:
    """This session's checks: what a pytest-xdist worker hands back to the controlling process."""
    return _observed


def merge_observed(other: dict[str, dict]) -> None:
    """Fold the checks another process observed (a pytest-xdist worker's) into this session's."""
    for check, theirs in other.items():
        mine = _observed.get(check)
        if mine is None:
            _observed[check] = dict(theirs)
            continue
        for k, v in theirs.items():
            if k in _COMBINE:
                mine[k] = _COMBINE[k](mine[k], v)
            else:
                assert mine[k] == v, f"check {check!r} is used with two tolerances: {k}={mine[k]} and {v}"


def _rounded(key: str, x: float) -> float:
    """Observed values with few digits (stable diffs); cosines keep 7 decimals; tolerances as given."""
    if key == "worst_cosine":
        return round(x, 7)
    if key.startswith(("worst", "max_abs")):
        return float(f"{x:.3g}") if x else 0.0
    return x


def write_record() -> int:
    """Merge this session's checks into tests/tolerances.json (atomically); the number written."""
    if not _observed:
        return 0
    checks = dict(recorded())
    for check, seen in _observed.items():
        checks[check] = {k: _rounded(k, v) for k, v in seen.items()}
    lines = ",\n".join(f"    {json.dumps(k)}: {json.dumps(checks[k], sort_keys=True)}" for k in sorted(checks))
    text = ("{\n"
            f'  "about": "allowed error (ulps) and worst observed error per check; see tests/tolerances.py. '
            f'Regenerate with: {RECORD_COMMAND}",\n'
            '  "checks": {\n' + lines + "\n  }\n}\n")
    fd, tmp = tempfile.mkstemp(dir=RECORD_FILE.parent, prefix=".tolerances.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, RECORD_FILE)
    except BaseException:
        os.unlink(tmp)
        raise
    return len(_observed)


def cosine(a, b) -> float:
    """Cosine similarity of two vectors (float64)."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_cosine(got, ref, check: str, min_cosine: float, what: str = "") -> float:
    """Assert cosine(got, ref) >= ``min_cosine``; recorded like :func:`assert_close`. The cosine."""
    c = cosine(got, ref)
    _note(check, {"min_cosine": min_cosine}, {"worst_cosine": (c, "min")})
    assert c >= min_cosine, f"{check}{': ' + what if what else ''}: cosine {c:.7f} < {min_cosine}"
    return c


__all__ = ["RECORD_FILE", "assert_close", "assert_cosine", "check_close", "cosine", "error_ulps", "merge_observed",
           "observed", "ulp16", "ulp32", "write_record"]
