"""What every model frontend shares: its error type.

The frontends' shared pieces live by concern: :mod:`anec.models.layout` (the
BC1S activation layout), :mod:`anec.models.buckets` (static sequence
buckets), :mod:`anec.models.blocks` (IR building blocks),
:mod:`anec.models.programs` (compiling and running a model's programs) and
:mod:`anec.models.progress`.
"""

from __future__ import annotations

from anec.diagnostics import AnecError
from anec.models.progress import Progress  # anec.cli imports it from here

__all__ = ["ModelError", "Progress"]


class ModelError(AnecError):
    """Bad input to a model frontend (config, prompt, bucket, adapter)."""
