"""`anec run`: artifacts and .ir files on the sim, inputs, outputs, interpreter comparison."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("anec.compiler")
from anec.cli import main  # noqa: E402
from anec.ir.interp import interpret  # noqa: E402
from anec.ir.parser import parse_file  # noqa: E402
from anec.ir.weight_binding import resolve_weights  # noqa: E402
from tolerances import assert_close  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MLP = os.path.join(ROOT, "examples", "gpt2_mlp.ir")
MULTI = os.path.join(ROOT, "examples", "multi_func.ir")


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_run_ir_compare_and_save(tmp_path):
    out = tmp_path / "o.npz"
    r = invoke("run", MLP, "--random-weights", "0", "--random-inputs", "0", "--backend", "sim",
               "--compare-interp", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert "backend: sim" in r.output and "y  [1, 768, 1, 64] float32" in r.output
    rels = [float(line.split("max_rel=")[1]) for line in r.output.splitlines() if "max_rel=" in line]
    assert len(rels) == 2 and max(rels) < 5e-3
    saved = np.load(out)["y"]
    assert saved.shape == (1, 768, 1, 64)
    # the saved output against the interpreter, with the CLI's random weights and inputs
    module = parse_file(MLP)
    graph = module.func()
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in graph.inputs}
    want = interpret(graph, feeds, resolve_weights(module, None, 0), "fp16")["y"]
    assert_close(saved, want, "cli/run:gpt2_mlp.ir:y", 4)


def test_run_artifact_dir_with_inputs(tmp_path):
    art = tmp_path / "art"
    assert invoke("compile", MULTI, "--random-weights", "0", "-o", str(art)).exit_code == 0
    r = invoke("run", str(art), "--random-inputs", "1")
    assert r.exit_code == 1 and "several funcs" in r.output
    x = np.random.default_rng(0).standard_normal((1, 256, 1, 128)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = invoke("run", str(art), "--func", "encode", "--input", f"x={tmp_path / 'x.npy'}", "--backend", "sim",
               "-o", str(tmp_path / "e.npz"))
    assert r.exit_code == 0, r.output
    got = np.load(tmp_path / "e.npz")
    assert set(got.files) == {"left", "neg_right"} and np.all(got["left"] >= 0) and np.all(got["neg_right"] <= 0)
    r = invoke("run", str(art), "--func", "encode", "--input", f"q={tmp_path / 'x.npy'}")
    assert r.exit_code == 1 and "no input 'q'" in r.output
    os.mkfifo(tmp_path / "fifo.npy")  # input arrays are read as hostile files, as anec interp does
    r = invoke("run", str(art), "--func", "encode", "--input", f"x={tmp_path / 'fifo.npy'}")
    assert r.exit_code == 1 and "a FIFO, not a regular file" in r.output
    r = invoke("run", str(art), "--func", "encode")
    assert r.exit_code == 2 and "--random-inputs" in r.output
    # an artifact dir carries program.ir: --compare-interp needs nothing else
    r = invoke("run", str(art), "--func", "encode", "--random-inputs", "0", "--compare-interp")
    assert r.exit_code == 0, r.output
    errs = [float(m) for m in re.findall(r"max_abs=(\S+)", r.output)]
    assert len(errs) == 4 and max(errs) < 1e-2  # fp32 and fp16 modes x two outputs
    r = invoke("run", str(art), "--func", "classify", "--random-inputs", "0", "--compare-interp", "--ir", MULTI,
               "--random-weights", "0")
    assert r.exit_code == 0 and "fp16  out  max_abs=" in r.output
