"""The GPT-2 section of benchmarks/bench_compress.py: the GPT-2-small body compiled with
``--compress``, its output on the sim against the uncompressed body and against fp32, and the
time its compile takes against the uncompressed compile.

The body is one func, the prefill over :data:`GPT2_SEQ` positions (hidden states in, ``h`` and
every layer's K and V out), built by anec's GPT-2 frontend from a GPT-2-small ``config.json``
(12 layers, d=768, 12 heads, MLP 3072; fewer layers or a narrower width for a smoke run). Its
weights are seeded random tensors scaled like GPT-2's (tests/models/synthetic.py: matrices and
biases 0.02 N, GPT-2's initialization; LayerNorm gains 1 + 0.1 N), stored fp32 in one
.safetensors file as a trained checkpoint holds them. The input is seeded N(0, 1) hidden states:
the residual stream keeps that scale through the layers (each layer adds terms of order
0.02 sqrt(d)), so ``h`` comes out of order 1, not a degenerate near-zero output (the section
reports both rms values).

Workers (each a process of bench_compress.py, ``--gpt2 WHAT DIR ARG``):

* ``prepare``: writes the IR text, the weights, the input and two references: the interpreter
  in fp32 on the fp32 weights, and the body compiled without compression run on the sim (fp16);
  its result is the fp16 row (what fp16 costs against fp32);
* ``accuracy FORMAT``: the body compiled by ``anec.compile_module(..., compress=FORMAT)`` (the
  default accuracy gate) and run on the sim, against both references: the cosine of the whole
  ``h``, the least cosine of one position's hidden state, the least cosine of a layer's K or V;
  payload bytes over fp16 bytes of the compressed weights (the matrices). Deterministic: run once;
* ``compile FORMAT`` (``fp16``: no compression): one compile as ``anec compile body.ir --weights
  weights.safetensors -o OUT [--compress FORMAT]`` does it (parse + ``compile_module`` with the
  output written), in rounds of alternating order with every other format, so that the ratio to
  the fp16 compile is taken per round (benchmarks/harness.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import harness  # benchmarks/ is on the path (bench_compress.py puts it there)


GPT2_SEQ = 64
"""Positions of the compiled body (its prefill bucket: hidden states ``[1, d, 1, 64]`` in)."""

GPT2_IR, GPT2_WEIGHTS, GPT2_REFS = "body.ir", "weights.safetensors", "refs.npz"
"""The files :func:`gpt2_prepare` writes for the other GPT-2 workers."""


def gpt2_config(layers: int, d: int) -> dict:
    """GPT-2-small's ``config.json`` with ``layers`` layers of width ``d`` (heads of 64 channels,
    as GPT-2's; the MLP 4d wide)."""
    from tests.models.synthetic import GPT2_SMALL

    return {**GPT2_SMALL, "n_layer": layers, "n_embd": d, "n_head": max(1, d // 64)}


def _gpt2_body(tmp: Path, layers: int, d: int):
    from anec.models.generate import decoder_frontend
    from tests.models.synthetic import shape_checkpoint

    fe = decoder_frontend(shape_checkpoint(tmp / "ckpt", gpt2_config(layers, d), ["transformer.wte.weight"]), 49152)
    return fe, fe.prefill(GPT2_SEQ)


def _gpt2_sim(tmp: Path, fmt: str, x) -> tuple[dict, list]:
    """The body of ``tmp`` compiled by ``anec.compile_module`` (``compress=fmt``, none for fp16;
    the default accuracy gate) and run on the sim on the input ``x``: its outputs and the
    compression records (one per weight const)."""
    import anec
    from anec.ir.parser import parse_file

    module = parse_file(tmp / GPT2_IR)
    res = anec.compile_module(module, weights=str(tmp / GPT2_WEIGHTS), compress=None if fmt == "fp16" else fmt)
    (art,) = res.artifacts.values()
    with anec.Runtime(backend="sim") as rt:
        prog = rt.load(art)
        try:
            outs = prog(x=x)
        finally:
            prog.close()
    reports = {r.key: r for a in getattr(art, "stages", [art]) for r in a.manifest.compression}
    return outs, list(reports.values())


def _gpt2_input(module):
    """The body's input: seeded N(0, 1) hidden states (activations of order 1)."""
    import numpy as np

    (graph,) = module.funcs.values()
    (x,) = graph.inputs
    return np.random.default_rng(1).standard_normal(x.type.shape).astype(np.float32)


def _cosine(got, ref) -> float:
    """Cosine of two outputs as flat vectors, as ``--compress-check`` computes it (equal
    outputs can come out a rounding above 1)."""
    from anec.compress.activations import agreement

    return min(agreement(got, ref)[0], 1.0)


def _agreement(outs: dict, refs, side: str) -> dict:
    """``outs`` against the ``side`` reference (``fp16``: the uncompressed body on the sim;
    ``fp32``: the interpreter in fp32): the cosine of the whole ``h``, the least cosine of one
    position's hidden state (the ``d`` channels of ``h`` ``[1, d, 1, S]`` at one position), and
    the least whole-tensor cosine over the layers' K and V outputs."""
    h, ref = outs["h"], refs[f"{side}/h"].reshape(outs["h"].shape)
    positions = [_cosine(h[0, :, 0, p], ref[0, :, 0, p]) for p in range(h.shape[-1])]
    return {"cosine": _cosine(h, ref), "min_position": min(positions),
            "kv_cosine": min(_cosine(v, refs[f"{side}/{k}"]) for k, v in outs.items() if k != "h")}


def gpt2_prepare(tmp: Path, layers: int, d: int) -> dict:
    """Write the body (one func: the prefill over :data:`GPT2_SEQ` positions, as IR text), its
    weights (fp32, one .safetensors, what a trained checkpoint holds), the input and both
    references: the interpreter in fp32, and the body compiled without compression on the sim.
    Returns the fp16 row (the sim's uncompressed output against fp32) and the shapes."""
    import numpy as np
    from safetensors.numpy import save_file

    from anec.ir.builder import Builder
    from anec.ir.interp import interpret
    from anec.ir.printer import print_module
    from tests.models.synthetic import random_weights

    fe, body = _gpt2_body(tmp, layers, d)
    weights = {k: np.asarray(v, np.float32) for k, v in random_weights(fe, [body]).items()}
    save_file(weights, str(tmp / GPT2_WEIGHTS))
    module = Builder.module(body)
    (tmp / GPT2_IR).write_text(print_module(module))
    x = _gpt2_input(module)
    ref = interpret(body, {"x": x}, weights, mode="fp32")
    outs, _ = _gpt2_sim(tmp, "fp16", x)
    refs = {"x": x, **{f"fp32/{k}": np.asarray(v, np.float32) for k, v in ref.items()},
            **{f"fp16/{k}": v for k, v in outs.items()}}
    np.savez(tmp / GPT2_REFS, **refs)
    h = np.asarray(ref["h"], np.float64)
    matrices = sum(w.nbytes // 2 for w in weights.values() if w.ndim == 4 and w.shape[2:] == (1, 1)
                   and w.shape[0] > 1 and w.shape[1] > 1)
    return {"layers": layers, "d_model": d, "heads": fe.cfg.n_head, "d_ffn": fe.cfg.d_ffn, "seq": GPT2_SEQ,
            "matrix_mib": matrices / (1 << 20), "h_rms": float(np.sqrt(np.mean(h * h))),
            "x_rms": float(np.sqrt(np.mean(x.astype(np.float64) ** 2))), "vs_fp32": _agreement(outs, refs, "fp32")}


def measure_gpt2_accuracy(tmp: Path, fmt: str) -> dict:
    """The body compiled with ``compress=fmt`` on the sim against both references: cosines,
    payload bytes over fp16 (the weights a SPEC matched: the matrices) and the formats used."""
    import numpy as np

    refs = np.load(tmp / GPT2_REFS)
    outs, reports = _gpt2_sim(tmp, fmt, refs["x"])
    formats: dict[str, int] = {}
    for r in reports:
        formats[r.format] = formats.get(r.format, 0) + 1
    dense = sum(int(r.dense_bytes) for r in reports)
    nbytes = sum(int(r.dense_bytes if r.bytes is None else r.bytes) for r in reports)
    return {"size": nbytes / dense if dense else 1.0, "formats": formats,
            "vs_fp16": _agreement(outs, refs, "fp16"), "vs_fp32": _agreement(outs, refs, "fp32")}


def measure_gpt2_compile(tmp: Path, fmt: str) -> dict:
    """One compile of the body as ``anec compile body.ir --weights weights.safetensors -o OUT
    [--compress FMT]`` does it: parse the IR, ``compile_module`` with the output written; the
    compiler's modules imported before the clock starts (what the compress path imports on
    first use is timed: a user's compile pays for it)."""
    import gc
    import os
    import shutil

    from anec.compiler import compile_module
    from anec.ir.parser import parse_file

    out = tmp / f"out-{fmt.replace('/', '_')}"
    shutil.rmtree(out, ignore_errors=True)  # the previous round's output: removed untimed
    gc.collect()
    os.sync()
    c0 = time.process_time()
    t0 = time.perf_counter()
    module = parse_file(tmp / GPT2_IR)
    res = compile_module(module, weights=str(tmp / GPT2_WEIGHTS), out_dir=out,
                         compress=None if fmt == "fp16" else fmt, timing=True)
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    stages: dict[str, float] = {}
    for _, stage, sec in res.timings:
        stages[stage] = stages.get(stage, 0.0) + sec
    return {"seconds": seconds, "cpu_s": cpu, "stages_s": stages}


GPT2_STAGES = ("emit-mil", "write")
"""The compile stages the GPT-2 compile table shows (where compression runs and where its
payloads are written); the others do not depend on ``--compress``."""


def gpt2_worker(what: str, tmp: str, arg: str) -> dict:
    t = Path(tmp)
    if what == "prepare":
        layers, d = (int(v) for v in arg.split("x"))
        return gpt2_prepare(t, layers, d)
    return (measure_gpt2_accuracy if what == "accuracy" else measure_gpt2_compile)(t, arg)


def gpt2_section(me: str, formats: list[str], layers: int, d: int, n_rounds: int, budget: float
                 ) -> tuple[dict, list[str]]:
    """Run the GPT-2 workers: the preparation (inputs, references, the fp16 row), one accuracy
    run per format (deterministic), then the compiles of fp16 and every format in alternating
    rounds; return the results and the markdown lines."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="anec-bench-gpt2-") as tmp:
        print("  GPT-2 body: writing the IR, the weights and the references ...", flush=True)
        prep = harness.run_worker([me, "--gpt2", "prepare", tmp, f"{layers}x{d}"], timeout=budget)
        acc = harness.run_rounds({fmt: [me, "--gpt2", "accuracy", tmp, fmt] for fmt in formats}, 1,
                                 timeout=budget)
        load_start, cpu_start = harness.load_average(), harness.cpu_now()
        rounds = harness.run_rounds({fmt: [me, "--gpt2", "compile", tmp, fmt] for fmt in ["fp16", *formats]},
                                    n_rounds, timeout=budget)
        load_end, other = harness.load_average(), harness.other_cpu_share(cpu_start)
    out: dict = {"shape": {k: prep[k] for k in ("layers", "d_model", "heads", "d_ffn", "seq", "matrix_mib",
                                                "h_rms", "x_rms")},
                 "accuracy": {"fp16": {"size": 1.0, "vs_fp32": prep["vs_fp32"]}}, "compile": {},
                 "load_start": load_start, "load_end": load_end, "other_cpu_share": other, "rounds": n_rounds}
    for fmt in formats:
        got = harness.done(acc[fmt])
        out["accuracy"][fmt] = got[0] if got else acc[fmt][0]
    secs = lambda r: r["seconds"]  # noqa: E731
    for fmt in ["fp16", *formats]:
        got = harness.done(rounds[fmt])
        out["compile"][fmt] = ({**harness.summarize(got), "over_fp16": None if fmt == "fp16" else
                                harness.paired_ratio(rounds[fmt], rounds["fp16"], secs)}
                               if got else rounds[fmt][0])
    out["raw"] = {"accuracy": acc, "compile": rounds}
    return out, gpt2_markdown(out)


def gpt2_markdown(g: dict) -> list[str]:
    """The section's two tables: output agreement per format, compile time per format."""
    f, sh = harness.fmt, g["shape"]
    layers, d, heads = sh["layers"], sh["d_model"], sh["heads"]
    name = "GPT-2-small body" if (layers, d) == (12, 768) else f"GPT-2 body ({layers} layers, d={d})"
    md = ["", f"## {name} compiled with `--compress`: output and compile time", "",
          f"{layers} layers, d={d}, {heads} head{'s' if heads > 1 else ''}, MLP {sh['d_ffn']}, {sh['seq']} "
          "positions, as one func (the prefill body: hidden states in, `h` and every layer's K and V out); "
          f"{sh['matrix_mib']:.1f} MiB of fp16 matrices. Seeded random weights scaled like GPT-2's (matrices and "
          "biases 0.02 N, LayerNorm gains 1 + 0.1 N; tests/models/synthetic.py), stored fp32; the input is seeded "
          f"N(0, 1) hidden states (rms {sh['x_rms']:.2f}), and `h` comes out of order 1 (rms {sh['h_rms']:.2f} in "
          "fp32). Each format is compiled by `anec.compile_module(..., compress=FORMAT)` (the default accuracy "
          "gate) and run on the sim; its `h` is compared with the same body compiled without compression (fp16) "
          "and with the interpreter in fp32 on the fp32 weights: the cosine of the whole `h` and the least cosine "
          "of one position's hidden state; K/V: the least whole-tensor cosine over the layers' K and V outputs. "
          "Size: payload bytes over fp16 bytes of the weights compressed (the matrices).", "",
          "| format | weights | size | cosine vs fp16 | min position vs fp16 | K/V vs fp16 | cosine vs fp32 | "
          "min position vs fp32 | K/V vs fp32 |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    cells = lambda c: f"{c['cosine']:.6f} | {c['min_position']:.6f} | {c['kv_cosine']:.6f}"  # noqa: E731
    for fmt, a in g["accuracy"].items():
        if fmt == "fp16":
            md.append(f"| fp16 | none compressed | 1.000 | - | - | - | {cells(a['vs_fp32'])} |")
        elif "skipped" in a:
            md.append(f"| {fmt} | skipped: {a['skipped']} | | | | | | | |")
        else:
            kinds = ", ".join(f"{v} {k}" for k, v in sorted(a["formats"].items()))
            md.append(f"| {fmt} | {kinds} | {a['size']:.3f} | {cells(a['vs_fp16'])} | {cells(a['vs_fp32'])} |")
    load = ["/".join(f"{x:.2f}" for x in g[k]) or "n/a" for k in ("load_start", "load_end")]
    other = g.get("other_cpu_share")
    cores = harness.machine()["cores"] or 1
    shared = harness.under_load(g["load_start"], g["load_end"], other, own_threads=cores)
    n = g["rounds"]
    md += ["", "Compile time: `parse_file` + `compile_module(..., out_dir=OUT, compress=FORMAT)` (the work of "
           "`anec compile body.ir --weights weights.safetensors -o OUT --compress FORMAT`), fp16 and each format "
           f"a process of its own, once per round, in alternating order ({n} round{'s' if n > 1 else ''}); load "
           f"average (1/5/15 min, {cores} cores) {load[0]} at the start, {load[1]} at the end"
           + (f"; other processes used {other:.0%} of the CPU time during these rounds" if other is not None else "")
           + (" (**shared machine**: absolute seconds are pessimistic; the ratios are per round)" if shared else "")
           + ".", "",
           "| format | seconds | over fp16 (per round) | CPU s | " + " | ".join(f"{s} s" for s in GPT2_STAGES) + " |",
           "|---|---:|---:|---:|" + "---:|" * len(GPT2_STAGES)]
    for fmt, c in g["compile"].items():
        if "skipped" in c:
            md.append(f"| {fmt} | skipped: {c['skipped']} | | |" + " |" * len(GPT2_STAGES))
            continue
        ratio = "" if c["over_fp16"] is None else f"x{f(c['over_fp16'], 2)}"
        md.append(f"| {fmt} | {f(c['seconds'], 3)} | {ratio} | {f(c['cpu_s'], 3)} | "
                  + " | ".join(f(c["stages_s"].get(k, 0.0), 3) for k in GPT2_STAGES) + " |")
    return md
