"""cffi (API mode) build of the anec C runtime: ``anec.runtime._native``.

Used by ``setup.py`` (``cffi_modules``) for ``pip install``; run it directly
(``python anec/runtime/_ffi_build.py``) to build the extension in place for
development. The sources are compiled with ``-Wall -Wextra -Werror``.
"""

from __future__ import annotations

import os
import sys

from cffi import FFI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Relative to the project root (setuptools wants relative source paths): every
# runtime source in csrc/ (fuzz harnesses live in tests/c). The ane driver is
# plain C that resolves every Apple symbol at run time, so it builds
# everywhere; a checkout without it gets a sim-only runtime.
SOURCES = sorted(os.path.join("csrc", f) for f in os.listdir(os.path.join(ROOT, "csrc")) if f.endswith(".c"))
_DEFINES: list[tuple[str, str | None]] = []
if "csrc/driver_ane.c" not in SOURCES:  # pragma: no cover
    _DEFINES.append(("ANEC_NO_ANE_DRIVER", None))

_libraries = ["m"]
if sys.platform.startswith("linux"):
    _libraries += ["pthread", "dl"]

# -ffp-contract=off: a * b + c rounds twice on every compiler (GCC in ISO C mode does not fuse
# it, clang does by default), so the sim gives the same bits on macOS as on Linux; the kernels
# that fuse say so (fmaf, FMA intrinsics).
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fno-strict-aliasing", "-ffp-contract=off"]


def make_builder(absolute: bool = False) -> FFI:
    """The FFI builder; ``absolute`` paths for building outside the project root."""
    base = ROOT if absolute else ""
    ffi = FFI()
    with open(os.path.join(ROOT, "csrc", "anec_rt.cdef.h"), encoding="utf-8") as f:
        ffi.cdef(f.read())
    ffi.set_source(
        "anec.runtime._native",
        '#include "anec_rt.h"',
        sources=[os.path.join(base, s) for s in SOURCES],
        include_dirs=[os.path.join(base, "csrc")],
        libraries=_libraries,
        define_macros=_DEFINES,
        extra_compile_args=CFLAGS,
    )
    return ffi


ffibuilder = make_builder()

if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="anec-ffi-") as tmp:
        make_builder(absolute=True).compile(tmpdir=tmp, verbose=False)
        # compile() writes anec/runtime/_native*.so relative to tmpdir: move it next to this file
        for root, _dirs, files in os.walk(tmp):
            for name in files:
                if name.startswith("_native") and name.endswith((".so", ".pyd", ".dylib")):
                    dst = os.path.join(ROOT, "anec", "runtime", name)
                    os.replace(os.path.join(root, name), dst)
                    print(dst)
