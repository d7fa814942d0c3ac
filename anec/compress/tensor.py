"""One tensor compressed: :func:`compress_tensor`, :class:`Compressed` and :func:`decompress`.

:func:`compress_tensor` stores a float tensor in one format (linear, LUT or sparse)
and measures the error the gate reads (relative L2 over the tensor and each
output channel, max abs error; infinite when the dequantized values are not
finite in fp16). :func:`decompress` is the numpy reference of the dequantized
fp16 tensor (what the interpreter and the simulator's C agree with).
:func:`compress_tensors` compresses many tensors in one format on the process's
worker threads, as a compile does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from anec.compress.formats import FORMATS, Format, get_format, scale_shape
from anec.compress.linear import errors_kernel, quantize_linear, quantize_linear_kernel
from anec.compress.palettize import quantize_lut
from anec.compress.sparse import densify, prune
from anec.thread_pools import map_on_cores


@dataclass
class Compressed:
    """A tensor in one format: its parts (role -> array) and the error it makes."""

    fmt: Format
    axis: int
    shape: tuple[int, ...]
    parts: dict[str, np.ndarray]
    """``linear``: q (the shape), scale [C], zero_point [C] (affine); ``lut``: indices (the
    shape, values < 2^bits), lut [groups, 2^bits]; ``sparse``: mask (0/1 in the shape), values
    (fp16 [D], D fixed by the shape and the sparsity)."""
    rel_l2: float = 0.0
    """||w - w'|| / ||w|| over the tensor."""
    max_abs: float = 0.0
    rel_abs: float = 0.0
    """max |w - w'| / max |w|."""
    channel_rel_l2: float = 0.0
    """The worst output channel's relative L2 error (what the gate checks)."""
    worst_channel: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the payloads (sub-byte payloads packed)."""
        total = 0
        for role, a in self.parts.items():
            sub = role == "indices" or (role in ("q", "zero_point") and self.fmt.bits < 8)
            bits = 1 if role == "mask" else self.fmt.bits if sub else a.dtype.itemsize * 8
            total += (a.size * bits + 7) // 8
        return total


def decompress(fmt: Format, axis: int, shape: Sequence[int], parts: Mapping[str, np.ndarray]) -> np.ndarray:
    """The fp16 tensor ``parts`` encode (numpy; the reference for the simulator's C)."""
    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    bshape = [1] * rank
    bshape[axis] = shape[axis]
    if fmt.kind == "linear":
        q = np.asarray(parts["q"]).reshape(shape).astype(np.float32)
        if fmt.blockwise:  # scales of the weight's rank: each repeated over its block
            sshape = scale_shape(fmt, axis, shape)

            def expand(a: np.ndarray) -> np.ndarray:
                a = np.asarray(a).reshape(sshape)
                for d in range(rank):
                    if a.shape[d] != shape[d]:
                        a = np.repeat(a, shape[d] // a.shape[d], axis=d)
                return a.astype(np.float32)
            if "zero_point" in parts:
                q = q - expand(parts["zero_point"])
            return (q * expand(parts["scale"])).astype(np.float16)
        if "zero_point" in parts:
            q = q - np.asarray(parts["zero_point"]).astype(np.float32).reshape(bshape)
        scale = np.asarray(parts["scale"]).astype(np.float32).reshape(bshape)
        return (q * scale).astype(np.float16)
    if fmt.kind == "lut":
        lut = np.asarray(parts["lut"], dtype=np.float16)
        if lut.shape[0] == 1:  # one table: a gather
            return lut.reshape(-1)[np.asarray(parts["indices"]).reshape(shape)]
        idx = np.asarray(parts["indices"]).reshape(shape).astype(np.int64)
        groups = lut.shape[0]
        per = shape[axis] // groups
        ch = np.arange(shape[axis]) // per
        gshape = [1] * rank
        gshape[axis] = shape[axis]
        g = np.broadcast_to(ch.reshape(gshape), shape)
        return lut[g, idx]
    if fmt.kind == "sparse":
        return densify(parts["mask"], _kept_values(fmt, axis, shape, parts), shape)
    raise ValueError(f"format {fmt.name} is not compressed")


def compress_tensors(ws: Sequence[np.ndarray], fmt: Format, axis: int) -> list[Compressed]:
    """``[compress_tensor(w, fmt, axis) for w in ws]``, the tensors spread over the cores (the
    kernels release the GIL); the same results, in order."""
    return map_on_cores(lambda w: compress_tensor(w, fmt, axis), ws)


def compress_tensor(w: np.ndarray, fmt: Format, axis: int) -> Compressed:
    """``w`` (float) in ``fmt``, with its error against ``w``."""
    w = np.asarray(w)
    native = quantize_linear_kernel(w, axis, fmt) if fmt.kind == "linear" else None
    if native is not None:  # the values and the error sums in one C pass
        (q, scale, zp), st = native
        parts = {"q": q, "scale": scale, **({"zero_point": zp} if zp is not None else {})}
        c = Compressed(fmt, axis, tuple(w.shape), parts)
        if not st["finite"]:
            c.rel_l2 = c.max_abs = c.rel_abs = c.channel_rel_l2 = math.inf
            return c
        _set_errors(c, st["err_sq"], st["norm_sq"], st["max_err"], st["max_w"])
        return c
    if fmt.kind == "linear":
        q, scale, zp = quantize_linear(w, axis, fmt)
        parts = {"q": q, "scale": scale}
        if zp is not None:
            parts["zero_point"] = zp
    elif fmt.kind == "lut":
        idx, lut = quantize_lut(w, axis, fmt)
        parts = {"indices": idx, "lut": lut}
    elif fmt.kind == "sparse":
        mask, values = prune(w, fmt.sparsity)
        parts = {"mask": mask, **_joint_parts(fmt, axis, mask, values)}
    else:
        raise ValueError(f"format {fmt.name} is not compressed")
    c = Compressed(fmt, axis, tuple(w.shape), parts)
    d = decompress(fmt, axis, w.shape, parts)
    st = errors_kernel(w, d, axis)
    if st is not None:
        if not st["finite"]:
            c.rel_l2 = c.max_abs = c.rel_abs = c.channel_rel_l2 = math.inf
        else:
            _set_errors(c, st["err_sq"], st["norm_sq"], st["max_err"], st["max_w"])
        return c
    if not np.all(np.isfinite(d)):
        c.rel_l2 = c.max_abs = c.rel_abs = c.channel_rel_l2 = math.inf
        return c
    ref = np.moveaxis(w.astype(np.float32), axis, 0).reshape(w.shape[axis], -1)
    err = np.moveaxis(d.astype(np.float32), axis, 0).reshape(ref.shape)
    err -= ref
    # per output channel sums of squares (float32 products, float64 totals)
    e_ch = np.einsum("ij,ij->i", err, err).astype(np.float64)
    n_ch = np.einsum("ij,ij->i", ref, ref).astype(np.float64)
    _set_errors(c, e_ch, n_ch, float(np.max(np.abs(err))) if err.size else 0.0,
                float(np.max(np.abs(ref))) if ref.size else 0.0)
    return c


def _joint_parts(fmt: Format, axis: int, mask: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """The parts that hold a sparse tensor's kept ``values``: ``values`` (fp16), or for
    ``sparseP+int8`` ``q`` [D] and ``scale`` (per output channel, in the weight's rank: the
    int8 quantization of the pruned tensor), for ``sparseP+lutN`` ``indices`` [D] and ``lut``
    [1, 2^N] (k-means over the kept values only)."""
    if not fmt.joint:
        return {"values": values}
    if fmt.joint == "int8":
        q, scale, _ = quantize_linear(densify(mask, values, mask.shape), axis, FORMATS["int8"])
        bshape = tuple(n if d == axis else 1 for d, n in enumerate(mask.shape))
        return {"q": q.reshape(-1)[mask.reshape(-1) != 0], "scale": scale.reshape(bshape)}
    idx, lut = quantize_lut(values, 0, get_format(fmt.joint))
    return {"indices": idx, "lut": lut}


def _kept_values(fmt: Format, axis: int, shape: tuple[int, ...], parts: Mapping[str, np.ndarray]) -> np.ndarray:
    """The fp16 values a sparse tensor keeps (1-D), dequantized as constexpr_sparse_blockwise_shift_scale
    or constexpr_lut_to_sparse does: each value with the scale of its element's channel."""
    if not fmt.joint:
        return np.asarray(parts["values"])
    if fmt.joint == "int8":
        mask = np.asarray(parts["mask"]).reshape(shape) != 0
        scale = np.broadcast_to(np.asarray(parts["scale"]).astype(np.float32).reshape(
            tuple(n if d == axis else 1 for d, n in enumerate(shape))), shape)
        return (np.asarray(parts["q"]).astype(np.float32).reshape(-1) * scale[mask]).astype(np.float16)
    return np.asarray(parts["lut"], np.float16).reshape(-1)[np.asarray(parts["indices"]).reshape(-1)]


def _set_errors(c: Compressed, e_ch: np.ndarray, n_ch: np.ndarray, max_err: float, top: float) -> None:
    """The gate's errors of ``c`` from per-channel sums of squared errors and of squared
    values, the largest absolute error and the largest |w|."""
    norm = float(np.sqrt(n_ch.sum()))
    c.rel_l2 = float(np.sqrt(e_ch.sum())) / norm if norm > 0 else float(e_ch.sum() > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_ch = np.where(n_ch > 0, np.sqrt(e_ch / np.where(n_ch > 0, n_ch, 1)), np.where(e_ch > 0, np.inf, 0.0))
    if rel_ch.size:
        c.worst_channel = int(np.argmax(rel_ch))
        c.channel_rel_l2 = float(rel_ch[c.worst_channel])
    c.max_abs = max_err
    c.rel_abs = c.max_abs / top if top > 0 else float(c.max_abs > 0)


def parts_from_blobs(entry_parts: Mapping[str, tuple[dict, np.ndarray]]) -> dict[str, np.ndarray]:
    """role -> array from (manifest part entry, 1-D payload read from its BLOBFILE)."""
    return {role: arr.reshape(e["shape"]) for role, (e, arr) in entry_parts.items()}
