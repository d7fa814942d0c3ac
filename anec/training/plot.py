"""A loss curve as a PNG, with no plotting library: a line chart, axis ticks and labels drawn
from a 3x5 bitmap font, written with zlib (deterministic bytes for the same data)."""

from __future__ import annotations

import struct
import zlib
from typing import Sequence

import numpy as np

_FONT = {  # 3x5 glyphs, rows top to bottom, 3 bits each
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
    "e": "000111111100111", "s": "000111100001111", "t": "010111010010011", "p": "000111101111100",
    "l": "110010010010111", "o": "000111101101111", " ": "000000000000000", ":": "000010000010000",
}


def _text(img: np.ndarray, x: int, y: int, s: str, scale: int = 2, color=(60, 60, 60)) -> None:
    for ch in s:
        g = _FONT.get(ch, _FONT[" "])
        for r in range(5):
            for c in range(3):
                if g[r * 3 + c] == "1":
                    img[y + r * scale: y + (r + 1) * scale, x + c * scale: x + (c + 1) * scale] = color
        x += 4 * scale


def _line(img: np.ndarray, x0: float, y0: float, x1: float, y1: float, color) -> None:
    n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    xs = np.linspace(x0, x1, n).round().astype(int)
    ys = np.linspace(y0, y1, n).round().astype(int)
    h, w, _ = img.shape
    ok = (xs >= 0) & (xs < w) & (ys >= 0) & (ys < h)
    for dy in (0, 1):
        img[np.clip(ys[ok] + dy, 0, h - 1), xs[ok]] = color


def _num(v: float) -> str:
    return f"{v:.3g}".replace("+", "")


def loss_png(steps: Sequence[int], losses: Sequence[float], width: int = 640, height: int = 360) -> bytes:
    """PNG bytes of the loss against the step (non-finite losses are left out)."""
    img = np.full((height, width, 3), 255, np.uint8)
    left, right, top, bottom = 70, 20, 30, 40
    pw, ph = width - left - right, height - top - bottom
    img[top: top + ph + 1, left] = (0, 0, 0)
    img[top + ph, left: left + pw + 1] = (0, 0, 0)
    pts = [(s, l) for s, l in zip(steps, losses) if np.isfinite(l)]
    _text(img, 8, 8, "loss", 2)
    _text(img, left + pw - 40, height - 16, "step", 2)
    if pts:
        s = np.array([p[0] for p in pts], float)
        lv = np.array([p[1] for p in pts], float)
        s0, s1 = s.min(), max(s.max(), s.min() + 1)
        l0, l1 = lv.min(), lv.max()
        if l1 - l0 < 1e-12:
            l0, l1 = l0 - 0.5, l1 + 0.5
        for k in range(5):  # ticks
            fy = top + ph - k * ph / 4
            img[int(fy), left - 5: left] = (0, 0, 0)
            _text(img, 4, int(fy) - 5, _num(l0 + (l1 - l0) * k / 4), 2)
            fx = left + k * pw / 4
            img[top + ph: top + ph + 5, int(fx)] = (0, 0, 0)
            _text(img, int(fx) - 8, top + ph + 10, str(int(round(s0 + (s1 - s0) * k / 4))), 2)
        xs = left + (s - s0) / (s1 - s0) * pw
        ys = top + ph - (lv - l0) / (l1 - l0) * ph
        for i in range(1, len(xs)):
            _line(img, xs[i - 1], ys[i - 1], xs[i], ys[i], (31, 119, 180))
        if len(xs) == 1:
            img[int(ys[0]) - 1: int(ys[0]) + 2, int(xs[0]) - 1: int(xs[0]) + 2] = (31, 119, 180)
    raw = b"".join(b"\x00" + img[r].tobytes() for r in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


__all__ = ["loss_png"]
