"""The model-level check of compressed weights: ``--compress-check INPUTS.npz``.

:func:`anec.compiler.compile_module` compiles a module twice, with and without
compression (weights, and int8 activations); :func:`model_check` runs both on the sim with the same calibration
inputs and compares every output (cosine and max relative error), failing the
compile below the user's threshold. It lives apart from :mod:`anec.compress`,
which the artifact writer and the runtime's reload use, because it runs
programs: it sits above the runtime in the layers.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from anec.compress.activations import agreement
from anec.diagnostics import AnecError


def model_check(compressed: Mapping[str, Any], dense: Mapping[str, Any], inputs: Any,
                min_cosine: float) -> list[dict]:
    """Each func's outputs with compressed weights against the same func without, on the
    calibration ``inputs`` (a .npz path or a mapping: one array per func input, by name),
    both run on the sim: per output ``{func, output, cosine, max_rel}`` (max_rel: the largest
    absolute difference over the uncompressed output's largest magnitude). Funcs whose weights
    and activations all stayed fp16 are skipped. An output below ``min_cosine`` is an AnecError listing every
    output's figures (the compile fails)."""
    from anec.runtime import Runtime

    if isinstance(inputs, (str, bytes)) or hasattr(inputs, "__fspath__"):
        from anec.ranges import load_calibration

        inputs = load_calibration(str(inputs))
    rows: list[dict] = []
    with Runtime("sim") as rt:
        for name, art in compressed.items():
            reports = [r for a in getattr(art, "stages", [art]) for r in a.manifest.compression]
            acts = art.manifest.activations
            if not any(r.format != "fp16" for r in reports) and not (acts is not None and acts.quantized):
                continue
            program = art.program_module().funcs[name]
            missing = [v.name for v in program.inputs if v.name not in inputs]
            if missing:
                raise AnecError(f"--compress-check: the calibration inputs have no {', '.join(missing)} "
                                f"for func '{name}'",
                                hint=f"give one array per input of {name} by name: "
                                     f"{', '.join(v.name for v in program.inputs)}")
            feed = {v.name: np.asarray(inputs[v.name]) for v in program.inputs}
            outs = []
            for a in (art, dense[name]):
                prog = rt.load(a)
                try:
                    outs.append(prog(**feed))
                finally:
                    prog.close()
            for out, got in outs[0].items():
                cos, rel = agreement(got, outs[1][out])
                rows.append({"func": name, "output": out, "cosine": cos, "max_rel": rel})
    bad = [r for r in rows if not r["cosine"] >= min_cosine]
    if bad:
        listing = "; ".join(f"{r['func']}:{r['output']} cosine {r['cosine']:.6f}, max rel {r['max_rel']:.4g}"
                            for r in rows)
        raise AnecError(f"--compress-check: {len(bad)} output(s) below cosine {min_cosine:g} against the "
                        f"uncompressed program ({listing})",
                        hint="compress fewer weights (e.g. fp16 for the sensitive ones: 'fp16:h.0.*,int8:*'), "
                             "a wider format, a stricter --compress-gate, or a lower --compress-min-cosine")
    return rows


def check_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """``compress-check: mlp:y cosine 0.999981, max rel 0.0041`` per output."""
    return [f"compress-check: {r['func']}:{r['output']} cosine {r['cosine']:.6f}, max rel {r['max_rel']:.4g}"
            for r in rows]
