"""``anec models export``: a checkpoint's programs as readable ``.ir`` files.

The output directory holds one ``.ir`` file per bucket (format
``anec-model/2``): a decoder's ``prefill_sS.ir`` and ``decode_wW_tT.ir``, each
one func for the whole layer stack, and ``lm_head.ir``; a BERT encoder's
``encoder_sS.ir``. The compiler partitions each func into as many ANE
programs as the target's budgets need. Next to them: ``weights.safetensors``
with every tensor the IR references (checkpoint keys, in the IR's conv layout,
fp16, plus generated tensors such as causal masks under ``anec.*`` keys) and
``model.json`` describing the funcs and buckets. Every file compiles as is,
and ``anec models compile`` compiles them all::

    anec models export gpt2 ./gpt2 -o out/
    anec compile out/prefill_s64.ir -o build/        # one file
    anec models compile out/ -o build/               # every file, checked against model.json

The directory is written all or nothing, like ``anec compile -o``: into a
temporary directory next to it, fsynced, renamed into place; concurrent
exports to one directory take turns, and a killed export's leftovers are
removed by the next one (see :func:`write_export`).

Directories written by older versions (``anec-model/1``: one func per layer
half) are refused by :func:`read_export` with the command that re-exports them.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import struct
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from anec.diagnostics import ArtifactError
from anec.fsutil import replace_file
from anec.models.buckets import target_limits
from anec.models.common import ModelError
from anec.models.hf import load_checkpoint
from anec.models.programs import weight_keys

if TYPE_CHECKING:
    from anec.ir.graph import Graph

FORMAT = "anec-model/2"
"""``model.json`` format: one func per bucket (``anec-model/1`` had one func per layer half)."""
MODEL_JSON = "model.json"
WEIGHTS = "weights.safetensors"
KINDS = ("gpt2", "llama", "bert")
_TYPES = {"gpt2": ("gpt2",), "llama": ("llama", "mistral"), "bert": ("bert",)}


def export_checkpoint(kind: str, checkpoint: str | Path, out_dir: str | Path,
                      prefill: Sequence[int] | None = None, cache: Sequence[int] | None = None,
                      target: str | None = None, lora_targets: Sequence[str] = (),
                      lora_rank: int = 8) -> dict[str, Any]:
    """Export ``checkpoint`` as a ``kind`` model; returns the ``model.json`` content."""
    if kind not in KINDS:
        raise ModelError(f"unknown model kind '{kind}'", hint=f"one of: {', '.join(KINDS)}")
    ckpt = load_checkpoint(checkpoint)
    if ckpt.model_type not in _TYPES[kind]:
        raise ModelError(f"'{checkpoint}' is a '{ckpt.model_type}' checkpoint, not {kind}",
                         hint=f"export it as: anec models export {_kind_of(ckpt.model_type)} ...")
    _, min_surface = target_limits(target)
    if kind == "bert":
        from anec.models.bert import Bert

        if cache:
            raise ModelError("BERT is an encoder: it has no decode programs (drop --cache)")
        fe = Bert(ckpt, min_surface)
        groups, info = fe.export_funcs(list(prefill) if prefill else None)
    else:
        from anec.models.generate import decoder_frontend

        fe = decoder_frontend(ckpt, min_surface)
        groups, info = fe.export_funcs(list(prefill) if prefill else None, list(cache) if cache else None)
    lora = (list(lora_targets), lora_rank) if lora_targets else None
    return write_export(out_dir, kind, groups, fe.weight, info, lora=lora,
                        release=lambda k: ckpt.drop_pages(k) if k in ckpt else None)


class _Lazy(Mapping[str, np.ndarray]):
    """``keys`` -> ``weight(key)``, looked up when read (nothing held)."""

    def __init__(self, keys: Iterable[str], weight: Callable[[str], np.ndarray]) -> None:
        self._keys = list(keys)
        self._weight = weight

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._keys:
            raise KeyError(key)
        return self._weight(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _kind_of(model_type: str) -> str:
    for k, types in _TYPES.items():
        if model_type in types:
            return k
    return "(unsupported)"


def _lora_texts(texts: dict[str, str], targets: list[str], rank: int) -> dict[str, Any]:
    """Give the exported modules LoRA inputs on ``targets`` (``texts``: file -> IR, rewritten
    in place); the ``lora`` entry of ``model.json``."""
    from anec.ir.parser import parse
    from anec.ir.printer import print_module
    from anec.ir.verifier import verify
    from anec.models.lora import apply_lora

    slots: dict[str, list[dict[str, Any]]] = {}
    for name, text in texts.items():
        module = parse(text, name)
        for g in module.funcs.values():
            added = apply_lora(g, targets, rank)
            if added:
                slots[g.name] = [asdict(s) for s in added]
        verify(module)
        texts[name] = text.split("\n", 1)[0] + "\n" + print_module(module)
    if not slots:
        raise ModelError(f"no projection matches the LoRA targets {', '.join(targets)}",
                         hint="targets are module-name endings such as q_proj, v_proj, c_attn, query, value")
    return {"targets": targets, "rank": rank, "inputs": slots}


def write_export(out_dir: str | Path, kind: str, groups: dict[str, list["Graph"]],
                 weight: Callable[[str], Any], info: dict[str, Any],
                 lora: tuple[list[str], int] | None = None,
                 release: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write one ``<group>.ir`` per group of funcs, the weights they reference and ``model.json``,
    all or nothing.

    ``weight(key)`` is looked up one tensor at a time while the weights file is written
    (views of a memory-mapped checkpoint: the model is never materialized), and
    ``release(key)`` called after each (:func:`save_fp16`).

    Every func is built and verified before anything is written. The files then go to a
    temporary directory ``.OUT.anec-tmp-*`` next to ``out_dir``, are fsynced, and the
    directory replaces ``out_dir`` in one rename (:func:`anec.fsutil.write_tree_atomic`,
    as ``anec compile -o`` writes): a reader, a kill or a full disk never leaves a mix of two
    exports. Writers of one ``out_dir`` take turns (``.OUT.anec-lock``) and remove what killed
    writers left. Entries of a previous ``out_dir`` that are not part of its export (the
    ``.ir`` files its ``model.json`` listed, ``model.json``, the weights file, temporary files
    of older versions) are kept: hard-linked into the new directory, never copied or
    followed. ``lora`` = (targets, rank) gives the funcs LoRA inputs."""
    from anec.ir.graph import Module, WeightSource
    from anec.ir.printer import print_module
    from anec.ir.verifier import verify
    from anec.fsutil import write_tree_atomic

    out = Path(out_dir)
    _check_destination(out)
    files: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    keys: dict[str, None] = {}
    for group, graphs in groups.items():
        module = Module()
        module.weight_sources.append(WeightSource(WEIGHTS))
        for g in graphs:
            module.add_func(g)
            keys.update(dict.fromkeys(weight_keys(g)))
        verify(module)
        head = f"// {kind} programs '{group}', generated by `anec models export`.\n"
        texts[f"{group}.ir"] = head + print_module(module)
        files[f"{group}.ir"] = [g.name for g in graphs]
    info = {"format": FORMAT, **info, "files": files, "weights": WEIGHTS}
    if lora is not None:
        info["lora"] = _lora_texts(texts, lora[0], lora[1])
    tree: dict[str, bytes] = {name: text.encode("utf-8") for name, text in texts.items()}
    tree[MODEL_JSON] = (json.dumps(info, indent=2) + "\n").encode("utf-8")
    ours = set(tree) | {WEIGHTS}

    def last(tmp: Path) -> dict[str, bytes]:
        """Under the write lock: the previous directory's other entries, then the weights
        (streamed into the temporary directory and fsynced)."""
        _keep_foreign(out, tmp, ours)
        path = tmp / WEIGHTS
        try:
            save_fp16(path, _Lazy(keys, weight), {"format": "anec-weights", "model": kind}, atomic=False,
                      release=release)
        except OSError as e:
            raise ModelError(f"cannot write '{out / WEIGHTS}': {e.strerror or e}",
                             hint="nothing was changed; free space (or fix the folder) and export again") from None
        return {}

    try:
        write_tree_atomic(out, tree, last)
    except ArtifactError as e:  # "cannot write artifact '<out>': <reason>", nothing changed
        raise ModelError(e.message.replace("artifact ", "export ", 1),
                         hint=e.hint or "nothing was changed; free space (or fix the folder) and export "
                                        "again") from None
    return info


def _check_destination(out: Path) -> None:
    """``out`` is new, or a real directory (a link is refused, as ``anec compile -o`` refuses it)."""
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return
    except OSError as e:
        raise ModelError(f"cannot write the export '{out}': {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ModelError(f"cannot write the export to '{out}': it is a symbolic link",
                         hint="give the real directory: an export replaces the path it is given")
    if not stat.S_ISDIR(st.st_mode):
        raise ModelError(f"cannot write the export to '{out}': it is a file", hint="choose a directory")


_OLD_TEMP = re.compile(r"\.(model\.json|weights\.safetensors|[A-Za-z0-9_.-]+\.ir)\.[A-Za-z0-9_]{8}\.tmp\Z")
"""The per-file temporary names older versions left in an export directory when killed."""


def _keep_foreign(out: Path, tmp: Path, ours: set[str]) -> None:
    """Hard-link every entry of the previous export directory ``out`` that is not part of an
    export into ``tmp`` (directories recreated, links and files linked as themselves)."""
    from anec.mil.beneath import Beneath

    if not os.path.lexists(out):
        return
    with Beneath.open(out) as d:
        drop = ours | {MODEL_JSON, WEIGHTS} | _listed(d)
        for name in d.names():
            if name in drop or _OLD_TEMP.match(name):
                continue
            _link_entry(d.fileno, name, tmp / name, out / name)


def _link_entry(dir_fd: int, name: str, to: Path, shown: Path) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                os.mkdir(to, stat.S_IMODE(st.st_mode) | 0o700)
                for sub in sorted(os.listdir(fd)):
                    _link_entry(fd, sub, to / sub, shown / sub)
            finally:
                os.close(fd)
        else:
            os.link(name, to, src_dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        raise ModelError(f"cannot keep '{shown}' in the new export: {e.strerror or e}",
                         hint="nothing was changed; move your own files out of the export directory") from None


def _listed(d: Any) -> set[str]:
    """The ``.ir`` files the previous export's ``model.json`` lists (any format; none if it is
    unreadable: then its files are kept like any other)."""
    from anec.fsutil import parse_json
    from anec.mil.manifest import MANIFEST_MAX_BYTES

    try:
        files = parse_json(d.read(MODEL_JSON, MANIFEST_MAX_BYTES, MODEL_JSON), str(d.path / MODEL_JSON),
                           MODEL_JSON).get("files")
    except (ArtifactError, AttributeError):
        return set()
    if not isinstance(files, dict):
        return set()
    return {f for f in files if isinstance(f, str) and _FILE.match(f)}


_CHUNK = 1 << 20


def save_fp16(path: str | Path, tensors: Mapping[str, np.ndarray], metadata: dict[str, str], *,
              atomic: bool = True, release: Callable[[str], None] | None = None) -> None:
    """Write ``tensors`` as fp16 safetensors, atomically: each tensor converted once,
    in cache-sized chunks, straight into the file (no copy of the whole file in memory).
    ``atomic=False`` writes a new file ``path`` (it must not exist) and fsyncs it: for a
    file of a temporary directory that is renamed into place as a whole.

    ``tensors`` may be a lazy mapping (arrays over a memory-mapped checkpoint, made when
    looked up): each tensor is looked up once for the header and once for its data, and
    never all at once; a strided array (a transposed view) is copied a block of rows at a
    time. ``release(key)`` is called after each tensor is written (to give its pages back),
    so the resident memory stays near one chunk, not the model.

    Tensors are laid out by name, as the safetensors library orders tensors of one
    dtype; the conversion rounds like numpy (the runtime's F16C converter when it is
    built, else numpy itself)."""
    names = sorted(tensors)
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for k in names:
        shape = np.shape(tensors[k])
        size = math.prod(shape)
        header[k] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + 2 * size]}
        offset += 2 * size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    convert = _f32_to_f16()

    def write(f: Any) -> None:
        f.write(struct.pack("<Q", len(head)) + head)
        buf = np.empty(_CHUNK, np.float16)
        for k in names:
            a = np.asarray(tensors[k])
            a = a.reshape(1, -1) if a.ndim < 2 or a.size == 0 else a.reshape(a.shape[0], -1)
            step = max(1, _CHUNK // max(1, a.shape[1]))
            for r in range(0, a.shape[0], step):
                block = np.ascontiguousarray(a[r:r + step]).reshape(-1)  # a copy only when strided
                if block.dtype == np.float16:
                    f.write(memoryview(block).cast("B"))
                    continue
                for i in range(0, block.size, _CHUNK):
                    part = block[i:i + _CHUNK]
                    out = buf[:part.size]
                    convert(part, out)
                    f.write(memoryview(out).cast("B"))
            del a
            if release is not None:
                release(k)

    if atomic:
        replace_file(path, write)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _f32_to_f16() -> Callable[[np.ndarray, np.ndarray], None]:
    """``convert(src, out)``: src (any float dtype) into the fp16 array ``out``."""
    from anec.runtime import native

    if native.available():
        def convert(src: np.ndarray, out: np.ndarray) -> None:
            if src.dtype == np.float32:
                native.f32_to_f16_into(src, out)
            else:
                out[...] = src.astype(np.float16)
        return convert

    def convert_np(src: np.ndarray, out: np.ndarray) -> None:
        out[...] = src.astype(np.float16)
    return convert_np


_FILE = re.compile(r"[A-Za-z0-9_.-]+\.ir\Z")


def read_export(path: str | Path) -> dict[str, Any]:
    """The ``model.json`` of an exported directory, checked: the current format, and every
    listed ``.ir`` file present. Older formats are a ModelError naming the re-export command."""
    d = Path(path)
    mj = d / MODEL_JSON
    if not mj.is_file():
        raise ModelError(f"'{path}' is not an exported model (no {MODEL_JSON})",
                         hint="write one with: anec models export {gpt2,llama,bert} CHECKPOINT -o DIR")
    try:
        info = json.loads(mj.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ModelError(f"cannot read {mj}: {e}") from None
    if not isinstance(info, dict):
        raise ModelError(f"{mj} is not a JSON object")
    fmt = info.get("format")
    if fmt != FORMAT:
        what = ("an older anec (one func per layer half; this anec exports one func per bucket "
                "and lets the compiler partition it)" if fmt == "anec-model/1" else f"an unknown format {fmt!r}")
        raise ModelError(f"{mj} is {fmt!r}, written by {what}; this anec reads {FORMAT!r}",
                         hint=_reexport(info, d))
    files = info.get("files")
    if not isinstance(files, dict) or not files or not all(
            isinstance(f, str) and _FILE.match(f) and isinstance(v, list) for f, v in files.items()):
        raise ModelError(f"{mj}: 'files' must map .ir file names to lists of func names")
    for f in files:
        if not (d / f).is_file():
            raise ModelError(f"{d / f} is listed in {MODEL_JSON} but missing",
                             hint=_reexport(info, d))
    return info


def _reexport(info: dict[str, Any], d: Path) -> str:
    kind = info.get("model") if info.get("model") in KINDS else "{gpt2,llama,bert}"
    ckpt = info.get("checkpoint") if isinstance(info.get("checkpoint"), str) else "CHECKPOINT"
    return f"re-export it: anec models export {kind} {ckpt} -o {d}"


def compile_export(path: str | Path, out_dir: str | Path | None,
                   target: str | None = None, compress: Any = None,
                   compress_gate: Any = None, share_programs: str = "auto",
                   plan: dict[str, Any] | None = None, compress_form: str | None = None) -> list[tuple[str, Any, Any]]:
    """Compile every func of an exported directory (weights from its weights file).

    Returns ``(func, artifact, written path or None)`` in file order; each
    func is one artifact directory under ``out_dir`` (written after every func
    compiled), a pipeline when the compiler cut it. ``compress`` and ``compress_gate`` as for
    :func:`anec.compiler.compile_module`. The compile budget is planned over every
    func together (one process loads them all): ``share_programs`` as for
    ``compile_module``, "auto" sharing programs across layers only when the funcs
    together need more compiles than the target's budget. ``plan`` (a dict) receives
    ``programs``, ``budget`` and ``shared``.

    The funcs share one memory map of the weights file, and their weight files stay
    views of it until written (``compile_module(keep_views=True)``): the weights the
    process holds are the file's pages, each once, never a copy per func (prefill and
    decode name the same layer weights). Without ``out_dir`` the artifacts are returned
    so, a weight file's bytes built when read."""
    from anec.compiler import discard, settle, share_mode, count_programs, over_budget
    from anec.ir.weight_binding import resolve_weights
    from anec.mil.output import write_output
    from anec.ir.parser import parse_file
    from anec.targets import get_target

    d = Path(path)
    info = read_export(d)
    share = share_mode(share_programs)
    budget = get_target(target).process_compile_budget
    modules = {}
    for f, funcs in info["files"].items():
        module = parse_file(d / f)
        if list(module.funcs) != funcs:
            raise ModelError(f"{d / f} holds funcs {list(module.funcs)}, but {MODEL_JSON} lists {funcs}",
                             hint=_reexport(info, d))
        modules[f] = module

    stores: dict[tuple[str, ...], Any] = {}

    def weights_of(module: Any) -> Any:
        """The store of the module's weight files, loaded once for every module naming them."""
        key = tuple(ws.path for ws in module.weight_sources)  # every module is in d: the same paths
        if key not in stores:
            stores[key] = resolve_weights(module)
        return stores[key]

    def compile_all(shared: bool) -> dict[str, Any]:
        from anec.compiler import compile_module

        arts: dict[str, Any] = {}
        for module in modules.values():  # each module alone stays within the budget (checked here)
            arts.update(compile_module(module, weights=weights_of(module), target=target, compress=compress,
                                       compress_gate=compress_gate, compress_form=compress_form,
                                       share_programs="always" if shared else "never", compile_budget=1 << 30,
                                       keep_views=True).artifacts)
        return arts

    shared = share == "always"
    arts = compile_all(shared)
    programs = count_programs(arts.values())
    if programs > budget and share == "auto":
        discard(arts.values())
        shared = True
        arts = compile_all(True)
        programs = count_programs(arts.values())
    if programs > budget:
        discard(arts.values())
        per = {name: count_programs([a]) for name, a in arts.items()}
        worst = max(per, key=lambda n: per[n])
        module = next(m for m in modules.values() if worst in m.funcs)
        raise over_budget(programs, budget, module, per, shared)
    if plan is not None:
        plan.update(programs=programs, budget=budget, shared=shared)
    # written once every func compiled, all or nothing: out_dir is replaced as a whole (the
    # complete previous build or the complete new one; see anec.mil.output.write_output)
    if out_dir is None:
        settle(arts.values(), pin=False)  # the weight hashes in (write_output fills them in itself)
    paths = {} if out_dir is None else write_output(out_dir, arts)
    return [(name, art, paths.get(name)) for name, art in arts.items()]
