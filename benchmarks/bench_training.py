"""Training step cost on the sim: where a step's time goes, and PyTorch CPU fp32 on the same model.

A Llama-family model (GQA) with random weights, saved locally by transformers:
d=256, 4 layers, 8 heads / 4 KV heads, FFN 688, vocab 4096, sequence 64, batch 1.
Each variant of the trainer (weight gradients on the device or on the host;
activations recomputed or saved) runs 2 warm-up steps and N measured steps;
the table gives the median ms per step of every phase the trainer times:

* forward: the forward program call(s); backward: the backward program call(s);
* host: embedding, loss and gathering gradients on the calling thread;
* wgrad wait: waiting for the host weight-gradient thread after the last call
  (host mode only: the rest of its work overlaps with the device);
* optimizer: clipping + AdamW on fp32 master weights; reload: new weights into
  both programs (input surface writes).

PyTorch: the same checkpoint in fp32, ``loss.backward()`` + ``AdamW.step()``,
the same batches, in the same run.

Usage (writes benchmarks/results/training.json and training.md)::

    PYTHONPATH=. python benchmarks/bench_training.py [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

CONFIG = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, vocab_size=4096, max_position_embeddings=256, initializer_range=0.02)
SEQ = 64
PHASES = ["forward_s", "backward_s", "host_s", "weight_grads_wait_s", "optimizer_s", "reload_s"]


def make_checkpoint(d: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval().save_pretrained(
        d, safe_serialization=True)


def batches(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, CONFIG["vocab_size"], (1, SEQ + 1)) for _ in range(n)]


def run_anec(ckpt: Path, data: list[np.ndarray], weight_grads: str, activations: str) -> dict:
    from anec.training import Trainer

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
    med = {k: statistics.median(r[k] for r in rows) * 1e3 for k in [*PHASES, "total_s"]}
    med["reload_share"] = med["reload_s"] / med["total_s"]
    return {"weight_grads": weight_grads, "activations": activations, "ms": med,
            "first_step_s": first, "compile_s": compile_s}


def run_torch(ckpt: Path, data: list[np.ndarray]) -> dict:
    import torch
    import transformers

    m = transformers.AutoModelForCausalLM.from_pretrained(ckpt).float()
    m.train(False)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    times = []
    for i, ids in enumerate(data):
        t0 = time.perf_counter()
        x = torch.tensor(ids)
        loss = m(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return {"ms": statistics.median(times) * 1e3, "threads": torch.get_num_threads()}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args(argv)
    data = batches(args.steps + 2)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "llama"
        make_checkpoint(ckpt)
        variants = [run_anec(ckpt, data, wg, act) for wg in ("device", "host") for act in ("recompute", "save")]
        ref = run_torch(ckpt, data)
    res = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
           "load_at_start": load, "config": CONFIG, "seq_len": SEQ, "steps": args.steps,
           "variants": variants, "torch": ref}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "training.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Training step on the sim", "",
             f"Machine: {res['machine']}, load average {load:.1f} at start. Model: Llama-family, "
             f"d={CONFIG['hidden_size']}, {CONFIG['num_hidden_layers']} layers, GQA "
             f"{CONFIG['num_attention_heads']}/{CONFIG['num_key_value_heads']}, vocab {CONFIG['vocab_size']}, "
             f"sequence {SEQ}, batch 1; median of {args.steps} steps.", "",
             "| weight grads | activations | forward | backward | host | wgrad wait | optimizer | reload | "
             "step ms | reload share | vs torch |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        ms = v["ms"]
        lines.append(f"| {v['weight_grads']} | {v['activations']} | {ms['forward_s']:.1f} | {ms['backward_s']:.1f} | "
                     f"{ms['host_s']:.1f} | {ms['weight_grads_wait_s']:.1f} | {ms['optimizer_s']:.1f} | "
                     f"{ms['reload_s']:.1f} | {ms['total_s']:.1f} | {ms['reload_share']:.1%} | "
                     f"{ms['total_s'] / ref['ms']:.2f}x |")
    lines += ["", f"PyTorch CPU fp32 ({ref['threads']} threads), same model and batches: "
              f"{ref['ms']:.1f} ms per step.", "",
              f"First step (compiles every program): "
              + ", ".join(f"{v['weight_grads']}/{v['activations']} {v['first_step_s']:.2f} s" for v in variants) + ".",
              "", "The sim is a software model of the ANE (fp16 storage, fp32 accumulation), not the "
              "device: the ratios say where anec's own time goes, not how fast an ANE trains."]
    (RESULTS / "training.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
