"""The verdict cache: what ``python -m anec.selftest`` verified on this machine.

A runtime on the ane driver reloads weights only by the strategies the self
test has verified on this machine, OS and anec version (docs/macos.md), and
the compiler keeps ``concat`` as MIL only for this Mac's own target when the
self test found it accepted and correct here (ANE-CONCAT, :func:`concat_reading`).
The verdicts live in ``~/.cache/anec/selftest-verdict.json`` (``$ANEC_CACHE_DIR``,
``$XDG_CACHE_HOME/anec``). The file is read as hostile input: no symlink, at
most 1 MiB, every field checked; an unreadable cache means "nothing verified".
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from anec.version import __version__
from anec.fsutil import write_text_atomic

VERDICT_FILE = "selftest-verdict.json"


def cache_dir() -> Path:
    """$ANEC_CACHE_DIR, else $XDG_CACHE_HOME/anec, else ~/.cache/anec."""
    if os.environ.get("ANEC_CACHE_DIR"):
        return Path(os.environ["ANEC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "anec"


def platform_info() -> dict[str, Any]:
    """This machine, OS, Python and anec (the chip on a Mac)."""
    from anec.machine import detect_chip

    info = {"os": platform.system(), "release": platform.release(), "machine": platform.machine(),
            "python": platform.python_version(), "numpy": np.__version__, "anec": __version__}
    if sys.platform == "darwin":
        info["macos"] = platform.mac_ver()[0] or None
        info["chip"] = detect_chip()
    return info


def machine_key(driver: str) -> str:
    """What a verdict belongs to: the driver, this machine and OS, and this anec."""
    info = platform_info()
    os_ver = info.get("macos") or info["release"]
    return f"{driver}|{info['machine']}|{info.get('chip') or '-'}|{info['os']} {os_ver}|anec {__version__}"


def _read_cache() -> dict[str, Any]:
    try:
        path = cache_dir() / VERDICT_FILE
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            return {}
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    return entries if isinstance(entries, dict) else {}


def cached_verdict(driver: str) -> list[str] | None:
    """The reload strategies `python -m anec.selftest` verified for `driver` on this
    machine, OS and anec version; None when it has not run here (reloads then
    recompile)."""
    entry = _read_cache().get(machine_key(driver))
    if not isinstance(entry, dict):
        return None
    strategies = entry.get("reload_verified")
    if not isinstance(strategies, list) or not all(s in ("data-patch", "new-object") for s in strategies):
        return None
    return list(strategies)


CONCAT_VERDICTS = ("accepted", "rejected", "accepted but wrong")
"""What the selftest's concat check can find: compiled and equal to the reference, refused by
the device compiler, or compiled but computing something else."""


def cached_concat(driver: str) -> str | None:
    """The concat verdict `python -m anec.selftest` cached for `driver` on this machine, OS and
    anec version (one of :data:`CONCAT_VERDICTS`); None when there is none or it is malformed."""
    entry = _read_cache().get(machine_key(driver))
    verdict = entry.get("concat") if isinstance(entry, dict) else None
    return verdict if isinstance(verdict, str) and verdict in CONCAT_VERDICTS else None


def this_mac_target() -> str | None:
    """The target profile of this machine's ANE (a Mac with Apple silicon, running arm64
    Python), else None: compiling anywhere else is cross-compiling."""
    from anec.machine import detect_chip
    from anec.targets import target_for_chip

    if sys.platform != "darwin" or platform.machine() != "arm64":
        return None
    return target_for_chip(detect_chip())


def concat_reading(target: str) -> tuple[str, str]:
    """(reading, why) for ``--concat verdict`` (ANE-CONCAT): ``native`` only when compiling for
    this Mac's own target and the self test's cached verdict here is ``accepted``; otherwise
    ``rewrite`` (no verdict, another verdict, or cross-compiling), with the reason."""
    here = this_mac_target()
    if here is None:
        return "rewrite", "cross-compiling: no ANE here, so no selftest verdict applies"
    if here != target:
        return "rewrite", f"cross-compiling: this Mac is {here}, the target {target}"
    verdict = cached_concat("ane")
    if verdict is None:
        return "rewrite", "no selftest concat verdict on this Mac (run python -m anec.selftest)"
    if verdict != "accepted":
        return "rewrite", f"the selftest found concat {verdict} on this Mac"
    return "native", "the selftest found concat accepted and correct on this Mac"


def save_verdict(report: dict[str, Any]) -> Path | None:
    """Cache the reload, dialect and concat verdicts of a self-test report (atomically); None
    if the reload check did not complete."""
    reload_check = next((c for c in report["checks"] if c["id"] == "reload"), None)
    if not reload_check or "verdict" not in reload_check["data"]:
        return None
    dialect = next((c for c in report["checks"] if c["id"] == "dialect"), None)
    concat = next((c for c in report["checks"] if c["id"] == "concat"), None)
    entries = _read_cache()
    entries[machine_key(report["driver"])] = {
        "reload_verified": reload_check["data"]["verdict"],
        "dialects": dialect["data"].get("accepted") if dialect else None,
        "concat": concat["data"].get("verdict") if concat else None,
        "target": report["target"],
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path = cache_dir() / VERDICT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps({"anec_selftest_verdict": 1, "entries": entries}, indent=2))
    return path


__all__ = ["CONCAT_VERDICTS", "VERDICT_FILE", "cache_dir", "cached_concat", "cached_verdict", "concat_reading",
           "machine_key", "platform_info", "save_verdict", "this_mac_target"]
