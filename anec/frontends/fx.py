"""FX nodes for diagnostics and pattern checks: where a node came from in the user's Python
source, located errors, and the structural patterns the ATen lowerings recognise."""

from __future__ import annotations

import contextvars
import os
import re
from typing import Any

from anec.diagnostics import AnecError, Source, Span

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]*)\n(?P<code>[^\n]*)')


def _frames(node: Any) -> list[tuple[str, int, str]]:
    trace = (getattr(node, "meta", None) or {}).get("stack_trace") or ""
    return [(m.group("file"), int(m.group("line")), m.group("code")) for m in _FRAME.finditer(trace)]


_CALLER: contextvars.ContextVar[tuple[str, int, str] | None] = contextvars.ContextVar("anec_import_caller",
                                                                                     default=None)


def _torch_dir() -> str:
    try:
        import torch

        return os.path.dirname(torch.__file__) + os.sep
    except ImportError:  # pragma: no cover - torch is there when nodes exist
        return os.sep + "torch" + os.sep


class importing_from:
    """``with importing_from():`` while ``anec.import_torch`` runs: remembers the user's line
    that called it (the innermost frame outside anec, torch and the standard library), the
    location of errors about layers whose whole stack trace is torch's own (an
    ``nn.Sequential`` of torch layers has no line of the user's in its forward)."""

    def __enter__(self) -> None:
        import sys
        import sysconfig

        skip = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep, _torch_dir(),
                os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep]
        site = sysconfig.get_paths().get("purelib")
        if site:
            skip.append(os.path.abspath(site) + os.sep)
        frame, found = sys._getframe(1), None
        while frame is not None:
            file = os.path.abspath(frame.f_code.co_filename)
            if not any(file.startswith(d) for d in skip) and not file.startswith("<"):
                import linecache

                found = (file, frame.f_lineno, linecache.getline(file, frame.f_lineno).strip())
                break
            frame = frame.f_back
        self.token = _CALLER.set(found)

    def __exit__(self, *exc: Any) -> None:
        _CALLER.reset(self.token)


def _user_frame(node: Any) -> tuple[str, int, str] | None:
    """The innermost frame of the node's stack trace outside torch (the model's code); when
    every frame is torch's, the user's call of the import (:class:`importing_from`), else
    torch's innermost frame."""
    frames = _frames(node)
    if not frames:
        return None
    torch_dir = _torch_dir()
    for f in reversed(frames):
        if not f[0].startswith(torch_dir):
            return f
    return _CALLER.get() or frames[-1]


def _only_torch_frames(node: Any) -> bool:
    frames = _frames(node)
    return bool(frames) and all(f[0].startswith(_torch_dir()) for f in frames)


def node_location(node: Any) -> str:
    """``file:line`` of the Python code that produced an FX node ('' if unknown)."""
    f = _user_frame(node)
    return f"{f[0]}:{f[1]}" if f else ""


def node_span(node: Any) -> Span | None:
    """A span on the Python source line of the node (for diagnostics and IR spans)."""
    f = _user_frame(node)
    return None if f is None else frame_span(*f)


def frame_span(file: str, line: int, code: str) -> Span:
    """A span on ``code``, line ``line`` of the Python file ``file``."""
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


def op_name(node: Any) -> str:
    """The FX node's target as text (``aten.add.Tensor``)."""
    t = getattr(node, "target", None)
    return str(t) if t is not None else str(node)


def located_error(cls: type, node: Any, message: str, hint: str | None = None) -> AnecError:
    """An error about FX ``node``: the ATen op, the user's source line, the module path."""
    op = op_name(node)
    notes = []
    mod = _module_note(node)
    if mod:
        notes.append(mod)
    if not _frames(node):
        notes.append("no Python source line is known for this node (the program has no stack traces)")
    elif _only_torch_frames(node) and _CALLER.get() is not None:
        file, line, _ = _frames(node)[-1]
        notes.append(f"the layer runs torch's own code ({file}:{line}); this is where the model was imported")
    return cls(f"{op}: {message}", span=node_span(node), hint=hint, notes=notes)


def repeat_kv_source(node: Any) -> Any:
    """For ``view(clone(expand(unsqueeze(x, -3))))`` repeating key/value heads
    (transformers' ``repeat_kv``), the FX node of ``x``; else None."""
    n = node
    if getattr(n, "op", None) != "call_function":
        return None
    if aten_base(n) not in ("view", "_unsafe_view", "reshape"):
        return None
    n = n.args[0]
    if aten_base(n) == "clone":
        n = n.args[0]
    if aten_base(n) != "expand":
        return None
    e = n
    n = n.args[0]
    if aten_base(n) != "unsqueeze":
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


def aten_base(node: Any) -> str | None:
    """The ATen op of a ``call_function`` node without namespace and overload (``add``), else None."""
    if getattr(node, "op", None) != "call_function":
        return None
    name = str(node.target)
    return name.split(".")[1] if name.startswith("aten.") else None
