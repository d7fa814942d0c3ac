"""Surfaces sized per stage: a pipeline whose stages differ widely in I/O size allocates each
stage's own size (the manifest's per-stage ``surface_bytes``, the runtime's per-program
surface sizes and the pipeline's ``surface_bytes`` counter), not the largest stage's size for
every stage, and computes exactly what the one-program compile computes.

The func: a residual chain of small layers (``[1, 8, 1, 16]`` fp16, 256 bytes, under the
49152-byte minimum surface) ending in a wide projection to ``[1, 8192, 1, 16]`` fp16 (256 KiB):
cut at two weights per program (three blobs, one for the scalar), the small stages need the minimum surface and the last stage
its wide output.
"""

from __future__ import annotations

import numpy as np

from anec.compiler import compile_module
from anec.ir.parser import parse
from anec.ir.weight_binding import random_weights
from anec.mil.manifest_types import PipelineManifest
from anec.mil.multi_program import PipelineArtifact
from anec.runtime import Runtime
from anec.targets import get_target
from tests.runtime.test_rt_pipeline import residual_chain

WIDE = 8192
MIN = 49152


def small_then_wide(layers: int) -> str:
    """The residual chain of test_rt_pipeline, then a conv to ``WIDE`` channels."""
    tail = f"  return %h{layers - 1}\n}}\n"
    text = residual_chain(layers)
    assert text.endswith(tail)
    return text[:-len(tail)] + "\n".join([f'  %wide_w = const(weight="wide.w") : fp16[{WIDE}, 8, 1, 1]',
                                           f"  %y = conv1x1(%h{layers - 1}, %wide_w)", "  return %y\n}\n"])


def compiled(blobs: int):
    m = parse(small_then_wide(4), "w.ir")
    store = random_weights(m, 0)
    return compile_module(m, weights=store, target=get_target("m4").replace(max_blob_tensors=blobs)).artifacts["f"]


def sizes(p) -> list[tuple[int, int]]:
    return [(s["input_surface_bytes"], s["output_surface_bytes"]) for s in p.stats["stages"]]


def surface_total(p) -> int:
    return sum(i * len(s.inputs) + o * len(s.outputs) for (i, o), s in zip(sizes(p), p.stages))


def test_each_stage_gets_its_own_surface_size_and_the_outputs_do_not_change(tmp_path):
    piped, whole = compiled(3), compiled(64)
    assert isinstance(piped, PipelineArtifact) and len(piped.stages) == 3
    wide = WIDE * 16 * 2
    assert [e.surface_bytes for e in piped.manifest.stages] == [MIN, MIN, wide]
    assert piped.manifest.surface_bytes == wide  # the largest: what a manifest without per-stage sizes uses
    x = {"x": np.random.default_rng(3).standard_normal((1, 8, 1, 16)).astype(np.float16)}
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        y = p(**x)["y"]
        assert sizes(p) == [(MIN, MIN), (MIN, MIN), (wide, wide)]
        st = p.stats
        assert st["surface_bytes"] == surface_total(p)
        assert st["zero_copy_edges"] == 1 and st["copied_edges"] == 1  # small -> small; small -> wide copies
        np.testing.assert_array_equal(y, rt.load(whole)(**x)["y"])
        per_stage = st["surface_bytes"]
        # the same artifact read as an older manifest (one size for every stage): same outputs,
        # every stage at the wide size
        for e in piped.manifest.document["stages"]:
            del e["surface_bytes"]
        piped.manifest = PipelineManifest.of(piped.manifest.document)
        q = rt.load(piped)
        np.testing.assert_array_equal(q(**x)["y"], y)
        assert set(sizes(q)) == {(wide, wide)}
        assert q.stats["zero_copy_edges"] == 2 and q.stats["surface_bytes"] == surface_total(q) > 2 * per_stage
