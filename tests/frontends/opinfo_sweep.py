"""PyTorch's own OpInfo samples through the importer, on the sim, at three magnitudes.

Which ops: every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db``
that supports float32 and lowers to the importer's table (``anec.frontends.lowerings.HANDLERS``,
the table of ``anec import --ops``): its first sample, run eagerly under a dispatch mode that
applies the importer's own decompositions (core ATen, as ``anec.frontends.torch.export.decompose``),
calls at least one ATen overload of the table and only overloads of the table. So an
OpInfo named after a table op (``add``, ``var``, ``linalg.vector_norm``) is swept, and so
is one that decomposes into table ops (``nn.functional.rms_norm``, ``nn.functional.layer_norm``,
``nn.functional.silu``); one that needs an op the table lacks is not (its refusal is
tested in test_import_errors.py).

Which samples: the first :data:`SAMPLES` float32 samples of each OpInfo (torch seeded with
0 before each OpInfo's generator: the same samples on every run).

The module: the OpInfo's op in a tiny ``nn.Module`` whose forward takes the float tensors of
the sample's ``input`` (a tensor, or the tensors of a list such as ``cat``'s); the
sample's other arguments (second operands, weights, biases, exponents, indices, masks,
shapes) are bound as constants, as a model's parameters are. Every float tensor is rounded
to fp16 first (what the program reads), so torch's fp32 reference and the sim see the
same numbers.

Magnitudes: the data inputs, the float tensors of ``input``, are multiplied by 1, 10^2
and 10^3; the constants keep their own magnitude. Large activations are what a model
meets (weights and biases stay small); scaling both operands of a product would square
the factor (10^6 at 10^3) and take most bilinear samples out of fp16 range, testing less;
exponents and indices are not magnitudes. Only the inputs change between magnitudes, so
each sample is imported and compiled once and run three times on one sim runtime.

Each (sample, magnitude) is one of:

* ``out of fp16 range``: torch's fp32 output has a finite element beyond 65504 (fp16
  cannot hold the answer; not run);
* ``match``: the sim's outputs equal torch's: float outputs to :data:`ULPS` fp16 ulps under
  the project's rule (tests/tolerances.py: relative near the output's largest value,
  absolute at its fp16 resolution below; NaN and infinities exactly), integer and bool
  outputs exactly;
* ``refused``: anec raised its own error (an ``AnecError``: ``UnsupportedOpError``,
  ``TorchImportError``, a constraint error) while importing, compiling or running;
* ``flagged``: it ran and an output is outside the tolerance, but anec's fp16 range
  analysis on the same inputs (``ImportedModel.check_ranges``, ``anec check --inputs``)
  names the node that overflows fp16 or loses bits, with ``ANE-FP16-RANGE`` and its
  source line: anec says so, located (the program as a torch user wrote it needs a value
  beyond fp16, or a difference of large values fp16 cannot resolve);
* ``silently wrong``: it ran, an output is outside the tolerance or not finite where
  torch's is, and nothing in anec says so;
* ``crash``: any other exception.

``python tests/frontends/opinfo_sweep.py`` prints the counts per op and magnitude
(``--markdown FILE`` writes the per-magnitude table; ``--op NAME`` restricts the sweep).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import math
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

if __package__ in (None, ""):  # run as a script: the repository and tests/ on sys.path
    _ROOT = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]

MAGNITUDES = (1.0, 1e2, 1e3)
"""The factors applied to the data inputs."""
SAMPLES = 3
"""Samples per OpInfo (the first ones its generator yields for float32)."""
ULPS = 8
"""Allowed error in fp16 ulps (tests/tolerances.py's rule). The inputs and constants are
fp16 exactly on both sides, so the error is the program's own: each rounding to fp16 of an
intermediate costs up to half an ulp of it, and the composed lowerings (an elu is six IR
ops, a layer norm nine) round several times; the transcendental units add an ulp or two."""
FP16_MAX = 65504.0
OUTCOMES = ("match", "refused", "flagged", "out of fp16 range", "silently wrong", "crash")


def check_id(magnitude: float) -> str:
    """The tolerances.json check of the matching samples at ``magnitude``."""
    return f"opinfo-sweep/x{magnitude:g}"


def magnitude_label(magnitude: float) -> str:
    return "1" if magnitude == 1 else f"10^{round(math.log10(magnitude))}"


@dataclass
class Run:
    """One sample at one magnitude."""

    op: str             # the OpInfo's name, with its variant: "div.floor_rounding"
    index: int          # the sample's index among the OpInfo's samples
    magnitude: float
    outcome: str        # one of OUTCOMES
    detail: str = ""    # the error or the mismatch, one line
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst_ulps: float = 0.0
    got: list = field(default_factory=list, repr=False)   # the sim's outputs (match only)
    want: list = field(default_factory=list, repr=False)  # torch's outputs (match only)

    def where(self) -> str:
        return f"{self.op} sample {self.index} at x{magnitude_label(self.magnitude)}"


# ---------------------------------------------------------------------------
# which OpInfos


def table() -> set[str]:
    """The ATen overloads the importer lowers ("aten.add.Tensor"), from its own table."""
    from anec.frontends.lowerings import HANDLERS

    return set(HANDLERS)


def _decompositions() -> dict:
    """The importer's decomposition table (anec.frontends.torch.export.decompose's)."""
    import torch

    from anec.frontends.torch.export import KEEP_WHOLE

    decomp = dict(torch.export.default_decompositions())
    for name in KEEP_WHOLE:
        op, overload = name.split(".")
        decomp.pop(getattr(getattr(torch.ops.aten, op), overload), None)
    return decomp


def traced_ops(fn: Any, args: tuple, kwargs: dict, mapped: set[str], decomp: dict) -> set[str]:
    """The ATen overloads ``fn(*args, **kwargs)`` reaches once decomposed to core ATen the way
    the importer decomposes (a table op is kept whole, as the importer keeps it)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Trace(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = str(func)
            packet, _, overload = name[len("aten."):].partition(".")
            if packet.endswith("_") and not packet.endswith("__"):  # in-place: functionalized by export
                name = f"aten.{packet[:-1]}.{overload}"
            if name not in mapped and func in decomp:
                with self:
                    out = decomp[func](*args, **kwargs)
                if out is not NotImplemented:
                    return out
            self.ops.add(name)
            return func(*args, **kwargs)

    mode = Trace()
    with mode, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(*args, **kwargs)
    return mode.ops


@contextlib.contextmanager
def _no_test_fn_lookup() -> Iterator[None]:
    """torch's OpInfo samples look for the running unittest.TestCase method (to key their seed
    and a debugging record) by ``inspect.stack()``, which under pytest costs ~0.15 s a call:
    most of the sweep's time. No frame of a pytest function or of this script holds a
    TestCase, so the lookup finds nothing either way; answering None at once is only speed:
    the samples and their seeds are the same."""
    import importlib

    mods = [importlib.import_module(m) for m in ("torch.testing._internal.common_utils",
                                                 "torch.testing._internal.opinfo.core")]
    saved = [(m, m.extract_test_fn) for m in mods if hasattr(m, "extract_test_fn")]
    for m, _ in saved:
        m.extract_test_fn = lambda: None
    try:
        yield
    finally:
        for m, orig in saved:
            m.extract_test_fn = orig


def _samples(info: Any, n: int) -> list:
    import torch

    torch.manual_seed(0)
    out = []
    with warnings.catch_warnings(), _no_test_fn_lookup():
        warnings.simplefilter("ignore")
        for s in info.sample_inputs("cpu", torch.float32, requires_grad=False):
            out.append(s)
            if len(out) == n:
                break
    return out


def opinfo_name(info: Any) -> str:
    return info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")


def swept_opinfos(only: set[str] | None = None) -> list[tuple[str, Any]]:
    """(name, OpInfo) of every float32 OpInfo whose first sample lowers to table ops only."""
    return list(_swept_opinfos(frozenset(only) if only else None))


@functools.lru_cache(maxsize=None)
def _swept_opinfos(only: frozenset[str] | None) -> tuple[tuple[str, Any], ...]:
    """:func:`swept_opinfos`, traced once per process (the sweep and its test both ask)."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    mapped, decomp = table(), _decompositions()
    picked = []
    for info in op_db:
        name = opinfo_name(info)
        if only and name not in only and info.name not in only:
            continue
        if torch.float32 not in info.supported_dtypes("cpu"):
            continue
        try:
            first = _samples(info, 1)
            if not first:
                continue
            s = first[0]
            ops = traced_ops(info.op, (s.input, *s.args), dict(s.kwargs), mapped, decomp)
        except Exception:  # the OpInfo's own sample does not run eagerly: nothing to sweep
            continue
        if ops and ops <= mapped:
            picked.append((name, info))
    return tuple(picked)


# ---------------------------------------------------------------------------
# one sample


def _fp16(t: Any) -> Any:
    import torch

    if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
        return t.detach().to(torch.float16).to(t.dtype)
    return t


def sample_module(info: Any, sample: Any) -> tuple[Any, list]:
    """(module, data inputs): forward takes the float tensors of ``sample.input``."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

    leaves, spec = tree_flatten(sample.input)
    data = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and x.dtype.is_floating_point]
    fixed = [_fp16(x) for x in leaves]
    args = tuple(tree_map(_fp16, a) for a in sample.args)
    kwargs = {k: tree_map(_fp16, a) for k, a in sample.kwargs.items()}

    class OpModule(torch.nn.Module):
        def forward(self, *xs):
            vals = list(fixed)
            for i, x in zip(data, xs):
                vals[i] = x
            return info.op(tree_unflatten(vals, spec), *args, **kwargs)

    return OpModule().eval(), [fixed[i] for i in data]


def _outputs(out: Any) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def _reference(module: Any, xs: list) -> list[np.ndarray]:
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = _outputs(module(*xs))
    return [t.detach().numpy().copy() for t in out]


def _out_of_range(refs: list[np.ndarray]) -> bool:
    for r in refs:
        if r.dtype.kind == "f":
            fin = r[np.isfinite(r)]
            if fin.size and float(np.abs(fin).max()) > FP16_MAX:
                return True
    return False


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def compare(got: list, want: list) -> tuple[str, str, float, float, float]:
    """(outcome, detail, max abs error, max rel error, worst ulps) of the sim's outputs."""
    from tolerances import check_close

    if len(got) != len(want):
        return "silently wrong", f"{len(got)} outputs, torch returns {len(want)}", math.inf, math.inf, math.inf
    max_abs = max_rel = worst = 0.0
    for k, (g, r) in enumerate(zip(got, want)):
        g = np.asarray(g)
        if g.shape != r.shape:
            return "silently wrong", f"output {k}: shape {g.shape} vs torch {r.shape}", math.inf, math.inf, math.inf
        if r.dtype.kind != "f":  # integer and bool outputs are exact
            if not np.array_equal(g.astype(np.float64), r.astype(np.float64)):
                n = int(np.sum(g.astype(np.float64) != r.astype(np.float64)))
                return "silently wrong", f"output {k}: {n} of {r.size} {r.dtype} elements differ", \
                    float(np.max(np.abs(g.astype(np.float64) - r.astype(np.float64)))), math.inf, math.inf
            continue
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        fin = np.isfinite(r64)
        with np.errstate(invalid="ignore"):
            diff = np.abs(g64 - r64)[fin]
        scale = float(np.max(np.abs(r64[fin]), initial=0.0))
        a = float(np.max(diff, initial=0.0)) if np.all(np.isfinite(diff)) else math.inf
        max_abs = max(max_abs, a)
        max_rel = max(max_rel, a / scale if scale else (0.0 if a == 0 else math.inf))
        try:
            w, _ = check_close(g, r, ULPS, f"output {k}")
        except AssertionError as e:
            return "silently wrong", " ".join(str(e).split()), max_abs, max_rel, math.inf
        worst = max(worst, w)
    return "match", "", max_abs, max_rel, worst


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def run_sample(name: str, index: int, info: Any, sample: Any, runtime: Any,
               magnitudes: tuple = MAGNITUDES) -> list[Run]:
    """The sample at each magnitude: imported and compiled once, run per magnitude."""
    import anec
    from anec.compiler import compile_module
    from anec.diagnostics import AnecError
    from anec.frontends.torch.runner import TorchRunner
    from anec.runtime import native
    from anec.weight_store import WeightStore

    runs: list[Run] = []
    try:
        module, xs = sample_module(info, sample)
        inputs = {m: [_fp16(x * m) for x in xs] for m in magnitudes}  # what the program reads
        refs = {m: _reference(module, inputs[m]) for m in magnitudes}
    except Exception:  # torch itself cannot run it in fp32: not a sample of the op, nothing to count
        return []
    todo = []
    for m in magnitudes:
        if _out_of_range(refs[m]) or any(bool(x.isinf().any()) for x in inputs[m]):
            runs.append(Run(name, index, m, "out of fp16 range"))
        else:
            todo.append(m)
    if not todo:
        return runs

    def fail(e: BaseException, stage: str) -> None:
        outcome = "refused" if isinstance(e, AnecError) else "crash"
        detail = f"{stage}: {_one_line(e)}"
        if outcome == "crash":
            detail += " | " + " < ".join(f"{f.name}:{f.lineno}" for f in traceback.extract_tb(e.__traceback__)[-3:])
        runs.extend(Run(name, index, m, outcome, detail) for m in todo)

    try:
        with _quiet():
            im = anec.import_torch(module, tuple(xs))
    except Exception as e:
        fail(e, "import")
        return runs
    program = None
    try:
        runner = TorchRunner.__new__(TorchRunner)  # TorchRunner's own binding, on a shared runtime
        runner.im, runner.backend, runner.rng = im, "sim", np.random.default_rng(0)
        runner.store = WeightStore(im.weights, source=f"<{im.name} weights>")
        runner._runtime = None
        with _quiet():
            native.reset_process_budget("sim")  # the sim models the ANE's compiles per process; a
            # sweep of hundreds of programs is many processes' worth (as the runtime tests do)
            result = compile_module(im.module, weights=runner.store, host_casts=True)
            runner.artifact = result.artifacts[im.name]
            program = runner._program = runtime.load(runner.artifact)
    except Exception as e:
        fail(e, "compile")
        if program is not None:
            program.close()
        return runs
    try:
        for m in todo:
            try:
                got = list(runner(*[x.numpy() for x in inputs[m]]))
            except Exception as e:
                outcome = "refused" if isinstance(e, AnecError) else "crash"
                runs.append(Run(name, index, m, outcome, f"run: {_one_line(e)}"))
                continue
            want = refs[m]
            outcome, detail, a, r, w = compare(got, want)
            if outcome == "silently wrong":
                found = _range_findings(im, inputs[m])
                if found:
                    outcome, detail = "flagged", f"{found} | {detail}"
            run = Run(name, index, m, outcome, detail, a, r, w)
            if outcome == "match":
                run.got, run.want = [np.asarray(g) for g in got], want
            runs.append(run)
    finally:
        program.close()
    return runs


def _range_findings(im: Any, xs: list) -> str:
    """The first finding of anec's fp16 range analysis on these inputs, in one line; ''."""
    try:
        with _quiet():
            reports = im.check_ranges(*[x.numpy() for x in xs])
    except Exception:  # the analysis itself failing is not a finding
        return ""
    for rep in reports:
        for f in rep.findings:
            return " ".join(f.diagnostic().render().split("\n")[0].split())
    return ""


@contextlib.contextmanager
def _cia_ops_computed_once() -> Iterator[None]:
    """torch.export collects the set of CompositeImplicitAutograd ops afresh for every export
    and every decomposition (0.4 s of the ~1 s an OpInfo sample takes to import here); the
    set does not change while the sweep runs, so it is computed once. Only speed: the
    importer's decompositions are the same."""
    import importlib

    names = ("_collect_all_valid_cia_ops", "_collect_all_valid_cia_ops_for_aten_namespace")
    patched = []
    utils = importlib.import_module("torch._export.utils")
    for name in names:
        orig = getattr(utils, name, None)
        if orig is None:
            continue
        memo = functools.lru_cache(maxsize=None)(orig)
        cached = functools.wraps(orig)(lambda memo=memo: set(memo()))
        for mod in ("torch._export.utils", "torch.export.exported_program", "torch.export.decomp_utils"):
            m = importlib.import_module(mod)
            if getattr(m, name, None) is orig:
                patched.append((m, name, orig))
                setattr(m, name, cached)
    try:
        yield
    finally:
        for m, name, orig in patched:
            setattr(m, name, orig)


def sweep(only: set[str] | None = None, samples: int = SAMPLES, magnitudes: tuple = MAGNITUDES,
          progress: Any = None, picked: list[tuple[str, Any]] | None = None) -> list[Run]:
    """Every swept OpInfo's first ``samples`` samples at each magnitude, on one sim runtime
    (``picked``: these (name, OpInfo) of :func:`swept_opinfos` instead, e.g. a shard of them)."""
    from anec.runtime import Runtime

    runs: list[Run] = []
    with Runtime(backend="sim") as rt, _cia_ops_computed_once():
        for name, info in swept_opinfos(only) if picked is None else picked:
            try:
                picked = _samples(info, samples)
            except Exception as e:  # pragma: no cover - torch's generators run for the first sample
                runs.extend(Run(name, 0, m, "crash", f"samples: {_one_line(e)}") for m in magnitudes)
                continue
            for i, s in enumerate(picked):
                runs.extend(run_sample(name, i, info, s, rt, magnitudes))
            if progress:
                progress(name, runs)
    return runs


# ---------------------------------------------------------------------------
# tables


def counts(runs: list[Run]) -> dict[float, dict[str, int]]:
    """magnitude -> outcome -> number of samples."""
    out: dict[float, dict[str, int]] = {}
    for r in runs:
        out.setdefault(r.magnitude, dict.fromkeys(OUTCOMES, 0))[r.outcome] += 1
    return out


def markdown(runs: list[Run]) -> str:
    """The per-magnitude table of docs/torch.md."""
    c = counts(runs)
    ops = len({r.op for r in runs})
    per_mag = {m: sum(v.values()) for m, v in c.items()}
    lines = [f"| magnitude | {' | '.join(OUTCOMES)} |", "|---|" + "---:|" * len(OUTCOMES)]
    for m in sorted(c):
        lines.append(f"| x{magnitude_label(m)} | " + " | ".join(str(c[m][o]) for o in OUTCOMES) + " |")
    n = next(iter(per_mag.values()), 0)
    lines.append("")
    lines.append(f"{ops} OpInfos, {n} samples per magnitude.")
    return "\n".join(lines) + "\n"


def text_table(runs: list[Run]) -> str:
    """Counts per op and magnitude (m=match r=refused f=flagged o=out of range W=silently wrong
    C=crash)."""
    short = dict(zip(OUTCOMES, "mrfoWC"))
    mags = sorted({r.magnitude for r in runs})
    per: dict[str, dict[float, dict[str, int]]] = {}
    worst: dict[str, float] = {}
    for r in runs:
        per.setdefault(r.op, {}).setdefault(r.magnitude, dict.fromkeys(OUTCOMES, 0))[r.outcome] += 1
        if r.outcome == "match":
            worst[r.op] = max(worst.get(r.op, 0.0), r.worst_ulps)
    width = max((len(o) for o in per), default=2) + 2
    head = "op".ljust(width) + "".join(f"x{magnitude_label(m)}".ljust(18) for m in mags) + "worst ulps"
    lines = [head, "-" * len(head)]
    for op, by in per.items():
        cells = []
        for m in mags:
            c = by.get(m, {})
            cells.append(" ".join(f"{c[o]}{short[o]}" for o in OUTCOMES if c.get(o)).ljust(18))
        lines.append(op.ljust(width) + "".join(cells) + (f"{worst[op]:.2g}" if op in worst else "-"))
    lines.append("")
    lines.append("m match, r refused, f flagged by the fp16 range analysis, o out of fp16 range, "
                 "W silently wrong, C crash")
    lines.append("")
    lines.append(markdown(runs))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", action="append", help="sweep only this OpInfo (repeatable)")
    p.add_argument("--samples", type=int, default=SAMPLES, help=f"samples per OpInfo (default {SAMPLES})")
    p.add_argument("--markdown", metavar="FILE", help="write the per-magnitude table as markdown")
    p.add_argument("--details", action="store_true", help="list every run that is not a match")
    ns = p.parse_args(argv)
    t0 = time.monotonic()
    runs = sweep(set(ns.op) if ns.op else None, ns.samples)
    print(text_table(runs))
    bad = [r for r in runs if r.outcome in ("silently wrong", "crash")
           or (ns.details and r.outcome in ("refused", "flagged"))]
    for r in bad:
        print(f"{r.outcome}: {r.where()}: max abs {r.max_abs:.3g}, max rel {r.max_rel:.3g}: {r.detail}")
    print(f"{time.monotonic() - t0:.0f} s")
    if ns.markdown:
        Path(ns.markdown).write_text(markdown(runs), "utf-8")
    return 1 if any(r.outcome in ("silently wrong", "crash") for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
