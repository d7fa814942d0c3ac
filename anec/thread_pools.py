"""The process's worker thread pools: one per kind of work, made on first use and kept.

A compile would otherwise start dozens of threads, each a wait on a busy
machine. Each pool is made again in a forked child (threads do not survive a
fork). :func:`hash_pool` runs work on the cores that releases the GIL (the
deferred weight hashes of :mod:`anec.hashing`, the page prefault of
:func:`anec.weight_store.touch_pages`); :func:`write_pool` writes and fsyncs the
files of :func:`anec.fsutil.write_tree_atomic`; :func:`map_on_cores` spreads
independent jobs whose time is spent in C (weight compression) over the cores.
"""

from __future__ import annotations

import os
from concurrent import futures
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")

WRITERS = 16
"""Threads writing an output: mostly waiting on fsync, so more than the cores."""

_pools: dict[str, tuple[int, futures.ThreadPoolExecutor]] = {}  # name -> (pid, pool)


def pool(name: str, workers: int) -> futures.ThreadPoolExecutor:
    """The process's worker threads ``anec-<name>``: made on first use and kept; made again
    in a forked child."""
    kept = _pools.get(name)
    if kept is None or kept[0] != os.getpid():
        kept = _pools[name] = (os.getpid(), futures.ThreadPoolExecutor(workers, thread_name_prefix=f"anec-{name}"))
    return kept[1]


def hash_pool() -> futures.ThreadPoolExecutor:
    """The worker threads for work on the cores that releases the GIL: one per core."""
    return pool("hash", os.cpu_count() or 1)


def write_pool() -> futures.ThreadPoolExecutor:
    """The worker threads writing and fsyncing outputs (shared by every write of the process:
    none of their jobs waits for another)."""
    return pool("write", WRITERS)


def map_on_cores(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, in order, computed on the ``anec-cores`` threads (one per
    core; a pool of its own, so the jobs never queue behind the hashes and page prefaults of
    :func:`hash_pool`). For jobs that spend their time in C with the GIL released; the first
    exception raised is raised here. One item, or one core, runs in the calling thread."""
    work = list(items)
    workers = os.cpu_count() or 1
    if len(work) < 2 or workers < 2:
        return [fn(x) for x in work]
    return list(pool("cores", workers).map(fn, work))
