"""The types of the ANE constraint catalog: evidence records, their scope, and entries.

An :class:`Evidence` record names its source, what it shows, its kind (:data:`KINDS`) and
the :class:`Scope` it was seen on; a :class:`Constraint` holds a device behaviour, its
records, how anec handles it (:data:`HANDLINGS`) and the target fields that limit or
switch it. :func:`derive_status` turns the records into the entry's status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from anec.ir.ops import OPS, Mil, NotOnAne
from anec.targets import Target

# record kinds
DEMONSTRATED = "demonstrated"
DOCUMENTED = "documented"
REPORTED = "reported"
HYPOTHESIS = "hypothesis"
KINDS = (DEMONSTRATED, DOCUMENTED, REPORTED, HYPOTHESIS)

# entry statuses (derived from the records)
VERIFIED = "verified"
CONTESTED = "contested"
STATUSES = (VERIFIED, REPORTED, CONTESTED, HYPOTHESIS)

#: API paths a record can be seen on: anec drives the in-memory one.
PATHS = ("in-memory", "disk", "e5rt", "Core ML", "any")

#: How a constraint is handled: by a rewrite in legalize, an error, the MIL
#: emitter, the runtime (C core / drivers), the SRAM analysis, or not at all
#: because anec cannot produce the offending construct.
HANDLINGS = ("rewrite", "rewrite or error", "error", "emitter", "runtime", "analysis", "n/a")


@dataclass(frozen=True)
class Scope:
    """Where a record was seen."""

    path: str
    """One of :data:`PATHS`: ``in-memory`` (``_ANEInMemoryModel``, anec's path), ``disk``
    (``_ANEClient``), ``e5rt`` (Espresso), ``Core ML``, ``any`` (a format or op set)."""
    chip: str
    """The chip(s), or ``not stated``."""
    os: str
    """The OS version(s), or ``not stated``."""

    def __str__(self) -> str:
        return f"{self.path}; {self.chip}; {self.os}"


@dataclass(frozen=True)
class Evidence:
    """One source's evidence about an entry."""

    source: str
    """Where: repository and file or test, paper section, issue."""
    shows: str
    """What it demonstrates (or claims), in one sentence."""
    kind: str
    """One of :data:`KINDS`."""
    scope: Scope
    """The path, chip and OS it was seen on."""
    supports: bool = True
    """False when the record contradicts the entry's claim."""


def derive_status(records: Iterable[Evidence]) -> str:
    """The status of an entry from its records: ``contested`` when a supporting and a
    contradicting record (not hypotheses) meet; else ``verified`` when a supporting
    record is demonstrated or documented; else ``reported``; else ``hypothesis``."""
    records = list(records)
    if not records:
        raise ValueError("an entry needs at least one evidence record")
    pro = [r for r in records if r.supports and r.kind != HYPOTHESIS]
    con = [r for r in records if not r.supports and r.kind != HYPOTHESIS]
    if con:
        if not pro:
            raise ValueError("every record contradicts the entry: it is not a device behaviour")
        return CONTESTED
    if any(r.kind in (DEMONSTRATED, DOCUMENTED) for r in pro):
        return VERIFIED
    return REPORTED if pro else HYPOTHESIS


@dataclass(frozen=True)
class Constraint:
    """One catalog entry."""

    id: str
    """Stable id, e.g. ``ANE-CONCAT``."""
    title: str
    """The constraint in a few words."""
    symptom: str
    """What happens on the device when it is violated."""
    evidence: tuple[Evidence, ...]
    """The records the claim rests on (and those that contradict it)."""
    handling: str
    """One of :data:`HANDLINGS`."""
    handled_by: str
    """The rule, function or component that handles it."""
    detail: str
    """How anec handles it, in a sentence or two."""
    stage: str
    """``compile`` (checked by ``anec compile``/``anec check``) or ``runtime``."""
    target_fields: tuple[str, ...] = ()
    """Target fields that parametrize it (limits)."""
    switch: str | None = None
    """Target field that turns it on or off per chip (claims that are not verified)."""

    @property
    def status(self) -> str:
        """``verified``, ``reported``, ``contested`` or ``hypothesis`` (:func:`derive_status`)."""
        return derive_status(self.evidence)

    def applies_to(self, target: Target) -> bool:
        """Whether the constraint is in force on ``target``."""
        if self.switch is None:
            return True
        return SWITCHES[self.switch](target)

    def on_target(self, target: Target) -> str:
        """A short description of this entry on ``target`` (limits, switch state)."""
        parts = [f"{f}={fmt_field(getattr(target, f))}" for f in self.target_fields]
        if self.switch is not None:
            state = "on" if self.applies_to(target) else "off"
            parts.insert(0, f"{state} ({self.switch}={fmt_field(getattr(target, self.switch))})")
        return ", ".join(parts) if parts else "always"


# A switch field -> "is the constraint in force on this target".
SWITCHES = {
    "softmax_pow2_only": lambda t: t.softmax_pow2_only,
    "reduce_mean_as_sum": lambda t: t.reduce_mean_as_sum,
    "fp32_io": lambda t: not t.fp32_io,
    "one_file_per_weight": lambda t: t.one_file_per_weight,
    "mil_dialect": lambda t: t.mil_dialect != "ios18",
    "surface_alignment": lambda t: t.surface_alignment > 64,
    "concat": lambda t: t.concat != "native",
}


def removed_by(cid: str) -> str:
    """``legalize: <rules>`` for a constraint the op table names (the rows say which rules)."""
    rules: list[str] = []
    for op in OPS.values():
        low = op.lowering
        rejections = [low] if isinstance(low, NotOnAne) else list(low.rejected.values()) if isinstance(low, Mil) else []
        rules += [r for rej in rejections if rej.constraint == cid for r in rej.rules]
    if not rules:
        raise ValueError(f"no op row names constraint {cid}")
    return "legalize: " + ", ".join(rules)


def fmt_field(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int) and v >= 1024 * 1024 and v % (1024 * 1024) == 0:
        return f"{v // (1024 * 1024)} MiB"
    return str(v)
