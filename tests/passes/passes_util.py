"""Helpers shared by the pass tests: IR text in, passes run, numerics compared."""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from anec.ir.graph import Graph, Module
from anec.ir.interp import interpret, random_inputs
from anec.ir.parser import parse
from anec.ir.printer import print_graph
from anec.ir.verifier import verify
from anec.passes import Pass, PassContext, run_pipeline
from anec.ir.weight_binding import random_weights
from anec.weight_store import WeightStore


CAST_CHAIN = """
func f(%x: fp16[1, 8, 1, 8]) {
  %a = cast(%x, dtype=fp32) : fp32[1, 8, 1, 8]
  %b = cast(%a, dtype=fp16) : fp16[1, 8, 1, 8]
  %y = relu(%b) : fp16[1, 8, 1, 8]
  return %y
}"""
"""A cast round trip before a relu: what the cleanup passes remove (manager tests)."""


def parse_module(text: str, name: str = "test.ir") -> Module:
    module = parse(text, name)
    verify(module)
    return module


def parse_func(text: str, name: str = "test.ir") -> Graph:
    """The only func of ``text`` (verified)."""
    return parse_module(text, name).func()


def run(passes: Pass | Iterable[Pass], graph: Graph, ctx: PassContext | None = None) -> PassContext:
    """Run passes on ``graph`` through the manager (verifying after each); the context."""
    ctx = ctx or PassContext.default()
    passes = (passes,) if isinstance(passes, Pass) else tuple(passes)
    run_pipeline(graph, passes, ctx)
    return ctx


def ops_of(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def text_of(graph: Graph) -> str:
    return print_graph(graph)


def logical_outputs(graph: Graph, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs as the caller sees them (``graph.facts.logical_outputs``): chunked ones
    reassembled, rank-4 device outputs reshaped to their logical shape."""
    out = dict(outputs)
    for entry in graph.facts.logical_outputs:
        pieces = [out.pop(p) for p in entry["pieces"]]
        axis = entry["axis"]
        whole = pieces[0] if axis is None else np.concatenate(pieces, axis=axis)
        out[entry["name"]] = whole.reshape(entry["shape"])
    return out


def device_inputs(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` (logical shapes) reshaped to the shapes ``graph`` declares (rank-4 device I/O)."""
    shapes = {v.name: v.type.shape for v in graph.inputs}
    return {k: np.reshape(v, shapes[k]) if k in shapes else v for k, v in feeds.items()}


def compare(before: Graph, after: Graph, weights: WeightStore, seed: int = 0,
            rtol: float = 1e-3, atol: float = 1e-3, inputs=None) -> float:
    """Run both graphs in the fp32 interpreter; assert equal logical outputs; the max error.

    ``atol`` is relative to the largest output magnitude (at least 1).
    """
    feeds = inputs if inputs is not None else random_inputs(before, seed)
    ref = interpret(before, feeds, weights, mode="fp32")
    got = logical_outputs(after, interpret(after, device_inputs(after, feeds), weights, mode="fp32"))
    assert list(got) == list(ref) or sorted(got) == sorted(ref)
    worst = 0.0
    for name, want in ref.items():
        have = got[name]
        assert have.shape == want.shape, name
        a, b = want.astype(np.float64), have.astype(np.float64)
        scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(a), a, 0)), initial=0)))
        ok = np.isclose(b, a, rtol=rtol, atol=atol * scale, equal_nan=True)
        assert ok.all(), f"output {name}: max err {np.nanmax(np.abs(a - b))}"
        err = np.abs(a - b)[np.isfinite(a) & np.isfinite(b)]
        worst = max(worst, float(err.max(initial=0)))
    return worst


def weights_for(graph_or_module, seed: int = 0) -> WeightStore:
    return random_weights(graph_or_module, seed)
