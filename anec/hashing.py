"""SHA-256 of texts and of weight payloads, large payloads hashed on worker threads.

:func:`sha256` names the MIL text, ``program.ir`` and the manifests;
:func:`array_sha256` and :func:`payload_digests` hash weight payloads in place
(row-major bytes, no copy). hashlib releases the GIL, so payloads of at least
:data:`PARALLEL_BYTES` are hashed in parallel. Within :func:`deferred_hashes`
the artifact builder submits each payload to :func:`anec.thread_pools.hash_pool`
instead and a manifest's weight hashes are filled in once they are done
(:meth:`anec.mil.artifact.Artifact.finish`).
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import numpy as np

PARALLEL_BYTES = 1 << 20
"""Payloads at least this large are hashed (and files this large written) on worker threads:
hashlib and file writes release the GIL."""


def sha256(data: bytes | str) -> str:
    """The hex sha256 of ``data`` (text as UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def parallel_workers(sizes: list[int]) -> int:
    """Threads to hash payloads of these byte sizes: one per payload of at least
    :data:`PARALLEL_BYTES`, at most the cores and eight."""
    big = sum(1 for n in sizes if n >= PARALLEL_BYTES)
    return min(big, os.cpu_count() or 1, 8)


def array_sha256(a: np.ndarray) -> str:
    """The hex sha256 of an array's bytes (row-major), hashed in place when contiguous."""
    a = np.ascontiguousarray(a)
    return hashlib.sha256(memoryview(a.reshape(-1)).cast("B")).hexdigest()


def payload_digests(arrays: list[np.ndarray]) -> list[str]:
    """sha256 of each array's bytes (row-major), hashed in place, large ones in parallel."""
    workers = parallel_workers([a.nbytes for a in arrays])
    if workers < 2:
        return [array_sha256(a) for a in arrays]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(array_sha256, arrays))


_deferring: ContextVar[bool] = ContextVar("anec_defer_weight_hashes", default=False)


@contextmanager
def deferred_hashes() -> Iterator[None]:
    """Within this block :meth:`anec.mil.artifact.Artifact.build` hashes the weights on worker
    threads and returns at once: each manifest's weight ``sha256`` is filled in by
    :meth:`~anec.mil.artifact.Artifact.finish` (which
    :meth:`~anec.mil.artifact.Artifact.files`, and so every write, calls first).
    :func:`anec.compiler.compile_module` builds its artifacts so, and
    :func:`anec.mil.output.write_output` streams the weights to disk while they are hashed."""
    token = _deferring.set(True)
    try:
        yield
    finally:
        _deferring.reset(token)


def hashes_deferred() -> bool:
    """True inside :func:`deferred_hashes`."""
    return _deferring.get()
