"""The rewrites coremltools' ML Program backend makes even under ``PassPipeline.EMPTY``, as data.

:data:`FUSIONS` lists the statement fusions a package may hold instead of
``model.mil``'s statements (``mul(x, sigmoid(x))`` -> ``silu(x)``...);
:data:`BACKEND_PASSES` says what every backend pass that runs does to an
exported program; :func:`fuse` applies the fusions to the expected statements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anec.frontends.coreml_mil import MilStatement


@dataclass(frozen=True)
class Fusion:
    """A rewrite coremltools' ML Program backend applies even under ``PassPipeline.EMPTY``
    (its ``_BACKEND_MIL_PASSES`` run on every conversion): a statement ``first`` whose
    only user is ``second`` (and which no output returns) becomes ``fused(x=first.x)``,
    named as ``second``'s result, where ``first`` was. ``second_args`` are the user's
    operands: ``"first"`` (the first's result), ``"first.x"`` (the first's ``x``) or a
    number (a const of that value); ``first_consts`` constrain the first's const operands."""

    pass_name: str
    meaning: str
    first: str
    second: str
    second_args: frozenset
    fused: str
    first_consts: tuple[tuple[str, float], ...] = ()


FUSIONS: tuple[Fusion, ...] = (
    Fusion("mil_backend::fuse_activation_silu", "mul(x, sigmoid(x)) -> silu(x)",
           "sigmoid", "mul", frozenset({"first.x", "first"}), "silu"),
    Fusion("mil_backend::fuse_pow2_sqrt", "sqrt(pow(x, 2)) -> identity(x)",
           "pow", "sqrt", frozenset({"first"}), "identity", (("y", 2.0),)),
    Fusion("mil_backend::fuse_pow2_sqrt", "pow(sqrt(x), 2) -> identity(x)",
           "sqrt", "pow", frozenset({"first", 2.0}), "identity"),
)
"""The rewrites of model.mil a package may hold (what coremltools' backend does), as data."""

BACKEND_PASSES: dict[str, str] = {
    "mil_backend::adjust_io_to_supported_types": "none: the I/O dtypes (fp32, fp16, int32) are supported",
    "mil_backend::insert_image_preprocessing_ops": "none: the package has no image inputs",
    "mil_backend::fuse_activation_silu": "FUSIONS",
    "mil_backend::fuse_pow2_sqrt": "FUSIONS",
    "mil_backend::sanitize_name_strings": "none: MIL names are identifiers already",
    "nn_backend::handle_unused_inputs": "none: every program input is used",
}
"""What each pass of coremltools' ML Program backend that runs under ``PassPipeline.EMPTY``
does to an exported program (coremltools drops from the backend the passes of its default
pipeline that the chosen pipeline leaves out: const elimination and deduplication, dead code
elimination...). A pass not listed here is a rewrite verification does not expect."""




@dataclass
class Expected:
    """One operation the package should hold: a model.mil statement in package names
    (its constant resolved to an array), with where it comes from."""

    stmt: MilStatement
    where: str
    blob: bool = False



def _uses(exp: list[Expected]) -> dict[str, list[int]]:
    uses: dict[str, list[int]] = {}
    for i, e in enumerate(exp):
        for v in e.stmt.args.values():
            for name in v.strip("()").split(",") if v.startswith("(") else [v]:
                uses.setdefault(name.strip(), []).append(i)
    return uses


def fuse(exp: list[Expected], outputs: set[str], applied: dict[str, int]) -> None:
    consts = {e.stmt.results[0][1]: e.stmt.value for e in exp if e.stmt.op == "const"}

    def const_is(name: str, want: float) -> bool:
        v = consts.get(name)
        return v is not None and not isinstance(v, str) and bool(np.all(np.asarray(v, np.float64) == want))

    changed = True
    while changed:
        changed = False
        uses = _uses(exp)
        for i, e in enumerate(exp):
            for f in FUSIONS:
                st = e.stmt
                if st.op != f.first or not all(const_is(st.args.get(k, ""), v) for k, v in f.first_consts):
                    continue
                r = st.results[0][1]
                users = sorted(set(uses.get(r, [])))
                if r in outputs or len(users) != 1 or exp[users[0]].stmt.op != f.second:
                    continue
                second = exp[users[0]].stmt
                got = list(second.args.values())
                want = [st.args.get("x") if a == "first.x" else r if a == "first" else a for a in f.second_args]
                if not (len(got) == len(want) and all(
                        any(g == w if isinstance(w, str) else const_is(g, w) for g in got) for w in want)
                        and all(any(g == w if isinstance(w, str) else const_is(g, w) for w in want) for g in got)):
                    continue
                exp[i] = Expected(MilStatement(second.results, f.fused, {"x": st.args["x"]}), e.where)
                del exp[users[0]]
                applied[f.meaning] = applied.get(f.meaning, 0) + 1
                changed = True
                break
            if changed:
                break


def fusions_hint() -> str:
    import coremltools as ct

    known = "; ".join(sorted({f.meaning for f in FUSIONS}))
    return (f"either the package is not this artifact's, or coremltools {ct.__version__} rewrote the program "
            f"in a way anec does not expect (expected: {known}); a new coremltools rewrite that keeps the "
            "meaning belongs in anec.frontends.coreml_fusions.FUSIONS")
