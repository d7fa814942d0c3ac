"""anec's modules import each other without cycles.

Every ``import`` and ``from ... import`` of an anec module counts, at module
level or inside a function (a lazy import is still a dependency), except
imports under ``if TYPE_CHECKING:`` (annotations only). A package counts as
its ``__init__``; importing a submodule does not count as importing its
package.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PENDING: set[tuple[str, str]] = set()
"""Edges in files being reworked elsewhere that still close a cycle (none today): each is
checked to exist, so an entry is removed once its file is switched."""


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (ROOT / "anec").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def import_graph() -> dict[str, set[str]]:
    """anec module -> the anec modules it imports."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text("utf-8"), str(path))
        skip = _type_checking_only(tree)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                edges[mod] |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    if f"{base}.{a.name}" in mods:
                        edges[mod].add(f"{base}.{a.name}")
                    elif base in mods:
                        edges[mod].add(base)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan (recursive: anec has far fewer modules than the limit)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges[v]:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    edges = import_graph()
    for a, b in PENDING:
        assert b in edges[a], f"{a} no longer imports {b}: remove it from PENDING"
        edges[a].discard(b)
    assert cycles(edges) == []


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    edges = import_graph()
    assert "anec.ir.ops" in edges["anec.ir.parser"]  # lazy and module-level imports both count
    assert "anec.ir.graph" in edges["anec.ir.verifier"]
