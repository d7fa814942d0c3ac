"""FX nodes for diagnostics and pattern checks: where a node came from in the user's Python
source, located errors, and the structural patterns the ATen lowerings recognise."""

from __future__ import annotations

import os
import re
from typing import Any

from anec.diagnostics import AnecError, Source, Span

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]*)\n(?P<code>[^\n]*)')


def _frames(node: Any) -> list[tuple[str, int, str]]:
    trace = (getattr(node, "meta", None) or {}).get("stack_trace") or ""
    return [(m.group("file"), int(m.group("line")), m.group("code")) for m in _FRAME.finditer(trace)]


def _user_frame(node: Any) -> tuple[str, int, str] | None:
    """The innermost frame of the node's stack trace outside torch (the model's code)."""
    frames = _frames(node)
    if not frames:
        return None
    try:
        import torch

        torch_dir = os.path.dirname(torch.__file__) + os.sep
    except ImportError:  # pragma: no cover - torch is there when nodes exist
        torch_dir = os.sep + "torch" + os.sep
    for f in reversed(frames):
        if not f[0].startswith(torch_dir):
            return f
    return frames[-1]


def node_location(node: Any) -> str:
    """``file:line`` of the Python code that produced an FX node ('' if unknown)."""
    f = _user_frame(node)
    return f"{f[0]}:{f[1]}" if f else ""


def node_span(node: Any) -> Span | None:
    """A span on the Python source line of the node (for diagnostics and IR spans)."""
    f = _user_frame(node)
    if f is None:
        return None
    file, line, code = f
    text = code.strip()
    full = _source_line(file, line)
    if full.strip() == text and text:
        indent = full[: len(full) - len(full.lstrip())]
    else:
        indent = ""
    src = Source(file, "\n" * (line - 1) + indent + text)
    start = len(src.text) - len(text)
    return Span(src, start, len(src.text))


def _source_line(file: str, line: int) -> str:
    """The line as written in the file (for its indentation), or '' if unreadable."""
    import linecache

    try:
        return linecache.getline(file, line).rstrip("\n")
    except Exception:  # unreadable or odd files: the stack trace's text is enough
        return ""


def _module_note(node: Any) -> str | None:
    stack = (getattr(node, "meta", None) or {}).get("nn_module_stack") or {}
    if not stack:
        return None
    path, cls = list(stack.values())[-1]
    if not path:
        return None
    return f"in module '{path}' ({str(cls).rsplit('.', 1)[-1]})"


def _op_name(node: Any) -> str:
    t = getattr(node, "target", None)
    return str(t) if t is not None else str(node)


def located_error(cls: type, node: Any, message: str, hint: str | None = None) -> AnecError:
    """An error about FX ``node``: the ATen op, the user's source line, the module path."""
    op = _op_name(node)
    notes = []
    mod = _module_note(node)
    if mod:
        notes.append(mod)
    if not _frames(node):
        notes.append("no Python source line is known for this node (the program has no stack traces)")
    return cls(f"{op}: {message}", span=node_span(node), hint=hint, notes=notes)


def repeat_kv_source(node: Any) -> Any:
    """For ``view(clone(expand(unsqueeze(x, -3))))`` repeating key/value heads
    (transformers' ``repeat_kv``), the FX node of ``x``; else None."""
    n = node
    if getattr(n, "op", None) != "call_function":
        return None
    if _short(n) not in ("view", "_unsafe_view", "reshape"):
        return None
    n = n.args[0]
    if _short(n) == "clone":
        n = n.args[0]
    if _short(n) != "expand":
        return None
    e = n
    n = n.args[0]
    if _short(n) != "unsqueeze":
        return None
    base = n.args[0]
    try:
        bs = tuple(base.meta["val"].shape)
        es = tuple(e.meta["val"].shape)
        out = tuple(node.meta["val"].shape)
    except (KeyError, AttributeError):
        return None
    if len(bs) < 3 or len(es) != len(bs) + 1 or n.args[1] % len(es) != len(bs) - 2:
        return None
    lead, kv, s, d = bs[:-3], bs[-3], bs[-2], bs[-1]
    if es[:-4] != lead or es[-4] != kv or es[-2:] != (s, d):
        return None
    if out != lead + (kv * es[-3], s, d):
        return None
    return base


def _short(node: Any) -> str | None:
    if getattr(node, "op", None) != "call_function":
        return None
    name = str(node.target)
    return name.split(".")[1] if name.startswith("aten.") else None
