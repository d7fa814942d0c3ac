"""Runtime benchmarks on the sim: delta reload vs full compile, and kernel speed.

Measures, in one run on this machine:

1. A Stories110M-sized layer stack (dim 768, hidden 2048, 12 layers; per layer
   an FFN program with w1/w3/w2 and an attention-projection program with
   wq/wk/wv/wo, all fp16, S=64), compiled by ``anec.compiler`` into artifacts.
   * full compile: a cold runtime compiles and loads all 24 programs
     (MIL parse + checks + plan + the compiled form written, weights loaded);
   * every reload strategy on the same stack (weights are baked at compile):
     recompile (one BLOBFILE per weight: the compiled data is opaque),
     data patch (``--pack-weights`` on a device that keeps a packed file as
     its data: sim ``data=file``) and weights as inputs (a surface write);
     through ``Program.reload_weights`` (keys -> arrays) and, for the
     BLOBFILE strategies, ``reload_blobs`` (the C path alone);
   * each reload from fp16 arrays and from fp32 arrays (every key changes),
     and again with the same arrays (nothing changes: costs a compare);
   * raw write: the changed payload bytes written to fresh files with fsync
     (and without), the floor any weight swap through files has to pay.
   Reported: each strategy vs the full compile and vs the raw write.
2. Kernels: sim conv1x1 and matmul (fp16 storage, fp32 accumulation) vs
   numpy float32 matmul (BLAS) on the same shapes, with 1 and 2 threads
   (GFLOP/s, median of several runs in each process). numpy runs in a
   process of its own per thread count, so that its BLAS thread pool can be
   set, and so does the sim.

Every part runs in its own process (the full compile, each strategy, the raw
writes, each kernel side and thread count), once per round, in an order that
alternates between rounds (benchmarks/harness.py); every figure is the median
(min-max) over the rounds, and every ratio is taken per round between
processes that met the same machine.

Usage (writes benchmarks/results/runtime.json and runtime.md)::

    PYTHONPATH=. python benchmarks/bench_runtime.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402
from anec.compiler import compile_module  # noqa: E402
from anec.ir.parser import parse  # noqa: E402
from anec.runtime import Runtime, native  # noqa: E402
from anec.runtime.weights import changed_blobs  # noqa: E402
from anec.ir.weight_binding import resolve_weights  # noqa: E402

DIM, HIDDEN, SEQ = 768, 2048, 64


def stack_ir(layers: int) -> str:
    """One FFN and one attention-projection func per layer."""
    out = []
    t = f"fp16[1, {DIM}, 1, {SEQ}]"
    for i in range(layers):
        out.append(f"""
func ffn{i}(%x: {t}) {{
  %w1 = const(weight="layers.{i}.w1") : fp16[{HIDDEN}, {DIM}, 1, 1]
  %w3 = const(weight="layers.{i}.w3") : fp16[{HIDDEN}, {DIM}, 1, 1]
  %w2 = const(weight="layers.{i}.w2") : fp16[{DIM}, {HIDDEN}, 1, 1]
  %h1 = conv1x1(%x, %w1)
  %h3 = conv1x1(%x, %w3)
  %sg = sigmoid(%h1)
  %si = mul(%h1, %sg)
  %g = mul(%si, %h3)
  %y = conv1x1(%g, %w2)
  return %y
}}

func attn{i}(%x: {t}, %a: {t}) {{
  %wq = const(weight="layers.{i}.wq") : fp16[{DIM}, {DIM}, 1, 1]
  %wk = const(weight="layers.{i}.wk") : fp16[{DIM}, {DIM}, 1, 1]
  %wv = const(weight="layers.{i}.wv") : fp16[{DIM}, {DIM}, 1, 1]
  %wo = const(weight="layers.{i}.wo") : fp16[{DIM}, {DIM}, 1, 1]
  %q = conv1x1(%x, %wq)
  %k = conv1x1(%x, %wk)
  %v = conv1x1(%x, %wv)
  %o = conv1x1(%a, %wo)
  return %q, %k, %v, %o
}}
""")
    return "".join(out)


def tmp_root() -> str:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="anec-bench-", dir=base)


def _write(path: str, arrs: list[np.ndarray], sync: bool) -> None:
    """The arrays' bytes, one after another, as the file ``path`` (fsynced when ``sync``)."""
    with open(path, "wb") as fh:
        for a in arrs:
            fh.write(memoryview(a).cast("B"))
        if sync:
            fh.flush()
            os.fsync(fh.fileno())


def _raw_write(root: str, payloads: dict[str, list[np.ndarray]], sync: bool, reps: int) -> float:
    """Best time to write the given payloads, one fresh file per program (fsync'd when ``sync``)."""
    best = float("inf")
    for r in range(reps):
        d = os.path.join(root, f"raw{int(sync)}-{r}")
        os.makedirs(d)
        t0 = time.perf_counter()
        for n, arrs in payloads.items():
            _write(os.path.join(d, n), arrs, sync)
        best = min(best, time.perf_counter() - t0)
        shutil.rmtree(d)
    return best


def _raw_replace(root: str, payloads: dict[str, list[np.ndarray]], reps: int) -> float:
    """Best time to replace one existing file per program by the given payloads the
    crash-safe way (a temp file written and fsynced, renamed over the old one, whose
    pages are then freed): the floor of any reload that keeps old-or-new on a crash."""
    best = float("inf")
    d = os.path.join(root, "replace")
    os.makedirs(d)
    for n, arrs in payloads.items():
        _write(os.path.join(d, n), arrs, False)
    for _ in range(reps):
        t0 = time.perf_counter()
        for n, arrs in payloads.items():
            path = os.path.join(d, n)
            _write(path + ".tmp", arrs, True)
            os.replace(path + ".tmp", path)
        best = min(best, time.perf_counter() - t0)
    shutil.rmtree(d)
    return best


def _reload_rounds(rt: Runtime, arts: dict, news: list[dict], blobs: dict | None, reps: int) -> dict:
    """Load every program, then time reloads of every program (best of ``reps``): new
    fp16 arrays, new fp32 arrays (each round changes every key), the same arrays again
    (nothing changes), and the C path alone (``reload_blobs``) when ``blobs``."""
    out: dict = {}
    progs = {n: rt.load(a) for n, a in arts.items()}
    out["strategy"] = sorted({p.reload_info["strategy"] for p in progs.values()})
    compiles = rt.stats["compiles"]
    state = 0  # the weights the programs hold: news[state]
    for dt in ("fp16", "fp32"):
        times = []
        for _ in range(reps):
            state = 1 - state
            new = {n: {k: np.asarray(v).astype(np.dtype("float16" if dt == "fp16" else "float32"))
                       for k, v in news[state][n].items()} for n in progs}
            native.reset_process_budget("sim")  # recompile reloads: the sim's budget is the bench's concern
            t0 = time.perf_counter()
            for n, p in progs.items():
                p.reload_weights(new[n])
            times.append(time.perf_counter() - t0)
        if dt == "fp16":  # each program's first reload: a data patch has no spare file yet
            out["first_reload_fp16_s"] = times[0]
        out[f"reload_weights_{dt}_s"] = min(times)
        # the Python half alone: the new file bytes from the arrays (nothing applied)
        other = {n: {k: np.asarray(v).astype(new[n][k].dtype) for k, v in news[1 - state][n].items()} for n in progs}
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            for n, p in progs.items():
                if p.manifest.document.get("weights"):
                    changed_blobs(p.manifest, p.dir, other[n])
            best = min(best, time.perf_counter() - t0)
        out[f"python_{dt}_s"] = best
        t0 = time.perf_counter()
        for n, p in progs.items():
            p.reload_weights(new[n])
        out[f"unchanged_{dt}_s"] = time.perf_counter() - t0
    out["reload_weights_s"] = out["reload_weights_fp32_s"]
    out["compiles_during_reload"] = (rt.stats["compiles"] - compiles) // (2 * reps)
    if blobs is not None:
        best = float("inf")
        for r in range(reps):
            native.reset_process_budget("sim")
            t0 = time.perf_counter()
            for n, p in progs.items():
                p.reload_blobs(blobs[r % 2][n])
            best = min(best, time.perf_counter() - t0)
        out["reload_blobs_s"] = best
    best = float("inf")  # the device reading the weights it holds again (part of every BLOBFILE reload)
    for _ in range(reps):
        t0 = time.perf_counter()
        for p in progs.values():
            p.unload()
            p.load()
        best = min(best, time.perf_counter() - t0)
    out["unload_load_s"] = best
    for p in progs.values():
        p.close()
    return out


VARIANTS = {
    "recompile": ({}, ""),
    "data-patch": ({"pack_weights": True}, "data=file"),
    "inputs": ({"weights_as_inputs": "all"}, ""),
}
"""Every reload strategy on the same stack: recompile (several BLOBFILEs, the evidenced device),
data patch (packed programs on a device whose compiled data is the packed file: sim data=file),
weights as inputs (a surface write)."""


def _stack(layers: int):
    """The stack, its two weight sets, its artifacts (default options) and, per program, the changed
    bytes a reload must write (every key's fp16 payload)."""
    module = parse(stack_ir(layers), "stack.ir")
    w0 = resolve_weights(module, None, 0)
    w1 = resolve_weights(module, None, 1)
    arts0 = compile_module(module, w0).artifacts
    keys = {n: sorted({w["key"] for w in a.manifest.document["weights"]}) for n, a in arts0.items()}
    payloads = {n: [np.ascontiguousarray(w1[k], dtype=np.float16) for k in ks] for n, ks in keys.items()}
    return module, w0, w1, arts0, payloads


def _root() -> str:
    return tempfile.mkdtemp(prefix="anec-bench-") if os.environ.get("ANEC_BENCH_DISK") == "1" else tmp_root()


def worker_compile(layers: int) -> dict:
    """Full compile: every program compiled and loaded by a cold runtime (no cache)."""
    _, _, _, arts0, payloads = _stack(layers)
    root = _root()
    out = {"layers": layers, "programs": len(arts0),
           "weight_bytes": sum(len(b) for a in arts0.values() for b in a.blobs.values()),
           "changed_bytes": sum(a.nbytes for arrs in payloads.values() for a in arrs),
           "program_dirs_on": "tmpfs" if root.startswith("/dev/shm") else "disk", "full_compile_s": 0.0}
    try:
        native.reset_process_budget("sim")
        for n, a in arts0.items():
            with Runtime("sim", temp_root=os.path.join(root, "cold", n)) as cold:
                t0 = time.perf_counter()
                cold.load(a)
                out["full_compile_s"] += time.perf_counter() - t0
        out["compiles"] = len(arts0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def worker_strategy(name: str, layers: int, reps: int) -> dict:
    """One strategy's reloads (best of ``reps`` in this process), from fp16 and fp32 arrays."""
    module, w0, w1, _, _ = _stack(layers)
    opts, device = VARIANTS[name]
    root = _root()
    try:
        native.reset_process_budget("sim")
        a0 = compile_module(module, w0, **opts).artifacts
        news = [{n: {k: w[k] for k in {w_["key"] for w_ in a.manifest.document["weights"]}
                     | {w_["key"] for w_ in a.manifest.document.get("weight_inputs", [])}} for n, a in a0.items()}
                for w in (w0, w1)]
        blobs = None
        if name != "inputs":  # the C path alone: whole files, alternating between the two weight sets
            a1 = compile_module(module, w1, **opts).artifacts
            blobs = [{n: {"@model_path/" + w["file"]: a.blobs[w["file"]] for w in a.manifest.document["weights"]}
                      for n, a in arts.items()} for arts in (a1, a0)]
        with Runtime("sim", temp_root=os.path.join(root, name), sim_device=device) as rt:
            r = _reload_rounds(rt, a0, news, blobs, reps)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    r["sim_device"] = device or "default (data=tensor, load=data)"
    for dt in ("fp16", "fp32"):  # the host's share: the reload without the device's own load
        if "reload_blobs_s" in r:
            r[f"host_{dt}_s"] = max(0.0, r[f"reload_weights_{dt}_s"] - r["unload_load_s"])
    return r


def worker_raw(layers: int, reps: int) -> dict:
    """The floors: the changed bytes written to fresh files with and without fsync, and replaced
    the crash-safe way (best of ``reps`` in this process)."""
    *_, payloads = _stack(layers)
    root = _root()
    try:
        return {"raw_write_fsync_s": _raw_write(root, payloads, True, reps),
                "raw_write_s": _raw_write(root, payloads, False, reps),
                "raw_replace_fsync_s": _raw_replace(root, payloads, reps)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def reload_round(comp: dict, strategies: dict[str, dict], raw: dict) -> dict:
    """One round's reload figures, with every ratio taken between processes of that round."""
    res = {**{k: v for k, v in comp.items() if k != "process_s"}, **raw, "strategies": {}}
    for name, r in strategies.items():
        r = {k: v for k, v in r.items() if k != "process_s"}
        r["ratio_reload_weights_vs_compile"] = r["reload_weights_s"] / comp["full_compile_s"]
        for dt in ("fp16", "fp32"):
            r[f"ratio_{dt}_vs_raw_write_fsync"] = r[f"reload_weights_{dt}_s"] / raw["raw_write_fsync_s"]
            r[f"ratio_unchanged_{dt}_vs_raw_write_fsync"] = r[f"unchanged_{dt}_s"] / raw["raw_write_fsync_s"]
            r[f"ratio_{dt}_vs_raw_replace"] = r[f"reload_weights_{dt}_s"] / raw["raw_replace_fsync_s"]
            if "host_fp16_s" in r:
                r[f"ratio_host_{dt}_vs_raw_write_fsync"] = r[f"host_{dt}_s"] / raw["raw_write_fsync_s"]
        r["ratio_first_reload_fp16_vs_raw_write_fsync"] = r["first_reload_fp16_s"] / raw["raw_write_fsync_s"]
        r["ratio_reload_weights_vs_raw_write_fsync"] = r["ratio_fp32_vs_raw_write_fsync"]
        if "reload_blobs_s" in r:
            r["ratio_reload_blobs_vs_raw_write_fsync"] = r["reload_blobs_s"] / raw["raw_write_fsync_s"]
        res["strategies"][name] = r
    return res


# ---- kernels -------------------------------------------------------------------

def _t(dt: str, shape) -> str:
    return f"tensor<{dt}, [{', '.join(map(str, shape))}]>"


def conv_mil(cin: int, cout: int, s: int) -> str:
    x, w, y = (1, cin, 1, s), (cout, cin, 1, 1), (1, cout, 1, s)
    return ("program(1.3)\n{\n"
            f"    func main<ios18>({_t('fp16', x)} x) {{\n"
            f'        {_t("fp16", w)} w = const()[name = string("w"), val = {_t("fp16", w)}(BLOBFILE(path = '
            'string("@model_path/weights/w.bin"), offset = uint64(64)))];\n'
            f'        {_t("fp16", y)} y = conv(weight = w, x = x)[name = string("y")];\n'
            "    } -> (y);\n}\n")


def matmul_mil(b: int, m: int, k: int, n: int) -> str:
    x, yv, z = (1, b, m, k), (1, b, k, n), (1, b, m, n)
    return ("program(1.3)\n{\n"
            f"    func main<ios18>({_t('fp16', x)} x, {_t('fp16', yv)} y) {{\n"
            '        bool f = const()[name = string("f"), val = bool(false)];\n'
            f'        {_t("fp16", z)} z = matmul(transpose_x = f, transpose_y = f, x = x, y = y)[name = string("z")];\n'
            "    } -> (z);\n}\n")


def blob(arr: np.ndarray) -> bytes:
    """A one-tensor fp16 BLOBFILE (the compiler's own writer)."""
    from anec.mil.blobfile import BlobWriter

    w = BlobWriter()
    w.add(np.ascontiguousarray(arr, dtype=np.float16))
    return w.to_bytes()


def time_runs(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


KERNELS = [
    ("conv1x1 768->2048, S=256 (FFN up)", "conv", (768, 2048, 256)),
    ("conv1x1 2048->768, S=256 (FFN down)", "conv", (2048, 768, 256)),
    ("conv1x1 768->768, S=64 (projection)", "conv", (768, 768, 64)),
    ("conv1x1 768->768, S=16 (a decode step's block)", "conv", (768, 768, 16)),
    ("conv1x1 768->3072, S=16 (a decode step's FFN up)", "conv", (768, 3072, 16)),
    ("matmul 12x[256x64]@[64x256] (scores)", "matmul", (12, 256, 64, 256)),
    ("matmul 12x[256x256]@[256x64] (context)", "matmul", (12, 256, 256, 64)),
]

NUMPY_SNIPPET = r"""
import json, statistics, sys, time
import numpy as np
shapes = json.loads(sys.argv[1]); reps = int(sys.argv[2]); out = []
rng = np.random.default_rng(0)
for kind, s in shapes:
    if kind == "conv":
        cin, cout, n = s
        a = rng.standard_normal((cout, cin)).astype(np.float32); b = rng.standard_normal((cin, n)).astype(np.float32)
        f = lambda: a @ b
    else:
        bt, m, k, n = s
        a = rng.standard_normal((bt, m, k)).astype(np.float32); b = rng.standard_normal((bt, k, n)).astype(np.float32)
        f = lambda: np.matmul(a, b)
    f(); ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    out.append(statistics.median(ts))
print(json.dumps({"times": out}))
"""


def worker_kernels_sim(threads: int, reps: int) -> dict:
    """Median seconds of each kernel on the sim with ``threads`` threads (``times``)."""
    rng = np.random.default_rng(0)
    out = []
    root = tmp_root()
    try:
        with Runtime("sim", sim_threads=threads, temp_root=os.path.join(root, "k")) as rt:
            for _, kind, s in KERNELS:
                if kind == "conv":
                    cin, cout, n = s
                    w = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float16)
                    prog = rt.compile(conv_mil(cin, cout, n), {"@model_path/weights/w.bin": blob(w)})
                    prog(x=rng.standard_normal((1, cin, 1, n)).astype(np.float16))
                else:
                    bt, m, k, n = s
                    prog = rt.compile(matmul_mil(bt, m, k, n))
                    prog(x=rng.standard_normal((1, bt, m, k)).astype(np.float16),
                         y=rng.standard_normal((1, bt, k, n)).astype(np.float16))
                out.append(time_runs(prog._native.run, reps))
                prog.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"times": out}


def _flops(kind: str, s) -> float:
    if kind == "conv":
        cin, cout, n = s
        return 2.0 * cin * cout * n
    bt, m, k, n = s
    return 2.0 * bt * m * k * n


def kernel_rows(sim: dict[int, list[dict]], npy: dict[int, list[dict]]) -> list[dict]:
    """Per kernel and thread count: GFLOP/s of each side and their ratio, per round, summarized."""
    rows = []
    for threads in sim:
        for k, (label, kind, s) in enumerate(KERNELS):
            per_round = [{"sim_s": a, "numpy_s": b, "gflops_sim": _flops(kind, s) / a / 1e9,
                          "gflops_numpy_f32": _flops(kind, s) / b / 1e9, "sim_vs_numpy": b / a}
                         for a, b in ((x["times"][k], y["times"][k]) for x, y in zip(sim[threads], npy[threads]))]
            rows.append({"kernel": label, "threads": threads, **harness.summarize(per_round)})
    return rows


def write_md(res: dict) -> list[str]:
    r = res["reload"]
    f = harness.fmt
    lines = harness.header(
        "Runtime benchmarks (sim)", res["load_start"], res["load_end"], res["rounds"],
        f"AVX2 micro-kernel: {res['avx2']}. Each round runs, each in its own process: the full compile, every "
        "reload strategy, the raw writes, and the sim and numpy kernels per thread count; ratios are per round "
        "(both sides met the same machine). Within a process each reload figure is the best of its repetitions. "
        "Generated by `benchmarks/bench_runtime.py`.")
    lines += [
        f"## Reload strategies vs full compile and vs a raw write ({r['layers']} layers, {r['programs']} programs, "
        f"{r['weight_bytes'] / 2**20:.1f} MiB of fp16 weights, program dirs on {r['program_dirs_on']}, "
        f"best of {r['reps']} per process)",
        "",
        "Weights are baked at compile (docs/runtime.md): each program reloads with the strategy its form and "
        "the device allow. Every reload gives every program new values for every key, as fp16 or as fp32 "
        f"arrays: the changed bytes are {r['changed_bytes'] / 2**20:.1f} MiB of fp16 payload. The raw write "
        "writes those bytes to one fresh file per program with fsync. \"unchanged\": the same arrays again.",
        "",
        "| strategy | sim device | fp16 arrays s | vs raw write | fp32 arrays s | vs raw write | unchanged (fp16 / fp32) s "
        "| vs raw write | fp32 vs full compile | C path (`reload_blobs`) s | compiles per reload round |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in r["strategies"].items():
        c = f"{f(s['reload_blobs_s'], 3)}" if "reload_blobs_s" in s else "n/a"
        lines.append(f"| {name} | {s['sim_device']} | {f(s['reload_weights_fp16_s'], 4)} | "
                     f"{f(s['ratio_fp16_vs_raw_write_fsync'], 2)} | {f(s['reload_weights_fp32_s'], 4)} | "
                     f"{f(s['ratio_fp32_vs_raw_write_fsync'], 2)} | {f(s['unchanged_fp16_s'], 4)} / "
                     f"{f(s['unchanged_fp32_s'], 4)} | {f(s['ratio_unchanged_fp16_vs_raw_write_fsync'], 2)} / "
                     f"{f(s['ratio_unchanged_fp32_vs_raw_write_fsync'], 2)} | "
                     f"{f(s['ratio_reload_weights_vs_compile'], 3)} | {c} | {s['compiles_during_reload']} |")
    lines += [
        f"| (full compile + load, each program in a cold runtime, {r['compiles']} compiles) | | | | "
        f"{f(r['full_compile_s'], 3)} | | | | 1 | | |",
        f"| (raw write of the changed bytes, fsync / no fsync) | | {f(r['raw_write_fsync_s'], 4)} / "
        f"{f(r['raw_write_s'], 4)} | 1 | | 1 | | 1 | | | |",
        "",
        "A program's first reload (fp16 arrays, the first reload in each process; a data-patch program has no spare file "
        "yet, so it writes a new file and frees the old one's pages): "
        + ", ".join(f"{name} {f(s['first_reload_fp16_s'], 4)} s ({f(s['ratio_first_reload_fp16_vs_raw_write_fsync'], 2)}"
                    " x raw write)" for name, s in r["strategies"].items())
        + ". The table's figures are the best reloads after it, as in a training loop.",
        "",
        "What a BLOBFILE reload costs beyond the raw write. Data patch: C compares the head of each new "
        "payload with the old one, then writes the new weights in one pass from the arrays over the program's "
        "spare file (the file its previous data patch replaced, whose pages already exist; docs/runtime.md): the "
        "bytes around the payloads copied from the old file, each payload checked and converted chunk by "
        "chunk. It fsyncs it, renames it over the old one (which becomes the spare), and the device loads the "
        "program again (the sim reads the new compiled data). Recompile: Python checks the arrays, converts fp32 "
        "to fp16 and builds each changed file in a buffer; C validates it, writes it and compiles. The new "
        "weights are not hashed: the cache computes their identity only when a lookup needs it. Weights as "
        "inputs are a surface write.",
        "",
        "The same reloads against two other floors: a raw *replace* (per program a temp file written, fsynced "
        "and renamed over an existing file: what any reload that leaves the old or the new file after a crash "
        "must do), and the host's share (the reload minus an unload + load of every program, the device's own "
        "reading of its weights, measured below).",
        "",
        f"Raw replace of the changed bytes: {f(r['raw_replace_fsync_s'], 4)} s.",
        "",
        "| strategy | fp16 vs raw replace | fp32 vs raw replace | host share fp16 / fp32 s | host share vs raw write "
        "fp16 / fp32 |",
        "|---|---|---|---|---|",
        *[f"| {name} | {f(s['ratio_fp16_vs_raw_replace'], 2)} | {f(s['ratio_fp32_vs_raw_replace'], 2)} | "
          + (f"{f(s['host_fp16_s'], 4)} / {f(s['host_fp32_s'], 4)} | {f(s['ratio_host_fp16_vs_raw_write_fsync'], 2)} / "
             f"{f(s['ratio_host_fp32_vs_raw_write_fsync'], 2)} |" if "host_fp16_s" in s else "n/a | n/a |")
          for name, s in r["strategies"].items()],
        "",
        "Where the time goes (the same processes, best of several in each): the Python half alone of the buffer path (arrays "
        "-> new file bytes, nothing applied; a data patch from arrays does not take it), the C path alone (`reload_blobs` of whole files), and an unload + load of every "
        "program (the device reading the weights again, which every BLOBFILE reload includes).",
        "",
        "| strategy | Python half fp16 / fp32 s | C path s | unload + load s | raw write s |",
        "|---|---|---|---|---|",
        *[f"| {name} | {f(s['python_fp16_s'], 4)} / {f(s['python_fp32_s'], 4)} | "
          f"{f(s['reload_blobs_s'], 4)} | {f(s['unload_load_s'], 4)} | {f(r['raw_write_fsync_s'], 4)} |"
          for name, s in r["strategies"].items() if "reload_blobs_s" in s],
        "",
        "On the device a compile costs the ANE compiler's time (tens of ms per program, Orion), far more than the "
        "sim's parse + plan, so a recompile reload is much dearer there than this table shows, and the data patch "
        "and inputs strategies save correspondingly more.",
        "",
        "## Kernels: sim (fp16 storage, fp32 accumulation) vs numpy float32 BLAS",
        "",
        "| kernel | threads | sim GFLOP/s | numpy GFLOP/s | sim / numpy |",
        "|---|---|---|---|---|",
    ]
    for k in res["kernels"]:
        lines.append(f"| {k['kernel']} | {k['threads']} | {f(k['gflops_sim'], 1)} | {f(k['gflops_numpy_f32'], 1)} | "
                     f"{f(k['sim_vs_numpy'], 2)} |")
    return lines


PLOT = "runtime_reload.png"


def write_plot(res: dict) -> str:
    """runtime_reload.png: seconds per reload round of each strategy from fp16 and fp32 arrays
    and with unchanged keys, next to a raw write of the changed bytes (with and without fsync).
    Needs matplotlib (``pip install 'anec[plots]'``); without it the tables are still written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "the plot needs matplotlib: pip install 'anec[plots]'"
    import io

    from anec.fsutil import write_bytes_atomic

    r = res["reload"]
    names = list(r["strategies"])
    series = [("fp16 arrays", "reload_weights_fp16_s"), ("fp32 arrays", "reload_weights_fp32_s"),
              ("unchanged (fp16)", "unchanged_fp16_s")]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    width = 0.8 / len(series)
    for j, (label, key) in enumerate(series):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(names))]
        ax.bar(xs, [harness.median(r["strategies"][n][key]) for n in names], width, label=label)
    ax.axhline(harness.median(r["raw_write_fsync_s"]), color="black", linestyle="--", linewidth=1,
               label="raw write + fsync")
    ax.axhline(harness.median(r["raw_write_s"]), color="gray", linestyle=":", linewidth=1, label="raw write")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("seconds per reload of every program")
    ax.set_title(f"Delta reload, {r['layers']} layers, {r['weight_bytes'] / 2**20:.0f} MiB of weights "
                 "(sim, median over rounds)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    write_bytes_atomic(harness.RESULTS / PLOT, buf.getvalue())
    return f"plot: [{PLOT}]({PLOT})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 layers, fewer repetitions, 2 rounds")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every process (I/O ratios need 5 to show their spread)")
    ap.add_argument("--plot-only", action="store_true", help="redraw the plot from runtime.json, measure nothing")
    ap.add_argument("--worker", choices=["compile", "strategy", "raw", "kernels-sim"], help=argparse.SUPPRESS)
    ap.add_argument("--strategy", choices=list(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--layers", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plot_only:
        print(write_plot(json.loads((harness.RESULTS / "runtime.json").read_text())))
        return 0
    native.require()
    if args.worker:
        out = {"compile": lambda: worker_compile(args.layers),
               "strategy": lambda: worker_strategy(args.strategy, args.layers, args.reps),
               "raw": lambda: worker_raw(args.layers, args.reps),
               "kernels-sim": lambda: worker_kernels_sim(args.threads, args.reps)}[args.worker]()
        print(json.dumps(out))
        return 0
    layers, reps, kreps = (2, 2, 3) if args.quick else (12, 5, 7)
    rounds_n = min(args.rounds, 2) if args.quick else args.rounds
    me = str(Path(__file__).relative_to(ROOT))
    common = ["--layers", str(layers), "--reps", str(reps)]
    sides = {"compile": [me, "--worker", "compile", *common],
             **{f"strategy/{n}": [me, "--worker", "strategy", "--strategy", n, *common] for n in VARIANTS},
             "raw": [me, "--worker", "raw", *common]}
    envs = {}
    for t in (1, 2):
        sides[f"sim/{t}"] = [me, "--worker", "kernels-sim", "--threads", str(t), "--reps", str(kreps)]
        sides[f"numpy/{t}"] = ["-c", NUMPY_SNIPPET, json.dumps([[k, s] for _, k, s in KERNELS]), str(kreps)]
        envs[f"numpy/{t}"] = {"OPENBLAS_NUM_THREADS": str(t), "OMP_NUM_THREADS": str(t), "MKL_NUM_THREADS": str(t)}
    load_start = harness.load_average()
    rounds = harness.run_rounds(sides, rounds_n, envs=envs)
    load_end = harness.load_average()
    per_round = [reload_round(rounds["compile"][i], {n: rounds[f"strategy/{n}"][i] for n in VARIANTS},
                              rounds["raw"][i]) for i in range(rounds_n)]
    reload = harness.summarize(per_round)
    reload["reps"] = reps
    res = {
        **harness.machine(), "avx2": bool(native.lib is not None and _avx2()),
        "load_start": load_start, "load_end": load_end, "rounds": rounds_n,
        "load_average_before": load_start, "load_average_after": load_end,
        "reload": reload,
        "kernels": kernel_rows({t: rounds[f"sim/{t}"] for t in (1, 2)}, {t: rounds[f"numpy/{t}"] for t in (1, 2)}),
        "raw": rounds,
    }
    lines = write_md(res) + ["", write_plot(res)]
    harness.write_results("runtime", res, lines)
    print("\n".join(lines))
    return 0


def _avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx2 " in f.read()
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
