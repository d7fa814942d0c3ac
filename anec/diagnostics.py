"""Source locations and the error hierarchy of anec.

Every error a user can cause is an :class:`AnecError`. When it carries a
:class:`Span` it renders like a compiler diagnostic::

    model.ir:7:8: error: unknown op 'gleu'
      %g = gleu(%h)
           ^^^^
    hint: did you mean 'gelu'?

The CLI prints :meth:`AnecError.render` to stderr and exits with status 1;
any other exception is reported as a bug in anec (exit 3, see anec/cli/group.py).
"""

from __future__ import annotations

import bisect
import difflib
import functools
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True, eq=False)
class Source:
    """A text the user gave us (a file or a string), kept for error rendering."""

    name: str
    """File name as the user spelled it, or ``<string>``."""
    text: str
    """The full text."""

    @functools.cached_property
    def _line_starts(self) -> list[int]:
        """Offsets where each line starts (computed once; rendering many
        diagnostics for one file stays linear)."""
        starts = [0]
        find = self.text.find
        pos = find("\n")
        while pos != -1:
            starts.append(pos + 1)
            pos = find("\n", pos + 1)
        return starts

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its newline."""
        starts = self._line_starts
        if not 1 <= line <= len(starts):
            return ""
        end = starts[line] - 1 if line < len(starts) else len(self.text)
        return self.text[starts[line - 1] : end].rstrip("\r")


@dataclass(frozen=True, eq=False)
class Span:
    """A range of characters ``[start, end)`` in a :class:`Source`."""

    source: Source
    start: int
    end: int

    @property
    def line(self) -> int:
        return self.source.line_col(self.start)[0]

    @property
    def col(self) -> int:
        return self.source.line_col(self.start)[1]

    @property
    def location(self) -> str:
        """``file:line:col``."""
        line, col = self.source.line_col(self.start)
        return f"{self.source.name}:{line}:{col}"

    def caret_lines(self) -> str:
        """The source line and a caret line under the span (two lines)."""
        line, col = self.source.line_col(self.start)
        text = self.source.line_text(line)
        end_line, end_col = self.source.line_col(max(self.start, self.end))
        width = (end_col - col) if end_line == line else len(text) - col + 1
        width = max(1, width)
        pad = "".join("\t" if ch == "\t" else " " for ch in text[: col - 1])
        return f"  {text}\n  {pad}{'^' * width}"

    def __repr__(self) -> str:
        return f"Span({self.location})"


class AnecError(Exception):
    """An error caused by user input: rendered, never a traceback."""

    kind = "error"

    def __init__(
        self,
        message: str,
        span: Span | None = None,
        hint: str | None = None,
        constraint: str | None = None,
        notes: Iterable[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint
        self.constraint = constraint
        self.notes = list(notes)

    def render(self) -> str:
        """The full diagnostic: location, message, caret lines, hint."""
        msg = self.message
        if self.constraint:
            msg = f"[{self.constraint}] {msg}"
        if self.span is not None:
            out = f"{self.span.location}: {self.kind}: {msg}\n{self.span.caret_lines()}"
        else:
            out = f"{self.kind}: {msg}"
        for note in self.notes:
            out += f"\nnote: {note}"
        if self.hint:
            out += f"\nhint: {self.hint}"
        return out

    def __str__(self) -> str:
        return self.render()


class ParseError(AnecError):
    """The text is not well-formed IR."""


class VerifyError(AnecError):
    """The IR is well-formed but not valid (types, SSA, attributes)."""


class WeightError(AnecError):
    """A weight file is missing, unreadable, or does not match the IR."""


class ConstraintError(AnecError):
    """A program cannot be made acceptable to the ANE; carries a constraint id."""


class PassError(AnecError):
    """A pass failed or left the IR invalid (names the pass)."""


class TrainingError(AnecError):
    """A training run cannot start or continue (names what and why)."""


class ArtifactError(AnecError):
    """A compiled artifact directory is missing, malformed or inconsistent."""


class RuntimeFailure(AnecError):
    """The C runtime or a driver reported an error (carries the C message)."""

    def __init__(self, message: str, code: int = 0, **kw) -> None:
        super().__init__(message, **kw)
        self.code = code


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """``"did you mean 'x'?"`` for the closest candidate, or None."""
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else None

