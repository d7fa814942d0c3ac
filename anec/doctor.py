"""``anec doctor``: what this machine can run, in a form to paste into an issue.

It reports the platform (OS, machine, macOS version and chip), the Python,
anec, numpy and cffi versions, whether the C runtime extension is built,
which drivers are usable and why not, whether AppleNeuralEngine.framework is
present, the default target's limits, and the compile budget a fresh runtime
has. Every probe is guarded: the doctor is most useful on a broken install,
so it reports a failure as text instead of raising.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from typing import Any, Callable

from anec.machine import detect_chip, sysctl
from anec.targets import DEFAULT_TARGET, get_target, target_for_chip

__all__ = ["collect", "detect_chip", "render", "target_for_chip"]

ANE_FRAMEWORK_DIR = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework"
ANE_FRAMEWORK_BINARY = ANE_FRAMEWORK_DIR + "/AppleNeuralEngine"

BUILD_HINT = (
    "build it with `pip install .` (or `pip install -e .`) from the anec source tree; "
    "this needs a C compiler (on macOS: `xcode-select --install`)"
)


def _guard(fn: Callable[[], Any]) -> Any:
    """fn() or {"error": "..."} when it raises (the doctor never tracebacks)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - every failure becomes part of the report
        return {"error": f"{type(e).__name__}: {e}"}


def _version(dist: str) -> str:
    try:
        from importlib import metadata

        return metadata.version(dist)
    except Exception:  # noqa: BLE001
        try:
            return str(importlib.import_module(dist).__version__)
        except Exception:  # noqa: BLE001
            return "not installed"


def _platform() -> dict[str, Any]:
    info: dict[str, Any] = {
        "os": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
    }
    if sys.platform == "darwin":
        info["macos"] = platform.mac_ver()[0] or None
        info["chip"] = detect_chip()
        # An x86_64 Python on Apple silicon runs under Rosetta: no ANE driver.
        info["rosetta"] = sysctl("sysctl.proc_translated") == "1"
    return info


def _versions() -> dict[str, Any]:
    import anec

    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "anec": anec.__version__,
        "anec_location": os.path.dirname(os.path.abspath(anec.__file__)),
        "numpy": _version("numpy"),
        "cffi": _version("cffi"),
    }


def _framework() -> dict[str, Any]:
    return {
        "path": ANE_FRAMEWORK_DIR,
        "directory_exists": os.path.isdir(ANE_FRAMEWORK_DIR),
        # Since macOS 11 system frameworks live in the dyld shared cache: the
        # binary file is usually absent even where dlopen works.
        "binary_file_exists": os.path.exists(ANE_FRAMEWORK_BINARY),
    }


def _runtime() -> dict[str, Any]:
    from anec.runtime import native

    if not native.available():
        return {
            "extension": False,
            "extension_error": str(getattr(native, "_IMPORT_ERROR", "") or "import failed"),
            "hint": BUILD_HINT,
        }
    drivers = {}
    for name in ("sim", "ane"):
        ok, why = native.driver_available(name)
        drivers[name] = {"available": ok, "why": why}
    out: dict[str, Any] = {"extension": True, "drivers": drivers}

    def budget() -> dict[str, Any]:
        from anec.runtime import Runtime

        rt = Runtime(backend="auto")
        try:
            st = rt.stats
            return {"driver": rt.backend, "compile_budget": st["compile_budget"],
                    "compile_budget_left": st["compile_budget_left"], "reload_verified": rt.reload_verified}
        finally:
            rt.close()

    out["fresh_runtime"] = _guard(budget)
    return out


def _target(chip: str | None) -> dict[str, Any]:
    t = get_target(DEFAULT_TARGET)
    limits = {
        "sram_bytes": t.sram_bytes,
        "max_blob_tensors": t.max_blob_tensors,
        "scalar_penalty": t.scalar_penalty,
        "max_conv_out_channels": t.max_conv_out_channels,
        "min_surface_bytes": t.min_surface_bytes,
        "fp32_io": t.fp32_io,
        "surface_alignment": t.surface_alignment,
        "mil_dialect": t.mil_dialect,
    }
    return {"default": t.name, "limits": limits, "suggested_for_chip": target_for_chip(chip)}


def collect() -> dict[str, Any]:
    """Everything the doctor knows, as JSON-able data."""
    plat = _guard(_platform)
    chip = plat.get("chip") if isinstance(plat, dict) else None
    return {
        "platform": plat,
        "versions": _guard(_versions),
        "framework": _guard(_framework),
        "runtime": _guard(_runtime),
        "target": _guard(lambda: _target(chip)),
    }


# ---- rendering -------------------------------------------------------------------------


def _row(key: str, value: Any) -> str:
    return f"  {key:<22} {value}"


def _err(section: Any) -> str | None:
    return section["error"] if isinstance(section, dict) and "error" in section else None


def render(info: dict[str, Any]) -> str:
    """The report as plain text (stable layout, one fact per line)."""
    lines = ["anec doctor", "", "platform"]
    p = info["platform"]
    if _err(p):
        lines.append(_row("error", _err(p)))
    else:
        lines.append(_row("os", f"{p['os']} {p['release']} ({p['machine']})"))
        if p.get("os") == "Darwin":
            lines.append(_row("macOS", p.get("macos") or "unknown"))
            lines.append(_row("chip", p.get("chip") or "unknown"))
            if p.get("rosetta"):
                lines.append(_row("rosetta", "yes: this Python is x86_64 under Rosetta; use an arm64 Python"))
        else:
            lines.append(_row("macOS", "no (the ane driver needs macOS on Apple silicon; the sim runs here)"))
    v = info["versions"]
    if _err(v):
        lines.append(_row("versions", _err(v)))
    else:
        lines.append(_row("python", f"{v['python']} ({v['python_executable']})"))
        lines.append(_row("anec", f"{v['anec']} ({v['anec_location']})"))
        lines.append(_row("numpy", v["numpy"]))
        lines.append(_row("cffi", v["cffi"]))

    lines += ["", "runtime"]
    r = info["runtime"]
    if _err(r):
        lines.append(_row("error", _err(r)))
    elif not r["extension"]:
        lines.append(_row("C extension", f"NOT BUILT ({r['extension_error']})"))
        lines.append(_row("fix", r["hint"]))
    else:
        lines.append(_row("C extension", "built"))
        for name, d in r["drivers"].items():
            state = "available" if d["available"] else "unavailable"
            lines.append(_row(f"driver {name}", f"{state}: {d['why']}" if d["why"] else state))
        fr = r["fresh_runtime"]
        if _err(fr):
            lines.append(_row("auto runtime", f"cannot open: {_err(fr)}"))
        else:
            lines.append(_row("auto picks", fr["driver"]))
            lines.append(_row("compile budget", f"{fr['compile_budget_left']} of {fr['compile_budget']} "
                                                f"compiles left in a fresh runtime"))
            verified = [v for v in fr.get("reload_verified", []) if v != "recompile"]
            how = ", ".join(verified) if verified else "none"
            if fr["driver"] == "ane" and not {"data-patch", "new-object"} & set(verified):
                how += (" (run `python -m anec.selftest`: until it verifies data patches or new objects, "
                        "reloads recompile)")
            lines.append(_row("reloads verified", how))
    f = info["framework"]
    if _err(f):
        lines.append(_row("framework", _err(f)))
    else:
        if f["directory_exists"]:
            where = "present" + ("" if f["binary_file_exists"] else " (binary in the dyld shared cache)")
        else:
            where = "not found"
        lines.append(_row("framework", f"{f['path']}: {where}"))

    lines += ["", "target"]
    t = info["target"]
    if _err(t):
        lines.append(_row("error", _err(t)))
    else:
        lines.append(_row("default", t["default"]))
        if t.get("suggested_for_chip") and t["suggested_for_chip"] != t["default"]:
            lines.append(_row("this chip", f"{t['suggested_for_chip']} (pass --target {t['suggested_for_chip']})"))
        for k, val in t["limits"].items():
            lines.append(_row(k, val))
    return "\n".join(lines) + "\n"
