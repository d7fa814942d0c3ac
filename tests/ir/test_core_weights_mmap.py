"""load_weights maps a .safetensors file instead of reading it, and checks its header."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from anec.diagnostics import WeightError
from anec.weight_store import load_weights, map_safetensors, touch_pages


def _tensors():
    rng = np.random.default_rng(0)
    return {
        "a.f16": rng.standard_normal((3, 5)).astype(np.float16),
        "b.f32": rng.standard_normal((7,)).astype(np.float32),
        "c.f64": rng.standard_normal((2, 2, 2)).astype(np.float64),
        "d.i32": rng.integers(-9, 9, (4, 1)).astype(np.int32),
        "e.i8": rng.integers(-9, 9, (5,)).astype(np.int8),
        "f.u8": rng.integers(0, 9, (6,)).astype(np.uint8),
        "g.bool": rng.integers(0, 2, (3,)).astype(np.bool_),
        "h.empty": np.zeros((0, 4), np.float32),
        "i.scalar": np.array(2.5, np.float32),
    }


def test_mapped_tensors_equal_the_safetensors_reader(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file(_tensors(), str(path))
    want = load_file(str(path))
    got = load_weights(path)
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        np.testing.assert_array_equal(got[k], v)


def test_a_write_to_a_mapped_array_never_reaches_the_file(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"w": np.arange(8, dtype=np.float32)}, str(path))
    before = path.read_bytes()
    arr = load_weights(path)["w"]
    arr[:] = -1  # copy-on-write: writable, like the arrays safetensors returns
    assert path.read_bytes() == before
    np.testing.assert_array_equal(load_weights(path)["w"], np.arange(8, dtype=np.float32))


def _file(tmp_path, header: dict, data: bytes, length: int | None = None):
    raw = json.dumps(header).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return str(path)


@pytest.mark.parametrize("header, data, why", [
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "do not hold"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}}, b"\0" * 16, "do not hold"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 16, "do not hold"),
    ({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, "malformed"),
    ({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, b"\0" * 8, "malformed"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, b"\0" * 8, "malformed"),
    ({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unsupported dtype"),
    ({"w": [1, 2]}, b"", "malformed entry"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "overlap"),
])
def test_hostile_headers_are_weight_errors(tmp_path, header, data, why):
    with pytest.raises(WeightError, match=why):
        map_safetensors(_file(tmp_path, header, data))


def test_a_header_length_past_the_end_is_a_weight_error(tmp_path):
    with pytest.raises(WeightError, match="runs past the end"):
        map_safetensors(_file(tmp_path, {}, b"", length=1 << 40))
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\1\2")
    with pytest.raises(WeightError):
        load_weights(path)


def test_a_file_of_empty_tensors_needs_no_map(tmp_path):
    path = _file(tmp_path, {"__metadata__": {"x": "y"},
                            "w": {"dtype": "F16", "shape": [0, 3], "data_offsets": [0, 0]}}, b"")
    got = map_safetensors(path)
    assert list(got) == ["w"] and got["w"].shape == (0, 3) and got["w"].dtype == np.float16


def test_without_mmap_the_file_is_read(tmp_path, monkeypatch):
    import mmap

    path = tmp_path / "w.safetensors"
    save_file(_tensors(), str(path))

    def no_mmap(*args, **kwargs):
        raise OSError(19, "No such device")

    monkeypatch.setattr(mmap, "mmap", no_mmap)
    got = map_safetensors(str(path))
    for k, v in load_file(str(path)).items():
        np.testing.assert_array_equal(got[k], v)
    got["b.f32"][0] = 7  # writable, like the mapped arrays


def _mapped_kib(a: np.ndarray) -> int:
    """Resident KiB of the memory mapping that holds ``a`` (its present pages), from /proc/self/smaps."""
    addr = a.__array_interface__["data"][0]
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("no mapping holds the array")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the mapped pages from /proc/self/smaps")
def test_touch_pages_maps_every_page_of_a_mapped_tensor(tmp_path):
    """A mapped tensor's pages are not mapped until read; touch_pages maps every one of them
    (and skips what it cannot read as one block). The file and the values are untouched."""
    big = np.random.default_rng(0).standard_normal(8 << 20).astype(np.float16)  # 16 MiB
    path = tmp_path / "w.safetensors"
    save_file({"big": big, "small": big[:8].copy()}, str(path))
    before = path.read_bytes()

    cold = load_weights(path)["big"]
    assert _mapped_kib(cold) < 1024
    touch_pages([cold[::2], np.zeros(3, np.float16)])  # not contiguous, not mapped: skipped
    assert _mapped_kib(cold) < 1024
    touch_pages([cold, load_weights(path)["small"]])
    assert _mapped_kib(cold) >= 16 * 1024
    np.testing.assert_array_equal(cold, big)
    assert path.read_bytes() == before


def test_load_weights_parses_the_header_once_and_reads_through_the_one_reader(tmp_path, monkeypatch):
    """load_weights reads a .safetensors file with SafetensorsFile (anec's one reader): one
    header parse, and the arrays it returns are views of that reader's map."""
    from anec import weight_store

    path = tmp_path / "w.safetensors"
    save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(path))
    calls = []
    real = weight_store.read_safetensors_header
    monkeypatch.setattr(weight_store, "read_safetensors_header", lambda *a: calls.append(a[1]) or real(*a))
    store = load_weights(path)
    assert calls == [str(path)]
    np.testing.assert_array_equal(store["a"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert not store["a"].flags.owndata  # a view of the map, not a copy


def test_the_one_reader_refuses_a_fifo_at_once(tmp_path):
    """A FIFO named .safetensors is refused (opened without blocking), never waited on."""
    path = tmp_path / "w.safetensors"
    os.mkfifo(path)
    with pytest.raises(WeightError, match="it is not a regular file"):
        load_weights(path)
