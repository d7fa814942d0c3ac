"""Hand-written MIL and BLOBFILEs for the runtime tests, and the checks their reloads share.

Independent of anec.mil (the emitter): the tests must be able to check the sim
against numpy without trusting the code that produces MIL in production.

A reload test claims two things, and :func:`assert_reloaded` checks both: the
outputs after the reload equal a fresh compile of the new weights bit for bit
(the sim is deterministic), and they differ from the outputs before it by
O(1), not by rounding noise (so a reload that does nothing fails). Its
failure messages are fixed strings (:data:`RELOAD_FAILURES`): the tests that
prove a reload test fails when the reload is a no-op match them.
"""

from __future__ import annotations

import struct

import numpy as np

HEADER = 'program(1.3)\n[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}})]\n{\n'
DT = {np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32", np.dtype(np.int32): "int32"}


def ttype(dtype: str, shape) -> str:
    if len(shape) == 0:
        return dtype
    return f"tensor<{dtype}, [{', '.join(str(int(d)) for d in shape)}]>"


def program(inputs: list[tuple[str, str, tuple]], body: list[str], outputs: list[str]) -> str:
    """inputs: (name, dtype, shape); body: statement lines; outputs: names."""
    sig = ", ".join(f"{ttype(dt, sh)} {n}" for n, dt, sh in inputs)
    lines = "".join(f"        {s}\n" for s in body)
    return HEADER + f"    func main<ios18>({sig}) {{\n{lines}    }} -> ({', '.join(outputs)});\n}}\n"


def hexf(v: float) -> str:
    return float(v).hex()


def const_scalar(name: str, dtype: str, value) -> str:
    if dtype == "bool":
        lit = f"bool({'true' if value else 'false'})"
    elif dtype == "string":
        lit = f'string("{value}")'
    elif dtype in ("fp16", "fp32"):
        lit = f"{dtype}({hexf(value)})"
    else:
        lit = f"{dtype}({int(value)})"
    return f'{dtype} {name} = const()[name = string("{name}"), val = {lit}];'


def const_ints(name: str, values) -> str:
    vals = ", ".join(str(int(v)) for v in values)
    t = ttype("int32", [len(values)])
    return f'{t} {name} = const()[name = string("{name}"), val = {t}([{vals}])];'


def const_bools(name: str, values) -> str:
    vals = ", ".join("true" if v else "false" for v in values)
    t = ttype("bool", [len(values)])
    return f'{t} {name} = const()[name = string("{name}"), val = {t}([{vals}])];'


def const_tensor(name: str, arr: np.ndarray) -> str:
    dt = DT[arr.dtype]
    t = ttype(dt, arr.shape)
    vals = ", ".join(hexf(float(v)) if dt != "int32" else str(int(v)) for v in arr.reshape(-1))
    return f'{t} {name} = const()[name = string("{name}"), val = {t}([{vals}])];'


def const_blob(name: str, dtype: str, shape, file: str, offset: int = 64) -> str:
    t = ttype(dtype, shape)
    return (f'{t} {name} = const()[name = string("{name}"), val = {t}(BLOBFILE(path = string("@model_path/weights/{file}"), '
            f'offset = uint64({offset})))];')


def op(result: str, rdtype: str, rshape, opname: str, **args) -> str:
    a = ", ".join(f"{k} = {v}" for k, v in sorted(args.items()))
    return f'{ttype(rdtype, rshape)} {result} = {opname}({a})[name = string("{result}")];'


_CODE = {np.dtype(np.float16): 1, np.dtype(np.float32): 2, np.dtype(np.uint8): 3, np.dtype(np.int8): 4}


def blobfile(*arrays: np.ndarray) -> bytes:
    """MILBlob v2 bytes holding the arrays (metadata of array i at the returned layout)."""
    out = bytearray(64)
    struct.pack_into("<II", out, 0, len(arrays), 2)
    for a in arrays:
        meta = len(out)
        data = np.ascontiguousarray(a).tobytes()
        rec = bytearray(64)
        struct.pack_into("<IIQQQ", rec, 0, 0xDEADBEEF, _CODE[a.dtype], len(data), meta + 64, 0)
        out += rec + data
        pad = (-len(out)) % 64
        if a is not arrays[-1]:
            out += bytes(pad)
    return bytes(out)


def weight_entry(key: str, file: str, offset: int, shape) -> dict:
    """A manifest's weight record: fp16 checkpoint key ``key`` at metadata ``offset`` of ``weights/file``."""
    return {"key": key, "file": f"weights/{file}", "path": f"@model_path/weights/{file}", "offset": offset,
            "dtype": "fp16", "shape": list(shape), "perm": None, "slice": None}


def rms(a) -> float:
    """Root mean square (float64)."""
    a = np.asarray(a, np.float64)
    return float(np.sqrt(np.mean(a * a))) if a.size else 0.0


def assert_order_one(a, what: str, lo: float = 0.1, hi: float = 10.0, max_zeros: float = 0.5) -> None:
    """``a`` holds real values: its RMS is in [lo, hi] and at most ``max_zeros`` of it is exactly 0."""
    r, zeros = rms(a), float(np.mean(np.asarray(a) == 0))
    assert lo <= r <= hi, f"{what}: RMS {r:.3g} is outside [{lo}, {hi}]"
    assert zeros <= max_zeros, f"{what}: {zeros:.0%} of the values are 0"


RELOAD_FAILURES = ("the outputs after the reload differ from a fresh compile of the new weights",
                   "the reload did not change the outputs")
"""The messages of :func:`assert_reloaded` (a regex alternation of them: ``"|".join``)."""


def assert_reloaded(before, after, fresh, what: str, min_change: float = 0.1) -> None:
    """A reload took effect: ``after`` equals ``fresh`` (a fresh compile of the new weights) bit for
    bit, and differs from ``before`` by an RMS of at least ``min_change`` (outputs are O(1))."""
    before, after, fresh = (np.asarray(a) for a in (before, after, fresh))
    if not np.array_equal(after, fresh):
        n = int(np.sum(after != fresh))
        raise AssertionError(f"{what}: {RELOAD_FAILURES[0]} ({n} of {after.size} elements)")
    change = rms(after.astype(np.float64) - before.astype(np.float64))
    if change < min_change:
        raise AssertionError(f"{what}: {RELOAD_FAILURES[1]} (RMS change {change:.3g} < {min_change})")


def limits(**kw) -> dict:
    base = {"max_blob_tensors": 16, "scalar_penalty": 1, "max_conv_out_channels": 16384,
            "min_surface_bytes": 49152, "allow_fp32_io": True}
    base.update(kw)
    return base
