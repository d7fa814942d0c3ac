"""PyTorch import benchmark: ``anec.import_torch`` of GPT-2 small vs coremltools' ``ct.convert``.

    python benchmarks/bench_import.py [--seq 64] [--rounds 3] [--quick]

anec and coremltools each run in their own process (which builds the same
torch module, untimed), once per round, in an order that alternates between
rounds (benchmarks/harness.py); every figure is the median (min-max) over the
rounds, and anec/coremltools ratios are taken per round. The module: a
GPT-2-small-shaped ``GPT2LMHeadModel`` (transformers' default config: 12
layers, d=768, 12 heads, vocab 50257, random weights) wrapped to take the
token ids and return the logits, with an explicit additive causal mask and
position ids (coremltools 9 cannot convert transformers' own mask
construction; anec imports either way).

1. *Import*: ``torch.export`` (shared by both), then anec's decomposition to
   core ATen + lowering to one verified func + ``ImportedModel.save``
   (model.ir + weights.safetensors) vs coremltools' decomposition +
   ``ct.convert`` to an ML Program + ``save`` (.mlpackage).
2. *Compile*: the whole 12-layer func, which legalize cuts into a pipeline
   of programs (the number of programs is recorded), the front passes (dce,
   fuse-casts, annotate-sram) alone, and the full compile of one imported
   GPT-2 block. "import + compile" is compared with ``ct.convert``.
3. *Numerics*: the acceptance models of the importer tests, per output:
   max relative error and cosine against torch fp32, through the reference
   interpreter (fp16 mode) and, for the models that fit one program, the sim.

``--quick`` runs the same code on a 2-layer d=128 GPT-2 (a smoke run).

Writes ``benchmarks/results/import.json`` and ``import.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


import harness  # noqa: E402

TINY = dict(n_layer=2, n_embd=128, n_head=2, vocab_size=1000)
"""The GPT-2 of ``--quick``."""


def gpt2_small(seq: int, tiny: bool = False):
    import torch
    import transformers

    class LogitsOnly(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, ids):
            n = ids.shape[1]
            mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
            return self.lm(ids, attention_mask=mask, position_ids=torch.arange(n)[None]).logits

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(use_cache=False, **(TINY if tiny else {}))
    lm = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, seq), generator=torch.Generator().manual_seed(1))
    return LogitsOnly(lm).eval(), ids


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench_anec(model, ids, tmp: Path) -> dict:
    import torch

    from anec.frontends.torch.export import decompose, export_module
    from anec.frontends.torch.fx_import import FxImporter as _Importer

    ep, t_export = _timed(lambda: export_module(model, (ids,)))
    dec, t_dec = _timed(lambda: decompose(ep))
    im, t_lower = _timed(lambda: _Importer(dec, "main", "m4").run())
    _, t_save = _timed(lambda: im.save(tmp / "gpt2"))
    size = sum(f.stat().st_size for f in (tmp / "gpt2").iterdir())
    del torch
    return {"export_s": t_export, "decompose_s": t_dec, "lower_verify_s": t_lower, "save_s": t_save,
            "nodes": len(im.func.nodes), "weights": im.stats["weights"], "transposes": im.stats["transposes"],
            "saved_mb": size / 2**20, "host_steps": len(im.host_steps), "imported": im}


def bench_compile(im, model, ids) -> dict:
    import torch

    import anec
    from anec.compiler import compile_module
    from anec.diagnostics import AnecError
    from anec.weight_store import WeightStore

    store = WeightStore(im.weights)
    _, t_front = _timed(lambda: compile_module(im.module, weights=store, passes="dce,fuse-casts,annotate-sram"))
    t0 = time.perf_counter()
    try:
        art = compile_module(im.module, weights=store).artifacts[im.name]
        stages = len(getattr(art, "stages", [art]))
        whole = f"compiled into {stages} programs"
    except AnecError as e:
        whole = f"[{e.constraint}] {e.message}" if e.constraint else e.message
    t_whole = time.perf_counter() - t0

    class Block(torch.nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x)[0] if isinstance(self.layer(x), tuple) else self.layer(x)

    block = Block(model.lm.transformer.h[0]).eval()
    x = torch.randn(1, ids.shape[1], model.lm.config.n_embd, generator=torch.Generator().manual_seed(2))
    bim, t_bimport = _timed(lambda: anec.import_torch(block, (x,)))
    res, t_bcompile = _timed(lambda: compile_module(bim.module, weights=WeightStore(bim.weights)))
    art = res.artifacts["main"]
    return {"front_passes_whole_s": t_front, "default_pipeline_whole_s": t_whole, "whole_result": whole,
            "block_import_s": t_bimport, "block_compile_s": t_bcompile,
            "block_mil_statements": art.op_count(), "block_weights": len(art.manifest.document["weights"])}


def bench_coremltools(model, ids, tmp: Path) -> dict:
    import torch

    quiet = contextlib.redirect_stderr(io.StringIO())
    with warnings.catch_warnings(), quiet:
        warnings.simplefilter("ignore")
        import coremltools as ct

        ep, t_export = _timed(lambda: torch.export.export(model, (ids,)))

        def dec():
            d = ep.run_decompositions()
            for n in list(d.graph.nodes):  # coremltools 9 has no converter for the no-op alias
                if n.op == "call_function" and n.target == torch.ops.aten.alias.default:
                    n.replace_all_uses_with(n.args[0])
                    d.graph.erase_node(n)
            d.graph_module.recompile()
            return d

        dep, t_dec = _timed(dec)
        mlm, t_conv = _timed(lambda: ct.convert(dep, convert_to="mlprogram",
                                                minimum_deployment_target=ct.target.iOS18, skip_model_load=True))
        _, t_save = _timed(lambda: mlm.save(str(tmp / "gpt2.mlpackage")))
    size = sum(f.stat().st_size for f in (tmp / "gpt2.mlpackage").rglob("*") if f.is_file())
    return {"export_s": t_export, "decompose_s": t_dec, "convert_s": t_conv, "save_s": t_save,
            "saved_mb": size / 2**20, "coremltools": ct.__version__}


def bench_numerics() -> list[dict]:
    from tests.frontends.conftest import CASES, SIM_CASES, metrics, reference

    import anec

    rows = []
    for name, make in CASES.items():
        module, args = make()
        im = anec.import_torch(module, args)
        ref = reference(module, args)
        backends = [("interp fp16", im.runner(backend="interp", mode="fp16"))]
        if name in SIM_CASES:
            backends.append(("sim", im.runner(backend="sim")))
        for label, run in backends:
            outs = run(*args)
            for out_name, got, want in zip(im.output_names, outs, ref):
                rel, cos = metrics(got, want)
                rows.append({"model": name, "backend": label, "output": out_name, "rel": rel, "cos": cos})
            if label == "sim":
                run.close()
    return rows


def worker(side: str, seq: int, tiny: bool) -> dict:
    """One side's measurement in this process: anec's import (and compile) or coremltools' convert."""
    model, ids = gpt2_small(seq, tiny)
    tmp = Path(tempfile.mkdtemp(prefix="anec-bench-import-"))
    try:
        if side == "coremltools":
            return bench_coremltools(model, ids, tmp)
        an = bench_anec(model, ids, tmp)
        im = an.pop("imported")
        return {"anec": an, "compile": bench_compile(im, model, ids)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _anec_total(a: dict) -> float:
    return a["decompose_s"] + a["lower_verify_s"] + a["save_s"]


def _ct_total(c: dict) -> float:
    return c["decompose_s"] + c["convert_s"] + c["save_s"]


def paired(anec_rounds: list[dict], ct_rounds: list[dict]) -> dict:
    """The per-round totals and ratios (anec's process and coremltools' of the same round)."""
    per_round = []
    for a, c in zip(anec_rounds, ct_rounds):
        row = {"anec_total_s": _anec_total(a["anec"]), "coremltools_total_s": _ct_total(c)}
        row["anec_over_coremltools"] = row["anec_total_s"] / row["coremltools_total_s"]
        if a["compile"].get("whole_result", "").startswith("compiled"):
            row["import_compile_s"] = row["anec_total_s"] + a["compile"]["default_pipeline_whole_s"]
            row["import_compile_over_coremltools"] = row["import_compile_s"] / row["coremltools_total_s"]
        per_round.append(row)
    return harness.summarize(per_round)


def _f(x) -> str:
    return harness.fmt(x, 2)


def to_md(r: dict) -> list[str]:
    lines = harness.header(
        "PyTorch import benchmark", r["load_start"], r["load_end"], r["rounds"],
        "anec and coremltools each in their own process (each builds the same torch module, untimed); "
        "ratios are per round. The numerics are deterministic: computed once.")
    a, c, k, p = r.get("anec"), r.get("coremltools"), r.get("compile"), r.get("paired")
    if a and c:
        anec_total, ct_total = p["anec_total_s"], p["coremltools_total_s"]
        lines += [
            f"## {r['model']}", "",
            "| stage | anec.import_torch | coremltools ct.convert |", "|---|---|---|",
            f"| torch.export (the same for both) | {_f(a['export_s'])} s | {_f(c['export_s'])} s |",
            f"| decomposition to core ATen | {_f(a['decompose_s'])} s | {_f(c['decompose_s'])} s |",
            f"| lowering (anec: one verified func; ct: convert to an ML Program) | {_f(a['lower_verify_s'])} s | "
            f"{_f(c['convert_s'])} s |",
            f"| save (anec: model.ir + weights.safetensors; ct: .mlpackage) | {_f(a['save_s'])} s | {_f(c['save_s'])} s |",
            f"| **total after export** | **{_f(anec_total)} s** | **{_f(ct_total)} s** |",
            f"| saved size | {harness.fmt(a['saved_mb'], 0)} MiB (fp16 weights) | {harness.fmt(c['saved_mb'], 0)} MiB |",
            "",
            f"anec: {a['nodes']} IR nodes, {a['weights']} weight tensors (state_dict keys), "
            f"{a['transposes']} transposes, {a['host_steps']} host step (the token embedding lookup). "
            f"anec/coremltools time after export (per round): {_f(p['anec_over_coremltools'])}. "
            f"coremltools {c['coremltools']}.", "",
        ]
        if "import_compile_s" in p:
            lines += [f"Import + compile of the whole model to ANE programs ({k['whole_result']}): "
                      f"{_f(p['import_compile_s'])} s, against {_f(ct_total)} s for ct.convert (which does not "
                      f"compile for the ANE: Core ML compiles at load): {_f(p['import_compile_over_coremltools'])}x "
                      "(per round).", ""]
    if k:
        lines += [
            "## Compile", "",
            "| what | time |", "|---|---|",
            f"| front passes (dce, fuse-casts, annotate-sram) on the whole func | {_f(k['front_passes_whole_s'])} s |",
            f"| default pipeline on the whole func ({k['whole_result'][:80]}) | {_f(k['default_pipeline_whole_s'])} s |",
            f"| import of one GPT-2 block | {_f(k['block_import_s'])} s |",
            f"| full compile of one GPT-2 block ({k['block_mil_statements']} MIL statements, {k['block_weights']} "
            f"weights) | {_f(k['block_compile_s'])} s |", "",
            "The whole model is one func; legalize cuts it into a pipeline of programs (docs/passes.md).", "",
        ]
    if r.get("numerics"):
        lines += ["## Numerics of the acceptance models (vs torch fp32)", "",
                  "rel = max|anec - torch| / max|torch|; cos = cosine of the flattened outputs.", "",
                  "| model | backend | output | rel | cos |", "|---|---|---|---|---|"]
        for row in r["numerics"]:
            lines.append(f"| {row['model']} | {row['backend']} | {row['output']} | {row['rel']:.2e} | {row['cos']:.7f} |")
        lines.append("")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description="PyTorch import benchmark")
    ap.add_argument("--seq", type=int, default=64, help="sequence length of the imported program")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the anec and coremltools processes")
    ap.add_argument("--quick", action="store_true", help="a 2-layer d=128 GPT-2, 2 rounds: a smoke run")
    ap.add_argument("--worker", choices=["anec", "coremltools"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.seq, a.quick), default=str))
        return 0
    n_rounds = min(a.rounds, 2) if a.quick else a.rounds
    me = str(Path(__file__).relative_to(ROOT))
    common = ["--seq", str(a.seq), *(["--quick"] if a.quick else [])]
    load_start = harness.load_average()
    rounds = harness.run_rounds({"anec": [me, "--worker", "anec", *common],
                                 "coremltools": [me, "--worker", "coremltools", *common]}, n_rounds)
    numerics = bench_numerics()
    load_end = harness.load_average()
    desc = ("2-layer d=128 GPT-2 (--quick)" if a.quick
            else "GPT-2 small shape (12 layers, d=768, 12 heads, vocab 50257)")
    results = {**harness.machine(), "load_start": load_start, "load_end": load_end, "rounds": n_rounds,
               "model": f"{desc}, random weights, sequence {a.seq}",
               "anec": harness.summarize([r["anec"] for r in rounds["anec"]]),
               "compile": harness.summarize([r["compile"] for r in rounds["anec"]]),
               "coremltools": harness.summarize(rounds["coremltools"]),
               "paired": paired(rounds["anec"], rounds["coremltools"]),
               "numerics": numerics, "raw": rounds}
    lines = to_md(results)
    harness.write_results("import", results, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
