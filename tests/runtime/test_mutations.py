"""Hypothesis over mutated manifests and MIL texts: whatever an artifact holds, loading and
running it (the runtime and ``anec run``) ends in success or an AnecError, never a traceback.

The number of inputs per test is ANEC_FUZZ_EXAMPLES (default 150); the documented long
run takes 10,000 each (about 20 minutes on 2 cores)::

    ANEC_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest tests/runtime/test_mutations.py -q
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anec.cli import main
from anec.compiler import compile_module
from anec.diagnostics import AnecError
from anec.ir.parser import parse
from anec.runtime import Runtime, native

from .hostile import FFN, FUNC

EXAMPLES = int(os.environ.get("ANEC_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mutations")
    compile_module(parse(FFN, "ffn.ir"), random_seed=0, out_dir=root / "plain")
    compile_module(parse(FFN, "ffn.ir"), random_seed=0, out_dir=root / "wai", weights_as_inputs=["l.proj.weight"])
    return {"plain": root / "plain" / FUNC, "wai": root / "wai" / FUNC}


def _attempt(path: Path) -> str | None:
    """Load and run ``path`` through the runtime and through ``anec run``; the error message
    or None. A traceback (anything but an AnecError, an internal error of the CLI) fails."""
    native.reset_process_budget("sim")
    msg = None
    with Runtime("sim") as rt:
        try:
            prog = rt.load(path)
            prog(**{s["name"]: np.zeros(s["logical_shape"], np.float32) for s in prog.inputs
                    if s["name"] in prog.input_names})
        except AnecError as e:
            msg = str(e)
    native.reset_process_budget("sim")
    result = CliRunner().invoke(main, ["run", str(path), "--backend", "sim", "--random-inputs", "0"])
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    assert isinstance(result.exception, (SystemExit, type(None))), repr(result.exception)
    assert result.exit_code == (0 if msg is None else 1), (result.exit_code, msg, result.output)
    return msg


# ---- manifests ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=8,
)
tricky = st.sampled_from([
    -1, 0, 1, 63, 64, 65, 128, 2**31 - 1, 2**31, 2**32, 2**62, 2**63, 2**64 - 1, 2**64, 1e300, -0.0, 0.5,
    True, False, None, "", "64", "../x", "/etc/passwd", "weights/../../x", "weights//w1.bin", "weights/w1.bin",
    "inputs/w2.bin", "model.mil", "a\\b", "x\x00y", "@model_path/weights/w1.bin", "fp16", "fp32", "fp64", "ios16",
    "x", "y", "z", "w2", [], {}, [0], [1, 8, 1, 4], [8, 16, 1, 1], [0, 1, 2], [2147483647] * 8, "x" * 300,
])


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated_manifest(draw, base: dict) -> Any:
    m = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(m)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["set", "set", "tricky", "tricky", "delete", "add", "dup"]))
        if not path:
            if op in ("set", "tricky"):
                m = copy.deepcopy(draw(json_values if op == "set" else tricky))
            continue
        parent = m
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        if op == "set":
            parent[key] = draw(json_values)
        elif op == "tricky":
            parent[key] = copy.deepcopy(draw(tricky))  # sampled values are shared: never mutate them
        elif op == "delete":
            del parent[key]
        elif op == "add" and isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=8))] = copy.deepcopy(draw(json_values | tricky))
        elif op == "dup" and isinstance(parent[key], list) and parent[key]:
            parent[key].append(json.loads(json.dumps(parent[key][0])))
        if not isinstance(m, (dict, list)):
            break
    return m


@pytest.mark.parametrize("base", ["plain", "wai"])
def test_mutated_manifests_never_traceback(bases, tmp_path, base):
    manifest = json.loads((bases[base] / "manifest.json").read_text())
    seen = {"errors": 0, "loads": 0}

    @SETTINGS
    @given(mutated_manifest(manifest))
    def run(m):
        d = tmp_path / "art"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(bases[base], d)
        (d / "manifest.json").write_text(json.dumps(m))
        msg = _attempt(d)
        seen["errors" if msg else "loads"] += 1

    run()
    assert seen["errors"] > 0  # the mutations do reach the checks


@SETTINGS
@given(data=st.binary(max_size=64), at=st.integers(0, 10**6), cut=st.integers(0, 64))
def test_manifest_bytes_never_traceback(bases, tmp_path_factory, data, at, cut):
    raw = (bases["plain"] / "manifest.json").read_bytes()
    at %= len(raw)
    d = tmp_path_factory.mktemp("bytes")
    shutil.copytree(bases["plain"], d / "art")
    (d / "art" / "manifest.json").write_bytes(raw[:at] + data + raw[at + cut:])
    _attempt(d / "art")


# ---- MIL texts ------------------------------------------------------------------------

MIL_TOKENS = ["1e300", "-1", "0", "2147483648", "4294967296", "18446744073709551616", "nan", "inf", "-inf", "0x1p+1024",
              "[", "]", "(", ")", "{", "}", "<", ">", ",", "=", ";", "->", "\"", "\\", "\x00", "\xff", "//",
              "tensor<fp16, [65536, 65536, 65536, 65536]>", "tensor<fp32, []>", "uint64(64)", "uint64(1e300)",
              "BLOBFILE(path = string(\"@model_path/../x\"), offset = uint64(64))", "x", "y", "conv", "matmul",
              "reshape", "concat", "func", "program(1.3)", "bool(true)", "int32(-2147483648)", "string(\"\")"]


@st.composite
def mutated_mil(draw, text: str) -> bytes:
    data = text.encode()
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["token", "token", "delete", "dup", "bytes"]))
        if op == "token":
            data = data[:at] + draw(st.sampled_from(MIL_TOKENS)).encode("utf-8", "surrogatepass") + data[at:]
        elif op == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 40)):]
        elif op == "dup":
            n = draw(st.integers(1, 80))
            data = data[:at] + data[at:at + n] * draw(st.integers(2, 50)) + data[at:]
        else:
            data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return data


def test_mutated_mil_never_traceback(bases, tmp_path):
    text = (bases["plain"] / "model.mil").read_text()
    manifest = json.loads((bases["plain"] / "manifest.json").read_text())

    @SETTINGS
    @given(mutated_mil(text))
    def run(mil):
        d = tmp_path / "art"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(bases["plain"], d)
        (d / "model.mil").write_bytes(mil)
        manifest["mil"]["sha256"] = hashlib.sha256(mil).hexdigest()  # past the hash: the parsers must hold
        (d / "manifest.json").write_text(json.dumps(manifest))
        _attempt(d)

    run()
