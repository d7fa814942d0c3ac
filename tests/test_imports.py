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


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` names, relative imports resolved against ``package``."""
    base = node.module or ""
    if node.level:
        up = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
    return base


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
                base = _from_module(node, package)
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
    assert "anec.ir.ops" in edges["anec.ir.module_builder"]  # a module-level import counts
    assert "anec.fsutil" in edges["anec.ir.parser"]  # and so does a function-local one
    assert "anec.ir.graph" in edges["anec.ir.verifier"]


# ---- layers ------------------------------------------------------------------------------
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("support", ("anec.diagnostics", "anec.fsutil", "anec.machine", "anec._lazy", "anec.version",
                 "anec.signals", "anec.hashing", "anec.thread_pools", "anec.c_extension")),
    ("weight storage", ("anec.weight_store",)),
    ("device facts", ("anec.targets",)),
    ("ir", ("anec.ir",)),
    ("formats", ("anec.mil", "anec.compress")),
    ("passes", ("anec.passes",)),
    ("runtime", ("anec.runtime", "anec.verdict")),
    ("compiler", ("anec.compiler", "anec.multi_program_build", "anec.ranges", "anec.compress_check",
                  "anec.constraints")),
    ("frontends, models, training", ("anec.frontends", "anec.models", "anec.training", "anec.autodiff")),
    ("apps", ("anec.cli", "anec.selftest", "anec.doctor", "anec")),
]
"""anec's layers, bottom to top (docs/architecture.md draws them): a module imports only modules
of its own layer or lower ones. A module belongs to the layer of the longest prefix that names
it; ``anec`` alone is the package's ``__init__`` (the public API, which imports everything)."""


def layer_of(module: str) -> int:
    best, found = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    if found is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_imports.py")
    return found


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for a in sorted(edges):
        for b in sorted(edges[a]):
            la, lb = layer_of(a), layer_of(b)
            if lb > la:
                bad.append(f"{a} ({LAYERS[la][0]}) imports {b} ({LAYERS[lb][0]}), a higher layer")
    return bad


def test_every_module_has_a_layer():
    for mod in import_graph():
        layer_of(mod)


def test_imports_follow_the_layer_order():
    assert layer_violations(import_graph()) == []


def test_the_layer_check_finds_an_upward_import():
    assert layer_violations({"anec.ir.graph": {"anec.passes.dce"}, "anec.passes.dce": {"anec.ir.graph"}}) == [
        "anec.ir.graph (ir) imports anec.passes.dce (passes), a higher layer"]


def private_imports() -> list[str]:
    """``from anec.x import _name`` in a module other than anec.x (a private name crossing a module)."""
    mods = _modules()
    found = []
    for mod, path in sorted(mods.items()):
        tree = ast.parse(path.read_text("utf-8"), str(path))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _from_module(node, package)
            if not base.startswith("anec") or base == mod:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: from {base} import {a.name}"
                      for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_across_modules():
    assert private_imports() == []


def _opening_paragraph(path: Path) -> bool:
    text = path.read_text("utf-8")
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text))
        return bool(doc and doc.strip())
    return text.lstrip().startswith("/*")


def test_modules_are_small_and_say_what_they_hold():
    """No anec module over 700 lines (the op table excepted), no C file over 900; each opens
    with a docstring (or, in C, a comment) that says what it holds."""
    big, silent = [], []
    for path in sorted((ROOT / "anec").rglob("*.py")):
        n = len(path.read_text("utf-8").splitlines())
        rel = path.relative_to(ROOT).as_posix()
        if n > 700 and rel != "anec/ir/ops.py":
            big.append(f"{rel}: {n} lines")
        if path.name != "__init__.py" and not _opening_paragraph(path):
            silent.append(str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "csrc").glob("*.[ch]")):
        n = len(path.read_text("utf-8").splitlines())
        if n > 900:
            big.append(f"{path.relative_to(ROOT)}: {n} lines")
        if not _opening_paragraph(path):
            silent.append(str(path.relative_to(ROOT)))
    assert big == [] and silent == []
