"""Mutants that survive because no test can tell them from the original, and why.

A mutant belongs here only when its behaviour is the original's on every input the
code can receive (or differs only in a way nothing can observe: a message that is
never shown, a cache that is rebuilt). Anything a test could tell apart gets a test.

PY_EQUIVALENT: mutmut mutant name -> (the mutant's changed line, as mutmut's diff shows
it with a leading "+", stripped; the reason). The line is checked on every report: when
the code moves and the name now names another mutation, the entry shows as stale.
C_EQUIVALENT: c_mutants.py id -> the reason.
"""

from __future__ import annotations

PY_EQUIVALENT: dict[str, tuple[str, str]] = {}

C_EQUIVALENT: dict[str, str] = {}
