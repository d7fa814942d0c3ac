"""MIL emission and the compiled artifact.

* :mod:`anec.mil.emitter` — IR graph -> MIL text and the weight plan
  (the only code writing MIL text);
* :mod:`anec.mil.blobfile` — the BLOBFILE (MILBlob storage v2) writer and reader;
* :mod:`anec.mil.artifact` — :class:`Artifact`: MIL + weight files + manifest,
  written and loaded atomically;
* :mod:`anec.mil.output` — a compile output: an artifact per func and the output index;
* :mod:`anec.mil.json_format` — the JSON layout of manifests and indexes.
"""

from __future__ import annotations

from anec.mil.blobfile import BlobReader, BlobWriter
from anec.mil.emitter import MilProgram, WeightSlot, emit_mil
from anec.mil.float_literals import float_literal

__all__ = ["BlobReader", "BlobWriter", "MilProgram", "WeightSlot", "emit_mil", "float_literal"]
