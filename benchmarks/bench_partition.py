"""Partitioning: planning time, and GPT-2 small as whole funcs vs the per-layer program set.

Four measurements, each variant in a fresh subprocess:

1. *Planning*: :func:`anec.passes.partition.plan_partition` alone on
   generated graphs of 1k..64k nodes: a chain (``conv1x1`` + ``relu`` blocks,
   one weight each, so the BLOBFILE budget cuts every ~16 blocks) and a
   U-Net (skips from layer i to layer n - i, values that cross many stages).
   Per-node time (best of 5, garbage collector off, CPU and wall) and its
   growth from the smallest to the largest size (1.0 = linear).
2. *Compile*: GPT-2 small (12 layers, d=768, random weights) for one
   generation: prefill S=64, decode W=16 against a 64-position KV cache, and
   the LM head. ``whole``: one func per bucket, cut by the compiler into
   pipelines; ``split``: the per-layer funcs of earlier versions (attention
   and MLP of every layer, 49 funcs). Wall time of ``compile_module`` (all
   passes, MIL, BLOBFILEs; weights already in memory) and of ``rt.load`` on
   the sim; programs; the runtime's compiles; bytes passed between programs
   in one step (whole: stage edges inside the pipeline call; split: the
   hidden state the host copies out of one program and into the next).
3. *Decode*: sim seconds per generated token (one decode step of the stack
   plus the LM head, host KV-cache writes included), median of timed steps
   after a warm-up; the logits of both variants are compared.
4. *LM head*: the decode func with the final norm + LM head joined (one
   pipeline per step) vs the body and a separate head func: programs,
   surface size, surface memory, load time, seconds per token; and the same
   structure numbers for a joined prefill (S=64) from a plan-only compile.

Usage (writes benchmarks/results/partition.json and partition.md)::

    PYTHONPATH=. python benchmarks/bench_partition.py [--sizes 1000,...,64000] [--tokens 8]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

S, W, T = 64, 16, 64  # prefill bucket, decode width, KV cache bucket
LOADS = 3  # rt.load of every artifact, best of
PLAN_REPEATS = 5  # plan_partition, best of
TIMES = ("compile_module_s", "compile_module_cpu_s", "load_s", "load_cpu_s", "s_per_token", "cpu_s_per_token")


# ---- 1. planning ------------------------------------------------------------------------


def chain(n_nodes: int):
    from anec.ir.builder import Builder

    b = Builder("chain")
    cur = b.input("x", "fp16", [1, 32, 1, 64])
    for i in range(n_nodes // 2):
        w = b.const_weight(f"w{i}", "fp16[32, 32, 1, 1]", name=f"w{i}")
        cur = b.relu(b.conv1x1(cur, w, name=f"c{i}"), name=f"r{i}")
    b.ret(cur)
    return b.graph


def unet(n_nodes: int):
    """Layers of conv + relu; in the second half each layer adds the output of its mirror."""
    from anec.ir.builder import Builder

    b = Builder("unet")
    cur = b.input("x", "fp16", [1, 32, 1, 64])
    layers = (2 * n_nodes) // 5  # 2 nodes per layer, 3 in the second half
    outs = []
    for i in range(layers):
        w = b.const_weight(f"w{i}", "fp16[32, 32, 1, 1]", name=f"w{i}")
        cur = b.relu(b.conv1x1(cur, w, name=f"c{i}"), name=f"r{i}")
        if i >= layers // 2:
            cur = b.add(cur, outs[layers - 1 - i], name=f"s{i}")
        outs.append(cur)
    b.ret(cur)
    return b.graph


def measure_plan(kind: str, n: int) -> dict:
    from anec.passes.partition import plan_partition
    from anec.targets import get_target

    graph = (chain if kind == "chain" else unet)(n)
    target = get_target("m4")
    items = sum(1 for x in graph.nodes if x.op != "const")
    times, cpu = [], []
    for _ in range(PLAN_REPEATS):
        gc.collect()
        gc.disable()  # as timeit does: a collection of the whole graph is not planning work
        t0, c0 = time.perf_counter(), time.process_time()
        plan = plan_partition(graph, target)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        gc.enable()
    return {"kind": kind, "nodes": items, "plan_s": min(times), "plan_cpu_s": min(cpu), "stages": len(plan.stages),
            "crossing_bytes": plan.crossing_bytes}


# ---- 2-4. GPT-2 small ----------------------------------------------------------------------


def _frontend(tmp: Path):
    from anec.models.generate import decoder_frontend
    from tests.models.synthetic import GPT2_SMALL, shape_checkpoint

    return decoder_frontend(shape_checkpoint(tmp / "gpt2-small", GPT2_SMALL, ["transformer.wte.weight"]), 49152)


def _joined_head(fe, g):
    """``g`` (a bucket func) with the final norm + LM head on its hidden state, returning logits."""
    from anec.models.blocks import ModelBuilder

    b = ModelBuilder(g)
    h16 = g.outputs[0].producer.operands[0]  # the fp16 residual stream before the fp32 cast of h
    n = fe._norm(b, h16, fe._final_norm_keys(), "lnf")
    logits = b.linear(n, fe._lm_head_key(), fe.cfg.vocab, None, "head")
    b.ret(b.cast(logits, dtype="fp32", name="logits"), *g.outputs[1:])
    g.name += "_head"
    return g


def _funcs(fe, variant: str):
    if variant == "whole":
        return [fe.prefill(S), fe.decode(W, T), fe.lm_head(W)]
    if variant == "joined":
        return [_joined_head(fe, fe.decode(W, T))]
    n = fe.cfg.n_layer
    return ([fe.attn(i, S) for i in range(n)] + [fe.mlp(i, S) for i in range(n)]
            + [fe.attn(i, W, T) for i in range(n)] + [fe.mlp(i, W) for i in range(n)] + [fe.lm_head(W)])


def _edge_bytes(art) -> int:
    """Bytes passed between the stages of a pipeline in one call."""
    stages = getattr(art, "stages", None)
    if stages is None:
        return 0
    total = 0
    for k, e in enumerate(art.manifest["stages"]):
        sizes = {i["name"]: i["bytes"] for i in stages[k].manifest["inputs"]}
        total += sum(sizes[i["name"]] for i in e["inputs"] if "stage" in i["from"])
    return total


def _surface_memory(art) -> int:
    m = art.manifest
    if "stages" not in m:
        return int(m["input_alloc_bytes"]) * len(m["inputs"]) + int(m["output_alloc_bytes"]) * len(m["outputs"])
    return int(m["surface_bytes"]) * sum(len(e["inputs"]) + len(e["outputs"]) for e in m["stages"])


def measure_gpt2(variant: str, tokens: int, out_npz: str) -> dict:
    from anec.compiler import compile_module
    from anec.ir.builder import Builder
    from anec.models.layout import MASK_NEG
    from anec.runtime import Runtime, native
    from anec.weights import WeightStore
    from tests.models.synthetic import random_weights

    with tempfile.TemporaryDirectory(prefix="anec-bench-") as tmp:
        fe = _frontend(Path(tmp))
        graphs = _funcs(fe, variant)
        if variant == "joined":
            graphs.append(fe.lm_head(W))  # only for the weights: the same tensors as the other variants
        store = WeightStore(random_weights(fe, graphs))
        if variant == "joined":
            graphs.pop()
        t0, c0 = time.perf_counter(), time.process_time()
        res = compile_module(Builder.module(*graphs), weights=store, target="m4")
        compile_s, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
        arts = res.artifacts
        n_layer = fe.cfg.n_layer
        row: dict = {"variant": variant, "funcs": len(arts), "compile_module_s": compile_s,
                     "compile_module_cpu_s": compile_cpu,
                     "programs": sum(len(getattr(a, "stages", [a])) for a in arts.values()),
                     "distinct_mil": len({s.manifest["mil"]["sha256"] for a in arts.values()
                                          for s in getattr(a, "stages", [a])})}
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, fe.cfg.d_model, 1, W)).astype(np.float32)
        kc = [rng.standard_normal((1, fe.cfg.n_kv_head, T, fe.cfg.head_dim)).astype(np.float16) for _ in range(n_layer)]
        vc = [rng.standard_normal((1, fe.cfg.n_kv_head, T, fe.cfg.head_dim)).astype(np.float16) for _ in range(n_layer)]
        pos = T // 2
        mask = np.full((1, 1, W, T), MASK_NEG, np.float16)
        mask[..., :pos] = 0
        loads = []
        for _ in range(LOADS):  # each in a fresh runtime, the process compile budget reset as in a new process
            native.reset_process_budget("sim")
            with Runtime(backend="sim") as rt:
                t0, c0 = time.perf_counter(), time.process_time()
                for a in arts.values():
                    rt.load(a)
                loads.append((time.perf_counter() - t0, time.process_time() - c0))
        row["load_s"], row["load_cpu_s"] = min(w for w, _ in loads), min(c for _, c in loads)
        native.reset_process_budget("sim")
        with Runtime(backend="sim") as rt:
            progs = {name: rt.load(a) for name, a in arts.items()}
            row["runtime_compiles"] = rt.stats["compiles"]
            if variant == "whole":
                dec, head = progs[fe.decode_name(W, T)], progs[fe.lm_head_name(W)]
                caches = {f"L{i}_{kv}c": a[i] for i in range(n_layer) for kv, a in (("k", kc), ("v", vc))}

                def step():
                    o = dec(x=x, mask=mask, **caches)
                    for i in range(n_layer):
                        kc[i][:, :, pos] = o[f"L{i}_k"][:, :, 0]
                        vc[i][:, :, pos] = o[f"L{i}_v"][:, :, 0]
                    return head(x=o["h"])["logits"]
            elif variant == "joined":
                dec = progs[fe.decode_name(W, T) + "_head"]
                caches = {f"L{i}_{kv}c": a[i] for i in range(n_layer) for kv, a in (("k", kc), ("v", vc))}

                def step():
                    o = dec(x=x, mask=mask, **caches)
                    for i in range(n_layer):
                        kc[i][:, :, pos] = o[f"L{i}_k"][:, :, 0]
                        vc[i][:, :, pos] = o[f"L{i}_v"][:, :, 0]
                    return o["logits"]
            else:
                head = progs[fe.lm_head_name(W)]

                def step():
                    h = x
                    for i in range(n_layer):
                        o = progs[fe.attn_name(i, W, T)](x=h, kc=kc[i], vc=vc[i], mask=mask)
                        kc[i][:, :, pos] = o["k"][:, :, 0]
                        vc[i][:, :, pos] = o["v"][:, :, 0]
                        h = progs[fe.mlp_name(i, W)](x=o["h"])["h"]
                    return head(x=h)["logits"]
            # the cache rows written by a step are not read by the next one (mask), so
            # every step computes the same logits
            logits = step()
            times, cpu = [], []
            for _ in range(tokens):
                t0, c0 = time.perf_counter(), time.process_time()
                step()
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            row["s_per_token"], row["cpu_s_per_token"] = statistics.median(times), min(cpu)
            np.savez(out_npz, logits=logits[:, :, :, :1])
        if variant == "whole":
            row["crossing_bytes_per_step"] = {"prefill": _edge_bytes(arts[fe.prefill_name(S)]),
                                              "decode": _edge_bytes(arts[fe.decode_name(W, T)])}
        elif variant == "split":
            c = fe.cfg.d_model * 4  # fp32 hidden state per position, out of one program and into the next
            row["crossing_bytes_per_step"] = {"prefill": (2 * n_layer - 1) * c * S, "decode": (2 * n_layer - 1) * c * W}
        row["surface"] = {name: {"programs": len(getattr(a, "stages", [a])),
                                 "surface_bytes": int(a.manifest.get("surface_bytes")
                                                      or max(a.manifest["input_alloc_bytes"],
                                                             a.manifest["output_alloc_bytes"])),
                                 "surface_memory": _surface_memory(a)}
                          for name, a in arts.items() if not name.startswith("L")}
        if variant == "joined":  # the prefill bucket with the head: structure only
            g = _joined_head(fe, fe.prefill(S))
            a = compile_module(Builder.module(g), with_weights=False).artifacts[g.name]
            row["surface"][g.name] = {"programs": len(a.stages), "surface_bytes": int(a.manifest["surface_bytes"]),
                                      "surface_memory": _surface_memory(a)}
            g = fe.prefill(S)
            a = compile_module(Builder.module(g), with_weights=False).artifacts[g.name]
            row["surface"][g.name] = {"programs": len(a.stages), "surface_bytes": int(a.manifest["surface_bytes"]),
                                      "surface_memory": _surface_memory(a)}
    return row


# ---- driver -------------------------------------------------------------------------------


def _sub(args: list[str], budget: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, "--one", *args], env=env, capture_output=True, text=True,
                          timeout=budget)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _growth(rows: list[dict], key: str = "plan_cpu_s") -> float:
    a, b = rows[0], rows[-1]
    return (b[key] / b["nodes"]) / (a[key] / a["nodes"])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,2000,4000,8000,16000,32000,64000")
    ap.add_argument("--tokens", type=int, default=16, help="timed decode steps per variant")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each GPT-2 variant (best of)")
    ap.add_argument("--budget", type=float, default=1800.0, help="seconds per subprocess")
    args = ap.parse_args(argv)
    if args.one:
        what = args.one[0]
        if what == "plan":
            print(json.dumps(measure_plan(args.one[1], int(args.one[2]))))
        else:
            print(json.dumps(measure_gpt2(args.one[1], int(args.one[2]), args.one[3])))
        return 0

    sizes = [int(s) for s in args.sizes.split(",")]
    plans: dict[str, list[dict]] = {}
    for kind in ("chain", "unet"):
        plans[kind] = []
        for n in sizes:
            row = _sub(["plan", kind, str(n)], args.budget)
            plans[kind].append(row)
            print(f"  plan {kind} {row['nodes']}: {row['plan_s'] * 1e3:.1f} ms, {row['stages']} stages", flush=True)
    gpt2: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="anec-bench-") as tmp:
        for _ in range(args.rounds):  # variants interleaved, so a busy spell of the machine hits all of them
            for variant in ("whole", "split", "joined"):
                npz = str(Path(tmp) / f"{variant}.npz")
                r = _sub(["gpt2", variant, str(args.tokens), npz], args.budget)
                r["_logits"] = np.load(npz)["logits"]
                print(f"  gpt2 {variant}: {r['programs']} programs, compile {_t(r, 'compile_module')} s, "
                      f"load {_t(r, 'load')} s, {_t(r, 'token')} s/token", flush=True)
                best = gpt2.setdefault(variant, r)
                for key in TIMES:
                    best[key] = min(best[key], r[key])
    ref = gpt2["whole"].pop("_logits")
    for variant in ("split", "joined"):
        got = gpt2[variant].pop("_logits")
        gpt2[variant]["logits_max_abs_diff_vs_whole"] = float(np.abs(got - ref).max())

    result = {
        "benchmark": "partition", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}, "
                   f"load average {os.getloadavg()[0]:.1f} at start",
        "plan": {k: {"rows": v, "growth_per_node": _growth(v), "growth_per_node_wall": _growth(v, "plan_s")}
                 for k, v in plans.items()},
        "rounds": args.rounds,
        "gpt2_small": {"buckets": {"prefill": S, "decode_width": W, "kv_cache": T}, **gpt2},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    _write(RESULTS / "partition.json", json.dumps(result, indent=2) + "\n")
    _write(RESULTS / "partition.md", to_md(result))
    print(f"wrote {RESULTS / 'partition.md'}")
    return 0


def _t(row: dict, what: str) -> str:
    if what == "token":
        return f"{row['s_per_token']:.3f} ({row['cpu_s_per_token']:.3f})"
    return f"{row[what + '_s']:.2f} ({row[what + '_cpu_s']:.2f})"


def _mb(n: float) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def to_md(r: dict) -> str:
    md = [f"# Partitioning benchmark ({r['date']})", "", f"Machine: {r['machine']}.", "",
          "## Planning time (`plan_partition`, m4 budgets)", "",
          f"Best of {PLAN_REPEATS} per size with the garbage collector off during the call (as timeit), each "
          "size in a fresh process. Chain: `conv1x1` + `relu` blocks with one weight each; U-Net: the same "
          "layers with skips from layer i to layer n - i.", ""]
    for kind, p in r["plan"].items():
        md += [f"### {kind}", "", "| nodes | plan ms (wall) | plan ms (CPU) | CPU us/node | stages | crossing bytes |",
               "|---:|---:|---:|---:|---:|---:|"]
        for row in p["rows"]:
            md.append(f"| {row['nodes']} | {row['plan_s'] * 1e3:.1f} | {row['plan_cpu_s'] * 1e3:.1f} | "
                      f"{1e6 * row['plan_cpu_s'] / row['nodes']:.2f} | {row['stages']} | {row['crossing_bytes']} |")
        md += ["", f"Per-node CPU time x{p['growth_per_node']:.2f} from {p['rows'][0]['nodes']} to "
               f"{p['rows'][-1]['nodes']} nodes, x{p['growth_per_node_wall']:.2f} in wall time (1.0 = linear).", ""]
    g = r["gpt2_small"]
    b = g["buckets"]
    w, s = g["whole"], g["split"]
    md += [
        f"## GPT-2 small (12 layers, d=768, random weights): prefill S={b['prefill']}, decode W={b['decode_width']} "
        f"with a {b['kv_cache']}-position KV cache, LM head", "",
        "`whole`: one func per bucket, partitioned by the compiler; `split`: one func per layer half "
        f"(the hand split of earlier versions). Each variant in a fresh process, {r['rounds']} rounds "
        "interleaved, the best of each time.", "",
        f"Times are wall seconds and, in parentheses, CPU seconds of the process (the machine is shared: "
        f"the CPU time is the load-independent number). rt.load: best of {LOADS} fresh runtimes; per token: "
        "median wall, least CPU over the timed steps.", "",
        "| measure | whole | split |", "|---|---:|---:|",
        f"| funcs | {w['funcs']} | {s['funcs']} |",
        f"| ANE programs | {w['programs']} | {s['programs']} |",
        f"| distinct MIL texts | {w['distinct_mil']} | {s['distinct_mil']} |",
        f"| compile_module s (passes, MIL, BLOBFILEs) | {_t(w, 'compile_module')} | {_t(s, 'compile_module')} |",
        f"| rt.load s (sim, all programs) | {_t(w, 'load')} | {_t(s, 'load')} |",
        f"| runtime compiles | {w['runtime_compiles']} | {s['runtime_compiles']} |",
        f"| bytes between programs, prefill call | {w['crossing_bytes_per_step']['prefill']} | "
        f"{s['crossing_bytes_per_step']['prefill']} |",
        f"| bytes between programs, decode step | {w['crossing_bytes_per_step']['decode']} | "
        f"{s['crossing_bytes_per_step']['decode']} |",
        f"| program calls per decode step (+ head) | 1 + 1 | {2 * 12} + 1 |",
        f"| sim s per generated token | {_t(w, 'token')} | {_t(s, 'token')} |",
        "", f"Logits of one decode step, split vs whole: max abs difference "
        f"{s['logits_max_abs_diff_vs_whole']:g}.", "",
        "Whole: bytes between programs are the fp16 values crossing stage cuts inside one pipeline call "
        "(zero-copy surfaces); split: the fp32 hidden state the host copies out of one program and into "
        "the next.", ""]
    j = g["joined"]
    rows = {**w["surface"], **j["surface"]}
    md += ["## LM head: its own func vs joined to the bucket func", "",
           "| func | programs | surface bytes (every surface of the pipeline) | surface memory |",
           "|---|---:|---:|---:|"]
    for name, e in rows.items():
        md.append(f"| `{name}` | {e['programs']} | {e['surface_bytes']} | {_mb(e['surface_memory'])} |")
    rows_sep = [n for n in w["surface"] if n.startswith(("decode", "lm_head"))]
    md += ["", "| decode step | separate head (2 calls) | joined (1 call) |", "|---|---:|---:|",
           f"| programs | {w['surface'][rows_sep[0]]['programs']} + 1 | {j['programs']} |",
           f"| surface memory | {_mb(sum(w['surface'][n]['surface_memory'] for n in rows_sep))} | "
           f"{_mb(j['surface'][next(iter(j['surface']))]['surface_memory'])} |",
           f"| sim s per token | {_t(w, 'token')} | {_t(j, 'token')} |",
           f"| logits max abs difference vs separate | 0 | {j['logits_max_abs_diff_vs_whole']:g} |", ""]
    return "\n".join(md)


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".bench-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
