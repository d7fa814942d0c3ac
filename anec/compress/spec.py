"""A ``--compress`` SPEC and the accuracy gate: :func:`parse_spec`, :class:`Spec`, :class:`Gate`.

A SPEC is comma-separated ``FORMAT[>FALLBACK...]:GLOB`` items (a bare ``FORMAT``
means ``FORMAT:*``; ``auto`` is ``lut4 -> int8 -> fp16`` narrowed to what the
target streams, :func:`for_target`); the first item whose glob matches a
weight's checkpoint key decides it. The gate (:class:`Gate`) bounds the relative
L2 error (over the tensor and each output channel) and the max abs error
relative to the tensor's max; :data:`DEFAULT_GATES` per format (:func:`sparse_gate`
for ``sparseP``).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from anec.compress.formats import DEFAULT_FALLBACK, FORMATS, Format, get_format
from anec.diagnostics import AnecError


@dataclass(frozen=True)
class Gate:
    """The accuracy gate a compressed tensor must pass (None: the format's default)."""

    max_rel_l2: float | None = None
    """||w - w'|| / ||w||, over the tensor and over each output channel."""
    max_rel_abs: float | None = None
    """max |w - w'| / max |w|."""

    def limits(self, fmt: Format) -> tuple[float, float]:
        base = fmt.name.split("/")[0]
        if fmt.kind == "sparse":  # the values' own format adds its error
            rel, ab = sparse_gate(fmt.sparsity)
            if fmt.joint:
                rel = min(1.0, rel + DEFAULT_GATES[fmt.joint][0])
        else:
            rel, ab = DEFAULT_GATES[base if base in DEFAULT_GATES else f"lut{fmt.bits}"]
        return (self.max_rel_l2 if self.max_rel_l2 is not None else rel,
                self.max_rel_abs if self.max_rel_abs is not None else ab)


DEFAULT_GATES: dict[str, tuple[float, float]] = {
    # (max relative L2, max abs error / max |w|): about 2x the error of each format on a
    # normal-distributed tensor, so an ordinary weight passes and an outlier-heavy one
    # (whose range the grid must stretch over) falls back
    "int8": (0.02, 0.01),
    "int8-affine": (0.02, 0.01),
    "uint8-affine": (0.02, 0.01),
    # 4-bit linear: ~0.09 relative L2 per block of 32 normal values, each error at most half a
    # step (1/14 of the block's range)
    "int4": (0.2, 0.15),
    "int4-affine": (0.2, 0.15),
    "uint4-affine": (0.2, 0.15),
    # k-means spends its entries where the values are, so a LUT's worst element (an
    # outlier of a large tensor) is far off even when the tensor is well kept
    "lut8": (0.025, 0.3),
    "lut6": (0.06, 0.6),
    "lut4": (0.2, 0.75),
    "lut2": (0.6, 1.0),
    "lut1": (0.9, 1.0),
    "fp16": (math.inf, math.inf),
}


def sparse_gate(sparsity: int) -> tuple[float, float]:
    """The default gate of ``sparseP``: twice the relative L2 error of pruning P% of a
    normal-distributed tensor (capped at 1: pruning never errs by more than the tensor),
    and no bound on the max abs error (a pruned element errs by at most the threshold,
    below max|w|). sparse50 allows 0.53 (a normal tensor loses 0.27), which a channel
    pruned to nothing (1.0) fails; from sparse73 on the cap makes it 1."""
    s = sparsity / 100
    a = NormalDist().inv_cdf((1 + s) / 2)  # the threshold, in standard deviations
    lost = s - 2 * a * math.exp(-a * a / 2) / math.sqrt(2 * math.pi)  # E[w^2; |w| < a]
    return min(1.0, 2 * math.sqrt(max(lost, 0.0))), 1.0


@dataclass(frozen=True)
class Rule:
    """``chain:glob``: the formats tried in order for the weights ``glob`` matches."""

    chain: tuple[Format, ...]
    glob: str
    auto: bool = False
    """``auto``: narrowed to the target's streamed formats (:func:`for_target`)."""

    def matches(self, key: str) -> bool:
        return fnmatch.fnmatchcase(key, self.glob)


@dataclass(frozen=True)
class Spec:
    """A parsed ``--compress`` SPEC: rules (first match wins) and the gate."""

    rules: tuple[Rule, ...]
    gate: Gate = Gate()
    text: str = ""

    def rule_for(self, key: str) -> Rule | None:
        return next((r for r in self.rules if r.matches(key)), None)


AUTO_CHAIN: tuple[str, ...] = ("lut4", "int8", "fp16")
"""``auto``: the most compact format first; :func:`for_target` keeps those the target streams."""


def streamed(fmt: Format, target: Any) -> bool:
    """Whether ``target`` is reported to read ``fmt`` natively (ANE-COMPRESSED-STREAMING); a
    linear weight written as constexpr_blockwise_shift_scale (4-bit, per block, or
    ``--compress-form blockwise``) is the kind ``blockwise``, and a sparse weight whose values
    are int8 or a LUT the kind ``sparse-joint``: no profile streams either (no source shows them)."""
    kind = {"lut": "lut", "linear": "int8", "sparse": "sparse-joint" if fmt.joint else "sparse"}.get(fmt.kind)
    if kind == "int8" and (fmt.blockwise or (getattr(target, "int8_form", "affine") == "blockwise"
                                             and getattr(target, "mil_dialect", "ios18") == "ios18")):
        kind = "blockwise"  # constexpr_blockwise_shift_scale: reported dequantized in the program
    return kind is None or kind in getattr(target, "streamed_weights", ("lut", "int8"))


def for_target(spec: "Spec | None", target: Any) -> "Spec | None":
    """``spec`` with every ``auto`` rule narrowed to the formats ``target`` streams
    (ANE-COMPRESSED-STREAMING): ``lut4 -> int8 -> fp16`` on M2 and later, ``lut4 -> fp16``
    on M1, which is reported to decompress int8 at load."""
    if spec is None or not any(r.auto for r in spec.rules):
        return spec
    rules = tuple(Rule(tuple(f for f in r.chain if streamed(f, target)), r.glob, False) if r.auto else r
                  for r in spec.rules)
    return Spec(rules, spec.gate, spec.text)


def not_streamed_warning(fmt: Format, target: Any) -> str | None:
    """The warning for a weight stored in a format ``target`` does not stream, or None."""
    if streamed(fmt, target):
        return None
    return (f"{fmt.name} is not read natively on {target.name} (ANE-COMPRESSED-STREAMING): the device is "
            "reported to decompress it when loading, so the file is smaller but no bandwidth is saved; "
            "--compress auto picks the formats this target streams")


def parse_spec(spec: "str | Spec | None", gate: Gate | None = None) -> Spec | None:
    """``'lut4:h.*.mlp.*,int8:*'`` -> :class:`Spec`; AnecError naming the bad item. ``auto``
    is ``lut4 -> int8 -> fp16`` narrowed to what the target streams (:func:`for_target`)."""
    if spec is None or isinstance(spec, Spec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise AnecError("--compress needs a SPEC", hint="e.g. --compress int8 or --compress 'lut4:h.*.mlp.*,int8:*'")
    rules = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        fmt_text, _, glob = item.partition(":")
        glob = glob.strip() or "*"
        names = [n.strip() for n in fmt_text.split(">") if n.strip()]
        if not names:
            raise AnecError(f"--compress item '{item}' names no format", hint="write FORMAT[:GLOB], e.g. int8:h.*")
        if names == ["auto"]:
            rules.append(Rule(tuple(FORMATS[n] for n in AUTO_CHAIN), glob, True))
            continue
        if "auto" in names:
            raise AnecError(f"--compress item '{item}': auto is a chain of its own",
                            hint="write auto:GLOB, or list formats: lut4>int8:GLOB")
        chain = [get_format(n) for n in names]
        if len(names) == 1:  # the default fallbacks (4-bit linear: int8 too)
            fb = DEFAULT_FALLBACK["lut" if chain[0].kind == "linear" and chain[0].bits == 4 else chain[0].kind]
            chain += [FORMATS[n] for n in fb]
        elif chain[-1].kind != "none":
            chain.append(FORMATS["fp16"])
        rules.append(Rule(tuple(chain), glob))
    if not rules:
        raise AnecError("--compress names no format", hint="e.g. --compress int8")
    return Spec(tuple(rules), gate or Gate(), spec)
