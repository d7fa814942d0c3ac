"""The C simulator's op table, generated from the op table (``csrc/sim_ops.h``).

The simulator reads MIL, so its table is keyed by MIL op: every op row
lowered to MIL (:class:`~anec.ir.ops.Mil`) gives its MIL op, kernel id and
build rule; :data:`~anec.ir.ops.SIM_ONLY_MIL_OPS` adds the MIL ops it runs
although no IR op lowers to them; every row the ANE does not take
(:class:`~anec.ir.ops.NotOnAne`, ``sim_rejects``) and every optional operand
a lowering rejects becomes a rejection carrying its constraint id. A
contested rejection (``native``) is also built and run, and its rejection
names the device switch (``concat=accept``) that lifts it.

The executor dispatches through ``SIM_KERNELS``: kernel id -> the C function
``kernel_<id>`` (lower case) in ``csrc/sim_exec.c``. A row whose kernel is
not written there therefore fails the build ("'kernel_<id>' undeclared"),
never runs as zeros; a build rule that makes a plan step (any but
:data:`VALUE_RULES`) without a kernel id is refused here::

    python -m anec.ir.gen_c            # rewrite csrc/sim_ops.h
    python -m anec.ir.gen_c --check    # exit 1 (and say so) when it is stale

A test fails when the committed header differs from :func:`header_text`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from anec.ir.ops import OPS, SIM_ONLY_MIL_OPS, SPATIAL_LIMITS, TARGET_OPS, Mil, NotOnAne, SimKernel

HEADER = Path(__file__).resolve().parents[2] / "csrc" / "sim_ops.h"

VALUE_RULES = frozenset({"const"})
"""Build rules that make a value rather than a plan step: the only ones without a kernel."""


def sim_ops() -> list[tuple[str, SimKernel]]:
    """(MIL op, kernel) for every MIL op the simulator builds, in table order."""
    rows_ = [*OPS.values(), *TARGET_OPS.values()]
    lowerings = [o.lowering.native if isinstance(o.lowering, NotOnAne) else o.lowering for o in rows_]
    rows = [(low.op, low.sim) for low in lowerings if isinstance(low, Mil) and low.sim is not None]
    rows += list(SIM_ONLY_MIL_OPS.items())
    seen: dict[str, SimKernel] = {}
    for op, k in rows:
        if seen.setdefault(op, k) != k:
            raise ValueError(f"MIL op '{op}' has two simulator kernels: {seen[op]} and {k}")
        if k.kernel is None and k.rule not in VALUE_RULES:
            raise ValueError(f"MIL op '{op}': build rule '{k.rule}' makes a plan step, so its row needs a "
                             "simulator kernel id (SimKernel(rule, kernel))")
    return rows


def kernels() -> list[str]:
    """Kernel ids, in order of first use."""
    return list(dict.fromkeys(k.kernel for _, k in sim_ops() if k.kernel is not None))


def rejections() -> tuple[list[tuple[str, NotOnAne]], list[tuple[str, str, NotOnAne]]]:
    """(MIL op, why) the simulator refuses, and (MIL op, argument, why) it refuses."""
    ops, args = [], []
    for o in OPS.values():
        low = o.lowering
        if isinstance(low, NotOnAne) and low.sim_rejects:
            ops.append((o.name, low))
        elif isinstance(low, Mil):
            args += [(low.op, low.arg(key), rej) for key, rej in low.rejected.items()]
    return ops, args


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _macro(name: str, doc: str, rows: list[str]) -> list[str]:
    body = [f"    X({row})" for row in rows] or ["    /* none */"]
    return [f"/* {doc} */", f"#define {name}(X) \\", *[b + " \\" for b in body[:-1]], body[-1], ""]


def header_text() -> str:
    """The text of ``csrc/sim_ops.h``."""
    ks = kernels()
    ops, args = rejections()
    lines = [
        "/*",
        " * sim_ops.h - the sim's op table (internal): which MIL ops it builds and runs,",
        " * and which it rejects as the ANE compiler does.",
        " *",
        " * GENERATED from the op table (anec/ir/ops.py) by `python -m anec.ir.gen_c`;",
        " * do not edit by hand (a test fails when this file is stale).",
        " */",
        "#ifndef ANEC_SIM_OPS_H",
        "#define ANEC_SIM_OPS_H",
        "",
        "/* Kernel ids: what a plan step runs (SOP_NONE: a statement that makes a value, not a step). */",
        "enum {",
        "    SOP_NONE = 0,",
        *[f"    SOP_{k}," for k in ks],
        "    SOP_COUNT",
        "};",
        "",
        "/* Limits of the spatial ops (kernel, stride, dilation per dim; upsample scale): ANE-SPATIAL-LIMITS,",
        " * anec.ir.ops.SPATIAL_LIMITS. A padding must be smaller than the kernel extent it pads. */",
        f"#define SIM_SPATIAL_MAX_KERNEL {SPATIAL_LIMITS.kernel}",
        f"#define SIM_SPATIAL_MAX_STRIDE {SPATIAL_LIMITS.stride}",
        f"#define SIM_SPATIAL_MAX_DILATION {SPATIAL_LIMITS.dilation}",
        f"#define SIM_SPATIAL_MAX_SCALE {SPATIAL_LIMITS.upsample_scale}",
        "",
        *_macro("SIM_MIL_OPS", "MIL op, kernel id, build rule (rule_<rule> in sim_rules.c).",
                [f"{_c_string(op)}, SOP_{k.kernel or 'NONE'}, {k.rule}" for op, k in sim_ops()]),
        *_macro("SIM_KERNELS", "Kernel id, kernel (kernel_<kernel> in sim_exec.c: without it, it does not compile).",
                [f"SOP_{k}, {k.lower()}" for k in ks]),
        *_macro("SIM_REJECTED_OPS", "MIL op the ANE compiler rejects, constraint id, message, and the device "
                "switch <switch>=accept under which the sim accepts it (contested: NULL if none).",
                [f"{_c_string(op)}, {_c_string(r.constraint)}, {_c_string(f'{r.why}; {r.fix}')}, "
                 f"{_c_string(r.reading) if r.native is not None and r.reading else 'NULL'}"
                 for op, r in ops]),
        *_macro("SIM_REJECTED_ARGS", "MIL op, argument the ANE compiler rejects, constraint id, message.",
                [f"{_c_string(op)}, {_c_string(arg)}, {_c_string(r.constraint)}, "
                 f"{_c_string(f'{r.why}; {r.fix}')}" for op, arg, r in args]),
        "#endif",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m anec.ir.gen_c", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that csrc/sim_ops.h is current")
    ap.add_argument("--output", type=Path, default=HEADER, help="where to write (default: csrc/sim_ops.h)")
    args = ap.parse_args(argv)
    text = header_text()
    current = args.output.read_text("utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            print(f"{args.output} is stale: run python -m anec.ir.gen_c", file=sys.stderr)
            return 1
        return 0
    if current != text:
        from anec.fsutil import write_text_atomic

        write_text_atomic(args.output, text)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
