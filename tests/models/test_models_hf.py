"""Checkpoint reading (safetensors incl. bf16 and shards, errors) and the wide, chunked LM head."""

from __future__ import annotations

import json

import numpy as np
import pytest

from anec.diagnostics import WeightError
from anec.models.generate import CausalLM, decoder_frontend
from anec.models.hf import Checkpoint, CheckpointError, load_checkpoint, load_tokenizer
from anec.weight_store import SafetensorsFile
from anec.models.llama import rotate_half_matrix, rope_theta
from anec.models.buckets import bucket_list, min_bucket, pick_bucket
from anec.models.common import ModelError
from tests.models.conftest import BACKEND, LOGIT_ULPS, hf_logits, hf_model, torch, transformers
from tolerances import assert_close


def test_safetensors_reader_matches_torch_including_bf16(tmp_path):
    from safetensors.torch import save_file

    t = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16), "c": torch.arange(6).reshape(2, 3),
         "d": torch.randn(4, 2).half()}
    save_file(t, str(tmp_path / "x.safetensors"))
    f = SafetensorsFile(tmp_path / "x.safetensors")
    assert sorted(f.keys()) == ["a", "b", "c", "d"] and f.shape("a") == (3, 5)
    for k, v in t.items():
        got = f.get(k)
        np.testing.assert_array_equal(got, v.float().numpy() if k == "b" else v.numpy())
    assert f.get("b").dtype == np.float32
    with pytest.raises(WeightError, match="not in"):
        f.get("zz")


def test_sharded_checkpoint_and_errors(tmp_path):
    from safetensors.numpy import save_file

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_checkpoint(tmp_path)
    save_file({"x": np.ones(2, np.float32)}, str(tmp_path / "m-1.safetensors"))
    save_file({"y": np.zeros(3, np.float32)}, str(tmp_path / "m-2.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "m-1.safetensors", "y": "m-2.safetensors"}}))
    ck = load_checkpoint(tmp_path)
    assert sorted(ck.keys()) == ["x", "y"] and ck.get("y").shape == (3,)
    with pytest.raises(WeightError, match="did you mean 'y'"):
        ck.get("yy")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="no config.json"):
        load_checkpoint(tmp_path.parent)
    with pytest.raises(CheckpointError, match="no tokenizer"):
        load_tokenizer(tmp_path)
    with pytest.raises(ModelError, match="not a supported decoder"):
        decoder_frontend(Checkpoint(ck.path, {"model_type": "t5"}), 49152)


def test_buckets_reach_the_minimum_surface():
    assert min_bucket(768) == 16          # GPT-2 small: 768 * 16 * 4 = 49152 bytes
    assert min_bucket(384) == 32          # MiniLM
    assert min_bucket(128) == 128
    assert bucket_list(16, 100) == [16, 32, 64, 128]
    assert pick_bucket(33, [16, 32, 64]) == 64
    with pytest.raises(ModelError, match="exceeds the largest bucket"):
        pick_bucket(65, [16, 32, 64])


def test_rotate_half_matrix_and_rope_config():
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(rotate_half_matrix(8) @ x, np.concatenate([-x[4:], x[:4]]))
    assert rope_theta({"rope_theta": 500000.0}) == 500000.0
    assert rope_theta({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}) == 1e4
    with pytest.raises(ModelError, match="RoPE scaling 'llama3'"):
        rope_theta({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}})


def test_lm_head_wider_than_a_conv_is_chunked(tmp_path):
    """vocab 20000 > 16384 conv output channels: the head is two chunk outputs, nothing joins them
    on the device side (legalize has no conv left to split; ``logits`` joins them on the host)."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=192, n_head=3, vocab_size=20000, n_positions=256,
                                  initializer_range=0.1)
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(tmp_path)
    lm = CausalLM(decoder_frontend(load_checkpoint(tmp_path), 49152), backend=BACKEND)
    try:
        ids = [1, 19999, 5, 12345]
        got = lm.logits(ids)
        head = lm.programs.programs[lm.fe.lm_head_name(lm.fe.buckets[0])]
        los = head.manifest.document["logical_outputs"]
    finally:
        lm.close()
    assert [(lo["name"], lo.get("pieces", [lo["name"]])) for lo in los] == \
        [("logits_c0", ["logits_c0"]), ("logits_c1", ["logits_c1"])]
    assert_close(got, hf_logits(hf_model(tmp_path), ids), "models/gpt2-wide-head:logits", LOGIT_ULPS)
