"""A one-line progress bar for long model runs (export, generation, embedding)."""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    """A one-line progress bar on stderr; silent when not a TTY or when quiet."""

    def __init__(self, enabled: bool | None = None, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = bool(enabled)
        self._label = ""
        self._total = 0
        self._done = 0
        self._t0 = 0.0

    def start(self, label: str, total: int) -> None:
        self._label, self._total, self._done, self._t0 = label, max(total, 1), 0, time.perf_counter()
        self._draw("")

    def step(self, note: str = "", n: int = 1) -> None:
        self._done = min(self._total, self._done + n)
        self._draw(note)

    def finish(self, note: str = "") -> None:
        if self.enabled:
            self._draw(note)
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, note: str) -> None:
        if not self.enabled:
            return
        width = 24
        fill = int(width * self._done / self._total)
        dt = time.perf_counter() - self._t0
        line = (f"\r{self._label:<9} [{'#' * fill}{'.' * (width - fill)}] "
                f"{self._done}/{self._total} {dt:6.1f}s {note}")
        self.stream.write(line[:120].ljust(80))
        self.stream.flush()
