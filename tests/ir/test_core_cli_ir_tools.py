"""``anec ops`` and ``anec interp``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

from anec.cli import main
from anec.ir.interp import interpret, random_inputs
from anec.ir.ops import OPS, TARGET_OPS
from anec.ir.parser import parse_file
from anec.passes.manager import device_form
from anec.ir.weight_binding import resolve_weights

ROOT = Path(__file__).resolve().parents[2]
MLP = str(ROOT / "examples" / "gpt2_mlp.ir")


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_ops_text_lists_every_op():
    r = run("ops")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0].split()[:4] == ["op", "operands", "attributes", "dtypes"]
    blank = lines.index("")
    assert [ln.split()[0] for ln in lines[1:blank]] == list(OPS)
    assert lines[blank + 1].startswith("target forms")
    assert [ln.split()[0] for ln in lines[blank + 2:]] == list(TARGET_OPS)
    gelu = next(ln for ln in lines if ln.startswith("gelu "))
    assert 'mode="exact"' in gelu and "fp16,fp32" in gelu


def test_ops_markdown_and_docs_ops_md_up_to_date():
    r = run("ops", "--markdown")
    assert r.exit_code == 0
    assert "| `conv1x1` | x, w, bias=? |" in r.output
    assert (ROOT / "docs" / "ops.md").read_text() == r.output, "regenerate: anec ops --markdown > docs/ops.md"


def test_interp_random_inputs_and_weights_saves_npz(tmp_path):
    out = tmp_path / "out.npz"
    r = run("interp", MLP, "--random-inputs", "0", "--random-weights", "0", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert r.output.startswith("y  fp32[1, 768, 1, 64]  (float32)  min=")
    m = parse_file(MLP)
    g = m.func()
    want = interpret(g, random_inputs(g, 0), resolve_weights(m, random_seed=0))["y"]
    with np.load(out) as z:
        assert list(z.files) == ["y"]
        np.testing.assert_array_equal(z["y"], want)
    assert not [p for p in tmp_path.iterdir() if p.name != "out.npz"]  # no temp file left


def test_interp_explicit_inputs_weights_and_fp16_mode(tmp_path):
    m = parse_file(MLP)
    g = m.func()
    x = np.random.default_rng(3).standard_normal((1, 768, 1, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    store = resolve_weights(m, random_seed=5)
    np.savez(tmp_path / "w.npz", **dict(store))
    out = tmp_path / "o.npz"
    r = run("interp", MLP, "--func", "mlp", "--input", f"x={tmp_path / 'x.npy'}", "--weights",
            str(tmp_path / "w.npz"), "--mode", "fp16", "-o", str(out))
    assert r.exit_code == 0, r.output
    with np.load(out) as z:
        # fp16 mode runs the func as the device computes it (cleanup and range-safe)
        np.testing.assert_array_equal(z["y"], interpret(device_form(g), {"x": x}, store, mode="fp16")["y"])


def test_interp_errors():
    r = CliRunner().invoke(main, ["interp", MLP, "--random-inputs", "0"])
    assert r.exit_code == 1
    assert "weight file" in r.output and "--random-weights SEED" in r.output
    r = CliRunner().invoke(main, ["interp", MLP, "--input", "x", "--random-weights", "0"])
    assert r.exit_code == 2 and "'x' is not NAME=PATH.npy" in r.output
    r = CliRunner().invoke(main, ["interp", MLP, "--random-weights", "0"])
    assert r.exit_code == 2 and "--random-inputs SEED" in r.output
    r = CliRunner().invoke(main, ["interp", MLP, "--random-inputs", "0", "--random-weights", "0",
                                  "--input", "z=/nonexistent.npy"])
    assert r.exit_code == 1 and "input 'z': no such file '/nonexistent.npy'" in r.output
    r = CliRunner().invoke(main, ["interp", str(ROOT / "examples" / "multi_func.ir"), "--random-inputs", "0",
                                  "--random-weights", "0"])
    assert r.exit_code == 1 and "choose one" in r.output and "encode, classify" in r.output


def test_interp_unknown_input_name(tmp_path):
    np.save(tmp_path / "q.npy", np.zeros(3, np.float32))
    r = CliRunner().invoke(main, ["interp", MLP, "--random-inputs", "0", "--random-weights", "0",
                                  "--input", f"xq={tmp_path / 'q.npy'}"])
    assert r.exit_code == 1 and "func 'mlp' has no input 'xq'" in r.output


def test_interp_bad_input_files_are_explained(tmp_path):
    (tmp_path / "text.npy").write_text("not an array")
    np.savez(tmp_path / "two.npz", a=np.zeros(2), b=np.zeros(3))
    np.save(tmp_path / "small.npy", np.zeros((1, 3), np.float32))
    base = ["interp", MLP, "--random-weights", "0", "--input"]
    cases = {
        "text.npy": "is not a .npy file of numbers\nhint: save a numeric array with numpy.save",
        "two.npz": "holds several arrays (.npz), not one\nhint: give one array per input",
        "small.npy": "error: input 'x' has shape [1, 3] but the func declares fp32[1, 768, 1, 64]",
    }
    for name, expected in cases.items():
        r = CliRunner().invoke(main, [*base, f"x={tmp_path / name}"])
        assert r.exit_code == 1 and expected in r.output, r.output
        assert "Traceback" not in r.output
    # the shape mismatch points at the declaration of the input
    r = CliRunner().invoke(main, [*base, f"x={tmp_path / 'small.npy'}"])
    line = Path(MLP).read_text().splitlines().index("func mlp(%x: fp32[1, 768, 1, 64]) {") + 1
    assert r.output.startswith(f"{MLP}:{line}:10: error: input 'x'"), r.output
    assert "  func mlp(%x: fp32[1, 768, 1, 64]) {\n" in r.output
