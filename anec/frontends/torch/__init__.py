"""``anec.import_torch``: a PyTorch module as one anec func, through ``torch.export``.

::

    import anec
    im = anec.import_torch(model, (x,))      # torch.export -> core ATen -> anec IR
    print(im.summary())                      # I/O, host steps, layout cost
    im.save("out/model")                     # model.ir + weights.safetensors + import.json
    with im.runner(backend="sim") as run:    # compile, load, apply host steps
        (y,) = run(x)                        # same arrays in, same shapes out

The module is exported (``strict=False``), decomposed to core ATen with
``torch.export``'s default table (except the ops anec lowers whole, such as
``scaled_dot_product_attention``), and its FX graph is walked once into one
func that computes in fp16, the ANE's arithmetic. Embedding lookups of integer
inputs and argmax/topk/sampling at the outputs are host work, described next
to the func and applied by the runner.

The package holds one concern per module:

* :mod:`~anec.frontends.torch.export` -- ``torch.export`` with anec's errors,
  the core-ATen decomposition, and reading a saved ``.pt2`` program safely;
* :mod:`~anec.frontends.torch.fx_import` -- the walk of the exported FX graph
  into one anec func (with :mod:`~anec.frontends.torch.fx_io`, the program's
  I/O names and entry layouts, and :mod:`~anec.frontends.torch.fx_constants`,
  constant folding);
* :mod:`~anec.frontends.torch.imported` -- :class:`ImportedModel` and its saved
  form (an import directory), and the link ``anec compile`` writes to it;
* :mod:`~anec.frontends.torch.runner` -- :class:`TorchRunner`, the host steps
  around the compiled program.

This module holds the entry point, :func:`import_torch`.
"""

from __future__ import annotations

from typing import Any, Mapping

from anec.frontends import require
from anec.frontends.fx import importing_from
from anec.frontends.torch.export import export_module
from anec.frontends.torch.fx_import import import_exported
from anec.frontends.torch.imported import ImportedModel


def import_torch(model: Any, example_inputs: Any = (), *, name: str = "main",
                 example_kwargs: Mapping[str, Any] | None = None,
                 target: str | None = None) -> ImportedModel:
    """Import a PyTorch module (or a ``torch.export.ExportedProgram``) as one anec func.

    ``example_inputs`` (a tuple of tensors, like ``torch.export.export``'s
    ``args``) fixes every shape: ANE programs are static. ``target`` picks the
    chip whose conv channel limit decides conv1x1 vs matmul for wide layers.
    """
    torch = require("torch", "torch", "anec.import_torch")
    with importing_from():
        if isinstance(model, torch.export.ExportedProgram):
            ep = model
        else:
            ep = export_module(model, example_inputs, example_kwargs)
        return import_exported(ep, name=name, target=target)
