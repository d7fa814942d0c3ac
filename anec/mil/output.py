"""A compile output: one artifact directory per func and the output index, written whole.

``anec compile -o out`` writes ``out/<func>/`` for every func (an artifact,
:mod:`anec.mil.artifact`, or a pipeline, :mod:`anec.mil.multi_program`) and the
index ``out/.anec-output.json`` (format ``anec-output/1``) naming every func and
the sha256 of its manifest. The index is written last, so an output is
complete exactly when it has one. Writing is all or nothing for the whole
output (:func:`write_output`, through :func:`anec.fsutil.write_tree_atomic`:
a temporary directory ``.out.anec-tmp-*`` replaces the destination in one
rename, writers take turns under ``.out.anec-lock``); the weight files are
streamed to disk while their hashes are computed. :func:`load_artifact` reads
one func of an output (or an artifact directory) beneath it, never a
temporary directory, and reads again an output a newer compile replaced
meanwhile.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from anec.diagnostics import ArtifactError, did_you_mean
from anec.fsutil import TreeFile, is_temp_name, parse_json, real_dir, write_new_file, write_tree_atomic
from anec.hashing import sha256
from anec.mil.artifact import (BLOB_MAX_BYTES, MANIFEST_FILE, MIL_FILE, OUTPUT_FORMAT, OUTPUT_INDEX, PROGRAM_IR_FILE,
                               Artifact, file_source)
from anec.mil.beneath import Beneath, check_rel
from anec.mil.json_format import format_json
from anec.mil.manifest import MANIFEST_MAX_BYTES
from anec.version import __version__


def _func_dir_name(name: Any) -> str:
    if not isinstance(name, str) or not name or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise ArtifactError(f"func name {name!r:.60} cannot name a directory of the output")
    return name


def write_output(out: str | os.PathLike, artifacts: Mapping[str, "Artifact"],
                 keep_funcs: bool = False) -> dict[str, Path]:
    """Write every func's artifact to ``out/<func>/`` and the output index, all or nothing.

    ``out`` is replaced as a whole, and a reader sees the complete previous
    output or the complete new one. Afterwards it holds exactly these funcs;
    with ``keep_funcs`` also the funcs of the previous output that these do
    not replace (hard-linked into the new tree, so adding one func costs no
    copy). An existing ``out`` must be empty, an anec output or an artifact,
    so a mistyped ``-o`` never deletes user files. Returns func -> directory.
    """
    dest = Path(out)
    early: dict[str, TreeFile] = {}
    for name, art in artifacts.items():
        d = _func_dir_name(name)
        if not art.complete:
            art.files()  # the error naming the missing weight file
        for rel, data in _early_files(art):
            early[f"{d}/{rel}"] = data
    index: dict[str, str] = {}

    def last(tmp: Path) -> dict[str, bytes]:
        """While the weight files, MIL and program.ir are written: every other file (the
        manifests wait for the weight hashes computed meanwhile) and the output index, with
        the kept funcs linked in first; runs under the write lock, so the previous output is
        stable. (The order of the writes into the temporary directory does not matter: the
        output appears whole, by a rename, once every file is fsynced.)"""
        rest: dict[str, TreeFile] = {}
        for name, art in artifacts.items():
            d = _func_dir_name(name)
            for rel, data in art.files().items():
                if f"{d}/{rel}" not in early:
                    rest[f"{d}/{rel}"] = data
            index[d] = sha256(rest[f"{d}/{MANIFEST_FILE}"])
        kept = _link_funcs(dest, tmp, exclude=index) if keep_funcs and os.path.lexists(dest) else {}
        marker = {"format": OUTPUT_FORMAT, "anec_version": __version__, "funcs": {**kept, **index}}
        return {**rest, OUTPUT_INDEX: (format_json(marker) + "\n").encode("utf-8")}

    if os.path.lexists(dest):
        _check_replaceable_output(dest)
    write_tree_atomic(dest, early, last)
    return {name: dest / name for name in artifacts}


def _early_files(art: Any) -> list[tuple[str, TreeFile]]:
    """The files of an artifact (and of a pipeline's stages) that do not wait for the weight
    hashes, relative path -> bytes or the writer streaming them: the weight files, the MIL and
    program.ir. :func:`write_output` writes them first, so their fsyncs overlap; the manifests
    follow once the hashes are known."""
    out = []
    stages = getattr(art, "stages", None)
    if stages is not None:  # a pipeline: its manifest names each stage's directory
        for entry, stage in zip(art.manifest.stages, stages):
            check_rel(entry.dir, "stage directory")
            out += [(f"{entry.dir}/{rel}", data) for rel, data in _early_files(stage)]
    else:
        out.append((MIL_FILE, art.mil_text.encode("utf-8")))
    out.append((PROGRAM_IR_FILE, art.program_ir.encode("utf-8")))
    for rel in art.blobs:
        check_rel(rel, "weight file")
        out.append((rel, file_source(art.blobs, rel)))
    return out


def _link_funcs(dest: Path, tmp: Path, exclude: Mapping[str, str]) -> dict[str, str]:
    """Hard-link the func directories of the output ``dest`` (all but ``exclude``) into
    ``tmp``; func -> manifest sha256. Only plain directories and regular files are taken."""
    kept: dict[str, str] = {}
    with Beneath.open(real_dir(dest)) as d:
        if d.kind(MANIFEST_FILE) is not None:
            return kept  # a single artifact, not an output: nothing to keep
        for name, digest in output_funcs(d).items():
            if name in exclude:
                continue
            with d.subdir(name, "func directory") as sub:
                _link_tree(sub, tmp / name)
                kept[name] = digest or sha256(sub.read(MANIFEST_FILE, MANIFEST_MAX_BYTES, "manifest"))
    return kept


def _link_tree(src: Beneath, to: Path) -> None:
    to.mkdir()
    for name in src.names():
        kind = src.kind(name)
        if kind == "directory":
            with src.subdir(name) as sub:
                _link_tree(sub, to / name)
        elif kind == "file":
            try:
                os.link(name, to / name, src_dir_fd=src.fileno, follow_symlinks=False)
            except OSError:  # no hard links here: copy
                write_new_file(to / name, src.read(name, BLOB_MAX_BYTES, "file"))
        else:
            raise ArtifactError(f"cannot keep '{src.path / name}' in the output: it is a {kind}",
                                hint="recompile that func, or write the output without keeping funcs")


def _check_replaceable_output(dest: Path) -> None:
    """ArtifactError unless ``dest`` is empty, an anec output or an artifact (outputs of
    older versions: func directories with a manifest, and their writers' temporary
    directories)."""
    with Beneath.open(real_dir(dest)) as d:
        names = d.names()
        if not names or d.kind(OUTPUT_INDEX) == "file" or d.kind(MANIFEST_FILE) == "file":
            return
        for n in names:
            if is_temp_name(n):
                continue
            if d.kind(n) == "directory":
                with d.subdir(n) as sub:
                    if sub.kind(MANIFEST_FILE) == "file":
                        continue
            raise ArtifactError(f"refusing to replace '{dest}': it holds '{n}', which is not part of an anec output",
                                hint="choose an empty or new output directory")


def load_artifact(path: str | os.PathLike, func: str | None = None,
                  loader: "Callable[[Beneath, str | None], Any] | None" = None) -> "Artifact":
    """The artifact at ``path``: an artifact directory, its ``manifest.json``, or a compile
    output (``func`` picks one when it holds several). A temporary directory of a write is
    never taken; an output replaced by a newer compile while it is read is read again.
    ``loader(directory, manifest sha256 or None)`` reads one func's directory (default:
    :meth:`Artifact.read`; :func:`anec.mil.multi_program.load_any` also reads pipelines)."""
    p = Path(os.fspath(path))
    if p.name == MANIFEST_FILE and not os.path.isdir(p):
        p = p.parent
    for part in (p.name, p.parent.name):
        if part and is_temp_name(part):
            raise ArtifactError(f"'{p}' is a temporary directory of an unfinished or replaced compile; "
                                "it is never loaded", hint="load the output directory the compile was given (-o)")
    for attempt in range(3):
        with Beneath.open(p) as d:
            try:
                return _load_from(d, func, loader or Artifact.read)
            except ArtifactError:
                if d.replaced and attempt < 2:  # a newer compile replaced the output meanwhile
                    continue
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _load_from(d: Beneath, func: str | None, loader: Callable[[Beneath, str | None], Any]) -> "Artifact":
    if d.kind(MANIFEST_FILE) is not None:
        art = loader(d, None)
        if func is not None and art.func != func:
            raise ArtifactError(f"'{d.path}' holds func '{art.func}', not '{func}'")
        return art
    funcs = output_funcs(d)
    if not funcs:
        raise ArtifactError(f"'{d.path}' is not an artifact directory (no manifest.json in it or its subdirectories)",
                            hint="compile first: anec compile model.ir -o DIR")
    names = sorted(funcs)
    if func is None:
        if len(names) > 1:
            raise ArtifactError(f"'{d.path}' holds several funcs ({', '.join(names)}); choose one",
                                hint="pass func=NAME (CLI: --func NAME)")
        func = names[0]
    if func not in funcs:
        raise ArtifactError(f"'{d.path}' has no func '{func}' (funcs: {', '.join(names)})",
                            hint=did_you_mean(func, names))
    with d.subdir(_func_dir_name(func), "func directory") as sub:
        art = loader(sub, funcs[func])
    if art.func != func:
        raise ArtifactError(f"'{d.path / func}' holds func '{art.func}', not '{func}'")
    return art


def output_funcs(d: Beneath) -> dict[str, str | None]:
    """Func -> manifest sha256 of the compile output in ``d``, from its index (outputs of
    older versions have none: every plain subdirectory holding a manifest, sha256 None)."""
    if d.kind(OUTPUT_INDEX) is not None:
        where = d.path / OUTPUT_INDEX
        index = parse_json(d.read(OUTPUT_INDEX, MANIFEST_MAX_BYTES, "output index"), str(where), "output index")
        funcs = index.get("funcs") if isinstance(index, dict) else None
        if not isinstance(index, dict) or index.get("format") != OUTPUT_FORMAT or not isinstance(funcs, dict) or \
                not all(isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for v in funcs.values()):
            raise ArtifactError(f'{where}: expected {{"format": "{OUTPUT_FORMAT}", "funcs": {{name: sha256}}}}',
                                hint="the output is damaged or was not written by anec; recompile it")
        for name in funcs:
            _func_dir_name(name)
        return dict(funcs)
    found: dict[str, str | None] = {}
    for n in d.names():
        if n.startswith(".") or d.kind(n) != "directory":
            continue
        with d.subdir(n) as sub:
            if sub.kind(MANIFEST_FILE) is not None:
                found[n] = None
    return found
