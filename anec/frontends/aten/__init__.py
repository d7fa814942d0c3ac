"""ATen lowerings by op family: what each supported ATen op becomes in anec IR.

* :mod:`~anec.frontends.aten.values` -- the values of FX nodes (``Const``,
  ``WeightRef``, ``InputRef``, ``HostValue``, ``Deferred``) and handler types;
* :mod:`~anec.frontends.aten.context` -- ``Lowering``, what every handler works
  with (operands on the device, fp16 consts, layout-aware elementwise ops,
  matmul and linear layers, located errors);
* :mod:`~anec.frontends.aten.table` -- ``Row`` and ``Family``, the registration
  of handlers;
* the families: :mod:`~anec.frontends.aten.elementwise` (arithmetic,
  activations, comparisons, logic, casts), :mod:`~anec.frontends.aten.reductions`
  (reductions, softmax, norms), :mod:`~anec.frontends.aten.matmul` (matrix
  products, linear layers, attention), :mod:`~anec.frontends.aten.shapes`
  (views, slicing, joining, indexing), :mod:`~anec.frontends.aten.host` (host
  work at the outputs), and the spatial layers on the canonical forms of
  :mod:`~anec.frontends.aten.spatial`: :mod:`~anec.frontends.aten.conv` and
  :mod:`~anec.frontends.aten.pooling`.

The complete table is :data:`anec.frontends.lowerings.HANDLERS`.
"""
