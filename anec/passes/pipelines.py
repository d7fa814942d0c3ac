"""Named pipelines: tuples of pass instances, each line saying why it is there.

``default`` is what ``anec compile`` runs. The order matters:

* dce first, so nothing unreachable is folded, counted or legalized;
* fuse-casts before legalize, so legalize sees the real dtypes of values and
  counts the weights that survive folding;
* a second dce, because fuse-casts leaves the inner casts of folded chains
  and the consts it re-declared unused;
* select-native right after the cleanup: the target forms it writes (one native conv,
  pool or upsample per layer) are what range-safe, the size analysis and legalize's
  BLOBFILE count must see, and it reads the weight consts fuse-casts settled;
* range-safe after the cleanup (it sees the real dtypes and only live squares) and
  before legalize, which lowers the rsqrt, neg and reduce_mean it writes; the
  squares it replaced are left unused for the sizes not to count them;
* annotate-sram on the cleaned-up program (legalize reads the report and
  refreshes it after rewriting, so the manifest describes what is emitted);
* legalize last among the transformations: it needs the final op set to
  count BLOBFILE tensors and check the target's limits;
* partition on the legal program: the BLOBFILE tensors and live bytes it
  budgets are those of the ops emitted (legalize refreshed the SRAM summary);
* emit-mil only ever sees legal programs, one per stage of a cut func.
"""

from __future__ import annotations

from anec.diagnostics import AnecError, did_you_mean
from anec.passes.annotate_sram import AnnotateSram
from anec.passes.base import Pass
from anec.passes.dce import DeadCodeElimination
from anec.passes.emit_mil import EmitMil
from anec.passes.fuse_casts import FuseCasts
from anec.passes.legalize import Legalize
from anec.passes.partition import Partition
from anec.passes.range_safe import RangeSafe
from anec.passes.select_native import SelectNative
from anec.passes.registry import PASSES

CLEANUP: tuple[Pass, ...] = (
    DeadCodeElimination(),   # drop what cannot reach an output before anything is counted
    FuseCasts(),             # fold no-op casts, lossless chains and casts of constants
    DeadCodeElimination(),   # fuse-casts leaves inner casts and re-declared consts unused
)
"""Target-independent cleanup only."""

PREPARE: tuple[Pass, ...] = CLEANUP + (
    SelectNative(),          # canonical spatial forms -> one native conv/pool/upsample each
    RangeSafe(),             # scale rows before squaring: norms never overflow fp16
    AnnotateSram(),          # sizes of the cleaned-up program; legalize refreshes them
)
"""Everything before legalize (``anec check`` runs it, then legalize on its own)."""

OPTIMIZE: tuple[Pass, ...] = PREPARE + (
    Legalize(),              # rewrite for the target, then count BLOBFILEs on the final ops
    Partition(),             # a func over a per-program budget: the plan of its programs
)
"""The legal program and its partition plan, without writing an artifact."""

DEFAULT: tuple[Pass, ...] = OPTIMIZE + (
    EmitMil(),               # MIL text + BLOBFILEs + manifest, legal programs only
)
"""What ``anec compile`` runs."""

NUMERICS: tuple[Pass, ...] = CLEANUP + (
    RangeSafe(),
)
"""The passes that decide what the device computes before legalize's exact rewrites: the
fp16 interpreter runs a func after them (:func:`anec.passes.manager.device_form`)."""


PIPELINES: dict[str, tuple[Pass, ...]] = {
    "default": DEFAULT,
    "optimize": OPTIMIZE,
    "cleanup": CLEANUP,
}
"""Pipeline name -> passes (``anec compile --pipeline NAME``)."""


def get_pipeline(name: str) -> tuple[Pass, ...]:
    """The pipeline called ``name``; AnecError with a suggestion otherwise."""
    if name in PIPELINES:
        return PIPELINES[name]
    hint = did_you_mean(name, PIPELINES) or f"pipelines: {', '.join(PIPELINES)}"
    raise AnecError(f"unknown pipeline '{name}'", hint=hint)


def get_pass(name: str) -> type[Pass]:
    """The pass class called ``name``; AnecError with a suggestion otherwise."""
    if name in PASSES:
        return PASSES[name]
    raise AnecError(f"unknown pass '{name}'", hint=pass_name_hint(name))


def pass_name_hint(name: str, extra: tuple[str, ...] = ()) -> str:
    """What to write instead of the unknown pass ``name`` (spelling, case, ``_`` for ``-``)."""
    choices = [*PASSES, *extra]
    normal = name.strip().lower().replace("_", "-")
    if normal in choices:
        return f"did you mean '{normal}'? (pass names are lowercase, with '-')"
    if name in PIPELINES:
        return (f"'{name}' is a pipeline, not a pass: use --pipeline {name} "
                f"(passes: {', '.join(p.name for p in PIPELINES[name])})")
    return did_you_mean(normal, choices) or f"passes: {', '.join(choices)}"


def parse_pass_list(text: str) -> tuple[Pass, ...]:
    """``"dce,fuse-casts,dce"`` -> pass instances, in order (repeats allowed)."""
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise AnecError(f"invalid pass list '{text}'",
                        hint="write pass names separated by commas, e.g. dce,fuse-casts,dce")
    return tuple(get_pass(n)() for n in names)


def check_pass_names(names) -> set[str]:
    """Validate names for ``--print-ir-after`` (pass names or ``all``)."""
    out = set()
    for n in names:
        n = n.strip()
        if n != "all" and n not in PASSES:
            raise AnecError(f"unknown pass '{n}'", hint=pass_name_hint(n, ("all",)))
        out.add(n)
    return out
