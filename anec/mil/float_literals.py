"""Float literals in MIL text: the shortest decimal that reads back to the exact fp16/fp32 value.

The MIL emitter (:mod:`anec.mil.emitter`) writes every float through
:func:`float_literal`. A literal must round to the same value along every path
a reader may take (straight to the target format, or through fp64 first), so
the spelling is checked against each: the IEEE binary formats are modelled
exactly (:data:`BINARY_FORMATS`) rather than trusted to the platform's parser.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from anec.ir.types import DType


@dataclass(frozen=True)
class _Binary:
    """An IEEE binary format: rounding to it from fp64 and from an exact decimal."""

    mant: int
    """Mantissa bits (without the implicit one)."""
    emin: int
    """Exponent of the smallest normal value."""
    emax: int
    pack: struct.Struct

    def round(self, d: float) -> float:
        """The fp64 ``d`` rounded to this format (nearest, ties to even; inf past the range)."""
        try:
            return self.pack.unpack(self.pack.pack(d))[0]
        except OverflowError:
            return math.copysign(math.inf, d)

    def round_exact(self, text: str) -> float:
        """The decimal ``text`` rounded once, exactly, to this format."""
        d = float(text)  # the nearest fp64 rounds like the exact value unless it is a midpoint
        r = self.round(d)
        if r == d or math.isinf(d) or not (math.frexp(d)[0] * (1 << (self.mant + 2))).is_integer():
            return r
        # d has at most mant + 2 significant bits: it may be a midpoint between two values
        # (or the overflow threshold) that the exact decimal is not on; round exactly
        a = abs(Fraction(text))
        e = a.numerator.bit_length() - a.denominator.bit_length()
        if a < Fraction(2) ** e:
            e -= 1
        scale = max(e, self.emin) - self.mant  # the spacing of values around a is 2**scale
        n, rem = divmod(a / Fraction(2) ** scale, 1)
        if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2):
            n += 1
        v = math.ldexp(int(n), scale)
        if v > math.ldexp((1 << (self.mant + 1)) - 1, self.emax - self.mant):
            v = math.inf
        return -v if text.startswith("-") else v


_FP16 = _Binary(10, -14, 15, struct.Struct("<e"))
_FP32 = _Binary(23, -126, 127, struct.Struct("<f"))
BINARY_FORMATS = {DType.fp16: _FP16, DType.fp32: _FP32}


def _parses(text: str, dtype: DType) -> list[float]:
    """``text`` read as ``dtype`` along every path a MIL reader may take.

    Directly (correctly rounded), through fp64 (``strtod`` then a cast), and
    for fp16 through fp32 too (``(float)strtod(..)``, then fp32 -> fp16: the
    C simulator's path), each rounding to nearest even.
    """
    f64 = float(text)
    fmt = BINARY_FORMATS[dtype]
    paths = [fmt.round(f64), fmt.round_exact(text)]
    if fmt is _FP16:
        paths += [_FP16.round(_FP32.round(f64)), _FP16.round(_FP32.round_exact(text))]
    return paths


def _same(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _reads_back(text: str, v: float, dtype: DType) -> bool:
    """Whether every path of :func:`_parses` maps ``text`` to exactly ``v``."""
    if BINARY_FORMATS[dtype].round(float(text)) != v:  # the cheap path first: most candidates fail here
        return False
    return all(_same(p, v) for p in _parses(text, dtype))


def float_literal(v: float, dtype: DType = DType.fp32) -> str:
    """The shortest decimal spelling of ``v`` (a value of ``dtype``) every reader maps back to ``v``.

    ``%g``-style, as the on-device references write floats (``0.125``,
    ``1e-05``, ``-0.5``, ``1``), but with as many significant digits as the
    value needs: the fewest digits for which some decimal parses back to
    exactly ``v`` along every path of :func:`_parses` (fp16 ``1/768`` is
    ``0.001302``, fp32 ``1/3`` is ``0.33333334``, fp16 ``65504`` is
    ``65500``, its nearest 3-digit decimal). Negative zero is
    ``-0.0`` (a reader that takes ``-0`` for an integer would lose the sign);
    ``inf``, ``-inf`` and ``nan`` are words, which MIL readers accept.
    """
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0"
    if dtype not in BINARY_FORMATS or not _same(BINARY_FORMATS[dtype].round(v), v):
        raise ValueError(f"{v!r} is not a {dtype} value")
    return _shortest(v, dtype)


@lru_cache(maxsize=65536)
def _shortest(v: float, dtype: DType) -> str:
    """:func:`float_literal` of a finite non-zero value (cached: -0.0 == 0.0 as a key)."""
    for digits in range(1, 18):
        nearest = f"{v:.{digits - 1}e}"
        if _reads_back(nearest, v, dtype):
            return f"{float(nearest):.{max(digits, 6)}g}"
        # the nearest decimal fails (double rounding, or the narrow side of a power
        # of two): a neighbour in the last digit may still read back as v
        mantissa, exp = nearest.split("e")
        m, e = int(mantissa.replace(".", "")), int(exp) - digits + 1
        ok = [text for text in (f"{m - 1}e{e}", f"{m + 1}e{e}") if _reads_back(text, v, dtype)]
        if ok:
            best = min(ok, key=lambda t: abs(Fraction(t) - Fraction(v)))
            return f"{float(best):.{max(digits, 6)}g}"
    raise AssertionError(f"no decimal spelling of {v!r} round-trips")  # pragma: no cover


__all__ = ["BINARY_FORMATS", "float_literal"]
