"""The constraint catalog: what the ANE does, what each claim rests on, and what anec does about it.

Each :class:`Constraint` has a stable id (``ANE-CONCAT`` ...) used in compiler
errors, in the C simulator's messages, in the manifest's ``rewrites`` list, in
comments and docs (which point here instead of restating evidence) and in
tests. An entry says what happens on the device, the evidence for it as
:class:`Evidence` records, and how anec handles it.

Every record names its source (repository and file or test, paper section,
issue), what it demonstrates in one sentence, the scope it was seen on
(:class:`Scope`: the API path, in-memory ``_ANEInMemoryModel`` or disk
``_ANEClient``; the chip; the OS) and its kind:

* ``demonstrated``: a test or a measurement shows it;
* ``documented``: the MIL op set or file format as published (coremltools);
* ``reported``: a claim without a test behind it (a README, an issue, an
  unmerged pull request, a conclusion drawn from runs that were not logged);
* ``hypothesis``: no source demonstrates it; only ``python -m anec.selftest``
  on a Mac settles it.

A record may contradict the entry (``supports=False``). The entry's status
derives from its records (:func:`derive_status`): ``verified`` (a supporting
record demonstrates or documents it, none contradicts), ``reported``,
``contested`` (records disagree) or ``hypothesis``. Claims that would cost
something to guard against are switchable per target (``switch`` names the
:class:`~anec.targets.Target` field).

How anec handles an entry: a legalize rewrite rule, a compile-time error, the
MIL emitter, the runtime, or the SRAM analysis. The tests that trigger a
constraint carry its id as a marker (``@pytest.mark.constraint("ANE-...")``,
:mod:`anec.constraints.markers`); ``anec constraints`` prints the catalog and
``docs/constraints.md`` is generated from it. The types are in
:mod:`anec.constraints.model`, shared records in :mod:`anec.constraints.evidence`,
the entries in :mod:`anec.constraints.entries_ops_runtime` and
:mod:`anec.constraints.entries_io_formats`, the text in
:mod:`anec.constraints.formatting`.
"""

from anec.constraints.catalog import CONSTRAINTS, get_constraint
from anec.constraints.formatting import format_catalog, format_markdown, format_targets_markdown
from anec.constraints.markers import marked_tests
from anec.constraints.model import (CONTESTED, DEMONSTRATED, DOCUMENTED, HANDLINGS, HYPOTHESIS, KINDS, PATHS,
                                    REPORTED, STATUSES, VERIFIED, Constraint, Evidence, Scope, derive_status)

__all__ = ["CONSTRAINTS", "CONTESTED", "DEMONSTRATED", "DOCUMENTED", "HANDLINGS", "HYPOTHESIS", "KINDS", "PATHS",
           "REPORTED", "STATUSES", "VERIFIED", "Constraint", "Evidence", "Scope", "derive_status",
           "format_catalog", "format_markdown", "format_targets_markdown", "get_constraint", "marked_tests"]
