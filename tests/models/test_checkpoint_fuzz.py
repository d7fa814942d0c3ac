"""Hypothesis over checkpoint configs and safetensors headers: whatever ``config.json``,
``adapter_config.json`` or a safetensors file holds, reading it ends in success or an
AnecError (CheckpointError, ModelError, AdapterError, WeightError), never another
exception. Successes are checked too: a header that parses gives arrays of its shapes.

The number of inputs per test is ANEC_FUZZ_EXAMPLES (default 150)::

    ANEC_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest tests/models/test_checkpoint_fuzz.py -q
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anec.diagnostics import AnecError, WeightError
from anec.models.bert import bert_config
from anec.models.gpt2 import gpt2_config
from anec.weight_store import SafetensorsFile
from anec.models.llama import llama_config, rope_theta
from anec.weight_store import ST_ITEMSIZE, map_safetensors

from .checkpoint_corpus import (ADAPTER_CONFIG, BERT_CONFIG, LLAMA_CONFIG, Case, make_adapter, make_bert,
                                make_gpt2, make_llama, read_st)
from .test_checkpoint_hostile import _load

EXAMPLES = int(os.environ.get("ANEC_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 3), st.integers(-(2**70), 2**70), st.sampled_from([128, 256, 4, 2, 1 << 30, 10**6]),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -0.0, 1e-300, 1e300, 0.5, 2.0]),
    st.text(max_size=8), st.sampled_from(["gpt2", "llama", "bert", "silu", "gelu", "default", "llama3"]),
)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                    max_leaves=12)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz")
    make_gpt2(root / "gpt2")
    make_llama(root / "llama")
    make_bert(root / "bert")
    make_adapter(root / "adapter")
    return {"gpt2": root / "gpt2", "llama": root / "llama", "bert": root / "bert", "adapter": root / "adapter"}


def _mutate(base: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    cfg = dict(base)
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["set", "set", "drop", "add"]))
        if how == "drop" and cfg:
            cfg.pop(data.draw(st.sampled_from(sorted(cfg))))
        elif how == "add":
            cfg[data.draw(st.sampled_from(["head_dim", "n_inner", "sliding_window", "rope_scaling",
                                           "rope_parameters", "num_key_value_heads", "attention_bias",
                                           "tie_word_embeddings", "scale_attn_by_inverse_layer_idx",
                                           "pad_token_id", "type_vocab_size", "x"]))] = data.draw(JSON)
        elif cfg:
            cfg[data.draw(st.sampled_from(sorted(cfg)))] = data.draw(JSON)
    return cfg


def _attempt(case: Case) -> str | None:
    try:
        _load(case)
    except AnecError as e:
        return str(e)
    return None


@SETTINGS
@given(data=st.data(), kind=st.sampled_from(["gpt2", "llama", "bert"]))
def test_mutated_configs_load_or_fail_cleanly(folders, tmp_path, data, kind):
    folder = tmp_path / kind
    if not folder.exists():
        shutil.copytree(folders[kind], folder)
    base = {"gpt2": json.loads((folders["gpt2"] / "config.json").read_text()), "llama": LLAMA_CONFIG,
            "bert": BERT_CONFIG}[kind]
    cfg = _mutate(base, data)
    (folder / "config.json").write_text(json.dumps(cfg))
    msg = _attempt(Case("fuzz", kind, folder, "", tokenizer=True))
    assert msg is None or str(folder) in msg, msg  # the message names the file


FIELDS = sorted(set(LLAMA_CONFIG) | set(BERT_CONFIG) | {
    "n_embd", "n_head", "n_layer", "n_inner", "n_positions", "layer_norm_epsilon", "activation_function",
    "scale_attn_by_inverse_layer_idx", "add_cross_attention", "head_dim", "sliding_window", "rope_scaling",
    "rope_parameters", "dim", "n_heads", "n_layers"})
CONFIGS = st.one_of(JSON, st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=12),
                    st.dictionaries(st.sampled_from(FIELDS), st.integers(-2, 300), min_size=5, max_size=20))


@SETTINGS
@given(cfg=CONFIGS)
def test_config_readers_take_any_json(cfg):
    if not isinstance(cfg, dict):
        return  # load_checkpoint refuses a config that is not an object (the corpus tests it)
    for read in (gpt2_config, llama_config, rope_theta, bert_config):
        try:
            read(cfg)
        except AnecError:
            pass


@SETTINGS
@given(data=st.data())
def test_mutated_adapter_configs_load_or_fail_cleanly(folders, tmp_path, data):
    adapter = tmp_path / "adapter"
    if not adapter.exists():
        shutil.copytree(folders["adapter"], adapter)
    (adapter / "adapter_config.json").write_text(json.dumps(_mutate(ADAPTER_CONFIG, data)))
    _attempt(Case("fuzz", "llama", folders["llama"], "", adapter=adapter))


def _write(path: Path, header: bytes, data: bytes, length: int | None = None) -> None:
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)


def _read_all(path: Path) -> None:
    """Read ``path`` with both readers; on success every tensor has its declared shape."""
    try:
        f = SafetensorsFile(path)
    except WeightError:
        f = None
    if f is not None:
        for k in f.keys():
            try:
                arr = f.get(k)
            except WeightError:
                assert f.dtype(k) not in ("F64", "F32", "F16", "BF16"), k
                continue
            assert arr.shape == f.shape(k)
    try:
        tensors = map_safetensors(str(path))
    except WeightError:
        return
    for arr in tensors.values():
        assert arr.nbytes == math.prod(arr.shape) * arr.itemsize


@SETTINGS
@given(raw=st.binary(max_size=200), length=st.one_of(st.none(), st.integers(0, 2**64 - 1)))
def test_random_safetensors_bytes(tmp_path, raw, length):
    path = tmp_path / "x.safetensors"
    _write(path, raw, b"", length)
    _read_all(path)
    path.write_bytes(raw[:7])
    _read_all(path)


@SETTINGS
@given(data=st.data())
def test_mutated_safetensors_headers(folders, tmp_path, data):
    header, body = read_st(folders["gpt2"] / "model.safetensors")
    keys = sorted(k for k in header if k != "__metadata__")
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(keys + ["__metadata__"]))
        entry = header.get(key)
        if key == "__metadata__" or not isinstance(entry, dict):
            header[key] = data.draw(JSON)
            continue
        field = data.draw(st.sampled_from(["dtype", "shape", "data_offsets", "extra"]))
        if field == "dtype":
            entry["dtype"] = data.draw(st.one_of(st.sampled_from(sorted(ST_ITEMSIZE)), JSON))
        elif field == "shape":
            entry["shape"] = data.draw(st.one_of(st.lists(st.integers(-2, 2**40), max_size=4), JSON))
        elif field == "data_offsets":
            entry["data_offsets"] = data.draw(st.one_of(
                st.lists(st.integers(-2, len(body) + 8), min_size=2, max_size=2), JSON))
        else:
            entry[data.draw(st.text(max_size=4))] = data.draw(JSON)
    cut = data.draw(st.sampled_from([len(body), len(body) // 2, 0]))
    path = tmp_path / "m.safetensors"
    _write(path, json.dumps(header).encode(), body[:cut])
    _read_all(path)
