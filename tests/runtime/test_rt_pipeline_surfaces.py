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


UNIFORM_SCRIPT = r"""
import numpy as np
from anec.compiler import compile_module
from anec.ir.parser import parse
from anec.runtime import Runtime

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))

n = 8
sig = ", ".join(["%a: fp16[1, 512, 128, 128]"] + [f"%b{i}: fp16[1, 512, 1, 1]" for i in range(n)])
body, prev = ["%s = reduce_sum(%a, axes=[2, 3], keep_dims=true)"], "%s"
for i in range(n):
    body.append(f"%t{i} = add({prev}, %b{i})")
    prev = f"%t{i}"
text = f"func f({sig}) {{\n" + "".join(f"  {l}\n" for l in body) + f"  return {prev}\n}}\n"
art = compile_module(parse(text, "f.ir"), random_seed=0).artifacts["f"]
with Runtime("sim") as rt:
    before = rss()
    p = rt.load(art)
    feeds = {"a": np.full((1, 512, 128, 128), 2.0**-10, np.float16)}
    feeds.update({f"b{i}": np.ones((1, 512, 1, 1), np.float16) for i in range(n)})
    out = p(**feeds)
    print(rss() - before, art.manifest.inputs[0].bytes, float(next(iter(out.values())).ravel()[0]))
"""


def test_surfaces_at_the_uniform_size_hold_only_their_tensors_resident(tmp_path):
    """ANE-UNIFORM-SURFACES: every input surface of a program is as large as its largest
    input. A 16 MiB input beside eight 1 KiB ones gives nine 16 MiB surfaces; the sim's
    surfaces are zero pages until written, so loading and calling the program grows the
    process by far less than those nine surfaces (it used to fill every byte with zeros:
    208 MiB)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", UNIFORM_SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": root, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    growth, big, value = done.stdout.split()
    assert float(value) == 128 * 128 * 2.0**-10 + 8  # the program ran: the sum of a, plus eight ones
    assert int(big) == 512 * 128 * 128 * 2
    assert int(growth) < 9 * int(big), (int(growth) >> 20, "MiB")
