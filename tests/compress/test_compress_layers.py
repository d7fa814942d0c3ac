"""The compressor calls the C kernels through anec.c_extension, below the runtime: importing
and running it loads the extension without importing the runtime package, and the runtime's
wrappers use the same loaded module."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from anec import c_extension


def test_compressing_never_imports_the_runtime():
    code = ("import sys, numpy as np\n"
            "from anec.compress import compress_tensor, get_format\n"
            "compress_tensor(np.ones((4, 8), np.float16), get_format('int8'), 0)\n"
            "compress_tensor(np.arange(64, dtype=np.float16).reshape(8, 8), get_format('lut2'), 0)\n"
            "print(sorted(m for m in sys.modules if m == 'anec.runtime' or m.startswith('anec.runtime.')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    loaded = eval(r.stdout.strip())  # noqa: S307 - our own subprocess's printed list
    ours = [m for m in loaded if m == c_extension.EXTENSION or m.startswith(c_extension.EXTENSION + ".")]
    assert loaded == ours  # the extension module only (and cffi's .lib), loaded by file: no runtime code
    assert (c_extension.EXTENSION in loaded) == c_extension.available()


def test_the_runtime_wraps_the_module_c_extension_loaded():
    from anec.runtime import native

    assert native.ffi is c_extension.ffi and native.lib is c_extension.lib
    if c_extension.available():
        assert sys.modules[c_extension.EXTENSION].lib is c_extension.lib
        q = c_extension.quantize_linear8(np.ones((2, 4), np.float16), 0, 0, True, False)
        assert q is not None and q[0][0].dtype == np.int8
