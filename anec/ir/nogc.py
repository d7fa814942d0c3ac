"""Pausing Python's cyclic garbage collector around work on large graphs."""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

__all__ = ["no_cyclic_gc"]


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (parsing, verifying, the pass pipeline, a
    whole compile).

    Each allocates many small objects while a large graph is alive; the
    cyclic collector would rescan every live object again and again, which
    made a 100k-node parse and pipeline superlinear (measured in
    benchmarks/bench_passes.py). Refcounting still frees what is dropped;
    the cycles left meanwhile (erased nodes and their results, an error's
    traceback) are collected by the collector's next full collection. Its
    previous state is restored.

    On the way out, what was allocated meanwhile joins the oldest generation
    (``gc.freeze()`` then ``gc.unfreeze()``: a list splice, no traversal),
    as the collector would have promoted a graph that stays alive. Left in
    the youngest generation, the first collection after the block would
    traverse every object of the graph at once, and the next ones again (a
    second per million objects, measured on a 100k-node pipeline). Skipped
    when the caller froze objects itself (unfreezing would release theirs).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()
