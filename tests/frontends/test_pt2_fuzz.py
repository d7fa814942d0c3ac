"""Fuzzing anec's ``.pt2`` reader: genuine ``torch.export.save`` archives with bytes flipped,
members renamed, central directory fields (sizes, flags, method) edited, JSON values
replaced, or the file cut, go through ``load_pt2`` under the code guard of
tests/frontends/pt2_corpus.py. Every outcome is a program or a ``TorchImportError``, never
another exception, never a guard trip, within a time bound.

The number of inputs per test is ANEC_FUZZ_EXAMPLES (default 40); the long run::

    ANEC_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest tests/frontends/test_pt2_fuzz.py -q
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from anec.frontends import TorchImportError  # noqa: E402
from anec.frontends.torch.export import load_pt2  # noqa: E402

from . import pt2_corpus as pc  # noqa: E402

EXAMPLES = int(os.environ.get("ANEC_FUZZ_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SECONDS = 10.0

_WORK = Path(tempfile.mkdtemp(prefix="anec-pt2-fuzz-"))
atexit.register(shutil.rmtree, _WORK, ignore_errors=True)  # made at import: every pytest process has one
_MARKER = _WORK / "MARKER"


@functools.lru_cache(maxsize=None)
def genuine(name: str) -> bytes:
    mods = pc.genuine_modules()
    return pc.save_genuine(*mods[name], _WORK / f"{name}.pt2").read_bytes()


def outcome(data: bytes) -> str:
    """Load the bytes as a .pt2 file: 'ok' or 'refused'; anything else fails the test."""
    path = _WORK / "fuzz.pt2"
    path.write_bytes(data)
    start = time.monotonic()
    with pc.code_guard() as trips:
        try:
            load_pt2(path)
            result = "ok"
        except TorchImportError as e:
            msg = str(e)
            assert "Traceback" not in msg
            assert str(path) in msg or "no such file" in msg, msg
            result = "refused"
    assert trips == [], trips
    assert not _MARKER.exists()
    assert time.monotonic() - start < SECONDS
    return result


models = st.sampled_from(["small", "mlp"])


@SETTINGS
@given(models, st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(1, 255)), min_size=1, max_size=8))
def test_byte_flips(name, flips):
    data = bytearray(genuine(name))
    for pos, xor in flips:
        data[pos % len(data)] ^= xor
    outcome(bytes(data))


_NAME_PARTS = st.sampled_from(["..", ".", "", "models", "model.json", "data", "weights", "weight_0", "extra",
                               "aotinductor", "x.so", "model.pt", "\\", "\x00", "é", "/", "sample_inputs",
                               "serialized_state_dict.pt", "constants", "tensor_0", "a" * 300])


@SETTINGS
@given(models, st.integers(0, 1 << 20), st.lists(_NAME_PARTS, min_size=1, max_size=5), st.booleans())
def test_member_renames(name, which, parts, keep_root):
    items = pc.members(genuine(name))
    i = which % len(items)
    root = items[0][0].split("/", 1)[0]
    new = "/".join(parts)
    items[i] = ((f"{root}/{new}" if keep_root else new), items[i][1])
    try:
        data = pc.write_zip(items)
    except (ValueError, UnicodeEncodeError):  # zipfile refuses to write some names
        return
    outcome(data)


_FIELDS = {"flags": (8, "<H"), "method": (10, "<H"), "crc": (16, "<I"), "csize": (20, "<I"), "usize": (24, "<I"),
           "namelen": (28, "<H"), "extralen": (30, "<H"), "offset": (42, "<I")}


@SETTINGS
@given(models, st.integers(0, 1 << 20), st.sampled_from(sorted(_FIELDS)),
       st.one_of(st.integers(0, 0xFFFF), st.sampled_from([0xFFFFFFFF, 1 << 31, 1 << 24, 1]), st.integers(0, 0xFFFFFFFF)),
       st.booleans())
def test_central_directory_edits(name, which, fld, value, local):
    data = bytearray(genuine(name))
    entries = pc.central_entries(bytes(data))
    pos, _ = entries[which % len(entries)]
    off, fmt = _FIELDS[fld]
    if fmt == "<H":
        value &= 0xFFFF
    if local and fld in ("flags", "method", "crc", "csize", "usize"):
        # the same field of the member's local header (its offsets are 2 less)
        lpos = struct.unpack_from("<I", data, pos + 42)[0]
        if data[lpos:lpos + 4] == b"PK\x03\x04":
            struct.pack_into(fmt, data, lpos + off - 2, value)
    else:
        struct.pack_into(fmt, data, pos + off, value)
    outcome(bytes(data))


_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(allow_nan=False),
              st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
    max_leaves=8)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@SETTINGS
@given(models, st.sampled_from([pc.WEIGHTS_CFG, pc.CONSTANTS_CFG, pc.PROGRAM]), st.integers(0, 1 << 20),
       _json_values)
def test_json_value_edits(name, member, which, value):
    items = pc.members(genuine(name))
    doc = next(json.loads(d) for n, d in items if n.split("/", 1)[1] == member)
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return
    path = paths[which % len(paths)]
    target = doc
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    outcome(pc.write_zip(pc.replace(items, member, json.dumps(doc).encode())))


@SETTINGS
@given(models, st.integers(0, 1 << 30), st.binary(max_size=64))
def test_cut_and_splice(name, at, junk):
    data = genuine(name)
    at %= len(data) + 1
    outcome(data[:at] + junk)


def test_unmodified_archives_load():
    assert outcome(genuine("small")) == "ok"
    assert outcome(genuine("mlp")) == "ok"
