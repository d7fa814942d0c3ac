"""Training data: a token stream and the batch of every step, deterministic from (seed, step).

``load_tokens`` reads a UTF-8 text file through the checkpoint's tokenizer
(``tokenizer.json``, or ``vocab.json`` + ``merges.txt``), or a ``.npy`` file
of token ids. ``Batches(tokens, seq_len, batch_size, seed).batch(step)`` is the
``[B, seq_len + 1]`` window set of that step: a resumed run sees exactly the
batches the uninterrupted run would have seen.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from anec.diagnostics import AnecError, TrainingError

MAX_TEXT = 1 << 30


def load_tokens(path: str | os.PathLike, checkpoint_dir: str | os.PathLike, vocab: int) -> np.ndarray:
    """Token ids of ``path`` (text through the checkpoint's tokenizer, or a .npy of ids)."""
    p = Path(path)
    if not p.is_file():
        raise TrainingError(f"no data file '{p}'", hint="give a UTF-8 text file or a .npy of token ids")
    if p.stat().st_size > MAX_TEXT:
        raise TrainingError(f"'{p}' is larger than {MAX_TEXT >> 20} MiB", hint="tokenize it to a .npy first")
    if p.suffix == ".npy":
        try:
            ids = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise TrainingError(f"cannot read '{p}' as a .npy array of token ids: {e}") from None
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise TrainingError(f"'{p}' holds {ids.dtype} {list(ids.shape)}; expected a 1-D array of token ids")
    else:
        from anec.models.hf import load_tokenizer

        try:
            text = p.read_text("utf-8")
        except UnicodeDecodeError as e:
            raise TrainingError(f"'{p}' is not UTF-8 text ({e.reason} at byte {e.start})") from None
        try:
            tok = load_tokenizer(checkpoint_dir)
        except AnecError as e:  # the hint is generate's (--prompt-ids): training takes --data ids.npy
            raise TrainingError(e.message, hint=f"give the training data as token ids: --data ids.npy (a 1-D "
                                                f"integer array), or add a tokenizer to '{checkpoint_dir}'") from None
        ids = np.asarray(tok.encode(text), np.int64)
    ids = ids.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise TrainingError(f"'{p}' has token ids outside the model's vocabulary [0, {vocab})")
    return ids


class Batches:
    """The batch of every step: ``batch_size`` random windows of ``seq_len + 1`` tokens."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int = 0) -> None:
        if len(tokens) < seq_len + 1:
            raise TrainingError(f"the data has {len(tokens)} tokens; one training sequence needs {seq_len + 1}",
                                hint="give more text, or a smaller --seq-len")
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed

    def batch(self, step: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, step])
        starts = rng.integers(0, len(self.tokens) - self.seq_len, self.batch_size)
        return np.stack([self.tokens[s: s + self.seq_len + 1] for s in starts])


__all__ = ["Batches", "load_tokens"]
