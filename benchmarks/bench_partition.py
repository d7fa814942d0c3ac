"""Partitioning: planning time, and GPT-2 small as whole funcs vs the per-layer program set.

Four measurements, each variant in a fresh subprocess, once per round; the
order of the processes alternates between rounds and every figure is the
median (min-max) over the rounds (benchmarks/harness.py):

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

    PYTHONPATH=. python benchmarks/bench_partition.py [--sizes 1000,...,64000] [--tokens 16] [--rounds 3]
    PYTHONPATH=. python benchmarks/bench_partition.py --quick   # small sizes, a 2-layer GPT-2: a smoke run
"""

from __future__ import annotations

import argparse
import gc
import json
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

S, W, T = 64, 16, 64  # prefill bucket, decode width, KV cache bucket
LOADS = 3  # rt.load of every artifact, best of
PLAN_REPEATS = 5  # plan_partition, best of
TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 2, "vocab_size": 1000, "n_positions": 128}
"""The GPT-2 of ``--quick`` (a smoke run of the same code)."""


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
    from anec.passes.partition_search import plan_partition
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


def _frontend(tmp: Path, tiny: bool = False):
    from anec.models.generate import decoder_frontend
    from tests.models.synthetic import GPT2_SMALL, shape_checkpoint

    return decoder_frontend(shape_checkpoint(tmp / "gpt2", TINY if tiny else GPT2_SMALL,
                                             ["transformer.wte.weight"]), 49152)


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
    for k, e in enumerate(art.manifest.document["stages"]):
        sizes = {i["name"]: i["bytes"] for i in stages[k].manifest.document["inputs"]}
        total += sum(sizes[i["name"]] for i in e["inputs"] if "stage" in i["from"])
    return total


def _surface_memory(art) -> int:
    m = art.manifest.document
    if "stages" not in m:
        return int(m["input_alloc_bytes"]) * len(m["inputs"]) + int(m["output_alloc_bytes"]) * len(m["outputs"])
    return sum(int(e.get("surface_bytes", m["surface_bytes"])) * (len(e["inputs"]) + len(e["outputs"]))
               for e in m["stages"])  # each stage's own size


def _head_logits(out: dict) -> np.ndarray:
    """The LM head's chunk outputs (``logits_c0``, ... in vocabulary order) as one fp32 array."""
    return np.concatenate(list(out.values()), axis=1).astype(np.float32)


def measure_gpt2(variant: str, tokens: int, out_npz: str, tiny: bool = False) -> dict:
    from anec.compiler import compile_module
    from anec.ir.builder import Builder
    from anec.models.layout import MASK_NEG, step_mask
    from anec.runtime import Runtime, native
    from anec.weight_store import WeightStore
    from tests.models.synthetic import random_weights

    with tempfile.TemporaryDirectory(prefix="anec-bench-") as tmp:
        fe = _frontend(Path(tmp), tiny)
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
                     "distinct_mil": len({s.manifest.document["mil"]["sha256"] for a in arts.values()
                                          for s in getattr(a, "stages", [a])})}
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, fe.cfg.d_model, 1, W)).astype(np.float32)
        kc = [rng.standard_normal((1, fe.cfg.n_kv_head, T, fe.cfg.head_dim)).astype(np.float16) for _ in range(n_layer)]
        vc = [rng.standard_normal((1, fe.cfg.n_kv_head, T, fe.cfg.head_dim)).astype(np.float16) for _ in range(n_layer)]
        pos = T // 2
        mask = np.full((1, 1, W, T), MASK_NEG, np.float16)
        mask[..., :pos] = 0
        new = {"mask_new": step_mask(W)}  # a one-token step's new-block mask (column 0 is the token)

        def fed(prog):
            return {k: v for k, v in new.items() if k in prog.input_names}
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
                    o = dec(x=x, mask=mask, **fed(dec), **caches)
                    for i in range(n_layer):
                        kc[i][:, :, pos] = o[f"L{i}_k"][:, :, 0]
                        vc[i][:, :, pos] = o[f"L{i}_v"][:, :, 0]
                    return _head_logits(head(x=o["h"]))
            elif variant == "joined":
                dec = progs[fe.decode_name(W, T) + "_head"]
                caches = {f"L{i}_{kv}c": a[i] for i in range(n_layer) for kv, a in (("k", kc), ("v", vc))}

                def step():
                    o = dec(x=x, mask=mask, **fed(dec), **caches)
                    for i in range(n_layer):
                        kc[i][:, :, pos] = o[f"L{i}_k"][:, :, 0]
                        vc[i][:, :, pos] = o[f"L{i}_v"][:, :, 0]
                    return o["logits"]
            else:
                head = progs[fe.lm_head_name(W)]

                def step():
                    h = x
                    for i in range(n_layer):
                        attn = progs[fe.attn_name(i, W, T)]
                        o = attn(x=h, kc=kc[i], vc=vc[i], mask=mask, **fed(attn))
                        kc[i][:, :, pos] = o["k"][:, :, 0]
                        vc[i][:, :, pos] = o["v"][:, :, 0]
                        h = progs[fe.mlp_name(i, W)](x=o["h"])["h"]
                    return _head_logits(head(x=h))
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
                                 "surface_bytes": int(a.manifest.document.get("surface_bytes")
                                                      or max(a.manifest.document["input_alloc_bytes"],
                                                             a.manifest.document["output_alloc_bytes"])),
                                 "surface_memory": _surface_memory(a)}
                          for name, a in arts.items() if not name.startswith("L")}
        if variant == "joined":  # the prefill bucket with the head: structure only
            g = _joined_head(fe, fe.prefill(S))
            a = compile_module(Builder.module(g), with_weights=False).artifacts[g.name]
            row["surface"][g.name] = {"programs": len(a.stages), "surface_bytes": int(a.manifest.document["surface_bytes"]),
                                      "surface_memory": _surface_memory(a)}
            g = fe.prefill(S)
            a = compile_module(Builder.module(g), with_weights=False).artifacts[g.name]
            row["surface"][g.name] = {"programs": len(a.stages), "surface_bytes": int(a.manifest.document["surface_bytes"]),
                                      "surface_memory": _surface_memory(a)}
    return row


# ---- driver -------------------------------------------------------------------------------


def _growth(rounds: list[list[dict]], key: str = "plan_cpu_s") -> dict | None:
    """Per-node time of the largest size over the smallest, per round."""
    return harness.paired_ratio(rounds[-1], rounds[0], lambda r: r[key] / r["nodes"])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,2000,4000,8000,16000,32000,64000")
    ap.add_argument("--tokens", type=int, default=16, help="timed decode steps per variant")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every process")
    ap.add_argument("--budget", type=float, default=1800.0, help="seconds per subprocess")
    ap.add_argument("--quick", action="store_true",
                    help="sizes 1000 and 2000, a 2-layer d=128 GPT-2, 2 tokens, 2 rounds: a smoke run")
    args = ap.parse_args(argv)
    if args.one:
        what = args.one[0]
        if what == "plan":
            print(json.dumps(measure_plan(args.one[1], int(args.one[2]))))
        else:
            print(json.dumps(measure_gpt2(args.one[1], int(args.one[2]), args.one[3], args.one[4:] == ["tiny"])))
        return 0
    if args.quick:
        args.sizes, args.tokens, args.rounds = "1000,2000", 2, min(args.rounds, 2)

    sizes = [int(s) for s in args.sizes.split(",")]
    me = str(Path(__file__).relative_to(ROOT))
    load_start = harness.load_average()
    with tempfile.TemporaryDirectory(prefix="anec-bench-") as tmp:
        sides = {f"plan/{kind}/{n}": [me, "--one", "plan", kind, str(n)] for kind in ("chain", "unet") for n in sizes}
        variants = ("whole", "split", "joined")
        npz = {v: str(Path(tmp) / f"{v}.npz") for v in variants}
        sides |= {f"gpt2/{v}": [me, "--one", "gpt2", v, str(args.tokens), npz[v], *(["tiny"] if args.quick else [])]
                  for v in variants}
        rounds = harness.run_rounds(sides, args.rounds, timeout=args.budget)
        for name, rs in rounds.items():
            if not harness.done(rs):
                raise SystemExit(f"{name}: {rs[-1]['skipped']}")
        logits = {v: np.load(npz[v])["logits"] for v in variants}  # the same in every round
    load_end = harness.load_average()
    plans = {kind: {"rows": [harness.summarize(rounds[f"plan/{kind}/{n}"]) for n in sizes],
                    "growth_per_node": _growth([rounds[f"plan/{kind}/{n}"] for n in sizes]),
                    "growth_per_node_wall": _growth([rounds[f"plan/{kind}/{n}"] for n in sizes], "plan_s")}
             for kind in ("chain", "unet")}
    gpt2 = {v: harness.summarize(rounds[f"gpt2/{v}"]) for v in variants}
    for v in ("split", "joined"):
        gpt2[v]["logits_max_abs_diff_vs_whole"] = float(np.abs(logits[v] - logits["whole"]).max())
        for key in ("s_per_token", "cpu_s_per_token"):  # per round: both met the same machine
            gpt2[v][f"{key}_over_whole"] = harness.paired_ratio(rounds[f"gpt2/{v}"], rounds["gpt2/whole"],
                                                                 lambda r, k=key: r[k])
    result = {
        "benchmark": "partition", "date": time.strftime("%Y-%m-%d %H:%M:%S"), **harness.machine(),
        "load_start": load_start, "load_end": load_end, "rounds": args.rounds,
        "plan": plans, "model": "2-layer d=128 GPT-2 (--quick)" if args.quick else "GPT-2 small",
        "gpt2_small": {"buckets": {"prefill": S, "decode_width": W, "kv_cache": T}, **gpt2},
        "raw": rounds,
    }
    harness.write_results("partition", result, to_md(result))
    print(f"wrote {harness.RESULTS / 'partition.md'}")
    return 0


def _t(row: dict, what: str) -> str:
    f = harness.fmt
    if what == "token":
        return f"{f(row['s_per_token'], 3)}; CPU {f(row['cpu_s_per_token'], 3)}"
    return f"{f(row[what + '_s'], 2)}; CPU {f(row[what + '_cpu_s'], 2)}"


def _mb(n: float) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def to_md(r: dict) -> list[str]:
    f = harness.fmt
    md = harness.header("Partitioning benchmark", r["load_start"], r["load_end"], r["rounds"],
                        "Every planning size and every GPT-2 variant runs in its own process once per round.")
    md += ["## Planning time (`plan_partition`, m4 budgets)", "",
          f"Each process: best of {PLAN_REPEATS} calls with the garbage collector off during the call (as "
          "timeit); the table shows that figure's median (min-max) over the rounds. Chain: `conv1x1` + `relu` blocks with one weight each; U-Net: the same "
          "layers with skips from layer i to layer n - i.", ""]
    for kind, p in r["plan"].items():
        md += [f"### {kind}", "", "| nodes | plan ms (wall) | plan ms (CPU) | CPU us/node | stages | crossing bytes |",
               "|---:|---:|---:|---:|---:|---:|"]
        for row in p["rows"]:
            md.append(f"| {row['nodes']} | {f(harness.scale(row['plan_s'], 1e3))} | "
                      f"{f(harness.scale(row['plan_cpu_s'], 1e3))} | "
                      f"{f(harness.scale(row['plan_cpu_s'], 1e6 / row['nodes']), 2)} | {row['stages']} | "
                      f"{row['crossing_bytes']} |")
        if p["growth_per_node"]:
            md += ["", f"Per-node CPU time x{f(p['growth_per_node'], 2)} from {p['rows'][0]['nodes']} to "
                   f"{p['rows'][-1]['nodes']} nodes, x{f(p['growth_per_node_wall'], 2)} in wall time (1.0 = linear; "
                   "per round).", ""]
    g = r["gpt2_small"]
    b = g["buckets"]
    w, s = g["whole"], g["split"]
    md += [
        f"## {r['model']} (random weights): prefill S={b['prefill']}, decode W={b['decode_width']} "
        f"with a {b['kv_cache']}-position KV cache, LM head", "",
        "`whole`: one func per bucket, partitioned by the compiler; `split`: one func per layer half "
        f"(the hand split of earlier versions). Each variant in a fresh process, {r['rounds']} rounds "
        "in alternating order.", "",
        f"Times are wall seconds and CPU seconds of the process (the machine is shared: the CPU time depends "
        f"less on its load). In each process, rt.load: best of {LOADS} fresh runtimes; per token: median wall, "
        "least CPU over the timed steps; the table shows those figures' median (min-max) over the rounds.", "",
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
        f"| program calls per decode step (+ head) | 1 + 1 | {(s['funcs'] - 1) // 2} + 1 |",
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
           f"| joined over separate, per round: wall / CPU per token | 1 | "
           f"{harness.fmt(j['s_per_token_over_whole'], 3)} / {harness.fmt(j['cpu_s_per_token_over_whole'], 3)} |",
           f"| logits max abs difference vs separate | 0 | {j['logits_max_abs_diff_vs_whole']:g} |", ""]
    return md


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
