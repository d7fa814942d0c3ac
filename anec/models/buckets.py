"""Sequence buckets: the static shapes a model's programs are compiled for.

An ANE program has static shapes, so sequence lengths are rounded up to a
bucket. The smallest bucket makes the residual-stream surface (``C * S * 4``
bytes, fp32) reach the target's minimum surface size (49152 bytes): 16
positions for GPT-2 small (768 channels), 32 for MiniLM (384). The LM head's
vocabulary is cut the same way, into chunks within the target's conv channel
limit (:func:`vocab_chunks`).
"""

from __future__ import annotations

from typing import Sequence

from anec.models.common import ModelError
from anec.targets import Target, get_target


def min_bucket(channels: int, itemsize: int = 4, min_surface: int | None = None,
               floor: int = 16) -> int:
    """Smallest power of two >= ``floor`` whose ``[1, C, 1, S]`` surface reaches ``min_surface``
    (default: the default target's minimum surface)."""
    if min_surface is None:
        min_surface = target_limits(None)[1]
    s = floor
    while channels * s * itemsize < min_surface:
        s *= 2
    return s


def bucket_list(smallest: int, largest: int) -> list[int]:
    """Powers of two from ``smallest`` up to the first one >= ``largest``."""
    out = [smallest]
    while out[-1] < largest:
        out.append(out[-1] * 2)
    return out


def pick_bucket(n: int, buckets: Sequence[int], what: str = "sequence") -> int:
    """The first bucket >= ``n``."""
    for b in sorted(buckets):
        if b >= n:
            return b
    raise ModelError(f"{what} of {n} positions exceeds the largest bucket ({max(buckets)})",
                     hint="use a shorter prompt or fewer new tokens")


def target_limits(target: str | None) -> tuple[str, int]:
    """``(target name, min surface bytes)`` for ``target`` (default target if None)."""
    t = get_target(target)
    return t.name, int(t.min_surface_bytes)


def head_channel_limit(target: str | Target | None) -> int:
    """The most output channels one LM head chunk may have on ``target`` (ANE-CONV-CHANNELS)."""
    return int(get_target(target).max_conv_out_channels)


def vocab_chunks(vocab: int, limit: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each LM head chunk: the fewest chunks within ``limit`` channels,
    of even size (the last one possibly smaller), in vocabulary order."""
    if limit < 1:
        raise ModelError(f"a channel limit of {limit} cannot hold an LM head chunk")
    n = -(-vocab // limit)
    size = -(-vocab // n)
    return [(i, min(vocab, i + size)) for i in range(0, vocab, size)]
