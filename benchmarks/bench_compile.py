"""Compile throughput and BLOBFILE write speed.

Measures, in one run on this machine:

1. ``compile_module`` (verification, the default pipeline, MIL emission and the
   weight blobs) on generated graphs of about 1k, 10k and 100k IR nodes, in
   nodes/s, and how the cost per node grows with size (1.0 = linear). Two
   workloads: ``legal`` (a transformer-like chain that is already acceptable to
   the ANE) and ``rewrites`` (the same chain with gelu and conv bias, which
   legalize rewrites in every block). A size whose predicted time exceeds the
   budget is skipped and recorded as such, never guessed. The default budget
   (120 s) leaves out coremltools' pipeline at 100k nodes, which alone takes
   9-11 minutes a round on 2 cores; ``--budget 900`` measures it.
2. emit-mil alone (the pass time) per node, for the same graphs.
3. BLOBFILE writing (``BlobWriter`` + file write) versus a raw write of the same
   payload bytes, and coremltools' ``_BlobStorageWriter`` on the same tensors.
4. coremltools' own MIL pipeline on the ``legal`` graph: building it with the
   MIL builder (type inference) plus the default pass pipeline.
5. The GPT-2-small body (12 layers, d=768, S=64, fp16 weights in a
   .safetensors file; 2 layers, d=128 with ``--quick``), IR text +
   safetensors -> artifact on disk, each compile in a fresh process, as ONE
   func (compiled into a pipeline of programs) and as 24 per-layer funcs, against
   coremltools building the same program (op for op, from the compiled
   artifact, as ``anec export-coreml`` does), running its default pass
   pipeline and serializing an .mlpackage, and against a raw write of the
   weight bytes (with and without fsync; anec fsyncs everything it writes).

Every part runs in its own process, once per round, in an order that
alternates between rounds (benchmarks/harness.py): anec's size series and
emission alone (1-2), coremltools' pipeline (4), the BLOBFILE writers (3,
which take turns inside their process), and in 5 each anec compile, the
coremltools run, each raw write and each baseline compile. Every figure is the
median (min-max) over the rounds; a ratio between two sides is taken per round.

Usage (writes benchmarks/results/compile.json and compile.md)::

    PYTHONPATH=. python benchmarks/bench_compile.py [--quick] [--budget SECONDS] [--rounds 5]
        [--baseline REV]  # also compile the GPT-2 body with that commit's anec/, in the same rounds
        [--only gpt2]     # re-measure the GPT-2 section, keep the others' last results
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # coremltools' pass pipeline progress bar

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402
from anec import __version__  # noqa: E402
from anec.compiler import compile_module  # noqa: E402
from anec.ir.graph import Graph, Module, Node, Value  # noqa: E402
from anec.ir.ops import infer_types  # noqa: E402
from anec.ir.types import DType, TensorType  # noqa: E402
from anec.mil.blobfile import BlobWriter  # noqa: E402

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
    from anec.ir.weight_binding import resolve_weights

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


def _best_alternating(fns: dict, repeat: int) -> dict[str, float]:
    """Best time of each function over ``repeat`` repetitions; in each repetition every function
    runs once, in an order that alternates between repetitions (so none always runs first)."""
    best = {name: float("inf") for name in fns}
    for r in range(repeat):
        for name in harness.round_order(list(fns), r):
            t = time.perf_counter()
            fns[name]()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def bench_blobfile(total_mib: int, repeat: int) -> list[dict]:
    rng = np.random.default_rng(0)
    cases = []
    for count in (1, 16, 1024):
        n = total_mib * (1 << 20) // 2 // count
        arrays = [rng.standard_normal(n).astype(np.float16) for _ in range(count)]
        payload_bytes = sum(a.nbytes for a in arrays)
        with tempfile.TemporaryDirectory() as d:
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

            try:
                from coremltools import libmilstoragepython as ms
            except ImportError:
                ms = None
            fns = {"raw": raw, "ours": ours, "bytes": ours_bytes}
            if ms is not None:
                def theirs():
                    w = ms._BlobStorageWriter(str(theirs_path), truncate_file=True)
                    for a in arrays:
                        w.write_fp16_data(a.view(np.uint16))
                    del w

                fns["theirs"] = theirs
            best = _best_alternating(fns, repeat)
            t_raw, t_ours, t_bytes = best["raw"], best["ours"], best["bytes"]
            mib = payload_bytes / (1 << 20)
            case = {"tensors": count, "payload_mib": round(mib, 2),
                    "raw_write_mib_s": round(mib / t_raw, 1),
                    "blobwriter_mib_s": round(mib / t_ours, 1),
                    "blobwriter_over_raw_time": round(t_ours / t_raw, 3),
                    "blobwriter_to_bytes_mib_s": round(mib / t_bytes, 1),
                    "file_overhead_bytes": os.path.getsize(ours_path) - payload_bytes}
            if ms is not None:
                t_theirs = best["theirs"]
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


TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 2, "vocab_size": 1000, "n_positions": 128}
"""The GPT-2 body of ``--quick`` (a smoke run of the same code)."""


def _gpt2_inputs(tmp: Path, tiny: bool = False) -> dict:
    """The GPT-2-small body as one func and as per-layer funcs (attention and MLP of every layer;
    IR text files) and its fp16 weights in one .safetensors file."""
    from safetensors.numpy import save_file

    from anec.ir.builder import Builder
    from anec.ir.printer import print_module
    from anec.models.generate import decoder_frontend
    from tests.models.synthetic import GPT2_SMALL, random_weights, shape_checkpoint

    fe = decoder_frontend(shape_checkpoint(tmp / "ckpt", TINY if tiny else GPT2_SMALL, ["transformer.wte.weight"]),
                          49152)
    body = fe.prefill(64)
    blocks = [g for i in range(fe.cfg.n_layer) for g in (fe.attn(i, 64), fe.mlp(i, 64))]
    weights = {k: np.asarray(v, np.float16) for k, v in random_weights(fe, [body, *blocks]).items()}
    save_file(weights, str(tmp / "gpt2.safetensors"))
    (tmp / "one.ir").write_text(print_module(Builder.module(body)))
    (tmp / "per_layer.ir").write_text(print_module(Builder.module(*blocks)))
    return {"weights": tmp / "gpt2.safetensors", "one": tmp / "one.ir", "per_layer": tmp / "per_layer.ir",
            "weight_mib": sum(a.nbytes for a in weights.values()) / (1 << 20), "layers": fe.cfg.n_layer,
            "d_model": fe.cfg.d_model}


def _quiesce() -> None:
    """Before a timed run: write back what earlier steps left dirty (the generated inputs, the
    outputs of coremltools, which saves without fsync), so that no run pays for another's
    writeback, and let go of garbage. Never timed."""
    gc.collect()
    os.sync()


def worker_raw_write(mib: float, path: Path, fsync: bool) -> dict:
    """One write of ``mib`` MiB of fp16 bytes to a new file (with fsync when asked)."""
    payload = memoryview(np.random.default_rng(0).standard_normal(int(mib * (1 << 20)) // 2)
                         .astype(np.float16)).cast("B")
    path.unlink(missing_ok=True)
    _quiesce()
    t = time.perf_counter()
    with open(path, "wb") as f:
        f.write(payload)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    took = time.perf_counter() - t
    path.unlink()
    return {"seconds": took}


def _coreml_build_passes_save(art, tmp: Path) -> dict | None:
    """coremltools on the compiled whole-body program: build (mb ops) + default passes + save."""
    try:
        import coremltools as ct
        from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline, PassPipelineManager

        from anec.frontends.coreml import quiet_stderr
        from anec.frontends.coreml_program import ProgramBuilder, assemble, io_plan
        from anec.frontends.coreml_wiring import pipeline_wiring
    except Exception as e:  # noqa: BLE001 - any import problem means "not measured"
        return {"skipped": f"coremltools unavailable: {e}"}
    import logging

    logging.getLogger("coremltools").setLevel(logging.ERROR)
    wiring = pipeline_wiring(art)
    # reading the artifact back and re-emitting its MIL is anec's work: not timed
    plan = io_plan(art.manifest, art.stages)
    builders = [ProgramBuilder(stage, plan.through(wiring.rename(k))) for k, stage in enumerate(art.stages)]
    path = tmp / "gpt2.mlpackage"
    shutil.rmtree(path, ignore_errors=True)  # the previous run's package: its removal is not timed
    _quiesce()
    c0 = time.process_time()
    t0 = time.perf_counter()
    prog = assemble(plan, wiring, builders)
    t1 = time.perf_counter()
    pipeline = PassPipeline.DEFAULT
    # its elementwise -> batch_norm fusion fails on this fp16 program (fp16 gamma, fp32 mean)
    pipeline.remove_passes([UNFUSABLE])
    quiet_stderr(lambda: PassPipelineManager.apply_pipeline(prog, pipeline))
    t2 = time.perf_counter()
    model = quiet_stderr(lambda: ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                                      pass_pipeline=ct.PassPipeline.EMPTY,
                                      compute_precision=ct.precision.FLOAT32, skip_model_load=True))
    model.save(str(path))
    t3 = time.perf_counter()
    cpu = time.process_time() - c0
    ops = sum(1 for _ in prog.functions["main"].operations)
    return {"version": ct.__version__, "build_s": t1 - t0, "passes_s": t2 - t1,
            "serialize_s": t3 - t2, "seconds": t3 - t0, "cpu_s": cpu,
            "ops_after_passes": ops,
            "default_pipeline_passes": len(pipeline.passes), "removed_pass": UNFUSABLE}


UNFUSABLE = "common::fuse_elementwise_to_batchnorm"


def worker_gpt2_coremltools(src: Path, tmp: Path) -> dict:
    """One coremltools build + passes + save of the compiled body at ``src``, in this process
    (coremltools and torch, which it imports, never load into a process that times anec: the
    threads they leave behind cost anec's compiles about a third more CPU there)."""
    from anec.mil.multi_program import load_any

    try:
        art = load_any(src)
    except Exception as e:  # noqa: BLE001 - reported as "not measured"
        return {"skipped": f"cannot read the artifact: {e}"}
    return _coreml_build_passes_save(art, tmp)


_ONE_COMPILE = """
import json, gc, os, shutil, sys, time
tree, ir, weights, out = sys.argv[1:]
sys.path.insert(0, tree)  # before the working directory, which python -c puts first
import anec
assert anec.__file__.startswith(tree), anec.__file__
from anec.compiler import compile_module
from anec.ir.parser import parse_file
shutil.rmtree(out, ignore_errors=True)
gc.collect()
os.sync()
c0 = time.process_time()
t0 = time.perf_counter()
module = parse_file(ir)
parsed = time.perf_counter() - t0
result = compile_module(module, weights=weights, out_dir=out, timing=True)
total = time.perf_counter() - t0
cpu = time.process_time() - c0
stages = {"parse": parsed}
for _, stage, sec in result.timings:
    stages[stage] = stages.get(stage, 0.0) + sec
row = {"seconds": total, "cpu_s": cpu, "stages_s": stages}
arts = list(result.artifacts.values())
row["funcs"] = len(arts)
row["programs"] = sum(len(getattr(a, "stages", [a])) for a in arts)
if all(hasattr(a, "weight_bytes") for a in arts):
    row["blob_mib"] = round(sum(a.weight_bytes() for a in arts) / (1 << 20), 1)
print(json.dumps(row))
"""
"""One compile (IR text + safetensors -> artifact on disk, fsynced), parse included, by the anec/ in
``tree``, in a fresh process whose imports are done before the clock starts."""


def _compile_argv(tree: Path, inputs: dict, form: str, out: Path) -> list[str]:
    return ["-c", _ONE_COMPILE, str(tree), str(inputs[form]), str(inputs["weights"]), str(out)]


def _extract(rev: str, tmp: Path) -> tuple[str, Path]:
    """The anec/ of commit ``rev`` (git archive) under ``tmp``/baseline."""
    import subprocess

    full = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    tree = tmp / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", full, "anec"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return full, tree


FORMS = ("one", "per_layer")


def gpt2_body(n_rounds: int, baseline: str | None = None, tiny: bool = False) -> dict:
    """anec's compiles (one func, per-layer funcs) vs coremltools vs raw writes (and vs the same
    compiles by the code of commit ``baseline``): each a process of its own, once per round, in
    alternating order (benchmarks/harness.py); ratios are per round."""
    me = str(Path(__file__).relative_to(ROOT))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print("  writing the GPT-2 IR and safetensors ...", flush=True)
        inputs = _gpt2_inputs(tmp, tiny)
        # the compiled body, once, untimed, for coremltools to read (and the bytes to write raw)
        src = tmp / "coremltools_src"
        prep = harness.run_worker(_compile_argv(ROOT, inputs, "one", src))
        blob_mib = prep.get("blob_mib") or round(inputs["weight_mib"], 1)
        sides = {f"anec/{form}": _compile_argv(ROOT, inputs, form, tmp / f"out_{form}") for form in FORMS}
        sides["coremltools"] = [me, "--worker", "gpt2-coremltools", "--src", str(src),
                                "--tmp", str(tmp)]
        sides["raw"] = [me, "--worker", "gpt2-raw", "--mib", str(blob_mib), "--tmp", str(tmp)]
        sides["raw_fsync"] = [*sides["raw"], "--fsync"]
        envs = {}
        rev = None
        if baseline:
            rev, tree = _extract(baseline, tmp)
            for form in FORMS:
                sides[f"baseline/{form}"] = _compile_argv(tree, inputs, form, tmp / f"base_{form}")
                envs[f"baseline/{form}"] = {"PYTHONPATH": str(tree)}  # that anec/ only
        load_start = harness.load_average()
        rounds = harness.run_rounds(sides, n_rounds, envs=envs)
        load_end = harness.load_average()
    return gpt2_summary(rounds, inputs, rev, load_start, load_end)


def gpt2_summary(rounds: dict[str, list[dict]], inputs: dict, rev: str | None, load_start, load_end) -> dict:
    sp, ratio = harness.spread, harness.paired_ratio
    secs = lambda r: r["seconds"]  # noqa: E731
    ct = rounds["coremltools"]
    ct_done = harness.done([c if c and "seconds" in c else {"skipped": (c or {}).get("skipped", "-")} for c in ct])
    out: dict = {"weight_mib": round(inputs["weight_mib"], 1), "layers": inputs["layers"],
                 "d_model": inputs["d_model"], "repeat": len(rounds["raw"]), "rounds": True,
                 "loadavg_start": load_start, "loadavg_end": load_end, "anec": {},
                 "raw_write_s": sp(map(secs, rounds["raw"])), "raw_write_fsync_s": sp(map(secs, rounds["raw_fsync"]))}
    out["coremltools"] = (harness.summarize(ct_done) | {"runs_s": [round(c["seconds"], 3) for c in ct_done]}
                          if ct_done else ct[0])
    for form in FORMS:
        rs = rounds[f"anec/{form}"]
        out["anec"][form] = {
            "seconds": sp(map(secs, rs)), "funcs": rs[0]["funcs"], "programs": rs[0]["programs"],
            "blob_mib": rs[0].get("blob_mib"), "stages_s": harness.summarize([r["stages_s"] for r in rs]),
            "cpu_s": sp(r["cpu_s"] for r in rs), "all_runs_s": [round(r["seconds"], 3) for r in rs],
            "all_runs_cpu_s": [round(r["cpu_s"], 3) for r in rs],
            # coremltools' run over anec's, in each round
            "coremltools_over_anec": ratio(ct, rs, secs) if ct_done else None,
            "round_ratios": [round(c["seconds"] / a["seconds"], 2) for c, a in zip(ct, rs) if "seconds" in c],
            "over_raw_write": ratio(rs, rounds["raw"], secs),
            "over_raw_write_fsync": ratio(rs, rounds["raw_fsync"], secs)}
    if rev:
        out["baseline"] = {"rev": rev, "baseline": {}, "current": {}, "speedup": {}}
        for form in FORMS:
            for label, key in (("baseline", f"baseline/{form}"), ("current", f"anec/{form}")):
                rs = rounds[key]
                out["baseline"][label][form] = {"seconds": sp(map(secs, rs)),
                                                "stages_s": harness.summarize([r["stages_s"] for r in rs])}
            out["baseline"]["speedup"][form] = ratio(rounds[f"baseline/{form}"], rounds[f"anec/{form}"], secs)
            out["baseline"].setdefault("cpu_speedup", {})[form] = ratio(
                rounds[f"baseline/{form}"], rounds[f"anec/{form}"], lambda r: r["cpu_s"])
    out["raw"] = rounds
    return out


def _load_note(g: dict) -> str:
    """The machine's load average (1, 5, 15 min) when the GPT-2 section started and ended."""
    if not g.get("loadavg_start"):
        return ""
    fmt = lambda la: "/".join(str(x) for x in la)  # noqa: E731
    return (f" Load average (1/5/15 min, {os.cpu_count()} cpus): {fmt(g['loadavg_start'])} at the start, "
            f"{fmt(g.get('loadavg_end') or [])} at the end (the benchmark's own processes count in it).")


def gpt2_markdown(g: dict) -> list[str]:
    f = harness.fmt
    ct = g.get("coremltools") or {}
    when = f" (measured {g['date']})" if g.get("date") else ""
    small = "GPT-2-small body" if g.get("layers", 12) == 12 else "GPT-2 body (a 2-layer stand-in)"
    lines = [f"## {small}: IR + safetensors -> artifact on disk{when}", "",
             f"{g.get('layers', 12)} layers, d={g.get('d_model', 768)}, S=64, {g['weight_mib']} MiB of fp16 weights "
             f"in one .safetensors file. Each of these runs in a process of its own, once per round, in an "
             f"order that alternates between rounds ({g['repeat']} rounds), so that all meet the same machine: "
             "anec compiling each form (parse + compile_module with the output written and fsynced; imports "
             "done before the clock starts); coremltools building the same program op for op with its MIL "
             "builder (from the compiled artifact, as `anec export-coreml` does), running its default pass "
             "pipeline, then ct.convert + save of an .mlpackage (coremltools writes without fsync); a raw "
             "write of the blob bytes to one file, with and without fsync. Before every timed run the "
             "previous output is removed and the disk is synced, untimed, so that no run pays for the "
             "writeback of what an earlier one left dirty. Ratios are per round." + _load_note(g), "",
             "| form | programs | seconds | coremltools / anec | anec / raw write | anec / raw write+fsync |",
             "|---|---:|---:|---:|---:|---:|"]
    for form, r in g["anec"].items():
        name = {"one": "one func (pipeline)", "per_layer": f"{2 * g.get('layers', 12)} per-layer funcs"}[form]
        lines.append(f"| {name} | {r['programs']} | {f(r['seconds'], 3)} | "
                     f"{'x' + f(r['coremltools_over_anec'], 2) if r['coremltools_over_anec'] else '-'} | "
                     f"x{f(r['over_raw_write'])} | x{f(r['over_raw_write_fsync'])} |")
    rounds = [f"{name} {', '.join(f'x{x}' for x in r['round_ratios'])}"
              for name, r in g["anec"].items() if r.get("round_ratios")]
    if rounds:
        lines += ["", "coremltools / anec in each round (that round's coremltools run over its anec run): "
                  + "; ".join(rounds) + "."]
    cpus = [f"{name} {f(r['cpu_s'], 3)} s" for name, r in g["anec"].items() if r.get("cpu_s")]
    if cpus:
        lines += ["", f"CPU time of the compiling process (user + sys, all its threads; {os.cpu_count()} cpus): "
                  f"{'; '.join(cpus)}" + (f". coremltools: {f(ct['cpu_s'], 3)} s" if ct.get("cpu_s") else "")
                  + ". CPU time varies less than wall time on a shared machine, and shows how much of the wall "
                  "time is work rather than waiting."]
    base = g.get("baseline") or {}
    old, new = base.get("baseline") or {}, base.get("current") or {}
    if old.get("one") and new.get("one"):
        lines += ["", f"Before and after, in the same rounds (each compile a fresh process): the code of "
                  f"{base['rev']} -> this tree: " + "; ".join(
                      f"{form} {f(old[form]['seconds'], 3)} s -> {f(new[form]['seconds'], 3)} s "
                      f"(x{f(base['speedup'][form])} per round, x{f(base['cpu_speedup'][form])} in CPU seconds)"
                      for form in FORMS) + "."]
        lines += ["", "(Code that does not report `verify` as a stage counts its verification in the passes "
                  "and in what the table does not show.)", "",
                  "| fresh process | " + " | ".join(STAGES) + " |", "|---|" + "---:|" * len(STAGES)]
        for label, rows in ((base["rev"], old), ("this tree", new)):
            for form in FORMS:
                lines.append(f"| {label} {form} | "
                             + " | ".join(f(rows[form]["stages_s"].get(k, 0.0), 3) for k in STAGES) + " |")
    lines += ["", f"Raw write of {g['anec']['one']['blob_mib']} MiB: {f(g['raw_write_s'], 4)} s "
                  f"({f(g['raw_write_fsync_s'], 4)} s with fsync).", ""]
    if "seconds" in ct:
        lines += [f"coremltools {ct['version']}: build {f(ct['build_s'], 3)} s + passes {f(ct['passes_s'], 3)} s "
                  f"({ct['default_pipeline_passes']} passes of its default pipeline; "
                  f"`{ct['removed_pass']}` is left out: it fails on this fp16 program) + serialize "
                  f"{f(ct['serialize_s'], 3)} s = {f(ct['seconds'], 3)} s"
                  + (f" (its runs: {', '.join(f'{x} s' for x in ct['runs_s'])})" if ct.get("runs_s") else "")
                  + ".", ""]
    elif ct:
        lines += [ct.get("skipped", ""), ""]
    lines += ["Where anec's time goes (seconds; since the weights are hashed while they are "
              "written, `write` includes hashing them, which code before that did in `emit-mil`):", "",
              "| form | " + " | ".join(STAGES) + " |", "|---|" + "---:|" * len(STAGES)]
    for form, r in g["anec"].items():
        lines.append(f"| {form} | " + " | ".join(f(r["stages_s"].get(k, 0.0), 3) for k in STAGES) + " |")
    return lines + [""]


STAGES = ("parse", "resolve-weights", "dce", "fuse-casts", "annotate-sram", "legalize", "emit-mil",
          "verify", "write")


# ---- report ------------------------------------------------------------------------------


def by_size(series: list[dict], key: str = "nodes") -> dict:
    """One size series (``runs``, ``skipped``) from several rounds: the runs of each size
    summarized over the rounds that measured it (a size skipped for its predicted time in some
    rounds shows the rounds that ran it); a size no round ran stays skipped."""
    sizes = list(dict.fromkeys(r[key] for s in series for r in s.get("runs", [])))
    runs = []
    for n in sizes:
        rows = [r for s in series for r in s["runs"] if r[key] == n]
        runs.append({**harness.summarize(rows), "rounds": len(rows)})
    out = {"runs": runs, "skipped": [k for k in series[0].get("skipped", []) if k["nodes"] not in sizes]}
    ratios = [s["per_node_ratio"] for s in series if "per_node_ratio" in s]
    if ratios:
        out["per_node_ratio"] = harness.summarize(ratios)
    return out


def ct_speedups(anec_rounds: list[dict], ct_rounds: list[dict]) -> dict[int, dict]:
    """Per coremltools size: anec's nodes/s over coremltools' (the closest anec size, legal
    workload), per round."""
    per: dict[int, list[float]] = {}
    for a, c in zip(anec_rounds, ct_rounds):
        ours = a["compile"]["legal"]["runs"]
        for r in c.get("runs", []):
            if ours:
                mine = min(ours, key=lambda o: abs(o["nodes"] - r["nodes"]))
                per.setdefault(r["nodes"], []).append(r["seconds"] / mine["seconds"] * mine["nodes"] / r["nodes"])
    return {n: harness.spread(v) for n, v in per.items()}


def markdown(res: dict) -> list[str]:
    f = harness.fmt
    lines = harness.header(  # (a results file of an older format has no load or rounds)
        "Compile benchmark", res.get("load_start", []), res.get("load_end", []), res.get("rounds", 1),
        f"anec {res.get('anec')}, numpy {res.get('numpy')}. Each round runs, each in its own process: anec's size "
        "series and emission alone, coremltools' MIL pipeline, the BLOBFILE writers"
        + (", and the GPT-2 section's compiles, coremltools and raw writes" if res.get("gpt2") else "")
        + "; ratios between two sides are per round.",
        own_threads=os.cpu_count() or 1)  # the last section's compiles spread their weights over every core
    if res.get("gpt2"):
        lines += gpt2_markdown(res["gpt2"])
    lines += ["## anec compile_module (verify + default pipeline + emission + blobs)", ""]
    for name, series in res["compile"].items():
        lines += [f"### workload `{name}`", "",
                  "| nodes | MIL statements | seconds | nodes/s | us/node | emit-mil us/node | legalize s | verify+other s |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in series["runs"]:
            lines.append(f"| {r['nodes']} | {r['mil_statements']} | {f(r['seconds'], 3)} | {f(r['nodes_per_s'], 0)} | "
                         f"{f(r['us_per_node'], 2)} | {f(r['emit_us_per_node'], 3)} | "
                         f"{f(r['stages_s'].get('legalize', 0), 3)} | {f(r['verify_and_other_s'], 3)} |"
                         + (f" ({r['rounds']} of {res['rounds']} rounds)" if r.get("rounds", 1) < res.get("rounds", 1)
                            else ""))
        for s in series["skipped"]:
            lines.append(f"| {s['nodes']} | - | not measured: {s['reason']} | | | | | |")
        if "per_node_ratio" in series:
            p = series["per_node_ratio"]
            lines += ["", f"Per-node time {p['to']} vs {p['from']} nodes: total x{f(p['total'], 3)}, "
                          f"emit-mil x{f(p['emit_mil'], 3)} (1.0 = linear; each round's own ratio)."]
        lines.append("")
    eo = res["emit_only"]
    lines += ["## Emission alone (emit_mil + Artifact.build on the legal graph)", "",
              "| nodes | emit_mil s | Artifact.build s | us/node |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['nodes']} | {f(r['emit_s'], 4)} | {f(r['artifact_s'], 4)} | {f(r['us_per_node'], 3)} |"
              for r in eo["runs"]]
    if "per_node_ratio" in eo:
        lines += ["", f"Per-node time largest vs smallest: x{f(eo['per_node_ratio'], 3)} (1.0 = linear)."]
    lines.append("")
    cm = res["coremltools"]
    lines += ["## coremltools MIL pipeline on the `legal` graph", ""]
    if "runs" in cm:
        lines += [f"coremltools {cm['version']}: MIL builder (type inference) + `PassPipeline.DEFAULT`, in its own "
                  "process; anec's speed-up is per round (the closest anec size of the same round).", "",
                  "| nodes | seconds (build + passes) | build s | passes s | nodes/s | anec nodes/s | anec speedup |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        ours = {r["nodes"]: r for r in res["compile"]["legal"]["runs"]}
        for r in cm["runs"]:
            mine = min(ours.values(), key=lambda o: abs(o["nodes"] - r["nodes"])) if ours else None
            sp = res.get("coremltools_speedup", {}).get(str(r["nodes"]))
            lines.append(f"| {r['nodes']} | {f(r['seconds'], 3)} | {f(r['build_s'], 3)} | {f(r['passes_s'], 3)} | "
                         f"{f(r['nodes_per_s'], 0)} | {f(mine['nodes_per_s'], 0) if mine else '-'} | "
                         f"{'x' + f(sp) if sp else '-'} |")
        for s in cm["skipped"]:
            lines.append(f"| {s['nodes']} | not measured: {s['reason']} | | | | | |")
    else:
        lines.append(cm["skipped"])
    lines += ["", "## BLOBFILE write vs raw write of the same bytes (page cache, no fsync)", "",
              "In each round's process every writer runs once per repetition, in alternating order; the best "
              "repetition of each, then the median (min-max) over the rounds.", "",
              "| tensors | MiB | raw MiB/s | BlobWriter MiB/s | time vs raw | via to_bytes MiB/s | coremltools MiB/s "
              "| identical |",
              "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for c in res["blobfile"]:
        lines.append(f"| {c['tensors']} | {c['payload_mib']} | {f(c['raw_write_mib_s'])} | {f(c['blobwriter_mib_s'])} | "
                     f"x{f(c['blobwriter_over_raw_time'], 3)} | {f(c['blobwriter_to_bytes_mib_s'])} | "
                     f"{f(c['coremltools_mib_s']) if 'coremltools_mib_s' in c else '-'} | "
                     f"{c.get('identical_to_coremltools', '-')} |")
    plots = res.get("plots") or {}
    if plots.get("files"):
        lines += ["", "## Plots", ""] + [f"![{f}]({f})" for f in plots["files"]]
    elif plots.get("skipped"):
        lines += ["", "## Plots", "", plots["skipped"] + "."]
    lines += ["", "## Notes", ""] + [f"* {n}" for n in res["notes"]]
    return lines


def worker(args) -> dict:
    """One process's part of a round (see :func:`main`)."""
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else []
    if args.worker == "scaling":
        return {"compile": {"legal": scale_series(sizes, False, args.budget),
                            "rewrites": scale_series(sizes, True, args.budget)},
                "emit_only": emit_only(sizes)}
    if args.worker == "coremltools-pipeline":
        return coreml_pipeline(sizes, args.budget)
    if args.worker == "blobfile":
        return {"cases": bench_blobfile(int(args.mib), args.reps)}
    if args.worker == "gpt2-coremltools":
        return worker_gpt2_coremltools(args.src, args.tmp)
    return worker_raw_write(args.mib, args.tmp / "raw.bin", args.fsync)


BASELINE = "8908afe"
"""The commit before the weight-path work that the before/after row of compile.md is measured against."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes and a 2-layer GPT-2 body, 2 rounds (a smoke run)")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds allowed per measurement: a size predicted to take longer is skipped and recorded "
                         "(coremltools' pipeline at 100k nodes takes 9-11 min a round on 2 cores: --budget 900)")
    ap.add_argument("--only", choices=["gpt2"], help="re-measure one section, keep the others' last results")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every process (each side once per round)")
    ap.add_argument("--repeat", type=int, dest="rounds", help=argparse.SUPPRESS)  # the former name
    ap.add_argument("--baseline", metavar="REV",
                    help=f"also compile the GPT-2 body with this commit's anec/ (default {BASELINE}, the commit "
                         "the results file's before/after row names; '' to skip; --quick skips it unless given)")
    ap.add_argument("--worker", choices=["scaling", "coremltools-pipeline", "blobfile", "gpt2-coremltools",
                                         "gpt2-raw"], help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    ap.add_argument("--mib", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--src", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--tmp", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--fsync", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.baseline is None:
        args.baseline = "" if args.quick else BASELINE
    if args.quick:
        args.rounds = min(args.rounds, 2)
    sizes = [300, 1000, 3000] if args.quick else [1000, 10000, 100000]
    if args.only == "gpt2":
        res = json.loads((harness.RESULTS / "compile.json").read_text())
        print("GPT-2-small body", flush=True)
        res["gpt2"] = gpt2_body(args.rounds, args.baseline, args.quick)
        res["gpt2"]["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
        _write_results(res)
        return 0
    me = str(Path(__file__).relative_to(ROOT))
    load_start = harness.load_average()
    res = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), **harness.machine(),
        "numpy": np.__version__, "anec": __version__, "sizes": sizes, "budget_s": args.budget,
        "rounds": args.rounds, "load_start": load_start,
    }
    size_arg = ["--sizes", ",".join(map(str, sizes)), "--budget", str(args.budget)]
    mib, repeat = (8, 3) if args.quick else (64, 5)
    print("compile scaling, emission alone, coremltools' pipeline, BLOBFILE writers", flush=True)
    rounds = harness.run_rounds({"scaling": [me, "--worker", "scaling", *size_arg],
                                 "coremltools": [me, "--worker", "coremltools-pipeline", *size_arg],
                                 "blobfile": [me, "--worker", "blobfile", "--mib", str(mib), "--reps", str(repeat)]},
                                args.rounds)
    res["compile"] = {w: by_size([r["compile"][w] for r in rounds["scaling"]]) for w in ("legal", "rewrites")}
    res["emit_only"] = by_size([r["emit_only"] for r in rounds["scaling"]])
    ct = rounds["coremltools"]
    res["coremltools"] = ({**by_size(ct), "version": ct[0]["version"]} if "runs" in ct[0] else ct[0])
    res["coremltools_speedup"] = {str(n): v for n, v in ct_speedups(rounds["scaling"], ct).items()}
    res["blobfile"] = harness.summarize([r["cases"] for r in rounds["blobfile"]])
    print("GPT-2-small body", flush=True)
    res["gpt2"] = gpt2_body(args.rounds, args.baseline, args.quick)
    res["load_end"] = harness.load_average()
    res["notes"] = [
        "nodes = IR nodes of the input graph (consts included); legalize adds nodes in `rewrites`.",
        "seconds is the wall time of compile_module: the verifier runs before the pipeline and after every "
        "pass (verify+other), plus resolving the 5 random weight tensors and writing the blobs in memory.",
        "coremltools counts the same blocks (11 IR nodes each); its builder creates more MIL ops per block "
        "(reshape shapes and scalars become const ops). Its default pipeline also does more work "
        "(about 95 passes) than anec's five, so the comparison is of whole front-ends, not of equal work.",
        "Skipped sizes were not run: their predicted time is an extrapolation, not a measurement.",
    ]
    res["raw"] = rounds
    _write_results(res)
    return 0


def _write_results(res: dict) -> None:
    res["plots"] = write_plots(res)
    harness.write_results("compile", res, markdown(res))
    print(f"wrote {harness.RESULTS / 'compile.json'} and {harness.RESULTS / 'compile.md'}")


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
        write_bytes_atomic(harness.RESULTS / name, buf.getvalue())

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, series in res["compile"].items():
        runs = series["runs"]
        ax.plot([r["nodes"] for r in runs], [harness.median(r["seconds"]) for r in runs], "o-",
                label=f"anec compile ({name} workload)")
    cm = res.get("coremltools", {})
    if cm.get("runs"):
        ax.plot([r["nodes"] for r in cm["runs"]], [harness.median(r["seconds"]) for r in cm["runs"]], "s--",
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
            labels.append({"one": "anec\none func", "per_layer": f"anec\n{2 * g.get('layers', 12)} funcs"}[form])
            values.append(harness.median(r["seconds"]))
        if (g.get("coremltools") or {}).get("seconds"):
            labels.append("coremltools\nbuild+passes+save")
            values.append(harness.median(g["coremltools"]["seconds"]))
        labels += ["raw write", "raw write\n+ fsync"]
        values += [harness.median(g["raw_write_s"]), harness.median(g["raw_write_fsync_s"])]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        bars = ax.bar(labels, values, color=["#1f77b4", "#1f77b4", "#ff7f0e", "#7f7f7f", "#7f7f7f"][:len(values)])
        ax.bar_label(bars, fmt="%.2f s", fontsize=8)
        ax.set_ylabel("seconds")
        ax.set_title(f"GPT-2 body ({g['weight_mib']} MiB fp16): IR + safetensors -> disk (median)")
        ax.tick_params(axis="x", labelsize=8)
        fig.tight_layout()
        save(fig, PLOTS[1])
        written.append(PLOTS[1])
    return {"files": written}


if __name__ == "__main__":
    sys.exit(main())
