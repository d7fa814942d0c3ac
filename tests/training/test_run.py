"""anec train: the run directory, a killed run resumed to the same weights, hostile state,
checkpoints that transformers and peft load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.training import Trainer, TrainingError
from anec.training.state import load_state, save_state
from tests.training.conftest import hf, torch

ROOT = Path(__file__).resolve().parents[2]


def train_args(ckpt, corpus, out, steps, *extra):
    return [str(ckpt), "--data", str(corpus), "--steps", str(steps), "-o", str(out), "--seq-len", "16",
            "--batch-size", "2", "--lr", "1e-3", "--save-every", "4", "--backend", "sim", "-q", *extra]


def tensors(path: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(path))


def test_a_run_writes_its_directory(gpt2_ckpt, corpus, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["train", *train_args(gpt2_ckpt, corpus, out, 6)])
    assert res.exit_code == 0, res.output
    assert "6 steps, final loss" in res.output
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert all(np.isfinite(r["loss"]) and r["tokens_per_s"] > 0 for r in rows)
    png = (out / "loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    idat = png[png.index(b"IDAT") + 4:png.index(b"IEND") - 8]
    assert len(zlib.decompress(idat)) == 360 * (1 + 640 * 3)
    # the model loads in transformers and computes what the trained weights compute
    m = hf(out / "model")
    st = tensors(out / "state" / "params.safetensors")
    named = dict(m.named_parameters())
    for k, v in st.items():
        np.testing.assert_array_equal(named[k].detach().numpy(), v)
    # a second run into the same directory needs --resume
    again = CliRunner().invoke(main, ["train", *train_args(gpt2_ckpt, corpus, out, 6)])
    assert again.exit_code != 0 and "--resume" in again.output and "Traceback" not in again.output


def test_a_killed_run_resumes_to_the_same_weights(gpt2_ckpt, corpus, tmp_path):
    steps = 14
    straight = tmp_path / "straight"
    res = CliRunner().invoke(main, ["train", *train_args(gpt2_ckpt, corpus, straight, steps)])
    assert res.exit_code == 0, res.output
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "anec.cli", "train", *train_args(gpt2_ckpt, corpus, killed, steps)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)})
    log = killed / "log.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and len(log.read_text().splitlines()) >= 6:  # past the save at step 4
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed / "state").is_dir() and not (killed / "model").exists()
    res = CliRunner().invoke(main, ["train", *train_args(gpt2_ckpt, corpus, killed, steps), "--resume"])
    assert res.exit_code == 0, res.output
    a, b = tensors(straight / "model" / "model.safetensors"), tensors(killed / "model" / "model.safetensors")
    assert set(a) == set(b)
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k
    la = [json.loads(x) for x in (straight / "log.jsonl").read_text().splitlines()]
    lb = [json.loads(x) for x in (killed / "log.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in la] == [r["loss"] for r in lb]


def test_resume_refuses_other_settings(gpt2_ckpt, corpus, tmp_path):
    out = tmp_path / "run"
    assert CliRunner().invoke(main, ["train", *train_args(gpt2_ckpt, corpus, out, 4)]).exit_code == 0
    args = train_args(gpt2_ckpt, corpus, out, 8, "--resume")
    args[args.index("--lr") + 1] = "2e-3"
    res = CliRunner().invoke(main, ["train", *args])
    assert res.exit_code != 0 and "other settings: lr" in res.output


def test_hostile_state_is_refused_and_changes_nothing(gpt2_ckpt, corpus, tmp_path):
    with Trainer(gpt2_ckpt, backend="interp", seq_len=8) as tr:
        save_state(tr, tmp_path / "good")
        before = {k: v.copy() for k, v in tr.params.items()}

        def broken(edit) -> str:
            import shutil

            d = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
            shutil.copytree(tmp_path / "good", d)
            edit(d)
            with pytest.raises(TrainingError) as e:
                load_state(tr, d)
            assert all(np.array_equal(before[k], tr.params[k]) for k in before)
            return str(e.value)

        def bad_json(d):
            (d / "trainer.json").write_text("{not json")

        def wrong_type(d):
            meta = json.loads((d / "trainer.json").read_text())
            meta["step"] = "12"
            (d / "trainer.json").write_text(json.dumps(meta))

        def wrong_shape(d):
            from safetensors.numpy import save_file

            t = tensors(d / "params.safetensors")
            k = next(iter(t))
            t[k] = np.zeros((3,), np.float32)
            save_file(t, str(d / "params.safetensors"))

        def symlinked(d):
            (d / "params.safetensors").unlink()
            (d / "params.safetensors").symlink_to(tmp_path / "good" / "params.safetensors")

        def garbage(d):
            (d / "adam_m.safetensors").write_bytes(b"\xff" * 64)

        def other_seq_len(d):
            meta = json.loads((d / "trainer.json").read_text())
            meta["seq_len"] = 99
            (d / "trainer.json").write_text(json.dumps(meta))

        assert "not JSON" in broken(bad_json)
        assert "'step'" in broken(wrong_type)
        assert "expected float32" in broken(wrong_shape)
        assert "cannot read" in broken(symlinked)
        assert "not a safetensors file" in broken(garbage)
        assert "seq_len 99" in broken(other_seq_len)


def test_lora_run_saves_an_adapter_peft_loads(llama_ckpt, corpus, tmp_path):
    peft = pytest.importorskip("peft")
    out = tmp_path / "lora"
    args = train_args(llama_ckpt, corpus, out, 3, "--lora-rank", "4")
    res = CliRunner().invoke(main, ["train", *args])
    assert res.exit_code == 0, res.output
    cfg = json.loads((out / "model" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and sorted(cfg["target_modules"]) == ["q_proj", "v_proj"]
    m = peft.PeftModel.from_pretrained(hf(llama_ckpt), str(out / "model"))
    saved = tensors(out / "model" / "adapter_model.safetensors")
    named = {k: v for k, v in m.named_parameters() if "lora_" in k}
    assert len(named) == len(saved) > 0
    b_norm = sum(float(np.abs(v).sum()) for k, v in saved.items() if "lora_B" in k)
    assert b_norm > 0  # B moved from its zero init
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert not torch.equal(m(ids).logits, hf(llama_ckpt)(ids).logits)
