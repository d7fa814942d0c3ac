"""Typed, range-checked reading of a checkpoint's ``config.json`` and tensor set.

A checkpoint is input like any other: ``config.json`` may hold ``0`` heads, a
string where a number belongs, ``true`` as a layer count or a million layers,
and ``model.safetensors`` may lack tensors the config names or hold tensors no
layer reads. Everything a frontend needs is read through :class:`Fields`, which
gives real ints (never bools, floats or strings) and finite floats within
bounds, or a :class:`~anec.models.hf.CheckpointError` naming the file and the
field::

    error: ckpt/config.json: num_attention_heads: 0 is not a positive integer

:func:`check_tensors` then holds the checkpoint's tensors against what the config
says the model reads: every layer below the layer count has tensors (checked
before anything is built), no tensor belongs to a layer at or above it, every
tensor the model reads is present with the expected shape and a float dtype, and
every other tensor is either a known unused buffer of the format (GPT-2's
``attn.bias`` masks, BERT's ``position_ids`` and pooler...) or an error naming it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from anec.diagnostics import AnecError
from anec.models.hf import FLOAT_DTYPES, Checkpoint, CheckpointError

MAX_LAYERS = 1024
"""More layers than any released model has (Llama 3.1 405B: 126)."""
MAX_DIM = 1 << 18
"""Hidden, feed-forward and head sizes."""
MAX_HEADS = 1 << 14
MAX_VOCAB = 1 << 24
MAX_POSITIONS = 1 << 24

_MISSING = object()


def show(value: Any, limit: int = 40) -> str:
    """A config value, as JSON spells it, shortened for a message."""
    if value is True or value is False:
        s = "true" if value else "false"
    elif value is None:
        s = "null"
    elif isinstance(value, str):
        s = '"' + value + '"'
    elif isinstance(value, dict):
        s = f"an object of {len(value)} keys"
    elif isinstance(value, list):
        s = f"an array of {len(value)} items"
    else:
        s = repr(value)
    return s if len(s) <= limit else s[: limit - 3] + "..."


class Fields:
    """Checked reads of one JSON object (``file`` names it in errors, ``error`` is raised)."""

    def __init__(self, obj: Mapping[str, Any], file: str = "config.json",
                 error: Callable[..., AnecError] = CheckpointError) -> None:
        self.obj = obj
        self.file = file
        self.error = error

    def fail(self, name: str, why: str, hint: str | None = None) -> AnecError:
        return self.error(f"{self.file}: {name}: {why}", hint=hint)

    def pick(self, names: tuple[str, ...]) -> tuple[str, Any]:
        """The first of ``names`` set (not null), with its value; else the first name and _MISSING."""
        for n in names:
            v = self.obj.get(n)
            if v is not None:
                return n, v
        return names[0], _MISSING

    def _missing(self, names: tuple[str, ...]) -> AnecError:
        return self.error(f"{self.file} has none of: {', '.join(names)}")

    def int(self, *names: str, default: Any = _MISSING, lo: int = 1, hi: int = MAX_DIM) -> int:
        name, v = self.pick(names)
        if v is _MISSING:
            if default is _MISSING:
                raise self._missing(names)
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(name, f"{show(v)} is not an integer")
        if v < lo:
            raise self.fail(name, f"{show(v)} is not a positive integer" if lo == 1 else
                            f"{show(v)} is not an integer >= {lo}")
        if v > hi:
            raise self.fail(name, f"{show(v)} is above anec's limit of {hi}")
        return v

    def float(self, *names: str, default: Any = _MISSING, hi: float = 1e300) -> float:
        """A finite number in (0, hi]."""
        name, v = self.pick(names)
        if v is _MISSING:
            if default is _MISSING:
                raise self._missing(names)
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(name, f"{show(v)} is not a number")
        f = float(v) if abs(v) < 1e308 else math.inf
        if not math.isfinite(f) or not 0 < f <= hi:
            raise self.fail(name, f"{show(v)} is not a finite number in (0, {hi:g}]")
        return f

    def bool(self, name: str, default: bool = False) -> bool:
        v = self.obj.get(name)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(name, f"{show(v)} is not true or false")
        return v

    def str(self, name: str, default: str | None, choices: Iterable[str] | None = None,
            what: str = "value") -> str | None:
        v = self.obj.get(name)
        if v is None:
            return default
        if not isinstance(v, str):
            raise self.fail(name, f"{show(v)} is not a string")
        if choices is not None:
            allowed = list(choices)
            if v not in allowed:
                raise self.fail(name, f"{what} {show(v)} is not supported", hint=f"supported: {', '.join(allowed)}")
        return v


def fields_of(ckpt: Checkpoint) -> Fields:
    """:class:`Fields` over the checkpoint's config.json."""
    return Fields(ckpt.config, ckpt.config_file)


@dataclass(frozen=True)
class TensorSpec:
    """What a model reads from its checkpoint, from its config.

    ``shapes``: every tensor read, with its shape as stored. ``layer``: a regex
    whose group 1 is the layer index of a per-layer tensor key. ``ignored``:
    regexes of tensors the format may hold and the model does not read.
    ``layer_field``: the config field holding the layer count (for messages)."""

    shapes: dict[str, tuple[int, ...]]
    layer: re.Pattern[str]
    n_layer: int
    layer_field: str
    ignored: tuple[re.Pattern[str], ...] = ()


def check_layer_bound(ckpt: Checkpoint, layer: re.Pattern[str], n_layer: int, layer_field: str) -> None:
    """No tensor of the checkpoint belongs to a layer at or above ``n_layer``."""
    for key in ckpt.keys():
        m = layer.match(key)
        if m and int(m.group(1)) >= n_layer:
            raise CheckpointError(
                f"{ckpt.file_of(key)}: tensor '{_key(key)}' belongs to layer {int(m.group(1))}, but "
                f"{ckpt.config_file}: {layer_field} is {n_layer}: the model would not use it",
                hint=f"set {layer_field} to the number of layers the checkpoint holds")


def present_layers(ckpt: Checkpoint, layer: re.Pattern[str]) -> set[int]:
    out = set()
    for key in ckpt.keys():
        m = layer.match(key)
        if m:
            out.add(int(m.group(1)))
    return out


def check_tensors(ckpt: Checkpoint, spec_of: Callable[[], TensorSpec], layer: re.Pattern[str],
                  n_layer: int, layer_field: str) -> None:
    """Hold the checkpoint's tensors against the model's config (see the module docstring).

    The layer count is checked against the layers present before ``spec_of``
    builds the list of expected tensors, so a config claiming a million layers
    costs one pass over the checkpoint's keys."""
    check_layer_bound(ckpt, layer, n_layer, layer_field)
    have = present_layers(ckpt, layer)
    for i in range(n_layer):
        if i not in have:
            raise CheckpointError(
                f"{ckpt.config_file}: {layer_field}: {n_layer} layers, but the checkpoint has no tensors "
                f"for layer {i}", hint=f"set {layer_field} to the number of layers the checkpoint holds")
    spec = spec_of()
    for key, shape in spec.shapes.items():
        if key not in ckpt:
            raise CheckpointError(f"checkpoint {ckpt.path} has no tensor '{key}', which the model reads "
                                  f"(per {ckpt.config_file})")
        _check_one(ckpt, key, shape)
    for key in ckpt.keys():
        if key in spec.shapes or any(p.fullmatch(key) for p in spec.ignored):
            continue
        raise CheckpointError(f"{ckpt.file_of(key)}: tensor '{_key(key)}' is not used by this model "
                              f"(per {ckpt.config_file})",
                              hint="remove it, or check that config.json describes this checkpoint")


def _check_one(ckpt: Checkpoint, key: str, shape: tuple[int, ...]) -> None:
    got, dt = ckpt.shape(key), ckpt.dtype(key)
    if dt not in FLOAT_DTYPES:
        raise CheckpointError(f"{ckpt.file_of(key)}: tensor '{key}' is {dt}; a model weight must be "
                              f"F16, BF16, F32 or F64")
    if tuple(got) != tuple(shape):
        raise CheckpointError(f"{ckpt.file_of(key)}: tensor '{key}' is {list(got)}, but "
                              f"{ckpt.config_file} makes it {list(shape)}")


def _key(key: str, limit: int = 80) -> str:
    return key if len(key) <= limit else key[: limit - 3] + "..."


def check_adapter(adapter: Any, spec: TensorSpec, linear: Callable[[str], tuple[int, int] | None],
                  error: Callable[..., AnecError]) -> None:
    """Every module an adapter adapts is a linear layer the model reads, of the right size:
    ``linear(weight_key)`` gives ``(out, in)`` of a projection, None for anything else."""
    where = adapter.source or adapter.name
    for module, (a, b) in adapter.modules.items():
        key = module + ".weight"
        m = spec.layer.match(key)
        if m and int(m.group(1)) >= spec.n_layer:
            raise error(f"adapter {where}: module {_key(module)} is in layer {int(m.group(1))}, but the model has "
                        f"{spec.n_layer} layers")
        io = linear(key) if key in spec.shapes else None
        if io is None:
            raise error(f"adapter {where}: module {_key(module)} is not a linear layer of this model",
                        hint="the adapter was trained for another model")
        out, cin = io
        if a.shape[1] != cin or b.shape[0] != out:
            raise error(f"adapter {where}: {module} is {b.shape[0]}x{a.shape[1]}, the model's projection "
                        f"is {out}x{cin}")
