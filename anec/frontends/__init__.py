"""Frontends that bring models from other frameworks into anec, and back out.

* :mod:`anec.frontends.torch` -- ``anec.import_torch``: a PyTorch module
  (through ``torch.export`` and its core-ATen decompositions) becomes one anec
  func plus its weights; host work (embedding lookups at the inputs,
  argmax/sampling at the outputs) is described next to it.
* :mod:`anec.frontends.lowerings` -- the table of supported ATen ops and the IR
  each one becomes, assembled from the op families of :mod:`anec.frontends.aten`.
* :mod:`anec.frontends.tensor_views` -- logical torch tensors held in physical
  IR values of another layout (the ANE's ``[1, C, 1, S]``), and the IR emitter
  that folds layout ops as it builds.
* :mod:`anec.frontends.coreml` -- ``anec export-coreml``: a compiled artifact
  as a Core ML ML Program (``.mlpackage``), op for op.

This module holds what they share: the errors and :func:`require` (optional
extras). torch and coremltools are optional extras (``pip install anec[torch]``,
``pip install anec[coreml]``); importing this package needs neither.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from anec.diagnostics import AnecError


class MissingExtraError(AnecError):
    """An optional dependency (torch, coremltools) is not installed."""


class TorchImportError(AnecError):
    """A PyTorch model (or a saved torch.export program) that anec cannot import."""


class UnsupportedOpError(TorchImportError):
    """An ATen op (or a use of one) that the core IR ops cannot express."""


class CoreMLExportError(AnecError):
    """An artifact that cannot be written or verified as a Core ML package."""


def require(module: str, extra: str, what: str) -> Any:
    """``import module`` or a :class:`MissingExtraError` naming ``pip install anec[extra]``.

    Import-time chatter of the library (coremltools prints version notices and
    missing-native-library messages on Linux) is not shown."""
    import contextlib
    import io
    import logging
    import warnings

    try:
        if sys.modules.get(module) is not None:
            return sys.modules[module]
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            try:
                return importlib.import_module(module)
            finally:
                logging.disable(logging.NOTSET)
    except ImportError as e:
        raise MissingExtraError(
            f"{what} needs {module}, which is not installed ({e})",
            hint=f"pip install 'anec[{extra}]'",
        ) from None
