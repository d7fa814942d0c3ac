"""Memory of a large export: ``anec models export`` reads the checkpoint through memory-mapped
views and writes the fp16 weights file a chunk at a time, so its peak resident memory grows
by about one chunk and one tensor, not by the model.

The checkpoint is a scaled-down model of the same structure as the billion-parameter ones
(``tests/models/synthetic.py``: Llama layout, GQA, tied embeddings): 8 layers, hidden 512,
62 MB of fp16 weights. The export runs in its own process, which reports its resident
memory once everything is imported and the checkpoint opened, and its peak (``VmHWM``)
after the export. The growth must stay under half the fp16 weights plus 24 MB: a
materializing export (each tensor widened to fp32 and kept, as it once was) grows by twice
the fp16 weights.

Compiling the export (``anec models compile``) maps the weights file once for every func
and streams each weight file of the build from that map: the process holds the file's
pages, once, and no copy of a weight. Its peak grows by the fp16 weights plus under 24 MB
(the compiler's own structures), where copying every func's weight files out of the map
(prefill and decode each name the layer weights) grew by 2.8x the weights; and the build
is byte for byte the one each module compiled alone (its weight files copied out) writes.
The same with programs shared across layers, whose weights are program inputs: each
input's weight file is a view of the map too (copied, they grew by 2.9x).

Generation compiles from the same views; once compiled, the programs hold their own
weights, and the checkpoint's pages the compile read are given back: the process's
file-backed resident memory after compiling stays under a quarter of the checkpoint
(it holds every page, about 1x, when they are kept).

And generation holds each weight once: the artifacts stay views of the checkpoint (no
copy of a weight file is kept after its program loads), each program's compiled data is
written and read through without a copy of it, and the sim holds one copy of every
distinct weight across programs (prefill and decode read the same layers). Compiling and
loading the model and running its prefill grows the process by under 2x the weights plus
24 MB (the weights once; at this scale the 13 programs' activations and surfaces are
nearly as large), where copies of the artifacts and of the sim's containers grew it by
6.2x. The decode steps add under a quarter of the weights: a weight that only pointwise
convs read is held once, as the slivers the narrow kernel reads at memory speed
(csrc/sim_weights.c), where a second copy packed for the decode steps on their second run
added the weights again (the whole run grew by 3.1x; now under 2.5x).

With programs shared across layers (a compile budget the unshared programs exceed), each
layer's weights are inputs of its stage, held in that stage's input surfaces. The sim reads
an input in its surface and a reshape of it where it is, as the device does: a run copies
neither into storage of its own. Generation then grows by under 4x the weights plus 24 MB,
where the two copies (kept by each stage after its first run) grew it by 7x.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anec.weight_store import SafetensorsFile
from tests.models.synthetic import llama_tensor_shapes, write_random_llama

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
         "num_key_value_heads": 4, "intermediate_size": 2048, "vocab_size": 8000,
         "max_position_embeddings": 512, "tie_word_embeddings": True, "rms_norm_eps": 1e-6}
CONSTANT = 24 << 20

WORKER = """
import json, resource, sys
from anec.models import export
from anec.models.hf import load_checkpoint

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

load_checkpoint(sys.argv[1])  # the reader's own imports, before the baseline
base = status("VmRSS")
export.export_checkpoint("llama", sys.argv[1], sys.argv[2], prefill=[64], cache=[128])
print(json.dumps({"base": base, "peak": status("VmHWM")}))
"""


STATUS = """
import json, sys
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
"""
"""A worker's imports and ``status(field)``: a /proc/self/status field in bytes."""


COMPILE = STATUS + """
import anec.compiler, anec.ir.parser, anec.mil.output  # the compile's imports, before the baseline
from anec.models.export import compile_export

base = status("VmRSS")
compile_export(sys.argv[1], sys.argv[2], share_programs=sys.argv[3])
print(json.dumps({"base": base, "peak": status("VmHWM")}))
"""


GENERATE = STATUS + """
from anec.models.generate import load_causal_lm

lm = load_causal_lm(sys.argv[1], backend="sim")
base = status("RssFile")
lm.compile(lm.program_names(4, 64))
after = status("RssFile")
print(json.dumps({"base": base, "after": after, "tokens": lm.generate([1, 2, 3, 4], max_new_tokens=2)}))
"""


PEAK = STATUS + """
from anec.models.generate import load_causal_lm

lm = load_causal_lm(sys.argv[1], backend="sim")
lm.programs.runtime  # the C runtime open before the baseline
base = status("VmRSS")
lm.compile(lm.program_names(4, 64))
logits = [lm.prefill([1, 2, 3, 4], 64)]
loaded = status("VmHWM")
for _ in range(3):
    logits.append(lm.decode(int(logits[-1].argmax())))
print(json.dumps({"base": base, "loaded": loaded, "peak": status("VmHWM"),
                  "tokens": [int(x.argmax()) for x in logits]}))
"""


SHARED = STATUS + """
from anec.models.generate import load_causal_lm
from anec.runtime import Runtime

lm = load_causal_lm(sys.argv[1], backend="sim")
lm.programs._runtime = Runtime(backend="sim", compile_budget=10)  # under the 13 unshared programs
base = status("VmRSS")
lm.compile(lm.program_names(4, 64))
logits = [lm.prefill([1, 2, 3, 4], 64)]
for _ in range(3):
    logits.append(lm.decode(int(logits[-1].argmax())))
stats = lm.stats()
print(json.dumps({"base": base, "peak": status("VmHWM"), "compiles": stats["compiles"],
                  "programs": stats["programs"], "tokens": [int(x.argmax()) for x in logits]}))
"""


def run_worker(code: str, *args: Path | str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_exporting_a_checkpoint_grows_memory_by_a_chunk_not_by_the_model(tmp_path):
    n = write_random_llama(tmp_path / "ckpt", SMALL)
    weights = 2 * n
    assert weights > 60 << 20
    r = run_worker(WORKER, tmp_path / "ckpt", tmp_path / "out")
    grew = r["peak"] - r["base"]
    assert grew < weights // 2 + CONSTANT, f"export grew by {grew >> 20} MiB for {weights >> 20} MiB of fp16 weights"
    # and the file holds every tensor, converted exactly (fp16 in, fp16 out), in the IR layout
    f, src = SafetensorsFile(tmp_path / "out" / "weights.safetensors"), SafetensorsFile(tmp_path / "ckpt" /
                                                                                         "model.safetensors")
    for key, shape in llama_tensor_shapes(SMALL).items():
        got = f.view(key)
        want = src.view(key).reshape(1, -1, 1, 1) if len(shape) == 1 else src.view(key).reshape(*shape, 1, 1)
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), key


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
@pytest.mark.parametrize("share", ["never", "always"])
def test_compiling_an_export_holds_the_weights_once(tmp_path, share):
    from anec.compiler import compile_module
    from anec.ir.parser import parse_file
    from anec.mil.output import write_output
    from anec.models.export import compile_export, export_checkpoint, read_export

    n = write_random_llama(tmp_path / "ckpt", SMALL)
    weights = 2 * n
    export_checkpoint("llama", tmp_path / "ckpt", tmp_path / "out", prefill=[64], cache=[128])
    r = run_worker(COMPILE, tmp_path / "out", tmp_path / "build", share)
    grew = r["peak"] - r["base"]
    assert grew < weights + CONSTANT, f"compile grew by {grew >> 20} MiB for {weights >> 20} MiB of fp16 weights"
    # the same bytes as every module compiled alone, its weight files copied out of its own map
    copied = {}
    for f in read_export(tmp_path / "out")["files"]:
        copied.update(compile_module(parse_file(tmp_path / "out" / f), share_programs=share).artifacts)
    write_output(tmp_path / "copied", copied)
    returned = {name: art for name, art, _ in compile_export(tmp_path / "out", None, share_programs=share)}
    assert {n: a.manifest.document for n, a in returned.items()} == {n: a.manifest.document for n, a in copied.items()}
    streamed = sorted(p.relative_to(tmp_path / "build") for p in (tmp_path / "build").rglob("*"))
    assert streamed == sorted(p.relative_to(tmp_path / "copied") for p in (tmp_path / "copied").rglob("*"))
    assert any(p.suffix == ".bin" for p in streamed)
    assert any("inputs" in p.parts for p in streamed) == (share == "always")  # weights as stage inputs
    for rel in streamed:
        if (tmp_path / "build" / rel).is_file():
            assert (tmp_path / "build" / rel).read_bytes() == (tmp_path / "copied" / rel).read_bytes(), rel


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssFile from /proc")
def test_compiled_programs_leave_the_checkpoint_pages_to_the_kernel(tmp_path):
    n = write_random_llama(tmp_path / "ckpt", SMALL)
    r = run_worker(GENERATE, tmp_path / "ckpt")
    assert len(r["tokens"]) == 2
    assert r["after"] - r["base"] < 2 * n // 4, f"{(r['after'] - r['base']) >> 20} MiB of file pages kept"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_generation_holds_each_weight_once(tmp_path):
    n = write_random_llama(tmp_path / "ckpt", SMALL)
    weights = 2 * n
    r = run_worker(PEAK, tmp_path / "ckpt")
    assert len(r["tokens"]) == 4
    loaded, peak = r["loaded"] - r["base"], r["peak"] - r["base"]
    assert loaded < 2 * weights + CONSTANT, \
        f"compile, load and prefill grew by {loaded >> 20} MiB for {weights >> 20} MiB of fp16 weights"
    assert peak - loaded < weights // 4, f"the decode steps grew it by {(peak - loaded) >> 20} MiB"
    assert peak < 2.5 * weights + CONSTANT, f"generation grew by {peak >> 20} MiB for {weights >> 20} MiB of weights"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_shared_programs_read_their_weight_inputs_where_they_are(tmp_path):
    n = write_random_llama(tmp_path / "ckpt", SMALL)
    weights = 2 * n
    r = run_worker(SHARED, tmp_path / "ckpt")
    assert r["compiles"] < r["programs"]  # the layers share programs: their weights are inputs
    assert r["tokens"] == run_worker(PEAK, tmp_path / "ckpt")["tokens"]
    peak = r["peak"] - r["base"]
    assert peak < 4 * weights + CONSTANT, f"generation grew by {peak >> 20} MiB for {weights >> 20} MiB of weights"


def test_the_program_with_the_largest_weight_loads_first(tmp_path):
    """A load holds its largest weight twice for a moment (the weight file built, the
    runtime's copy): the LM head (vocab x hidden, the model's largest weight) loads before
    the layers are resident, so that moment does not add to the whole model."""
    from anec.models.generate import load_causal_lm
    from anec.models.programs import largest_weight

    write_random_llama(tmp_path / "ckpt", SMALL)
    lm = load_causal_lm(str(tmp_path / "ckpt"), backend="sim")
    try:
        order: list[str] = []
        real = lm.programs._load
        lm.programs._load = lambda art: (order.append(art.func), real(art))[1]
        names = lm.program_names(4, 64)
        lm.compile(names)
        sizes = [largest_weight(lm.programs.graphs[n]) for n in order]
        assert sorted(order) == sorted(names) and sizes == sorted(sizes, reverse=True)
        assert order[0] == names[-1] and "head" in order[0]  # compiled last, loaded first
        assert sizes[0] == SMALL["vocab_size"] * SMALL["hidden_size"] * 2
    finally:
        lm.close()
