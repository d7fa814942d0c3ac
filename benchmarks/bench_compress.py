"""Weight compression: anec's quantizers against coremltools' ``ct.optimize.coreml`` on the same weights.

The weights are the matrices of a GPT-2-small body (per layer: c_attn 2304x768, attn c_proj
768x768, mlp c_fc 3072x768, mlp c_proj 768x3072, as 1x1 conv weights), drawn from a seeded
normal distribution scaled like trained GPT-2 weights (std 0.02), in fp16. Per format
(int8 per-channel symmetric, lut4 and lut6 per tensor with k-means) each side compresses
every matrix:

* anec: :func:`anec.compress.compress_tensor` (what ``--compress`` runs per weight: the
  quantizer, the decompression and the error the gate reads; the C kernels of
  csrc/host_compress.c when the runtime extension is built);
* coremltools: ``linear_quantize_weights`` (mode ``linear_symmetric``, ``per_channel``) or
  ``palettize_weights`` (mode ``kmeans``, ``per_tensor``) on a pymil program holding one conv
  per matrix, the pass alone timed.

Reported per format and side: seconds, compressed bytes over fp16 bytes, and the weight
error (relative L2 over all matrices, computed the same way on both sides from the
decompressed tensors). Each side runs in its own process, once per round, in alternating
order (benchmarks/harness.py).

Usage (writes benchmarks/results/compress.json and compress.md)::

    PYTHONPATH=. python benchmarks/bench_compress.py [--layers 12] [--formats int8,lut4,lut6] [--rounds 3] [--quick]
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
    from anec.compress import compress_tensor, decompress, get_format
    from anec.runtime import native  # noqa: F401  (the C kernels' module: imported outside the timing, as coremltools is)

    ws = weights(layers)
    f = get_format(fmt)
    t0 = time.perf_counter()
    comps = [compress_tensor(w, f, 0) for w in ws]
    seconds = time.perf_counter() - t0
    pairs = [(decompress(f, 0, w.shape, c.parts), w) for c, w in zip(comps, ws)]
    return {"seconds": seconds, "bytes": sum(c.nbytes for c in comps), "dense_bytes": sum(w.nbytes for w in ws),
            "rel_l2": _error(pairs)}


def measure_coremltools(fmt: str, layers: int) -> dict:
    import numpy as np
    import coremltools as ct
    import coremltools.optimize.coreml as cto
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types
    from coremltools.optimize.coreml import _quantization_passes as qp

    ws = weights(layers)

    @mb.program(input_specs=[mb.TensorSpec((1, 768, 1, 8), types.fp16), mb.TensorSpec((1, 3072, 1, 8), types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(x, z):
        return tuple(mb.conv(x=x if w.shape[1] == 768 else z, weight=w, name=f"c{k}") for k, w in enumerate(ws))

    if fmt == "int8":
        cfg = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel",
                                          weight_threshold=0)
        cls = qp.linear_quantize_weights
    else:
        cfg = cto.OpPalettizerConfig(mode="kmeans", nbits=int(fmt[3:]), granularity="per_tensor", weight_threshold=0)
        cls = qp.palettize_weights
    p = cls(config=cto.OptimizationConfig(global_config=cfg), fake_compression=False)
    t0 = time.perf_counter()
    p(prog)
    seconds = time.perf_counter() - t0
    ops = [op for op in prog.functions["main"].operations if op.op_type.startswith("constexpr_")]
    by_conv = {op.outputs[0].child_ops[0].name: op for op in ops}
    pairs, nbytes = [], 0
    for k, w in enumerate(ws):
        op = by_conv[f"c{k}"]
        pairs.append((np.asarray(op.materialized_val_inference()).reshape(w.shape), w))
        for name, v in op.inputs.items():
            if v.val is None or not hasattr(v.val, "size"):
                continue
            bits = int(fmt[3:]) if name == "indices" else np.dtype(v.val.dtype).itemsize * 8  # indices are packed
            nbytes += (v.val.size * bits + 7) // 8
    return {"seconds": seconds, "bytes": nbytes, "dense_bytes": sum(w.nbytes for w in ws), "rel_l2": _error(pairs)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", nargs=3, metavar=("SIDE", "FORMAT", "LAYERS"), help=argparse.SUPPRESS)
    ap.add_argument("--layers", type=int, default=12, help="GPT-2-small layers of weights (default 12)")
    ap.add_argument("--formats", default="int8,lut4,lut6")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=1800.0, help="seconds per worker")
    ap.add_argument("--quick", action="store_true", help="one layer, int8 and lut4, 1 round: a smoke run")
    args = ap.parse_args(argv)
    if args.one:
        side, fmt, layers = args.one[0], args.one[1], int(args.one[2])
        fn = measure_anec if side == "anec" else measure_coremltools
        print(json.dumps(fn(fmt, layers)))
        return 0
    if args.quick:
        args.layers, args.formats, args.rounds = 1, "int8,lut4", 1
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    me = str(Path(__file__).relative_to(ROOT))
    sides = {f"{side}/{fmt}": [me, "--one", side, fmt, str(args.layers)]
             for fmt in formats for side in ("anec", "coremltools")}
    load_start = harness.load_average()
    rounds = harness.run_rounds(sides, args.rounds, timeout=args.budget)
    load_end = harness.load_average()
    rows = []
    for fmt in formats:
        a, c = harness.done(rounds[f"anec/{fmt}"]), harness.done(rounds[f"coremltools/{fmt}"])
        row = {"format": fmt, "anec": harness.summarize(a) if a else None,
               "coremltools": harness.summarize(c) if c else None,
               "speedup": harness.paired_ratio(rounds[f"coremltools/{fmt}"], rounds[f"anec/{fmt}"],
                                               lambda r: r["seconds"])}
        rows.append(row)
    result = {"benchmark": "compress", "date": time.strftime("%Y-%m-%d %H:%M:%S"), **harness.machine(),
              "load_start": load_start, "load_end": load_end, "rounds": args.rounds, "layers": args.layers,
              "rows": rows, "raw": rounds}
    f = harness.fmt
    md = harness.header(
        "Weight compression: anec vs coremltools", load_start, load_end, args.rounds,
        f"Weights: {args.layers} GPT-2-small layer(s) of seeded normal fp16 matrices "
        f"({4 * args.layers} matrices); see `benchmarks/bench_compress.py`.")
    md += ["| format | anec s | coremltools s | speed-up | anec size | coremltools size | anec rel L2 | "
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
    harness.write_results("compress", result, md)
    print(f"wrote {harness.RESULTS / 'compress.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
