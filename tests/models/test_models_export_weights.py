"""The exported weights file: streamed fp16 safetensors that the safetensors library
reads back as numpy's own fp16 cast of every tensor."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from anec.models import export
from anec.weight_store import SafetensorsFile


def tensors():
    r = np.random.default_rng(5)
    big = r.standard_normal((37, 41)).astype(np.float32)
    big.flat[:6] = [65504.0, -65504.0, 65520.0, 1e-8, 2.0**-24, -0.0]  # edges of the fp16 range
    return {
        "b.weight": big,
        "a.bias": r.standard_normal(13).astype(np.float64),
        "c.view": r.standard_normal((9, 7)).astype(np.float32).T,   # not contiguous
        "d.half": r.standard_normal((3, 5)).astype(np.float16),
        "anec.mask": np.triu(np.full((4, 4), -1e4, np.float32), 1),
        "e.empty": np.zeros((0, 3), np.float32),
    }


@pytest.mark.parametrize("chunk", [7, 1 << 20])  # chunks that cut tensors, and whole tensors
def test_fp16_file_reads_back_as_numpy_cast(tmp_path, monkeypatch, chunk):
    from safetensors.numpy import load_file

    monkeypatch.setattr(export, "_CHUNK", chunk)
    t = tensors()
    path = tmp_path / "weights.safetensors"
    export.save_fp16(path, t, {"format": "anec-weights", "model": "gpt2"})
    back = load_file(str(path))
    assert sorted(back) == sorted(t)
    for k, v in t.items():
        with np.errstate(over="ignore"):  # 65520 rounds to inf, as in numpy
            want = np.asarray(v).astype(np.float16)
        assert back[k].dtype == np.float16 and back[k].shape == want.shape
        np.testing.assert_array_equal(back[k].view(np.uint16), want.view(np.uint16))
    f = SafetensorsFile(path)  # anec's own reader agrees
    np.testing.assert_array_equal(f.get("c.view"), t["c.view"].astype(np.float16))
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    head = json.loads(path.read_bytes()[8:8 + n])
    assert head["__metadata__"] == {"format": "anec-weights", "model": "gpt2"} and n % 8 == 0


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "weights.safetensors"
    export.save_fp16(path, {"x": np.ones(3, np.float32)}, {})
    before = path.read_bytes()
    with pytest.raises((TypeError, ValueError)):
        export.save_fp16(path, {"x": np.ones(3, np.float32), "y": np.array(["text"])}, {})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["weights.safetensors"]
