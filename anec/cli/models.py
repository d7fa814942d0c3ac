"""The ``anec`` commands for Hugging Face checkpoints.

``models export`` writes a checkpoint's programs as IR, ``models compile`` compiles every
func of such an export, ``generate`` runs a GPT-2 or Llama checkpoint and ``embed`` a BERT
sentence encoder, all as ANE programs.
"""

from __future__ import annotations

import click

from anec.cli.group import AnecGroup
from anec.cli.options import MODEL_BACKENDS, compress_options, int_list, share_option
from anec.cli.output import print_compression, print_ranges, progress_bar


@click.group("models", cls=AnecGroup)
def models_group() -> None:
    """Hugging Face checkpoints (GPT-2, Llama, BERT) as anec programs. See docs/models.md."""


@models_group.command("export")
@click.argument("kind", type=click.Choice(["gpt2", "llama", "bert"]))
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--prefill", callback=int_list, metavar="S[,S...]",
              help="Sequence buckets of the prefill (BERT: encoder) programs.")
@click.option("--cache", callback=int_list, metavar="T[,T...]",
              help="KV-cache buckets of the decode programs (decoders only).")
@click.option("--lora", "lora_targets", metavar="NAME[,NAME...]",
              help="Give these projections LoRA adapter inputs (e.g. q_proj,v_proj).")
@click.option("--lora-rank", type=int, default=8, show_default=True, help="Rank of the LoRA inputs.")
@click.option("--target", metavar="NAME", help="Chip profile that sets the bucket sizes (default m4).")
def models_export_cmd(kind, checkpoint, output, prefill, cache, lora_targets, lora_rank, target) -> None:
    """Write CHECKPOINT's programs to OUTPUT/*.ir, OUTPUT/weights.safetensors and OUTPUT/model.json."""
    from anec.models.export import export_checkpoint

    targets = [t for t in (lora_targets or "").split(",") if t]
    info = export_checkpoint(kind, checkpoint, output, prefill, cache, target, targets, lora_rank)
    n = sum(len(v) for v in info["files"].values())
    click.echo(f"wrote {n} funcs in {len(info['files'])} files to {output}")
    for name, funcs in info["files"].items():
        click.echo(f"  {name}: {', '.join(funcs)}")
    click.echo(f"compile them with: anec models compile {output} -o build/")


@models_group.command("compile")
@click.argument("export_dir", type=click.Path(file_okay=False), metavar="DIR")
@click.option("-o", "--output", type=click.Path(file_okay=False), metavar="OUT",
              help="Write OUT/<func>/ for every func (default: check and plan only).")
@click.option("--target", metavar="NAME", help="Chip profile (default m4).")
@compress_options
@share_option
def models_compile_cmd(export_dir, output, target, compress, compress_gate, compress_form, share_programs) -> None:
    """Compile every func of an exported model DIR (written by `anec models export`).

    Each func (one per bucket) becomes one artifact; the compiler cuts a func
    that breaks a per-program budget into a pipeline of ANE programs. Prints
    the programs the funcs need together against the process compile budget,
    then one line per func: programs, weights, peak SRAM."""
    from anec.compiler import budget_line, summarize
    from anec.models.export import compile_export

    plan: dict = {}
    done = compile_export(export_dir, output, target, compress=compress, compress_gate=compress_gate,
                          share_programs=share_programs, plan=plan, compress_form=compress_form)
    click.echo(budget_line(plan["programs"], plan["budget"], plan["shared"]))
    for name, art, path in done:
        click.echo(summarize(name, art, path))
        print_compression(name, art)


@click.command("generate")
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.option("--prompt", help="Prompt text (needs the checkpoint's tokenizer and the tokenizers package).")
@click.option("--prompt-ids", callback=int_list, metavar="ID[,ID...]", help="Prompt as token ids.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="0 = greedy.")
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True, help="0 = no top-k filter.")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@click.option("--adapter", type=click.Path(file_okay=False), help="PEFT LoRA adapter directory.")
@click.option("--lora-rank", type=int, help="LoRA input rank (default: the adapter's).")
@click.option("--backend", type=click.Choice(MODEL_BACKENDS), default="auto", show_default=True)
@click.option("--target", metavar="NAME", help="Chip profile (default m4).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or timing summary.")
@click.option("--check-ranges", is_flag=True,
              help="Instead of generating, report every node of the prefill program whose values leave "
                   "fp16 on this prompt [ANE-FP16-RANGE] (exit 1 on an overflow).")
@click.pass_context
def generate_cmd(ctx, checkpoint, prompt, prompt_ids, max_new_tokens, temperature, top_k, seed, adapter,
                 lora_rank, backend, target, quiet, check_ranges) -> None:
    """Generate text with a GPT-2 or Llama checkpoint running as ANE programs."""
    import time

    from anec.models.common import ModelError
    from anec.models.generate import LoraSpec, load_causal_lm
    from anec.models.hf import load_tokenizer
    from anec.models.lora import LoraAdapter

    if (prompt is None) == (prompt_ids is None):
        raise ModelError("give exactly one of --prompt and --prompt-ids")
    lora = ad = None
    if adapter is not None:
        ad = LoraAdapter.load(adapter)
        lora = LoraSpec(tuple(sorted(ad.targets)), lora_rank or ad.rank)
    lm = load_causal_lm(checkpoint, backend=backend, target=target, progress=progress_bar(quiet), lora=lora)
    try:
        tok = None
        if prompt is not None:
            tok = load_tokenizer(checkpoint)
            prompt_ids = tok.encode(prompt)
        if ad is not None:
            lm.set_adapter(ad)
        if check_ranges:
            if print_ranges(lm.check_ranges(prompt_ids)):
                ctx.exit(1)
            return
        eos = None
        if tok is not None:
            eos = lm.fe.ckpt.config.get("eos_token_id")
            eos = eos if isinstance(eos, int) and 0 <= eos < lm.cfg.vocab else None
        t0 = time.perf_counter()
        out = lm.generate(prompt_ids, max_new_tokens, temperature, top_k, seed, eos_id=eos)
        dt = time.perf_counter() - t0
        if tok is not None:
            click.echo(prompt + tok.decode(out))
        else:
            click.echo(",".join(str(t) for t in out))
        if not quiet:
            st = lm.stats()
            compiles = f" ({st['compiles']} compiled)" if "compiles" in st else ""
            click.echo(f"{len(out)} tokens in {dt:.2f} s ({st['funcs']} funcs, {st['programs']} programs{compiles}, "
                       f"compile {st['compile_seconds']:.2f} s)", err=True)
    finally:
        lm.close()


@click.command("embed")
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.argument("sentences", nargs=-1, required=True)
@click.option("--vectors", is_flag=True, help="Print the embeddings (JSON lines) instead of similarities.")
@click.option("--backend", type=click.Choice(MODEL_BACKENDS), default="auto", show_default=True)
@click.option("--target", metavar="NAME", help="Chip profile (default m4).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@compress_options
def embed_cmd(checkpoint, sentences, vectors, backend, target, quiet, compress, compress_gate,
              compress_form) -> None:
    """Sentence embeddings with a BERT checkpoint (e.g. all-MiniLM-L6-v2) running as ANE programs.

    With two or more sentences, prints their cosine similarity matrix."""
    import json

    from anec.models.bert import cosine_matrix, load_sentence_encoder

    if compress is not None and backend == "interp":
        raise click.UsageError("--compress needs a compiled backend (sim or ane): the interpreter "
                               "reads the checkpoint's weights as they are")
    enc = load_sentence_encoder(checkpoint, backend=backend, target=target, progress=progress_bar(quiet),
                                compress=compress, compress_gate=compress_gate, compress_form=compress_form)
    try:
        emb = enc.encode(list(sentences))
        if compress is not None and not quiet:
            from anec.compress import report_summary

            click.echo(f"compressed {report_summary(enc.programs.compression)}", err=True)
    finally:
        enc.close()
    if vectors or len(sentences) == 1:
        for s, e in zip(sentences, emb):
            click.echo(json.dumps({"sentence": s, "embedding": [round(float(v), 6) for v in e]}))
        return
    sim = cosine_matrix(emb)
    for i, s in enumerate(sentences):
        row = " ".join(f"{sim[i, j]:6.3f}" for j in range(len(sentences)))
        click.echo(f"{row}  {s}")
