"""Reading Hugging Face-format checkpoint directories, offline only.

A checkpoint directory holds ``config.json`` and the weights as
``model.safetensors`` (or shards listed in ``model.safetensors.index.json``),
plus tokenizer files when present. Nothing here ever contacts a model hub:
the caller gives a local directory, or gets a clear :class:`CheckpointError`.

The safetensors reader is our own (a JSON header followed by raw
little-endian arrays, memory-mapped) because numpy has no bfloat16 and
Llama-family checkpoints are often stored in it; bf16 is widened to fp32
here. Writing uses the ``safetensors`` package.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from anec.diagnostics import AnecError, WeightError
from anec.fsutil import write_bytes_atomic


class CheckpointError(AnecError):
    """A checkpoint directory is missing, incomplete or of an unsupported kind."""


_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": None,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_,
}


class SafetensorsFile:
    """A memory-mapped ``.safetensors`` file: ``keys()``, ``shape(key)``, ``get(key)``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                raw = f.read(8)
                if len(raw) != 8:
                    raise ValueError("file is shorter than the 8-byte header length")
                (n,) = struct.unpack("<Q", raw)
                header = json.loads(f.read(n))
        except (OSError, ValueError) as e:
            raise WeightError(f"cannot read safetensors file {self.path}: {e}") from None
        self._base = 8 + n
        self._meta = {k: v for k, v in header.items() if k != "__metadata__"}
        self._mm: np.memmap | None = None

    def keys(self) -> list[str]:
        return list(self._meta)

    def __contains__(self, key: str) -> bool:
        return key in self._meta

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._meta[key]["shape"])

    def get(self, key: str) -> np.ndarray:
        """The tensor ``key`` as a numpy array (bf16 widened to fp32)."""
        info = self._meta.get(key)
        if info is None:
            raise WeightError(f"tensor '{key}' is not in {self.path}")
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        start, stop = info["data_offsets"]
        buf = self._mm[self._base + start: self._base + stop]
        dt = info["dtype"]
        if dt not in _ST_DTYPES:
            raise WeightError(f"tensor '{key}' in {self.path} has unsupported dtype {dt}")
        if dt == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=np.dtype(_ST_DTYPES[dt]).newbyteorder("<"))
        return np.array(arr.reshape(info["shape"]))


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

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    def keys(self) -> list[str]:
        return list(self._index)

    def __contains__(self, key: str) -> bool:
        return key in self._index

    def get(self, key: str) -> np.ndarray:
        """Tensor ``key`` as stored (fp32 for bf16), or a WeightError naming it."""
        f = self._index.get(key)
        if f is None:
            from anec.diagnostics import did_you_mean

            raise WeightError(f"checkpoint {self.path} has no tensor '{key}'",
                              hint=did_you_mean(key, self._index))
        return f.get(key)

    def get_f32(self, key: str) -> np.ndarray:
        return self.get(key).astype(np.float32, copy=False)  # get() returns a fresh array

    def find(self, *candidates: str) -> str:
        """The first of ``candidates`` present in the checkpoint."""
        for c in candidates:
            if c in self._index:
                return c
        raise WeightError(f"checkpoint {self.path} has none of: {', '.join(candidates)}")


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Open a local checkpoint directory (never downloads)."""
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(
            f"checkpoint directory '{path}' does not exist",
            hint="give a local directory holding config.json and model.safetensors "
                 "(anec never downloads models)",
        )
    cfg_path = p / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"'{path}' has no config.json", hint="is this a Hugging Face checkpoint directory?")
    try:
        config = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {cfg_path}: {e}") from None
    files: list[SafetensorsFile] = []
    single = p / "model.safetensors"
    index = p / "model.safetensors.index.json"
    if single.is_file():
        files.append(SafetensorsFile(single))
    elif index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError) as e:
            raise CheckpointError(f"cannot read {index}: {e}") from None
        files.extend(SafetensorsFile(p / s) for s in shards)
    else:
        hint = "save the model with save_pretrained(..., safe_serialization=True)"
        if (p / "pytorch_model.bin").exists():
            hint = "this checkpoint is in the pickle format; re-save it as safetensors: " + hint
        raise CheckpointError(f"'{path}' has no model.safetensors", hint=hint)
    ck = Checkpoint(p, config, files)
    for f in files:
        for k in f.keys():
            ck._index[k] = f
    return ck


def cfg_get(config: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    """The first of ``names`` present in ``config`` (HF configs use several spellings)."""
    for n in names:
        if n in config and config[n] is not None:
            return config[n]
    if default is None:
        raise CheckpointError(f"config.json has none of: {', '.join(names)}")
    return default


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
    if (p / "tokenizer.json").is_file():
        try:
            return Tokenizer(tokenizers.Tokenizer.from_file(str(p / "tokenizer.json")))
        except Exception as e:  # the Rust side raises plain Exceptions
            raise CheckpointError(f"cannot read {p / 'tokenizer.json'}: {e}") from None
    if (p / "vocab.json").is_file() and (p / "merges.txt").is_file():
        from tokenizers.implementations import ByteLevelBPETokenizer

        tok = ByteLevelBPETokenizer(str(p / "vocab.json"), str(p / "merges.txt"))
        return Tokenizer(tok._tokenizer)
    if (p / "vocab.txt").is_file():
        from tokenizers.implementations import BertWordPieceTokenizer

        lower = True
        tc = p / "tokenizer_config.json"
        if tc.is_file():
            lower = bool(json.loads(tc.read_text()).get("do_lower_case", True))
        tok = BertWordPieceTokenizer(str(p / "vocab.txt"), lowercase=lower)
        return Tokenizer(tok._tokenizer)
    raise CheckpointError(
        f"'{path}' has no tokenizer (tokenizer.json, vocab.json + merges.txt, or vocab.txt)",
        hint="pass token ids directly: anec generate CHECKPOINT --prompt-ids 1,2,3",
    )
