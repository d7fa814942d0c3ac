"""The complete table of ATen lowerings: the core ops and the spatial layers.

:mod:`anec.frontends.aten` holds the table and the lowerings of the core ops;
:mod:`anec.frontends.spatial` adds convolutions, pooling and upsampling to it
when imported. Code that reads the table (the importer, ``anec import --ops``,
the docs) imports it from here, so it always sees every lowering, and neither
of the two modules has to import the other back.
"""

from __future__ import annotations

from anec.frontends import spatial as _spatial  # noqa: F401  (registers the spatial lowerings)
from anec.frontends.aten import HANDLERS, format_table, rows

__all__ = ["HANDLERS", "format_table", "rows"]
