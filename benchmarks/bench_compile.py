"""Compile throughput and BLOBFILE write speed.

Measures, in one run on this machine:

1. ``compile_module`` (verification, the default pipeline, MIL emission and the
   weight blobs) on generated graphs of about 1k, 10k and 100k IR nodes, in
   nodes/s, and how the cost per node grows with size (1.0 = linear). Two
   workloads: ``legal`` (a transformer-like chain that is already acceptable to
   the ANE) and ``rewrites`` (the same chain with gelu and conv bias, which
   legalize rewrites in every block). A size whose predicted time exceeds the
   budget is skipped and recorded as such, never guessed.
2. emit-mil alone (the pass time) per node, for the same graphs.
3. BLOBFILE writing (``BlobWriter`` + file write) versus a raw write of the same
   payload bytes, and coremltools' ``_BlobStorageWriter`` on the same tensors.
4. coremltools' own MIL pipeline on the ``legal`` graph: building it with the
   MIL builder (type inference) plus the default pass pipeline.
5. The GPT-2-small body (12 layers, d=768, S=64, fp16 weights in a
   .safetensors file), IR text + safetensors -> artifact on disk, as ONE func
   (compiled into a pipeline of programs) and as 24 per-layer funcs, against
   coremltools building the same program (op for op, from the compiled
   artifact, as ``anec export-coreml`` does), running its default pass
   pipeline and serializing an .mlpackage, and against a raw write of the
   weight bytes (with and without fsync; anec fsyncs everything it writes).

Usage (writes benchmarks/results/compile.json and compile.md)::

    PYTHONPATH=. python benchmarks/bench_compile.py [--quick] [--budget SECONDS]
        [--only gpt2]   # re-measure the GPT-2 section, keep the others' last results
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # coremltools' pass pipeline progress bar

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from anec import __version__  # noqa: E402
from anec.compiler import compile_module  # noqa: E402
from anec.ir.graph import Graph, Module, Node, Value  # noqa: E402
from anec.ir.ops import infer_types  # noqa: E402
from anec.ir.types import DType, TensorType  # noqa: E402
from anec.mil.blobfile import BlobWriter  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
C, S = 64, 32  # channels and sequence of the generated graphs


# ---- workloads ----------------------------------------------------------------


class _Chain:
    """Builds a graph node by node (types from the op table, names v1, v2, ...).

    Built directly rather than with the Builder so that constructing a
    100k-node graph is not part of what is measured.
    """

    def __init__(self) -> None:
        self.g = Graph("chain")
        self.n = 0

    def node(self, op, operands, attrs, declared=None, optional=None):
        optional = optional or {}
        types = infer_types(op, [v.type for v in operands], {k: v.type for k, v in optional.items()},
                            attrs, declared=declared)
        self.n += 1
        results = [Value(f"v{self.n}", t) for t in types]
        self.g.add_node(Node(op, list(operands), dict(attrs), results, dict(optional)))
        return results[0]


def chain_graph(nodes: int, rewrites: bool) -> Module:
    """A residual chain of blocks: conv (+bias), activation, scale, a head-wise softmax, residual add.

    ``rewrites=False`` uses only ANE-legal ops (tanh, bias as an add);
    ``rewrites=True`` uses gelu and conv bias=, which legalize must rewrite.
    Four weight matrices and one bias are shared by all blocks, so every size
    stays within the 16-BLOBFILE budget.
    """
    b = _Chain()
    x = b.g.add_input("x", TensorType(DType.fp16, (1, C, 1, S)))
    ws = [b.node("const", [], {"weight": f"w{i}"}, TensorType(DType.fp16, (C, C, 1, 1))) for i in range(4)]
    bias = b.node("const", [], {"weight": "bias"}, TensorType(DType.fp16, (1, C, 1, 1)))
    cur, i = x, 0
    while len(b.g.nodes) < nodes:
        if rewrites:
            h = b.node("conv1x1", [cur, ws[i % 4]], {}, optional={"bias": bias})
            a = b.node("gelu", [h], {"mode": "tanh"})
        else:
            h = b.node("add", [b.node("conv1x1", [cur, ws[i % 4]], {}), bias], {})
            a = b.node("tanh", [h], {})
        half = b.node("const", [], {"value": 0.5}, TensorType(DType.fp16, ()))
        m = b.node("mul", [a, half], {})
        r = b.node("reshape", [m], {"shape": [1, 4, C // 4, S]})
        t = b.node("transpose", [r], {"perm": [0, 1, 3, 2]})
        sm = b.node("softmax", [t], {"axis": -1})
        t2 = b.node("transpose", [sm], {"perm": [0, 1, 3, 2]})
        r2 = b.node("reshape", [t2], {"shape": [1, C, 1, S]})
        cur = b.node("add", [cur, r2], {})
        i += 1
    b.g.set_outputs([cur])
    module = Module()
    module.add_func(b.g)
    return module


def run_compile(nodes: int, rewrites: bool) -> dict:
    module = chain_graph(nodes, rewrites)
    n = len(module.funcs["chain"].nodes)
    start = time.perf_counter()
    result = compile_module(module, random_seed=0, timing=True)
    total = time.perf_counter() - start
    passes: dict[str, float] = {}
    for _, stage, sec in result.timings:
        passes[stage] = passes.get(stage, 0.0) + sec
    art = result.artifacts["chain"]
    return {
        "nodes": n,
        "mil_statements": art.op_count(),
        "seconds": round(total, 4),
        "nodes_per_s": round(n / total, 1),
        "us_per_node": round(1e6 * total / n, 2),
        "emit_us_per_node": round(1e6 * passes.get("emit-mil", 0.0) / n, 3),
        "stages_s": {k: round(v, 4) for k, v in passes.items()},
        "verify_and_other_s": round(total - sum(passes.values()), 4),
    }


def scale_series(sizes: list[int], rewrites: bool, budget: float) -> dict:
    """Run sizes in increasing order; skip one whose predicted time exceeds the budget.

    The prediction extrapolates the last two measured points with their own
    growth exponent (at least 1), so a quadratic pass is predicted as such.
    """
    runs, skipped = [], []
    for n in sizes:
        if len(runs) >= 1:
            last = runs[-1]
            exp = 1.0
            if len(runs) >= 2:
                prev = runs[-2]
                exp = max(1.0, np.log(last["seconds"] / prev["seconds"]) / np.log(last["nodes"] / prev["nodes"]))
            predicted = last["seconds"] * (n / last["nodes"]) ** exp
            if predicted > budget:
                skipped.append({"nodes": n, "predicted_s": round(float(predicted), 1),
                                "reason": f"predicted {predicted:.0f} s > budget {budget:.0f} s (growth exponent {exp:.2f})"})
                continue
        print(f"  compile {'rewrites' if rewrites else 'legal'} {n} nodes ...", flush=True)
        runs.append(run_compile(n, rewrites))
        r = runs[-1]
        print(f"    {r['seconds']:.2f} s, {r['nodes_per_s']:.0f} nodes/s", flush=True)
    out = {"runs": runs, "skipped": skipped}
    if len(runs) >= 2:
        a, b = runs[0], runs[-1]
        out["per_node_ratio"] = {"from": a["nodes"], "to": b["nodes"],
                                 "total": round(b["us_per_node"] / a["us_per_node"], 3),
                                 "emit_mil": round(b["emit_us_per_node"] / a["emit_us_per_node"], 3)}
    return out


def emit_only(sizes: list[int]) -> dict:
    """emit_mil + Artifact.build alone on the (already legal) chain graph: is emission linear?"""
    from anec.mil.artifact import Artifact
    from anec.mil.emitter import emit_mil
    from anec.targets import get_target
    from anec.weights import resolve_weights

    target = get_target()
    runs = []
    for n in sizes:
        module = chain_graph(n, False)
        graph, store = module.funcs["chain"], resolve_weights(module, random_seed=0)
        t0 = time.perf_counter()
        program = emit_mil(graph, target)
        t1 = time.perf_counter()
        Artifact.build(graph, program, target, store)
        t2 = time.perf_counter()
        nodes = len(graph.nodes)
        runs.append({"nodes": nodes, "emit_s": round(t1 - t0, 4), "artifact_s": round(t2 - t1, 4),
                     "us_per_node": round(1e6 * (t2 - t0) / nodes, 3)})
        print(f"  emit only {nodes} nodes: {runs[-1]['us_per_node']} us/node", flush=True)
    return {"runs": runs, "per_node_ratio": round(runs[-1]["us_per_node"] / runs[0]["us_per_node"], 3)}


# ---- BLOBFILE -----------------------------------------------------------------------


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_blobfile(total_mib: int, repeat: int) -> list[dict]:
    rng = np.random.default_rng(0)
    cases = []
    for count in (1, 16, 1024):
        n = total_mib * (1 << 20) // 2 // count
        arrays = [rng.standard_normal(n).astype(np.float16) for _ in range(count)]
        payload_bytes = sum(a.nbytes for a in arrays)
        with tempfile.TemporaryDirectory(dir=RESULTS) as d:
            raw_path, ours_path, theirs_path = (Path(d) / f for f in ("raw.bin", "ours.bin", "theirs.bin"))

            def raw():  # the payload bytes, straight from the arrays, nothing else
                with open(raw_path, "wb") as f:
                    for a in arrays:
                        f.write(memoryview(a).cast("B"))

            def ours():  # BlobWriter streamed into the file
                w = BlobWriter()
                for a in arrays:
                    w.add(a)
                with open(ours_path, "wb") as f:
                    w.write_to(f)

            def ours_bytes():  # BlobWriter.to_bytes() then one write: what an Artifact does
                w = BlobWriter()
                for a in arrays:
                    w.add(a)
                with open(ours_path, "wb") as f:
                    f.write(w.to_bytes())

            t_raw, t_ours, t_bytes = _best(raw, repeat), _best(ours, repeat), _best(ours_bytes, repeat)
            mib = payload_bytes / (1 << 20)
            case = {"tensors": count, "payload_mib": round(mib, 2),
                    "raw_write_mib_s": round(mib / t_raw, 1),
                    "blobwriter_mib_s": round(mib / t_ours, 1),
                    "blobwriter_over_raw_time": round(t_ours / t_raw, 3),
                    "blobwriter_to_bytes_mib_s": round(mib / t_bytes, 1),
                    "file_overhead_bytes": os.path.getsize(ours_path) - payload_bytes}
            try:
                from coremltools import libmilstoragepython as ms
            except ImportError:
                ms = None
            if ms is not None:
                def theirs():
                    w = ms._BlobStorageWriter(str(theirs_path), truncate_file=True)
                    for a in arrays:
                        w.write_fp16_data(a.view(np.uint16))
                    del w

                t_theirs = _best(theirs, repeat)
                case["coremltools_mib_s"] = round(payload_bytes / (1 << 20) / t_theirs, 1)
                case["identical_to_coremltools"] = ours_path.read_bytes() == theirs_path.read_bytes()
            cases.append(case)
            print(f"  blobfile {count} tensors: ours {case['blobwriter_mib_s']} MiB/s, raw "
                  f"{case['raw_write_mib_s']} MiB/s", flush=True)
    return cases


# ---- coremltools ---------------------------------------------------------------------


def coreml_pipeline(sizes: list[int], budget: float) -> dict:
    try:
        import logging

        import coremltools as ct
        from coremltools.converters.mil import Builder as mb
        from coremltools.converters.mil.mil import Function, Program, types
        from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline, PassPipelineManager
    except Exception as e:  # noqa: BLE001 - any import problem means "not measured"
        return {"skipped": f"coremltools unavailable: {e}"}
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    rng = np.random.default_rng(0)

    def build(nodes: int):
        with Function({"x": mb.TensorSpec((1, C, 1, S), types.fp16)}, opset_version=ct.target.iOS18) as f:
            cur = f.inputs["x"]
            ws = [mb.const(val=rng.standard_normal((C, C, 1, 1)).astype(np.float16)) for _ in range(4)]
            bias = mb.const(val=rng.standard_normal((1, C, 1, 1)).astype(np.float16))
            count, i = 5, 0
            while count < nodes:  # the same blocks as chain_graph(rewrites=False), 11 IR nodes each
                h = mb.add(x=mb.conv(x=cur, weight=ws[i % 4]), y=bias)
                m = mb.mul(x=mb.tanh(x=h), y=np.float16(0.5))
                t = mb.transpose(x=mb.reshape(x=m, shape=[1, 4, C // 4, S]), perm=[0, 1, 3, 2])
                t2 = mb.transpose(x=mb.softmax(x=t, axis=-1), perm=[0, 1, 3, 2])
                cur = mb.add(x=cur, y=mb.reshape(x=t2, shape=[1, C, 1, S]))
                count += 11
                i += 1
            f.set_outputs([cur])
        p = Program()
        p.add_function("main", f)
        return p, count

    runs, skipped = [], []
    for n in sizes:
        if runs:
            last = runs[-1]
            predicted = last["seconds"] * n / last["nodes"]
            if predicted > budget:
                skipped.append({"nodes": n, "predicted_s": round(predicted, 1),
                                "reason": f"predicted {predicted:.0f} s (linear) > budget {budget:.0f} s"})
                continue
        print(f"  coremltools {n} nodes ...", flush=True)
        t0 = time.perf_counter()
        prog, count = build(n)
        t1 = time.perf_counter()
        PassPipelineManager.apply_pipeline(prog, PassPipeline.DEFAULT)
        t2 = time.perf_counter()
        ops = sum(1 for _ in prog.functions["main"].operations)
        runs.append({"nodes": count, "pymil_ops_after": ops, "build_s": round(t1 - t0, 3),
                     "passes_s": round(t2 - t1, 3), "seconds": round(t2 - t0, 3),
                     "nodes_per_s": round(count / (t2 - t0), 1),
                     "default_pipeline_passes": len(PassPipeline.DEFAULT.passes)})
        print(f"    {t2 - t0:.2f} s", flush=True)
    return {"runs": runs, "skipped": skipped, "version": ct.__version__}


# ---- GPT-2-small body: IR + safetensors -> artifact on disk ----------------------------


def _gpt2_inputs(tmp: Path) -> dict:
    """The GPT-2-small body as one func and as 24 per-layer funcs (IR text files) and its
    fp16 weights in one .safetensors file."""
    from safetensors.numpy import save_file

    from anec.ir.builder import Builder
    from anec.ir.printer import print_module
    from anec.models.generate import decoder_frontend
    from tests.models.synthetic import GPT2_SMALL, random_weights, shape_checkpoint

    fe = decoder_frontend(shape_checkpoint(tmp / "ckpt", GPT2_SMALL, ["transformer.wte.weight"]), 49152)
    body = fe.prefill(64)
    blocks = [g for i in range(12) for g in (fe.attn(i, 64), fe.mlp(i, 64))]
    weights = {k: np.asarray(v, np.float16) for k, v in random_weights(fe, [body, *blocks]).items()}
    save_file(weights, str(tmp / "gpt2.safetensors"))
    (tmp / "one.ir").write_text(print_module(Builder.module(body)))
    (tmp / "per_layer.ir").write_text(print_module(Builder.module(*blocks)))
    return {"weights": tmp / "gpt2.safetensors", "one": tmp / "one.ir", "per_layer": tmp / "per_layer.ir",
            "weight_mib": sum(a.nbytes for a in weights.values()) / (1 << 20)}


def _anec_compile(ir: Path, weights: Path, out: Path) -> tuple[float, dict, object, float]:
    """(seconds, stage -> seconds, the CompileResult, CPU seconds) of one in-process compile."""
    from anec.compiler import compile_module
    from anec.ir.parser import parse_file

    shutil.rmtree(out, ignore_errors=True)
    _quiesce()  # (the removal too)
    c0 = time.process_time()
    t0 = time.perf_counter()
    t_parse = time.perf_counter()
    module = parse_file(ir)
    t_parse = time.perf_counter() - t_parse
    result = compile_module(module, weights=str(weights), out_dir=out, timing=True)
    total = time.perf_counter() - t0
    cpu = time.process_time() - c0
    stages = {"parse": t_parse}
    for _, stage, sec in result.timings:
        stages[stage] = stages.get(stage, 0.0) + sec
    return total, stages, result, cpu


def _quiesce() -> None:
    """Before a timed run: write back what earlier steps left dirty (the generated inputs, the
    outputs of coremltools, which saves without fsync), so that no run pays for another's
    writeback, and let go of garbage. Never timed."""
    gc.collect()
    os.sync()


def _raw_write(payload: memoryview, path: Path, fsync: bool) -> float:
    _quiesce()
    t = time.perf_counter()
    with open(path, "wb") as f:
        f.write(payload)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    took = time.perf_counter() - t
    path.unlink()
    return took


def _coreml_build_passes_save(art, tmp: Path) -> dict | None:
    """coremltools on the compiled whole-body program: build (mb ops) + default passes + save."""
    try:
        import coremltools as ct
        from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline, PassPipelineManager

        from anec.frontends.coreml import _assemble, _Builder, _quiet, _wiring
    except Exception as e:  # noqa: BLE001 - any import problem means "not measured"
        return {"skipped": f"coremltools unavailable: {e}"}
    import logging

    logging.getLogger("coremltools").setLevel(logging.ERROR)
    wiring = _wiring(art)
    # reading the artifact back and re-emitting its MIL is anec's work: not timed
    builders = [_Builder(stage, wiring.rename(k)) for k, stage in enumerate(art.stages)]
    path = tmp / "gpt2.mlpackage"
    shutil.rmtree(path, ignore_errors=True)  # the previous run's package: its removal is not timed
    _quiesce()
    c0 = time.process_time()
    t0 = time.perf_counter()
    prog = _assemble(art.manifest, wiring, builders)
    t1 = time.perf_counter()
    pipeline = PassPipeline.DEFAULT
    # its elementwise -> batch_norm fusion fails on this fp16 program (fp16 gamma, fp32 mean)
    pipeline.remove_passes([UNFUSABLE])
    _quiet(lambda: PassPipelineManager.apply_pipeline(prog, pipeline))
    t2 = time.perf_counter()
    model = _quiet(lambda: ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                                      pass_pipeline=ct.PassPipeline.EMPTY,
                                      compute_precision=ct.precision.FLOAT32, skip_model_load=True))
    model.save(str(path))
    t3 = time.perf_counter()
    cpu = time.process_time() - c0
    ops = sum(1 for _ in prog.functions["main"].operations)
    return {"version": ct.__version__, "build_s": round(t1 - t0, 3), "passes_s": round(t2 - t1, 3),
            "serialize_s": round(t3 - t2, 3), "seconds": round(t3 - t0, 3), "cpu_s": round(cpu, 3),
            "ops_after_passes": ops,
            "default_pipeline_passes": len(pipeline.passes), "removed_pass": UNFUSABLE}


UNFUSABLE = "common::fuse_elementwise_to_batchnorm"

_CT_WORKER = """
import json, sys
from pathlib import Path
root, src, tmp = sys.argv[1:]
sys.path.insert(0, root)
try:
    from benchmarks.bench_compile import _coreml_build_passes_save
    from anec.mil.pipeline import load_any
    art = load_any(src)
except Exception as e:  # noqa: BLE001 - reported as "not measured"
    print(json.dumps({"skipped": f"cannot read the artifact: {e}"}), flush=True)
    sys.exit(0)
for line in sys.stdin:
    print(json.dumps(_coreml_build_passes_save(art, Path(tmp))), flush=True)
"""
"""coremltools' runs, one per line read, in their own process (see :class:`_Coreml`)."""


class _Coreml:
    """A process that measures coremltools on the compiled GPT-2 body (read from ``src``) each
    time :meth:`run` asks, so that its runs take turns with anec's in one benchmark: both meet
    the same machine, which here speeds up and slows down by up to 2x from minute to minute.
    coremltools (and torch, which it imports) never load into the process that times anec: the
    threads they leave behind cost anec's compiles about a third more CPU there."""

    def __init__(self, src: Path, tmp: Path) -> None:
        import subprocess

        self.log = open(tmp / "coremltools.log", "w+")  # its warnings, kept for a failure
        self.proc = subprocess.Popen([sys.executable, "-c", _CT_WORKER, str(ROOT), str(src), str(tmp)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, cwd=tmp, env=dict(os.environ, PYTHONPATH=str(ROOT)))

    def run(self) -> dict:
        """One build + passes + save (timed in the worker), or why it was not measured."""
        try:
            self.proc.stdin.write("run\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.log.seek(0)
            return {"skipped": "the coremltools process failed: " + " ".join(self.log.read().strip().splitlines()[-1:])}
        return json.loads(line)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait()
        self.log.close()


_ONE_COMPILE = """
import json, os, shutil, sys, time
tree, ir, weights, out = sys.argv[1:]
import anec
assert anec.__file__.startswith(tree), anec.__file__
from anec.compiler import compile_module
from anec.ir.parser import parse_file
shutil.rmtree(out, ignore_errors=True)
os.sync()
t0 = time.perf_counter()
module = parse_file(ir)
parsed = time.perf_counter() - t0
result = compile_module(module, weights=weights, out_dir=out, timing=True)
total = time.perf_counter() - t0
stages = {"parse": parsed}
for _, stage, sec in result.timings:
    stages[stage] = stages.get(stage, 0.0) + sec
print(json.dumps({"seconds": total, "stages_s": stages}))
"""
"""One compile, as :func:`_anec_compile` measures it, by the anec/ in ``tree`` (a subprocess)."""


def _process_compiles(tree: Path, inputs: dict, tmp: Path, repeat: int, tag: str) -> dict:
    """Best-of-``repeat`` compiles of both forms, each in a fresh process running the anec/ in
    ``tree`` (imports done before the clock starts, nothing warmed up by an earlier compile)."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(tree))  # that anec/ only: this file puts ROOT first
    out: dict = {}
    for form in ("one", "per_layer"):
        best = None
        for _ in range(repeat):
            proc = subprocess.run([sys.executable, "-c", _ONE_COMPILE, str(tree), str(inputs[form]),
                                   str(inputs["weights"]), str(tmp / f"{tag}_{form}")],
                                  env=env, cwd=tmp, capture_output=True, text=True)
            if proc.returncode:
                return {"skipped": proc.stderr.strip().splitlines()[-1:]}
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            if best is None or row["seconds"] < best["seconds"]:
                best = row
        out[form] = {"seconds": round(best["seconds"], 3),
                     "stages_s": {k: round(v, 3) for k, v in best["stages_s"].items()}}
        print(f"  {tag} {form} (fresh process): {best['seconds']:.2f} s", flush=True)
    return out


def _baseline_compiles(rev: str, inputs: dict, tmp: Path, repeat: int) -> dict:
    """The fresh-process compiles with the anec/ of commit ``rev`` (git archive) and with this tree's."""
    import subprocess

    full = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    tree = tmp / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", full, "anec"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return {"rev": full, "baseline": _process_compiles(tree, inputs, tmp, repeat, f"baseline {full}"),
            "current": _process_compiles(ROOT, inputs, tmp, repeat, "current")}


def gpt2_body(repeat: int, baseline: str | None = None) -> dict:
    """Best-of-``repeat`` anec compiles (one func, per-layer funcs) vs coremltools vs raw writes
    (and vs the same compiles by the code of commit ``baseline``). The runs go in rounds: each
    form compiled once by anec, then coremltools once (in its own process), so that the ratio
    compares runs that met the same machine."""
    with tempfile.TemporaryDirectory(dir=RESULTS) as d:
        tmp = Path(d)
        print("  writing the GPT-2-small IR and safetensors ...", flush=True)
        inputs = _gpt2_inputs(tmp)
        out: dict = {"weight_mib": round(inputs["weight_mib"], 1), "repeat": repeat, "rounds": True,
                     "anec": {}, "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
        if baseline:
            out["baseline"] = _baseline_compiles(baseline, inputs, tmp, repeat)
        forms = ("one", "per_layer")
        runs: dict[str, list] = {form: [] for form in forms}
        results: dict[str, object] = {}
        ct_runs: list[dict] = []
        coreml = None
        print("  rounds of anec (both forms) and coremltools ...", flush=True)
        try:
            for k in range(repeat):
                for form in forms:
                    # the previous compile's artifacts map the files it wrote: let go of them before
                    # the clock starts, so that removing its output is not timed (as in a fresh process)
                    results[form] = None
                    total, stages, results[form], cpu = _anec_compile(inputs[form], inputs["weights"],
                                                                      tmp / f"out_{form}")
                    runs[form].append((total, stages, cpu))
                if coreml is None:  # the compiled body, copied once for coremltools to read
                    art = results["one"].artifacts[next(iter(results["one"].artifacts))]
                    src = tmp / "coremltools_src"
                    art.write(src)
                    coreml = _Coreml(src, tmp)
                ct_runs.append(coreml.run())
                print(f"  round {k + 1}: anec " + ", ".join(f"{form} {runs[form][-1][0]:.3f} s" for form in forms)
                      + f"; coremltools {ct_runs[-1].get('seconds', '-')} s", flush=True)
        finally:
            if coreml is not None:
                coreml.close()
        for form in forms:
            best, stages, cpu = min(runs[form], key=lambda r: r[0])
            arts = list(results[form].artifacts.values())
            programs = sum(len(getattr(a, "stages", [a])) for a in arts)
            blob_bytes = sum(a.weight_bytes() for a in arts)
            out["anec"][form] = {"seconds": round(best, 3), "funcs": len(arts), "programs": programs,
                                 "blob_mib": round(blob_bytes / (1 << 20), 1),
                                 "stages_s": {k: round(v, 3) for k, v in stages.items()},
                                 "cpu_s": round(cpu, 3), "all_runs_s": [round(r[0], 3) for r in runs[form]],
                                 "all_runs_cpu_s": [round(r[2], 3) for r in runs[form]]}
        results.clear()
        payload = np.random.default_rng(0).standard_normal(
            int(out["anec"]["one"]["blob_mib"] * (1 << 20)) // 2).astype(np.float16)
        view = memoryview(payload).cast("B")
        out["raw_write_s"] = round(min(_raw_write(view, tmp / "raw.bin", False) for _ in range(repeat)), 3)
        out["raw_write_fsync_s"] = round(min(_raw_write(view, tmp / "raw.bin", True) for _ in range(repeat)), 3)
        print(f"  raw write {out['raw_write_s']} s, with fsync {out['raw_write_fsync_s']} s", flush=True)
        done = [r for r in ct_runs if r and "seconds" in r]
        out["coremltools"] = min(done, key=lambda r: r["seconds"]) if done else ct_runs[0]
        if done:
            out["coremltools"]["runs_s"] = [r["seconds"] for r in done]
        out["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    ct_s = (out["coremltools"] or {}).get("seconds")
    for form, r in out["anec"].items():
        r["coremltools_over_anec"] = round(ct_s / r["seconds"], 2) if ct_s else None
        if ct_s and len(done) == len(r["all_runs_s"]):  # each round's coremltools run over its anec run
            r["round_ratios"] = [round(c["seconds"] / a, 2) for c, a in zip(done, r["all_runs_s"])]
        r["over_raw_write"] = round(r["seconds"] / out["raw_write_s"], 1)
        r["over_raw_write_fsync"] = round(r["seconds"] / out["raw_write_fsync_s"], 1)
    return out


def _load_note(g: dict) -> str:
    """The machine's load average (1, 5, 15 min) when the GPT-2 section started and ended."""
    if not g.get("loadavg_start"):
        return ""
    fmt = lambda la: "/".join(str(x) for x in la)  # noqa: E731
    return (f" Load average (1/5/15 min, {os.cpu_count()} cpus): {fmt(g['loadavg_start'])} at the start, "
            f"{fmt(g.get('loadavg_end') or [])} at the end (the benchmark's own processes count in it).")


def gpt2_markdown(g: dict) -> list[str]:
    ct = g.get("coremltools") or {}
    when = f" (measured {g['date']})" if g.get("date") else ""
    lines = [f"## GPT-2-small body: IR + safetensors -> artifact on disk{when}", "",
             f"12 layers, d=768, S=64, {g['weight_mib']} MiB of fp16 weights in one .safetensors file; "
             f"best of {g['repeat']} in-process runs (parse + compile_module with the output written and "
             "fsynced). coremltools: the same program built op for op with its MIL builder, its "
             "default pass pipeline, then ct.convert + save of an .mlpackage (the best of its runs, "
             "below; coremltools writes without fsync). "
             + ("The runs take turns, in rounds: anec compiles each form once, then coremltools runs once "
                "(in a process of its own), so that both meet the same machine. " if g.get("rounds") else "")
             + "Raw write: the blob "
             "bytes written to one file. Before every timed run (anec's, coremltools', the raw writes) the "
             "previous output is removed and the disk is synced, untimed, so that no run pays for the "
             "writeback of what an earlier one left dirty." + _load_note(g), "",
             "| form | programs | seconds | coremltools / anec | anec / raw write | anec / raw write+fsync |",
             "|---|---:|---:|---:|---:|---:|"]
    for form, r in g["anec"].items():
        name = {"one": "one func (pipeline)", "per_layer": "24 per-layer funcs"}[form]
        lines.append(f"| {name} | {r['programs']} | {r['seconds']} | "
                     f"{'x' + str(r['coremltools_over_anec']) if r['coremltools_over_anec'] else '-'} | "
                     f"x{r['over_raw_write']} | x{r['over_raw_write_fsync']} |")
    rounds = [f"{name} {', '.join(f'x{x}' for x in r['round_ratios'])} "
              f"(median x{round(statistics.median(r['round_ratios']), 2)})"
              for name, r in g["anec"].items() if r.get("round_ratios")]
    if rounds:
        lines += ["", "coremltools / anec in each round (that round's coremltools run over its anec run): "
                  + "; ".join(rounds) + "."]
    runs = [f"{name}: {', '.join(f'{x} s' for x in r['all_runs_s'])}" for name, r in g["anec"].items()
            if r.get("all_runs_s")]
    if runs:
        lines += ["", f"anec's {g['repeat']} runs of each form (the table shows the best; the spread is this "
                  f"machine's disk and CPU from run to run): {'; '.join(runs)}."]
    cpus = [f"{name} {r['cpu_s']} s (all runs: {', '.join(str(x) for x in r['all_runs_cpu_s'])})"
            for name, r in g["anec"].items() if r.get("all_runs_cpu_s")]
    if cpus:
        lines += ["", f"CPU time of the process (user + sys, all its threads; {os.cpu_count()} cpus) in anec's best "
                  f"run: {'; '.join(cpus)}"
                  + (f". coremltools' best run: {ct['cpu_s']} s" if ct.get("cpu_s") else "")
                  + ". CPU time varies less than wall time here, and shows how much of the wall time is "
                  "work rather than waiting."]
    base = g.get("baseline") or {}
    old, new = base.get("baseline") or {}, base.get("current") or {}
    if old.get("one") and new.get("one"):
        lines += ["", f"Before and after, each compile in a fresh process (best of {g['repeat']}, same run): "
                  f"the code of {base['rev']} -> this tree: " + "; ".join(
                      f"{form} {old[form]['seconds']:.3f} s -> {new[form]['seconds']:.3f} s "
                      f"(x{old[form]['seconds'] / new[form]['seconds']:.1f})"
                      for form in ("one", "per_layer")) + "."]
        lines += ["", "(Code that does not report `verify` as a stage counts its verification in the passes "
                  "and in what the table does not show.)", "",
                  "| fresh process | " + " | ".join(STAGES) + " |", "|---|" + "---:|" * len(STAGES)]
        for label, rows in ((base["rev"], old), ("this tree", new)):
            for form in ("one", "per_layer"):
                lines.append(f"| {label} {form} | "
                             + " | ".join(str(rows[form]["stages_s"].get(k, 0.0)) for k in STAGES) + " |")
    elif base:
        lines += ["", f"Baseline {base.get('rev')} not measured: {old.get('skipped') or new.get('skipped')}"]
    lines += ["", f"Raw write of {g['anec']['one']['blob_mib']} MiB: {g['raw_write_s']} s "
                  f"({g['raw_write_fsync_s']} s with fsync).", ""]
    if "seconds" in ct:
        lines += [f"coremltools {ct['version']}: build {ct['build_s']} s + passes {ct['passes_s']} s "
                  f"({ct['default_pipeline_passes']} passes of its default pipeline; "
                  f"`{ct['removed_pass']}` is left out: it fails on this fp16 program) + serialize "
                  f"{ct['serialize_s']} s = {ct['seconds']} s"
                  + (f" (the best of {len(ct['runs_s'])} runs: {', '.join(f'{x} s' for x in ct['runs_s'])})"
                     if ct.get("runs_s") else "") + ".", ""]
    elif ct:
        lines += [ct.get("skipped", ""), ""]
    lines += ["Where anec's time goes (seconds, best run; since the weights are hashed while they are "
              "written, `write` includes hashing them, which code before that did in `emit-mil`):", "",
              "| form | " + " | ".join(STAGES) + " |", "|---|" + "---:|" * len(STAGES)]
    for form, r in g["anec"].items():
        lines.append(f"| {form} | " + " | ".join(str(r["stages_s"].get(k, 0.0)) for k in STAGES) + " |")
    return lines + [""]


STAGES = ("parse", "resolve-weights", "dce", "fuse-casts", "annotate-sram", "legalize", "emit-mil",
          "verify", "write")


# ---- report ------------------------------------------------------------------------------


def markdown(res: dict) -> str:
    lines = [f"# Compile benchmark ({res['date']})", "",
             f"Machine: {res['machine']}. Python {res['python']}, numpy {res['numpy']}, anec {res['anec']}.", "",
             ]
    if res.get("gpt2"):
        lines += gpt2_markdown(res["gpt2"])
    lines += ["## anec compile_module (verify + default pipeline + emission + blobs)", ""]
    for name, series in res["compile"].items():
        lines += [f"### workload `{name}`", "",
                  "| nodes | MIL statements | seconds | nodes/s | us/node | emit-mil us/node | legalize s | verify+other s |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in series["runs"]:
            lines.append(f"| {r['nodes']} | {r['mil_statements']} | {r['seconds']} | {r['nodes_per_s']} | "
                         f"{r['us_per_node']} | {r['emit_us_per_node']} | {r['stages_s'].get('legalize', 0)} | "
                         f"{r['verify_and_other_s']} |")
        for s in series["skipped"]:
            lines.append(f"| {s['nodes']} | - | not measured: {s['reason']} | | | | | |")
        if "per_node_ratio" in series:
            p = series["per_node_ratio"]
            lines += ["", f"Per-node time {p['to']} vs {p['from']} nodes: total x{p['total']}, "
                          f"emit-mil x{p['emit_mil']} (1.0 = linear)."]
        lines.append("")
    eo = res["emit_only"]
    lines += ["## Emission alone (emit_mil + Artifact.build on the legal graph)", "",
              "| nodes | emit_mil s | Artifact.build s | us/node |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['nodes']} | {r['emit_s']} | {r['artifact_s']} | {r['us_per_node']} |" for r in eo["runs"]]
    lines += ["", f"Per-node time largest vs smallest: x{eo['per_node_ratio']} (1.0 = linear).", ""]
    cm = res["coremltools"]
    lines += ["## coremltools MIL pipeline on the `legal` graph", ""]
    if "runs" in cm:
        lines += [f"coremltools {cm['version']}: MIL builder (type inference) + `PassPipeline.DEFAULT`.", "",
                  "| nodes | seconds (build + passes) | build s | passes s | nodes/s | anec nodes/s | anec speedup |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        ours = {r["nodes"]: r for r in res["compile"]["legal"]["runs"]}
        for r in cm["runs"]:
            mine = min(ours.values(), key=lambda o: abs(o["nodes"] - r["nodes"])) if ours else None
            sp = f"x{r['seconds'] / mine['seconds'] * mine['nodes'] / r['nodes']:.1f}" if mine else "-"
            lines.append(f"| {r['nodes']} | {r['seconds']} | {r['build_s']} | {r['passes_s']} | {r['nodes_per_s']} | "
                         f"{mine['nodes_per_s'] if mine else '-'} | {sp} |")
        for s in cm["skipped"]:
            lines.append(f"| {s['nodes']} | not measured: {s['reason']} | | | | | |")
    else:
        lines.append(cm["skipped"])
    lines += ["", "## BLOBFILE write vs raw write of the same bytes (best of runs, page cache, no fsync)", "",
              "| tensors | MiB | raw MiB/s | BlobWriter MiB/s | time vs raw | via to_bytes MiB/s | coremltools MiB/s "
              "| identical |",
              "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for c in res["blobfile"]:
        lines.append(f"| {c['tensors']} | {c['payload_mib']} | {c['raw_write_mib_s']} | {c['blobwriter_mib_s']} | "
                     f"x{c['blobwriter_over_raw_time']} | {c['blobwriter_to_bytes_mib_s']} | "
                     f"{c.get('coremltools_mib_s', '-')} | "
                     f"{c.get('identical_to_coremltools', '-')} |")
    plots = res.get("plots") or {}
    if plots.get("files"):
        lines += ["", "## Plots", ""] + [f"![{f}]({f})" for f in plots["files"]]
    elif plots.get("skipped"):
        lines += ["", "## Plots", "", plots["skipped"] + "."]
    lines += ["", "## Notes", ""] + [f"* {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds allowed per measurement")
    ap.add_argument("--only", choices=["gpt2"], help="re-measure one section, keep the others' last results")
    ap.add_argument("--repeat", type=int, default=5,
                    help="GPT-2 rounds (each: anec compiles both forms, then coremltools runs once); "
                         "the best run of each is reported")
    ap.add_argument("--baseline", metavar="REV", help="also compile the GPT-2 body with this commit's anec/")
    args = ap.parse_args(argv)
    sizes = [300, 1000, 3000] if args.quick else [1000, 10000, 100000]
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.only == "gpt2":
        res = json.loads((RESULTS / "compile.json").read_text())
        print("GPT-2-small body", flush=True)
        res["gpt2"] = gpt2_body(args.repeat, args.baseline)
        res["gpt2"]["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
        _write_results(res)
        return 0
    res = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpus".replace("  ", " "),
        "python": platform.python_version(), "numpy": np.__version__, "anec": __version__,
        "sizes": sizes, "budget_s": args.budget,
    }
    print("compile scaling", flush=True)
    res["compile"] = {"legal": scale_series(sizes, False, args.budget),
                      "rewrites": scale_series(sizes, True, args.budget)}
    print("emission alone", flush=True)
    res["emit_only"] = emit_only(sizes)
    print("blobfile", flush=True)
    res["blobfile"] = bench_blobfile(8 if args.quick else 64, 3 if args.quick else 5)
    print("coremltools", flush=True)
    res["coremltools"] = coreml_pipeline(sizes, args.budget)
    if not args.quick:
        print("GPT-2-small body", flush=True)
        res["gpt2"] = gpt2_body(args.repeat, args.baseline)
    res["notes"] = [
        "nodes = IR nodes of the input graph (consts included); legalize adds nodes in `rewrites`.",
        "seconds is the wall time of compile_module: the verifier runs before the pipeline and after every "
        "pass (verify+other), plus resolving the 5 random weight tensors and writing the blobs in memory.",
        "coremltools counts the same blocks (11 IR nodes each); its builder creates more MIL ops per block "
        "(reshape shapes and scalars become const ops). Its default pipeline also does more work "
        "(about 95 passes) than anec's five, so the comparison is of whole front-ends, not of equal work.",
        "Skipped sizes were not run: their predicted time is an extrapolation, not a measurement.",
    ]
    _write_results(res)
    return 0


def _write_results(res: dict) -> None:
    from anec.fsutil import write_text_atomic

    res["plots"] = write_plots(res)
    write_text_atomic(RESULTS / "compile.json", json.dumps(res, indent=2) + "\n")
    write_text_atomic(RESULTS / "compile.md", markdown(res))
    print(f"wrote {RESULTS / 'compile.json'} and {RESULTS / 'compile.md'}")


PLOTS = ("compile_scaling.png", "compile_gpt2.png")


def write_plots(res: dict) -> dict:
    """compile_scaling.png (seconds vs graph size, anec and coremltools, log-log) and
    compile_gpt2.png (the GPT-2-small body: anec, coremltools, raw writes). Needs matplotlib
    (``pip install anec[plots]``); without it the tables are still written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        note = "plots need matplotlib: pip install 'anec[plots]'"
        print(f"  {note}", flush=True)
        return {"skipped": note}
    import io

    from anec.fsutil import write_bytes_atomic

    def save(fig, name: str) -> None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
        plt.close(fig)
        write_bytes_atomic(RESULTS / name, buf.getvalue())

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, series in res["compile"].items():
        runs = series["runs"]
        ax.plot([r["nodes"] for r in runs], [r["seconds"] for r in runs], "o-",
                label=f"anec compile ({name} workload)")
    cm = res.get("coremltools", {})
    if cm.get("runs"):
        ax.plot([r["nodes"] for r in cm["runs"]], [r["seconds"] for r in cm["runs"]], "s--",
                label="coremltools build + default passes (legal)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("IR nodes")
    ax.set_ylabel("seconds")
    ax.set_title("Compile time vs graph size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, PLOTS[0])
    written = [PLOTS[0]]

    g = res.get("gpt2")
    if g:
        labels, values = [], []
        for form, r in g["anec"].items():
            labels.append({"one": "anec\none func", "per_layer": "anec\n24 funcs"}[form])
            values.append(r["seconds"])
        if (g.get("coremltools") or {}).get("seconds"):
            labels.append("coremltools\nbuild+passes+save")
            values.append(g["coremltools"]["seconds"])
        labels += ["raw write", "raw write\n+ fsync"]
        values += [g["raw_write_s"], g["raw_write_fsync_s"]]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        bars = ax.bar(labels, values, color=["#1f77b4", "#1f77b4", "#ff7f0e", "#7f7f7f", "#7f7f7f"][:len(values)])
        ax.bar_label(bars, fmt="%.2f s", fontsize=8)
        ax.set_ylabel("seconds")
        ax.set_title(f"GPT-2-small body ({g['weight_mib']} MiB fp16): IR + safetensors -> disk")
        ax.tick_params(axis="x", labelsize=8)
        fig.tight_layout()
        save(fig, PLOTS[1])
        written.append(PLOTS[1])
    return {"files": written}


if __name__ == "__main__":
    sys.exit(main())
