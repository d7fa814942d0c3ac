"""What machine this is: macOS sysctl probes (the doctor, the selftest)."""

from __future__ import annotations

import subprocess
import sys


def sysctl(name: str) -> str | None:
    """A sysctl value on macOS, else None."""
    if sys.platform != "darwin":
        return None
    try:
        r = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def detect_chip() -> str | None:
    """The Apple chip name ("Apple M4 Max") on macOS, else None."""
    return sysctl("machdep.cpu.brand_string")
