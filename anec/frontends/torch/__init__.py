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
* :mod:`~anec.frontends.torch.fx_import` -- ``import_torch`` and the walk of
  the exported FX graph into one anec func, with
  :mod:`~anec.frontends.torch.fx_io` (the program's I/O names and entry
  layouts) and :mod:`~anec.frontends.torch.fx_constants` (constant folding);
* :mod:`~anec.frontends.torch.imported` -- ``ImportedModel`` and its saved
  form (an import directory), and the link ``anec compile`` writes to it;
* :mod:`~anec.frontends.torch.runner` -- ``TorchRunner``, the host steps
  around the compiled program.

This file holds no code: torch records the frames of files named
``torch/__init__.py`` in the stack traces of exported nodes, which anec reads
to locate errors in the user's source.
"""
