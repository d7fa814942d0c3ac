"""The emitter's model of a correctly rounding MIL reader: a decimal rounded once, exactly.

float_literal only writes a decimal that every reader maps back to the value; the reader
that rounds the exact decimal (not its nearest fp64) is modelled by ``_Binary.round_exact``.
Its fast path trusts the fp64 rounding unless the fp64 value could be a midpoint; these
decimals sit at, just above and just below midpoints (and the overflow threshold), where
the fp64 rounding is wrong, and are checked against the independent reference of
test_mil_literals.py.
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from anec.ir.types import DType
from anec.mil.float_literals import BINARY_FORMATS

from .test_mil_literals import _round_exact


def _dec(q: Fraction) -> str:
    with localcontext() as ctx:
        ctx.prec = 200
        return format(Decimal(q.numerator) / Decimal(q.denominator), "f")


def _near_midpoints(np_type) -> list[str]:
    info = np.finfo(np_type)
    values = [np_type(1.0), np_type(1.5), np_type(3.0), info.smallest_subnormal, info.smallest_normal,
              np.nextafter(info.max, np_type(0))]
    eps = Fraction(1, 10**60)
    texts = []
    for v in values:
        mid = (Fraction(float(v)) + Fraction(float(np.nextafter(v, np_type(np.inf))))) / 2
        texts += [_dec(mid), _dec(mid + eps), _dec(mid - eps)]
    return texts + ["-" + t for t in texts]


def _threshold(np_type) -> Fraction:
    """The overflow threshold: the max plus half its spacing (a tie there rounds to inf)."""
    top = Fraction(float(np.finfo(np_type).max))
    return top + (top - Fraction(float(np.nextafter(np.finfo(np_type).max, np_type(0))))) / 2


@pytest.mark.parametrize("dtype, np_type", [(DType.fp16, np.float16), (DType.fp32, np.float32)], ids=["fp16", "fp32"])
def test_round_exact_rounds_the_decimal_not_its_nearest_double(dtype, np_type):
    fmt = BINARY_FORMATS[dtype]
    for text in _near_midpoints(np_type):
        want = _round_exact(Fraction(text), text.startswith("-"), np_type)
        got = fmt.round_exact(text)
        assert got == float(want) and np.signbit(got) == np.signbit(want), text
    top = _threshold(np_type)
    for text in (_dec(top), _dec(top + Fraction(1, 10**60)), "1e39", "1e400"):
        assert fmt.round_exact(text) == np.inf and fmt.round_exact("-" + text) == -np.inf, text
    below = _dec(top - Fraction(1, 10**60))  # its nearest double is the threshold itself
    assert fmt.round_exact(below) == float(np.finfo(np_type).max) == -fmt.round_exact("-" + below)
    # the case the fast path would get wrong: fp64 reads 1 + 2**-11 (a tie, to even: 1)
    assert BINARY_FORMATS[DType.fp16].round_exact("1.00048828125000000000001") == 1.0009765625
    assert BINARY_FORMATS[DType.fp16].round_exact("1.00048828125") == 1.0
