"""csrc/anec_rt.cdef.h (what cffi parses) declares exactly what csrc/anec_rt.h declares.

cffi's cdef() cannot read the real header (includes, preprocessor logic), so
the cdef is a second copy. This test keeps the copy honest: the same
constants with the same values, the same functions with the same signatures,
and the same structs with the same fields in the same order.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"


def _strip(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def declarations(text: str) -> dict[str, dict]:
    """Constants (``#define NAME value``), functions and structs of a C header, normalized."""
    text = _strip(text)
    defines = {}
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(ANEC_[A-Z0-9_]+)[ \t]+(\S+)", text, re.M):
        value = m.group(2)
        defines[m.group(1)] = str(int(value, 0)) if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", value) else value
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for name, value in defines.items():  # array sizes written with a constant or its value
        body = re.sub(rf"\b{name}\b", value, body)
    body = re.sub(r"\s+", " ", body)
    body = re.sub(r'extern "C" \{|^\s*\}\s*$', " ", body)
    structs: dict[str, list[str]] = {}
    for m in re.finditer(r"(?:typedef )?struct (\w+) \{(.*?)\}\s*\w*\s*;", body):
        structs[m.group(1)] = [re.sub(r"\s*([*,\[\]])\s*", r"\1", f.strip()) for f in m.group(2).split(";")
                               if f.strip()]
    rest = re.sub(r"(?:typedef )?struct (\w+) \{(.*?)\}\s*\w*\s*;", " ", body)
    functions: dict[str, str] = {}
    opaque: set[str] = set()
    for stmt in rest.split(";"):
        stmt = stmt.strip()
        m = re.fullmatch(r"typedef struct (\w+) (\w+)", stmt)
        if m:
            opaque.add(m.group(2))
            continue
        m = re.fullmatch(r"(.+?)\b(anec_\w+)\s*\((.*)\)", stmt)
        if m:
            sig = f"{m.group(1).strip()} {m.group(2)}({m.group(3).strip()})"
            functions[m.group(2)] = re.sub(r"\s*([*,()])\s*", r"\1", sig)
    return {"defines": defines, "structs": structs, "functions": functions, "opaque": opaque}


@pytest.fixture(scope="module")
def both():
    return (declarations((CSRC / "anec_rt.h").read_text("utf-8")),
            declarations((CSRC / "anec_rt.cdef.h").read_text("utf-8")))


@pytest.mark.parametrize("kind", ["defines", "structs", "functions", "opaque"])
def test_cdef_copies_the_header(both, kind):
    header, cdef = both
    assert header[kind], f"no {kind} found in anec_rt.h: the reader is broken"
    assert cdef[kind] == header[kind]


def test_the_reader_sees_a_difference():
    h = declarations("typedef struct s { int a; size_t b; } s;\nint anec_f(const s *x, size_t n);\n"
                     "#define ANEC_X 1\n")
    assert h == {"defines": {"ANEC_X": "1"}, "structs": {"s": ["int a", "size_t b"]},
                 "functions": {"anec_f": "int anec_f(const s*x,size_t n)"}, "opaque": set()}
    changed = declarations("typedef struct s { int a; int b; } s;\nint anec_f(const s *x);\n#define ANEC_X 2\n")
    assert all(changed[k] != h[k] for k in ("defines", "structs", "functions"))
