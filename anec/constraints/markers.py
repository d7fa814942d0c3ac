"""Which tests trigger each constraint, read from a source checkout's tests/ without running pytest.

A Python test names the constraints it triggers with ``@pytest.mark.constraint("ANE-X", ...)``
(the marker is registered in pyproject.toml); a C test with the comment line
``/* constraint: ANE-X ANE-Y */`` directly above its ``static void test_...(`` line.
:func:`marked_tests` reads the Python markers with :mod:`ast` and the C comments line by
line, and gives the ``path::test`` references per constraint id. A marker it cannot read
(not on a module-level ``test_`` function, ids that are not string literals, a C comment
not above a test) is an error, so the listing never misses a marked test silently.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The checkout anec runs from; its ``tests/`` holds the marked tests (absent in an install)."""

_C_MARKER = re.compile(r"^/\* constraint: ((?:ANE-[A-Z0-9-]+ ?)+) \*/$")
_C_TEST = re.compile(r"^static void (test_\w+)\(")


class MarkerError(ValueError):
    """A constraint marker the reader cannot read (names the file and line)."""


def _mark_attribute(node: ast.AST) -> ast.Attribute | None:
    """The ``mark.constraint`` attribute of ``node`` (``pytest.mark.constraint``, ``mark.constraint``
    or a call of either), else None."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute) and node.attr == "constraint" and (
            (isinstance(node.value, ast.Attribute) and node.value.attr == "mark")
            or (isinstance(node.value, ast.Name) and node.value.id == "mark")):
        return node
    return None


def _python_markers(path: Path, rel: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(line, "rel::test", ids)`` for each marked test function of a Python file."""
    text = path.read_text("utf-8")
    if "mark.constraint" not in text:
        return []
    tree = ast.parse(text, str(path))
    found, read = [], set()
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.name.startswith("test_"):
            continue
        for dec in node.decorator_list:
            attr = _mark_attribute(dec)
            if attr is None:
                continue
            read.add(id(attr))
            args = dec.args if isinstance(dec, ast.Call) else []
            ids = tuple(a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str))
            if not ids or len(ids) != len(args) or (isinstance(dec, ast.Call) and dec.keywords):
                raise MarkerError(f"{rel}:{dec.lineno}: give the constraint ids as string literals: "
                                  "@pytest.mark.constraint(\"ANE-...\", ...)")
            found.append((node.lineno, f"{rel}::{node.name}", ids))
    for node in ast.walk(tree):
        if _mark_attribute(node) is node and id(node) not in read:
            raise MarkerError(f"{rel}:{node.lineno}: a constraint marker must decorate a module-level "
                              "test_ function")
    return found


def _c_markers(path: Path, rel: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(line, "rel::test", ids)`` for each C test function with a marker comment above it."""
    lines = path.read_text("utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("/* constraint:"):
            continue
        m = _C_MARKER.match(line.strip())
        test = _C_TEST.match(lines[i + 1]) if m and i + 1 < len(lines) else None
        if test is None:
            raise MarkerError(f"{rel}:{i + 1}: a constraint comment is the line '/* constraint: ANE-X [ANE-Y ...] */' "
                              "directly above 'static void test_...('")
        found.append((i + 2, f"{rel}::{test.group(1)}", tuple(m.group(1).split())))
    return found


def marked_tests(root: Path = SOURCE_ROOT) -> dict[str, tuple[str, ...]]:
    """The tests under ``root/tests`` marked with each constraint id: ``{id: ("path::test", ...)}``,
    by path, then line. Empty when ``root`` has no tests/ (anec installed without its sources)."""
    tests = root / "tests"
    if not tests.is_dir():
        return {}
    marked: dict[str, list[str]] = {}
    for path in sorted([*tests.rglob("*.py"), *tests.rglob("*.c")]):
        rel = path.relative_to(root).as_posix()
        read = _python_markers if path.suffix == ".py" else _c_markers
        for _line, ref, ids in read(path, rel):
            for cid in ids:
                marked.setdefault(cid, []).append(ref)
    return {cid: tuple(refs) for cid, refs in marked.items()}
