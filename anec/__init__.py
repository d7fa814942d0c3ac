"""anec: an ahead-of-time optimizing compiler toolchain for the Apple Neural Engine.

The package root stays import-light; the public entry points are loaded on
first use::

    import anec
    module = anec.parse_file("model.ir")
    result = anec.compile_module(module, random_seed=0)
    with anec.Runtime(backend="auto") as rt:
        prog = rt.load(result.artifacts["mlp"])
        outputs = prog(x=x)
"""

from __future__ import annotations

from anec._lazy import lazy_exports
from anec.version import __version__

_LAZY = {
    "parse": "anec.ir",
    "parse_file": "anec.ir",
    "print_module": "anec.ir",
    "verify": "anec.ir",
    "compile_module": "anec.compiler",
    "Runtime": "anec.runtime",
    "AnecError": "anec.diagnostics",
    "import_torch": "anec.frontends.torch.fx_import",
}

__all__ = ["__version__", *_LAZY]  # noqa: PLE0604 - _LAZY is a dict: its keys, the names


__getattr__, __dir__ = lazy_exports("anec", _LAZY, globals())
