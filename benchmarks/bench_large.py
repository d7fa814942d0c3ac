"""Billion-parameter checkpoints: peak memory per phase, programs compiled, generation speed.

Random-weight fp16 Llama checkpoints (tests/models/synthetic.py, written a block at a time)
shaped like a 28-layer 0.6B GQA model (hidden 1024, 16 heads, 8 KV heads, intermediate
3072, vocab 151936, tied embeddings) and like Llama-3.2-1B (hidden 2048, 16 layers, 32
heads, 8 KV heads, intermediate 8192, vocab 128256, tied). Each phase runs in its own
process, which reports its peak resident memory (``VmHWM``; ``ru_maxrss`` where /proc is
missing):

- ``export``: ``anec models export llama`` at its default buckets (memory-mapped views, fp16
  written in chunks);
- ``compile``: ``anec models compile`` of the export (the planner's program count first);
- ``generate``: ``load_causal_lm`` on the sim, a prompt, then greedy decode steps: time to
  first token (compile + prefill + head), decode tokens/s, and the bytes the host moves
  to and from the programs' surfaces per decode step, as the runtime counts them
  (``host_in_bytes`` + ``host_out_bytes`` of the decode func and the LM head over every
  step after the first, which writes the prompt's rows into the cache once; the KV cache
  stays in the decode program, so a step writes its new rows only); the bytes copied
  between stage surfaces are reported next to them;
- ``transformers``: the same checkpoint in transformers' ``LlamaForCausalLM`` on the CPU in
  fp32 (torch's default threads), the same prompt, the same number of greedy steps with
  its KV cache: time to first token, decode tokens/s and the tokens, so the table shows
  anec's decode speed on the sim next to it and how many greedy tokens agree (random
  weights give small logit gaps, so a late disagreement is expected; the tests check
  tokens on shapes where the gaps are checked).

Memory is judged against the fp16 weight bytes: the target is each phase <= 1.3x the fp16
weights plus ``CONSTANT`` (the interpreter, numpy and anec, measured as the peak of a
process that only imports them). ``--quick``: a 4-layer model of the same structure
(hidden 256), 4 decode steps, 1 round. Every phase runs ``--rounds`` times (3 by default); each
figure is the median (min-max) over the rounds and a phase is within target only when every
round is. Usage::

    python benchmarks/bench_large.py [--models 0.6b,1b] [--tokens 32] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import harness  # noqa: E402

TARGET = 1.3
"""Each phase's peak resident memory should stay <= TARGET x the fp16 weights + the constant."""
PROMPT = 8
CACHE = 64
QUICK = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 768, "vocab_size": 4096,
         "max_position_embeddings": 512, "tie_word_embeddings": True, "rms_norm_eps": 1e-6}


def peak_rss() -> int:
    """This process's peak resident memory in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024


def worker_baseline() -> dict:
    """The constant: a process that imports what the phases import."""
    import anec.compiler  # noqa: F401
    import anec.models.export  # noqa: F401
    import anec.models.generate  # noqa: F401
    from anec.runtime import Runtime

    Runtime(backend="sim").close()  # the C extension loaded, as every phase loads it
    return {"peak_rss": peak_rss()}


def worker_export(ckpt: Path, out: Path) -> dict:
    from anec.models.export import export_checkpoint

    t0 = time.perf_counter()
    export_checkpoint("llama", ckpt, out)  # the default buckets
    return {"seconds": time.perf_counter() - t0, "peak_rss": peak_rss()}


def worker_compile(out: Path, build: Path) -> dict:
    from anec.models.export import compile_export

    plan: dict = {}
    t0 = time.perf_counter()
    done = compile_export(out, build, plan=plan)
    programs = sum(len(getattr(art, "stages", None) or [art]) for _, art, _ in done)
    return {"seconds": time.perf_counter() - t0, "peak_rss": peak_rss(), "planned_compiles": plan.get("programs"),
            "budget": plan.get("budget"), "shared": plan.get("shared"), "stages": programs}


IO_COUNTERS = ("host_in_bytes", "host_out_bytes", "surface_copy_bytes")


def io_counts(lm) -> dict:
    """The runtime's byte counters (every program of the model)."""
    st = lm.programs.runtime.stats
    return {k: int(st[k]) for k in IO_COUNTERS}


def worker_generate(ckpt: Path, tokens: int) -> dict:
    from anec.models.generate import load_causal_lm

    lm = load_causal_lm(str(ckpt), backend="sim")
    try:
        prompt = [int(x) for x in np.random.default_rng(0).integers(0, lm.cfg.vocab, PROMPT)]
        t0 = time.perf_counter()
        lm.compile(lm.program_names(len(prompt), CACHE))
        compile_s = time.perf_counter() - t0
        out = [int(np.argmax(lm.prefill(prompt, CACHE)))]
        first_s = time.perf_counter() - t0
        times, io = [], []
        for _ in range(tokens):
            before = io_counts(lm)
            t1 = time.perf_counter()
            out.append(int(np.argmax(lm.decode(out[-1]))))
            times.append(time.perf_counter() - t1)
            io.append({k: v - before[k] for k, v in io_counts(lm).items()})
        st = lm.stats()
    finally:
        lm.close()
    steady = io[1:] or io  # the first step also writes the prompt's rows into the cache
    per_step = {k: sum(d[k] for d in steady) // len(steady) for k in IO_COUNTERS} if steady else None
    return {"compile_s": compile_s, "first_token_s": first_s, "decode_s": times,
            "tokens_per_s": len(times) / sum(times) if times else None, "compiles": st.get("compiles"),
            "programs": st.get("programs"), "io_bytes_per_step": io, "peak_rss": peak_rss(),
            "host_io_bytes_per_step": per_step and per_step["host_in_bytes"] + per_step["host_out_bytes"],
            "surface_copy_bytes_per_step": per_step and per_step["surface_copy_bytes"], "tokens": out}


def worker_transformers(ckpt: Path, tokens: int) -> dict:
    import torch
    import transformers

    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), torch_dtype=torch.float32).eval()
    load_s = time.perf_counter() - t0
    vocab = model.config.vocab_size
    prompt = [int(x) for x in np.random.default_rng(0).integers(0, vocab, PROMPT)]
    with torch.no_grad():
        t0 = time.perf_counter()
        res = model(torch.tensor([prompt]), use_cache=True)
        out = [int(torch.argmax(res.logits[0, -1]))]
        first_s = time.perf_counter() - t0
        past, times = res.past_key_values, []
        for _ in range(tokens):
            t1 = time.perf_counter()
            res = model(torch.tensor([[out[-1]]]), past_key_values=past, use_cache=True)
            past = res.past_key_values
            out.append(int(torch.argmax(res.logits[0, -1])))
            times.append(time.perf_counter() - t1)
    return {"load_s": load_s, "first_token_s": first_s, "decode_s": times,
            "tokens_per_s": len(times) / sum(times) if times else None, "peak_rss": peak_rss(), "tokens": out}


def run_model(name: str, config: dict, tokens: int, me: str, constant: int, rounds: int) -> dict:
    """One checkpoint, ``rounds`` rounds. A round exports into a fresh directory and compiles
    that export (in that order: compile reads the export), then runs generate and transformers
    in an order that alternates between rounds, each phase in its own process. A phase's figures
    become spreads over the rounds (harness.summarize); ``decode_anec_over_transformers`` is the
    per-round ratio of decode tokens/s. A failed phase ends the model's rows with its error."""
    from tests.models.synthetic import write_random_llama

    with tempfile.TemporaryDirectory(prefix="anec-bench-large-") as d:
        ckpt = Path(d) / "ckpt"
        n = write_random_llama(ckpt, config)
        os.sync()
        row: dict = {"model": name, "config": config, "params": n, "fp16_bytes": 2 * n, "rounds": rounds}
        runs: dict[str, list[dict]] = {}
        tail = ["generate", *(["transformers"] if importlib.util.find_spec("transformers") is not None else [])]
        for r in range(rounds):
            out, build = Path(d) / f"export{r}", Path(d) / f"build{r}"
            argvs = {"export": ["--ckpt", str(ckpt), "--out", str(out)],
                     "compile": ["--out", str(out), "--build", str(build)],
                     "generate": ["--ckpt", str(ckpt), "--tokens", str(tokens)],
                     "transformers": ["--ckpt", str(ckpt), "--tokens", str(tokens)]}
            for phase in ["export", "compile", *harness.round_order(tail, r)]:
                try:
                    res = harness.run_worker([me, "--worker", phase, *argvs[phase]])
                except RuntimeError as e:  # e.g. over the compile budget: the row says so, the next model runs
                    errors = [ln for ln in str(e).splitlines() if "error:" in ln] or str(e).splitlines()[-1:]
                    row["failed"] = {"phase": phase, "round": r + 1, "error": errors[-1].strip()}
                    return row
                runs.setdefault(phase, []).append(res)
                print(f"  {name} round {r + 1}/{rounds}: {phase} done", flush=True)
            shutil.rmtree(out)
            shutil.rmtree(build, ignore_errors=True)
        for phase, rs in runs.items():
            row[phase] = {**harness.summarize([{k: v for k, v in x.items() if k != "tokens"} for x in rs]),
                          "tokens_per_round": [x["tokens"] for x in rs] if "tokens" in rs[0] else None}
            if phase != "transformers":
                row[phase]["within_target"] = all(x["peak_rss"] <= TARGET * 2 * n + constant for x in rs)
        g, t = runs["generate"], runs.get("transformers")
        if t and all(x["tokens_per_s"] for x in g + t):
            row["decode_anec_over_transformers"] = harness.ratio_spread(
                [x["tokens_per_s"] for x in g], [x["tokens_per_s"] for x in t])
    return row


def leading_equal(a: list[int], b: list[int]) -> int:
    """How many leading greedy tokens two runs share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def to_md(results: dict) -> list[str]:
    f, worst = harness.fmt, (lambda v: v["max"] if harness.is_spread(v) else v)
    lines = harness.header("Billion-parameter checkpoints: memory and speed", results["load_start"],
                           results["load_end"], results["rounds"],
                           f"Random fp16 Llama checkpoints; each phase in its own process; peak RSS from VmHWM. "
                           f"Target: each phase <= {TARGET}x the fp16 weights + {results['constant'] >> 20} MiB "
                           "(the peak of a process that only imports anec), in every round. A round exports, "
                           "compiles that export, then runs generate and transformers in alternating order.",
                           scheme="one process per phase",
                           own_threads=os.cpu_count() or 1)  # the sim's pool and torch use every core
    lines += ["| model | fp16 weights | phase | peak RSS MiB | x weights (worst round) | within target | seconds |",
              "|---|---|---|---|---|---|---|"]
    for row in results["models"]:
        w = row["fp16_bytes"]
        for phase in ("export", "compile", "generate"):
            if phase not in row:
                break
            r = row[phase]
            secs = r.get("seconds", r.get("first_token_s"))
            lines.append(f"| {row['model']} | {w / 2**20:.0f} MiB | {phase} | {f(harness.scale(r['peak_rss'], 2**-20), 0)} | "
                         f"{worst(r['peak_rss']) / w:.2f} | {'yes' if r['within_target'] else 'no'} | {f(secs)} |")
    for row in results["models"]:
        if "failed" in row:
            lines.append(f"| {row['model']} | {row['fp16_bytes'] / 2**20:.0f} MiB | {row['failed']['phase']} | "
                         f"failed in round {row['failed']['round']}: {row['failed']['error']} | | | |")
    done = [row for row in results["models"] if "failed" not in row]
    lines += ["", "| model | compiles planned (budget) | shared | compiles in generate | time to first token s | "
              "decode tokens/s | host I/O bytes per decode step | bytes copied between stages per step |",
              "|---|---|---|---|---|---|---|---|"]
    for row in done:
        c, g = row["compile"], row["generate"]
        lines.append(f"| {row['model']} | {c['planned_compiles']} ({c['budget']}) | {c['shared']} | {g['compiles']} | "
                     f"{f(g['first_token_s'])} | {f(g['tokens_per_s'], 2) if g['tokens_per_s'] else 'n/a'} | "
                     f"{g['host_io_bytes_per_step']} | "
                     f"{g.get('surface_copy_bytes_per_step')} |")
    lines += ["", "Host I/O per decode step: the bytes the runtime counts written into input surfaces and read "
              "from output surfaces (decode func and LM head), steps after the first; the KV cache stays in "
              "the decode program, so they do not grow with the cache."]
    lines += ["", "Next to transformers (CPU, fp32, same checkpoint, prompt and greedy steps; its own process, "
              "in the same rounds; the ratio is taken per round):", "",
              "| model | anec decode tokens/s (sim) | transformers decode tokens/s | anec / transformers | "
              "transformers time to first token s | greedy tokens equal (leading, fewest over the rounds) |",
              "|---|---|---|---|---|---|"]
    for row in done:
        g, t = row["generate"], row.get("transformers")
        if t is None:
            lines.append(f"| {row['model']} | | not run: transformers is not installed | | | |")
            continue
        same = min(leading_equal(a, b) for a in g["tokens_per_round"] for b in t["tokens_per_round"])
        ratio = row.get("decode_anec_over_transformers")
        lines.append(f"| {row['model']} | {f(g['tokens_per_s'] or 0, 2)} | {f(t['tokens_per_s'] or 0, 2)} | "
                     f"{f(ratio, 2) if ratio else 'n/a'} | {f(t['first_token_s'], 2)} | "
                     f"{same} of {len(t['tokens_per_round'][0])} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description="billion-parameter checkpoints: memory per phase and speed")
    ap.add_argument("--models", default="0.6b,1b", help="comma-separated: 0.6b, 1b")
    ap.add_argument("--tokens", type=int, default=32, help="greedy decode steps")
    ap.add_argument("--quick", action="store_true", help="a 4-layer hidden-256 model of the same structure, 1 round")
    ap.add_argument("--rounds", type=int, help="rounds of every phase (3; 1 with --quick)")
    ap.add_argument("--worker", choices=["baseline", "export", "compile", "generate", "transformers"], help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        result = {"baseline": worker_baseline, "export": lambda: worker_export(a.ckpt, a.out),
                  "compile": lambda: worker_compile(a.out, a.build),
                  "generate": lambda: worker_generate(a.ckpt, a.tokens),
                  "transformers": lambda: worker_transformers(a.ckpt, a.tokens)}[a.worker]()
        print(json.dumps(result))
        return 0
    from tests.models.synthetic import LLAMA_06B, LLAMA_1B

    shapes = {"0.6b": LLAMA_06B, "1b": LLAMA_1B}
    if a.quick:
        todo = {"quick": QUICK}
        a.tokens = min(a.tokens, 4)
    else:
        names = [m.strip() for m in a.models.split(",") if m.strip()]
        bad = [m for m in names if m not in shapes]
        if bad:
            ap.error(f"unknown model {bad[0]!r}: one of {', '.join(shapes)}")
        todo = {m: shapes[m] for m in names}
    me = str(Path(__file__).relative_to(ROOT))
    load_start = harness.load_average()
    constant = harness.run_worker([me, "--worker", "baseline"])["peak_rss"]
    rounds = max(1, a.rounds or (1 if a.quick else 3))
    results: dict = {**harness.machine(), "target": TARGET, "constant": constant, "rounds": rounds,
                     "models": [run_model(name, cfg, a.tokens, me, constant, rounds) for name, cfg in todo.items()]}
    results.update(load_start=load_start, load_end=harness.load_average())
    lines = to_md(results)
    harness.write_results("large", results, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
