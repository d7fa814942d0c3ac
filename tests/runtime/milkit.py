"""Hand-written MIL and BLOBFILEs for the runtime tests.

Independent of anec.mil (the emitter): the tests must be able to check the sim
against numpy without trusting the code that produces MIL in production.
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


def limits(**kw) -> dict:
    base = {"max_blob_tensors": 16, "scalar_penalty": 1, "max_conv_out_channels": 16384,
            "min_surface_bytes": 49152, "allow_fp32_io": True}
    base.update(kw)
    return base
