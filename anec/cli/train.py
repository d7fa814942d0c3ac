"""The ``anec train`` command: train a GPT-2 or Llama-family checkpoint on the ANE."""

from __future__ import annotations

import click

from anec.cli.options import MODEL_BACKENDS
from anec.cli.output import progress_bar


@click.command("train")
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.option("--data", required=True, type=click.Path(dir_okay=False),
              help="UTF-8 text (tokenized with the checkpoint's tokenizer) or a .npy of token ids.")
@click.option("--steps", type=click.IntRange(min=1), required=True, help="Total optimizer steps of the run.")
@click.option("-o", "--output", "run_dir", required=True, type=click.Path(file_okay=False),
              help="Run directory: state/, log.jsonl, loss.png, model/.")
@click.option("--resume", is_flag=True, help="Continue the run in OUTPUT from its last saved state.")
@click.option("--seq-len", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--lr", type=click.FloatRange(min=0.0), default=3e-4, show_default=True)
@click.option("--weight-decay", type=click.FloatRange(min=0.0), default=0.0, show_default=True)
@click.option("--grad-clip", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              help="Global gradient norm limit (0 = none).")
@click.option("--lora-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="Train LoRA adapters of this rank instead of the weights (saved in PEFT format).")
@click.option("--seed", type=click.IntRange(min=0, max=2 ** 63 - 1), default=0, show_default=True,
              help="Batch sampling seed.")
@click.option("--save-every", type=click.IntRange(min=1), default=50, show_default=True,
              help="Steps between saved states (and loss.png redraws).")
@click.option("--backend", type=click.Choice(MODEL_BACKENDS), default="auto", show_default=True)
@click.option("--target", metavar="NAME", help="Chip profile (default m4).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def train_cmd(checkpoint, data, steps, run_dir, resume, seq_len, batch_size, lr, weight_decay, grad_clip,
              lora_rank, seed, save_every, backend, target, quiet) -> None:
    """Train a GPT-2 or Llama-family CHECKPOINT on the ANE (forward and backward programs,
    weights updated in place every step; docs/training.md)."""
    from anec.training.run import RunConfig, train_run

    cfg = RunConfig(checkpoint=checkpoint, data=data, steps=steps, seq_len=seq_len, batch_size=batch_size,
                    lr=lr, weight_decay=weight_decay, grad_clip=grad_clip, lora_rank=lora_rank, seed=seed,
                    save_every=save_every, backend=backend, target=target)
    bar = progress_bar(quiet)

    def on_step(row) -> None:
        if bar is not None:
            bar.step(f"loss {row['loss']:.4f} {row['tokens_per_s']:.0f} tok/s"
                     + (" (skipped)" if row["skipped"] else ""))

    if bar is not None:
        bar.start("train", steps)
    res = train_run(cfg, run_dir, resume=resume, on_step=on_step,
                    on_note=lambda text: click.echo(f"note: {text}", err=True))
    if bar is not None:
        bar.finish()
    click.echo(f"{res['steps']} steps, final loss {res['final_loss']:.4f} ({res['skipped']} skipped), "
               f"{res['seconds']:.1f} s -> {res['model']}")
