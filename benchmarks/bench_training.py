"""Training step cost on the sim: where a step's time goes, and PyTorch CPU fp32 on the same model.

A Llama-family model (GQA) with random weights, saved locally by transformers:
d=256, 4 layers, 8 heads / 4 KV heads, FFN 688, vocab 4096, sequence 64, batch 1.
Each variant of the trainer (weight gradients on the device or on the host;
activations recomputed or saved) and PyTorch each run in their own process
(benchmarks/harness.py), in alternating rounds; each process runs 2 warm-up steps
and N measured steps and reports the median ms per step of every phase:

* forward / backward: the forward and backward program calls;
* host: the calling thread's host work, split into embedding (gather of the rows
  and scatter of their gradient), loss (cross-entropy and its gradient) and
  gradients (gathering the weight gradients from the backward outputs);
* wgrad wait: waiting for the host weight-gradient thread (host mode only);
* optimizer: finiteness check, clipping and AdamW on fp32 master weights;
* reload: the new weights into both programs (fp16 conversion, surface writes).

PyTorch: the same checkpoint in fp32, ``loss.backward()``, ``clip_grad_norm_`` and
``AdamW.step()`` on the same batches. Its process also times, on the same tensors, the
work each anec host phase does: AdamW + clipping over the model's parameters; cross-entropy
forward and backward on the [S, vocab] logits; the embedding gather and its gradient
scatter; a transposed add of every weight-shaped gradient; every parameter converted to
fp16 (transposed) into a preallocated buffer. The table shows anec's phase over PyTorch's.

Usage (writes benchmarks/results/training.json and training.md)::

    PYTHONPATH=. python benchmarks/bench_training.py [--steps 8] [--rounds 3]
    PYTHONPATH=. python benchmarks/bench_training.py --quick   # d=64, 2 layers, 2 steps, 2 rounds: a smoke run
"""

from __future__ import annotations

import argparse
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

CONFIG = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, vocab_size=4096, max_position_embeddings=256, initializer_range=0.02)
TINY = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, max_position_embeddings=128, initializer_range=0.02)
"""The model of ``--quick``."""
SEQ = 64
PHASES = ["forward_s", "backward_s", "host_s", "embed_s", "loss_s", "grads_s", "weight_grads_wait_s",
          "optimizer_s", "clip_s", "reload_s"]
VARIANTS = [(wg, act) for wg in ("device", "host") for act in ("recompute", "save")]
# anec phase -> the same work timed in PyTorch's process
SAME_WORK = {"optimizer_s": "adamw", "loss_s": "loss", "embed_s": "embedding", "grads_s": "gather",
             "reload_s": "fp16"}
WORK_TITLES = {"adamw": "clip + AdamW", "loss": "cross-entropy fwd+bwd", "embedding": "embedding gather+scatter",
               "gather": "transposed gradient add", "fp16": "fp16 conversion"}


def make_checkpoint(d: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval().save_pretrained(
        d, safe_serialization=True)


def batches(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, CONFIG["vocab_size"], (1, SEQ + 1)) for _ in range(n)]


def worker_anec(ckpt: Path, steps: int, weight_grads: str, activations: str) -> dict:
    from anec.training import Trainer

    data = batches(steps + 2)
    rows = []
    with Trainer(ckpt, backend="sim", seq_len=SEQ, lr=1e-4, weight_grads=weight_grads,
                 activations=activations) as tr:
        t0 = time.perf_counter()
        tr.step(data[0])
        first = time.perf_counter() - t0
        compile_s = tr.timings.get("compile_s", 0.0)
        tr.step(data[1])
        for ids in data[2:]:
            t0 = time.perf_counter()
            tr.step(ids)
            row = {k: tr.timings.get(k, 0.0) for k in PHASES}
            row["total_s"] = time.perf_counter() - t0
            rows.append(row)
    ms = {k: statistics.median(r[k] for r in rows) * 1e3 for k in [*PHASES, "total_s"]}
    return {"ms": ms, "first_step_s": first, "compile_s": compile_s}


def worker_torch(ckpt: Path, steps: int) -> dict:
    import torch
    import torch.nn.functional as F
    import transformers

    data = batches(steps + 2)
    m = transformers.AutoModelForCausalLM.from_pretrained(ckpt).float()
    m.train(False)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    times = []
    for i, ids in enumerate(data):
        t0 = time.perf_counter()
        x = torch.tensor(ids)
        loss = m(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)

    # the same work as each anec host phase, on this model's tensors
    work: dict[str, list[float]] = {k: [] for k in WORK_TITLES}
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=gen) * 1e-3 for p in params]
    shadow = [p.detach().clone() for p in params]
    opt2 = torch.optim.AdamW(shadow, lr=1e-4)
    for s, g in zip(shadow, grads):
        s.grad = g.clone()
    emb = m.get_input_embeddings().weight.detach().clone()
    matrices = [p.detach() for p in params if p.dim() == 2 and p is not m.get_input_embeddings().weight]
    acc = [torch.zeros(w.shape[::-1]) for w in matrices]
    half = [torch.empty(p.shape[::-1] if p.dim() == 2 else p.shape, dtype=torch.float16) for p in params]
    for i, ids in enumerate(data):
        row = torch.tensor(ids[0])
        logits = torch.randn(SEQ, CONFIG["vocab_size"], generator=gen, requires_grad=True)
        table = emb.clone().requires_grad_(True)
        t0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(shadow, 1.0)
        opt2.step()
        t1 = time.perf_counter()
        F.cross_entropy(logits, row[1:]).backward()
        t2 = time.perf_counter()
        F.embedding(row[:-1], table).sum().backward()
        t3 = time.perf_counter()
        with torch.no_grad():
            for a, w in zip(acc, matrices):
                a.add_(w.t())
            t4 = time.perf_counter()
            for h, p in zip(half, params):
                h.copy_(p.detach().t() if p.dim() == 2 else p.detach())
        t5 = time.perf_counter()
        if i >= 2:
            for k, dt in (("adamw", t1 - t0), ("loss", t2 - t1), ("embedding", t3 - t2), ("gather", t4 - t3),
                          ("fp16", t5 - t4)):
                work[k].append(dt)
    return {"ms": statistics.median(times) * 1e3, "threads": torch.get_num_threads(),
            "work_ms": {k: statistics.median(v) * 1e3 for k, v in work.items()}}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", choices=["anec", "torch"])
    ap.add_argument("--ckpt", type=Path)
    ap.add_argument("--weight-grads", default="device")
    ap.add_argument("--activations", default="recompute")
    ap.add_argument("--quick", action="store_true", help="a d=64 2-layer model, 2 steps, 2 rounds: a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        CONFIG.update(TINY)
        if not args.worker:
            args.steps, args.rounds = min(args.steps, 2), min(args.rounds, 2)
    if args.worker == "anec":
        print(json.dumps(worker_anec(args.ckpt, args.steps, args.weight_grads, args.activations)))
        return 0
    if args.worker == "torch":
        print(json.dumps(worker_torch(args.ckpt, args.steps)))
        return 0

    load_start = harness.load_average()
    me = str(Path(__file__).relative_to(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "llama"
        make_checkpoint(ckpt)
        common = ["--ckpt", str(ckpt), "--steps", str(args.steps), *(["--quick"] if args.quick else [])]
        sides = {f"{wg}/{act}": [me, "--worker", "anec", "--weight-grads", wg, "--activations", act, *common]
                 for wg, act in VARIANTS}
        sides["torch"] = [me, "--worker", "torch", *common]
        rounds = harness.run_rounds(sides, args.rounds)
    load_end = harness.load_average()
    torch_ms = [r["ms"] for r in rounds["torch"]]
    variants = []
    for wg, act in VARIANTS:
        rs = rounds[f"{wg}/{act}"]
        v = {"weight_grads": wg, "activations": act,
             "ms": {k: harness.spread(r["ms"][k] for r in rs) for k in [*PHASES, "total_s"]},
             "first_step_s": harness.spread(r["first_step_s"] for r in rs),
             "vs_torch": harness.ratio_spread([r["ms"]["total_s"] for r in rs], torch_ms),
             "phase_vs_torch": {k: harness.ratio_spread([r["ms"][k] for r in rs],
                                                        [t["work_ms"][w] for t in rounds["torch"]])
                                for k, w in SAME_WORK.items()}}
        variants.append(v)
    ref = {"ms": harness.spread(torch_ms), "threads": rounds["torch"][0]["threads"],
           "work_ms": {w: harness.spread(t["work_ms"][w] for t in rounds["torch"]) for w in WORK_TITLES}}
    res = {**harness.machine(), "load_start": load_start, "load_end": load_end, "rounds": args.rounds,
           "config": CONFIG, "seq_len": SEQ, "steps": args.steps, "variants": variants, "torch": ref,
           "raw": rounds}
    f = harness.fmt
    lines = harness.header(
        "Training step on the sim", load_start, load_end, args.rounds,
        f"Model: Llama-family, d={CONFIG['hidden_size']}, {CONFIG['num_hidden_layers']} layers, GQA "
        f"{CONFIG['num_attention_heads']}/{CONFIG['num_key_value_heads']}, vocab {CONFIG['vocab_size']}, "
        f"sequence {SEQ}, batch 1; each process: median of {args.steps} steps after 2 warm-up steps.")
    lines += ["## Where a step's time goes (ms)", "",
              "| weight grads | activations | forward | backward | host | wgrad wait | optimizer | reload | "
              "step | step vs torch |", "|---|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        ms = v["ms"]
        lines.append(f"| {v['weight_grads']} | {v['activations']} | {f(ms['forward_s'])} | {f(ms['backward_s'])} | "
                     f"{f(ms['host_s'])} | {f(ms['weight_grads_wait_s'])} | {f(ms['optimizer_s'])} | "
                     f"{f(ms['reload_s'])} | {f(ms['total_s'])} | {f(v['vs_torch'], 2)}x |")
    lines += ["", f"PyTorch CPU fp32 ({ref['threads']} threads), same model and batches, its own process: "
              f"{f(ref['ms'])} ms per step (forward, backward, clipping, AdamW).", "",
              "## Host phases against the same work in PyTorch", "",
              "Each anec host phase (ms, median over the variants' rounds) next to the same work done by "
              "PyTorch CPU on the same tensors in its process; the ratio is per round (anec over PyTorch).", "",
              "| anec phase | PyTorch's same work | PyTorch ms | " + " | ".join(f"{wg}/{act}" for wg, act in VARIANTS)
              + " |", "|---|---|---|" + "---|" * len(VARIANTS)]
    for k, w in SAME_WORK.items():
        cells = [f"{f(v['ms'][k])} ms = {f(v['phase_vs_torch'][k], 2)}x" for v in variants]
        lines.append(f"| {k.removesuffix('_s')} | {WORK_TITLES[w]} | {f(ref['work_ms'][w], 2)} | " + " | ".join(cells)
                     + " |")
    lines += ["", "First step (compiles every program): " + ", ".join(
        f"{v['weight_grads']}/{v['activations']} {f(v['first_step_s'], 2)} s" for v in variants) + ".",
              "", "The sim is a software model of the ANE (fp16 storage, fp32 accumulation), not the device: "
              "its forward and backward times say nothing about an ANE's; the host phases are the same work "
              "on a Mac."]
    harness.write_results("training", res, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
