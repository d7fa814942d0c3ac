"""Training on the ANE: backward programs derived by :mod:`anec.autodiff`, the host optimizer,
checkpoints that resume bit for bit (docs/training.md).

    from anec.training import Trainer
    with Trainer("path/to/checkpoint", backend="sim", seq_len=64, lr=3e-4) as tr:
        loss = tr.step(input_ids)       # [B, T] token ids
        tr.save("trained/")             # a Hugging Face checkpoint
"""

from anec.diagnostics import TrainingError
from anec.training.trainer import Trainer

__all__ = ["Trainer", "TrainingError"]
