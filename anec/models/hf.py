"""Reading Hugging Face-format checkpoint directories, offline only.

A checkpoint directory holds ``config.json`` and the weights as
``model.safetensors`` (or shards listed in ``model.safetensors.index.json``),
plus tokenizer files when present. Nothing here ever contacts a model hub:
the caller gives a local directory, or gets a clear :class:`CheckpointError`.

Shards are read by :class:`anec.weight_store.SafetensorsFile`, anec's one
safetensors reader (our own: a checked JSON header followed by raw
little-endian arrays, memory-mapped), because numpy has no bfloat16 and
Llama-family checkpoints are often stored in it; bf16 is widened to fp32
there. Writing uses the ``safetensors`` package.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from anec.diagnostics import AnecError, ArtifactError, WeightError
from anec.fsutil import parse_json, write_bytes_atomic
from anec.mil.beneath import Beneath, check_rel
from anec.weight_store import SafetensorsFile


class CheckpointError(AnecError):
    """A checkpoint directory is missing, incomplete, malformed or of an unsupported kind."""


JSON_MAX = 16 << 20
"""The largest JSON file of a checkpoint read (config.json, adapter_config.json...)."""
INDEX_MAX = 64 << 20
"""The largest ``model.safetensors.index.json``."""
TOKENIZER_MAX = 256 << 20
"""The largest tokenizer file (tokenizer.json, vocab.json, merges.txt, vocab.txt)."""
WEIGHTS_MAX = 1 << 40
"""The largest safetensors file (one shard)."""
MAX_SHARDS = 4096

_LINK_HINT = ("checkpoint files are read only from inside the directory you name, never through "
              "symbolic links; copy the real files into the checkpoint directory")


def _checkpoint_error(e: ArtifactError, error: type[AnecError] | None = None) -> AnecError:
    """An error of :class:`Beneath` reading a checkpoint file, told as a checkpoint error."""
    hint = _LINK_HINT if "symbolic link" in e.message else None
    return (error or CheckpointError)(e.message, hint=hint)


def open_dir(path: str | os.PathLike, what: str = "checkpoint directory",
             error: type[AnecError] | None = None) -> Beneath:
    """The directory ``path`` opened for reading beneath it (CheckpointError if it is missing)."""
    p = Path(os.fspath(path))
    if not p.is_dir():
        raise (error or CheckpointError)(
            f"{what} '{path}' does not exist" if not p.exists() else f"{what} '{path}' is not a directory",
            hint="give a local directory holding config.json and model.safetensors "
                 "(anec never downloads models)",
        )
    try:
        return Beneath.open(p)
    except ArtifactError as e:
        raise _checkpoint_error(e, error) from None


def kind(d: Beneath, name: str, error: type[AnecError] | None = None) -> str | None:
    """What the entry ``name`` of ``d`` is, without following it (None if absent)."""
    try:
        return d.kind(name)
    except ArtifactError as e:
        raise _checkpoint_error(e, error) from None


def read_bytes(d: Beneath, rel: str, limit: int, error: type[AnecError] | None = None) -> bytes:
    """The bytes of the regular file ``rel`` beneath ``d``: no link followed, at most ``limit`` bytes."""
    try:
        return d.read(rel, limit, what=Path(rel).name)
    except ArtifactError as e:
        raise _checkpoint_error(e, error) from None


def parse_json_file(data: bytes, where: str, error: type[AnecError] | None = None) -> Any:
    """Strict JSON (UTF-8, no NaN/Infinity, no duplicate keys, at most 32 levels) from the
    bytes of the file ``where``; ``error`` (CheckpointError by default) otherwise."""
    try:
        return parse_json(data, where, "file")
    except ArtifactError as e:
        raise (error or CheckpointError)(e.message) from None


def read_json(d: Beneath, rel: str, limit: int = JSON_MAX, error: type[AnecError] | None = None) -> dict[str, Any]:
    """The strict JSON object file ``rel`` beneath ``d``."""
    where = str(d.path / rel)
    obj = parse_json_file(read_bytes(d, rel, limit, error), where, error)
    if not isinstance(obj, dict):
        shown = "an array" if isinstance(obj, list) else f"a {type(obj).__name__}"
        raise (error or CheckpointError)(f"{where}: expected a JSON object, got {shown}")
    return obj


FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})
"""The safetensors dtypes a model weight may have."""


def open_safetensors(d: Beneath, rel: str, error: type[AnecError] | None = None) -> SafetensorsFile:
    """The safetensors file ``rel`` beneath ``d`` (no link followed, a regular file)."""
    try:
        fd, _ = d.open_file(rel, WEIGHTS_MAX, what=Path(rel).name)
    except ArtifactError as e:
        raise _checkpoint_error(e, error) from None
    return SafetensorsFile(d.path / rel, fd)


def save_safetensors(path: str | os.PathLike, tensors: Mapping[str, np.ndarray],
                     metadata: Mapping[str, str] | None = None) -> None:
    """Write ``tensors`` atomically (temp file + rename)."""
    from safetensors.numpy import save

    data = save({k: np.ascontiguousarray(v) for k, v in tensors.items()},
                metadata=dict(metadata) if metadata else None)
    write_bytes_atomic(path, data)


@dataclass
class Checkpoint:
    """A local Hugging Face checkpoint: its config and lazily read tensors."""

    path: Path
    config: dict[str, Any]
    files: list[SafetensorsFile] = field(default_factory=list)
    _index: dict[str, SafetensorsFile] = field(default_factory=dict, repr=False)
    dir: Beneath | None = field(default=None, repr=False)
    """The open checkpoint directory every further file is read beneath."""

    @property
    def model_type(self) -> str:
        t = self.config.get("model_type")
        if t is None:
            return ""
        if not isinstance(t, str):
            raise CheckpointError(f"{self.config_file}: model_type: {_show(t)} is not a string")
        return t

    @property
    def config_file(self) -> str:
        """``config.json`` with its directory, as messages name it."""
        return str(self.path / "config.json")

    def keys(self) -> list[str]:
        return list(self._index)

    def __contains__(self, key: str) -> bool:
        return key in self._index

    def shape(self, key: str) -> tuple[int, ...]:
        return self._index[key].shape(key)

    def dtype(self, key: str) -> str:
        return self._index[key].dtype(key)

    def file_of(self, key: str) -> Path:
        return self._index[key].path

    def _file(self, key: str) -> SafetensorsFile:
        f = self._index.get(key)
        if f is None:
            from anec.diagnostics import did_you_mean

            raise WeightError(f"checkpoint {self.path} has no tensor '{key}'",
                              hint=did_you_mean(key, self._index))
        return f

    def get(self, key: str) -> np.ndarray:
        """Tensor ``key`` as stored (fp32 for bf16), or a WeightError naming it."""
        return self._file(key).get(key)

    def stored(self, key: str) -> np.ndarray:
        """Tensor ``key`` as stored, a view of the memory-mapped file where numpy holds the dtype
        (nothing read until used, nothing copied); bf16 widened to a new fp32 array."""
        return self._file(key).stored(key)

    def rows(self, key: str, index: Any) -> np.ndarray:
        """Rows ``index`` of tensor ``key`` in fp32, reading only those rows."""
        return self._file(key).rows(key, index)

    def drop_pages(self, key: str) -> None:
        """Unmap the pages of tensor ``key`` read so far (a streaming reader's memory)."""
        self._file(key).drop_pages(key)

    def get_f32(self, key: str) -> np.ndarray:
        return self.get(key).astype(np.float32, copy=False)  # get() returns a fresh array

    def find(self, *candidates: str) -> str:
        """The first of ``candidates`` present in the checkpoint."""
        for c in candidates:
            if c in self._index:
                return c
        raise WeightError(f"checkpoint {self.path} has none of: {', '.join(candidates)}")

    def opened(self) -> Beneath:
        """The checkpoint directory, open for reading beneath it."""
        if self.dir is None:
            self.dir = open_dir(self.path)
        return self.dir

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The optional JSON object file ``name`` of the checkpoint (None if absent)."""
        d = self.opened()
        if kind(d, name) is None:
            return None
        return read_json(d, name)


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Open a local checkpoint directory (never downloads).

    Every file is read beneath the directory, never through a symbolic link, and
    only if it is a regular file within its size bound; ``config.json`` and the
    index are strict JSON; shard names are plain relative paths; every
    safetensors header is checked. Anything else is a CheckpointError (or a
    WeightError for a malformed safetensors file) naming the file."""
    p = Path(path)
    d = open_dir(p)
    if kind(d, "config.json") is None:
        raise CheckpointError(f"'{path}' has no config.json", hint="is this a Hugging Face checkpoint directory?")
    config = read_json(d, "config.json")
    files: list[SafetensorsFile] = []
    index: dict[str, SafetensorsFile] = {}
    if kind(d, "model.safetensors") is not None:
        files.append(open_safetensors(d, "model.safetensors"))
        index = {k: files[0] for k in files[0].keys()}
    elif kind(d, "model.safetensors.index.json") is not None:
        files, index = _load_shards(d)
    else:
        hint = "save the model with save_pretrained(..., safe_serialization=True)"
        if kind(d, "pytorch_model.bin") is not None:
            hint = "this checkpoint is in the pickle format; re-save it as safetensors: " + hint
        raise CheckpointError(f"'{path}' has no model.safetensors", hint=hint)
    return Checkpoint(p, config, files, index, d)


def _load_shards(d: Beneath) -> tuple[list[SafetensorsFile], dict[str, SafetensorsFile]]:
    """The shards an index names, and which holds which tensor (as the index says, checked)."""
    name = "model.safetensors.index.json"
    where = str(d.path / name)
    obj = read_json(d, name, INDEX_MAX)
    wmap = obj.get("weight_map")
    if not isinstance(wmap, dict) or not wmap:
        raise CheckpointError(f"{where}: weight_map: expected a non-empty object of tensor name -> shard file")
    names: list[str] = []
    for key, shard in wmap.items():
        if not isinstance(shard, str):
            raise CheckpointError(f"{where}: weight_map[{_show(key)}]: expected a shard file name, "
                                  f"got {_show(shard)}")
        try:
            check_rel(shard, "shard")
        except ArtifactError:
            raise CheckpointError(
                f"{where}: weight_map[{_show(key)}]: shard {_show(shard)} is not a relative path inside the "
                "checkpoint directory (absolute paths and '..' are refused)") from None
        if shard not in names:
            if len(names) >= MAX_SHARDS:
                raise CheckpointError(f"{where}: weight_map names more than {MAX_SHARDS} shards")
            names.append(shard)
    shards = {s: open_safetensors(d, s) for s in sorted(names)}
    index: dict[str, SafetensorsFile] = {}
    for key, shard in wmap.items():
        if key not in shards[shard]:
            raise CheckpointError(f"{where}: weight_map[{_show(key)}]: the tensor is not in shard {_show(shard)}")
        index[key] = shards[shard]
    for shard, f in shards.items():
        for key in f.keys():
            if wmap.get(key) != shard:
                raise CheckpointError(f"{d.path / shard}: tensor {_show(key)} is not listed for this shard in "
                                      f"{name}")
    return list(shards.values()), index


def _show(value: Any, limit: int = 60) -> str:
    """A value from a hostile file, quoted and shortened for a message."""
    s = repr(value)
    return s if len(s) <= limit else s[: limit - 3] + "..."


# ---- tokenizers ---------------------------------------------------------------


class Tokenizer:
    """A thin wrapper over a ``tokenizers.Tokenizer`` (no padding, our truncation)."""

    def __init__(self, tok: Any, special: Iterable[str] = ()) -> None:
        self._tok = tok
        self._tok.no_padding()
        self._tok.no_truncation()
        self.special = set(special)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(int(i) for i in ids), skip_special_tokens=True)

    def token_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """The tokenizer of a checkpoint dir, through the ``tokenizers`` package.

    Uses ``tokenizer.json`` when present, else builds one from ``vocab.json`` +
    ``merges.txt`` (byte-level BPE, GPT-2) or ``vocab.txt`` (WordPiece, BERT).
    Every file is read beneath the directory (no link followed, bounded size) and
    handed to ``tokenizers`` as content, never as a path.
    """
    p = Path(path)
    try:
        import tokenizers
    except ImportError:
        raise CheckpointError(
            "reading a tokenizer needs the 'tokenizers' package, which is not installed",
            hint="pip install tokenizers (it comes with transformers), or pass token ids "
                 "directly (anec generate --prompt-ids 1,2,3)",
        ) from None
    d = open_dir(p)
    try:
        if kind(d, "tokenizer.json") is not None:
            text = _text(d, "tokenizer.json")
            try:
                return Tokenizer(tokenizers.Tokenizer.from_str(text))
            except Exception as e:  # the Rust side raises plain Exceptions
                raise CheckpointError(f"cannot read {p / 'tokenizer.json'}: {str(e)[:200]}") from None
        if kind(d, "vocab.json") is not None and kind(d, "merges.txt") is not None:
            from tokenizers.implementations import ByteLevelBPETokenizer

            vocab = parse_json_file(read_bytes(d, "vocab.json", TOKENIZER_MAX), str(p / "vocab.json"))
            if not isinstance(vocab, dict) or not all(type(v) is int and v >= 0 for v in vocab.values()):
                raise CheckpointError(f"{p / 'vocab.json'}: expected an object of token -> non-negative id")
            merges = []
            for n, line in enumerate(_text(d, "merges.txt").split("\n"), 1):
                line = line.rstrip("\r")
                if not line or line.startswith("#version"):
                    continue
                pair = line.split(" ")
                if len(pair) != 2 or not all(pair):
                    raise CheckpointError(f"{p / 'merges.txt'}:{n}: expected two tokens separated by a space")
                merges.append((pair[0], pair[1]))
            try:
                tok = ByteLevelBPETokenizer(vocab, merges)
            except Exception as e:
                raise CheckpointError(f"cannot read {p / 'vocab.json'} and {p / 'merges.txt'}: "
                                      f"{str(e)[:200]}") from None
            return Tokenizer(tok._tokenizer)
        if kind(d, "vocab.txt") is not None:
            from tokenizers.implementations import BertWordPieceTokenizer

            lower = True
            if kind(d, "tokenizer_config.json") is not None:
                tc = read_json(d, "tokenizer_config.json")
                lower = tc.get("do_lower_case", True) if isinstance(tc, dict) else True
                if not isinstance(lower, bool):  # the message of config.Fields.bool (not imported:
                    # anec.models.config reads checkpoints through this module)
                    shown = json.dumps(lower)
                    raise CheckpointError(f"{p / 'tokenizer_config.json'}: do_lower_case: "
                                          f"{shown if len(shown) <= 40 else shown[:37] + '...'} "
                                          "is not true or false")
            lines = _text(d, "vocab.txt").split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            vocab = {line.rstrip(): i for i, line in enumerate(lines)}  # as tokenizers reads vocab.txt
            try:
                tok = BertWordPieceTokenizer(vocab, lowercase=lower)
            except Exception as e:
                raise CheckpointError(f"cannot read {p / 'vocab.txt'}: {str(e)[:200]}") from None
            return Tokenizer(tok._tokenizer)
    finally:
        d.close()
    raise CheckpointError(
        f"'{path}' has no tokenizer (tokenizer.json, vocab.json + merges.txt, or vocab.txt)",
        hint="pass token ids directly: anec generate CHECKPOINT --prompt-ids 1,2,3",
    )


def _text(d: Beneath, name: str) -> str:
    """The UTF-8 text file ``name`` of a checkpoint (a tokenizer file)."""
    data = read_bytes(d, name, TOKENIZER_MAX)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{d.path / name}: not valid UTF-8 (byte {e.start})") from None
