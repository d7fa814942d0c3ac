"""The training forward func of a decoder checkpoint and the host side around it.

The forward func is the whole causal LM for one sequence of ``S`` positions
(``S`` = the trainer's ``seq_len``), from embedded rows to logits::

    func train_s64(%x: fp32[1, C, 1, 64] (, %cos, %sin: fp16[1, D, 1, 64] for RoPE)) {
      ... every layer: norm, attention with the causal mask, residual, norm, MLP, residual
      ... final norm, LM head
      return %logits : fp32[1, V, 1, 64]
    }

built from the decoder frontends' own layer hooks (the same IR the inference
programs use, so a trained model's programs are the ones it will run). The
embedding lookup and the loss stay on the host: :func:`embed_adjoint`
scatters the input gradient back into the embedding tables,
:func:`cross_entropy` gives the loss and the logits' gradient.

Checkpoint tensors enter the IR in the frontend's layout (GPT-2's Conv1D
weights transposed, vectors as ``[1, C, 1, 1]``): :class:`Layout` maps a
tensor and its gradient between the two layouts exactly (the adjoint of a
permutation and a reshape is their inverse).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from anec.ir.graph import Graph
from anec.ir.nodes import Value
from anec.models.blocks import ModelBuilder
from anec.runtime import native


class _UniqueBuilder(ModelBuilder):
    """A ModelBuilder where explicit result names are made unique (the layer hooks name their
    values as if each layer were its own func)."""

    def op(self, opname: str, *operands: Value, name: str | None = None,
           names: Sequence[str] | None = None, **kw: Any):
        if name is not None:
            name = self.graph.fresh_name(name)
        if names is not None:
            taken: list[str] = []
            for n in names:
                taken.append(self.graph.fresh_name(n, exclude=taken))
            names = taken
        return super().op(opname, *operands, name=name, names=names, **kw)


def causal_lm_graph(fe: Any, s: int, name: str | None = None) -> Graph:
    """The forward func of decoder frontend ``fe`` over ``s`` positions (module docstring)."""
    c = fe.cfg
    b = _UniqueBuilder(name or f"train_s{s}")
    x = b.input("x", "fp32", [1, c.d_model, 1, s])
    pos_in = fe._position_input_values(b, s)
    h = b.cast(x, dtype="fp16", name="xh")
    causal = b.weight(f"anec.mask.causal.{s}", [1, 1, s, s], "causal")
    for i in range(c.n_layer):
        n = fe._norm(b, h, fe._attn_norm_keys(i), f"l{i}_ln1")
        q, k, v = fe._qkv(b, n, i)
        q = b.mul(q, b.scalar(c.head_dim ** -0.5), name=f"l{i}_qs")
        qh, kh = fe._positions(b, q, k, pos_in)
        vh = b.to_heads(v, c.n_kv_head, f"l{i}_v")
        ctx = b.attention(qh, kh, vh, causal, name=f"l{i}_attn")
        h = b.add(h, fe._out_proj(b, ctx, i), name=f"l{i}_r1")
        n2 = fe._norm(b, h, fe._mlp_norm_keys(i), f"l{i}_ln2")
        h = b.add(h, fe._mlp_body(b, n2, i), name=f"l{i}_r2")
    n = fe._norm(b, h, fe._final_norm_keys(), "lnf")
    logits = b.linear(n, fe._lm_head_key(), c.vocab, None, "head")
    b.ret(b.cast(logits, dtype="fp32", name="logits"))
    return b.graph


class Layout:
    """Checkpoint layout <-> IR layout of one tensor, through the frontend's own ``_layout``."""

    def __init__(self, fe: Any, key: str, shape: Sequence[int]) -> None:
        self.key = key
        self.shape = tuple(int(d) for d in shape)
        n = int(np.prod(self.shape))
        idx = fe._layout(key, np.arange(n, dtype=np.int64).reshape(self.shape))
        self.ir_shape = tuple(idx.shape)
        self._idx = np.ascontiguousarray(idx).reshape(-1)
        self.identity = bool(np.array_equal(self._idx, np.arange(n)))

    def to_ir(self, arr: np.ndarray) -> np.ndarray:
        if self.identity:
            return arr.reshape(self.ir_shape)
        return arr.reshape(-1)[self._idx].reshape(self.ir_shape)

    def to_checkpoint(self, g: np.ndarray) -> np.ndarray:
        """The gradient in checkpoint layout of a gradient ``g`` in IR layout."""
        if self.identity:
            return g.reshape(self.shape)
        out = np.empty(int(np.prod(self.shape)), g.dtype)
        out[self._idx] = g.reshape(-1)
        return out.reshape(self.shape)


def embedding_keys(fe: Any) -> dict[str, str]:
    """Host tables: role -> checkpoint key (``tokens`` always; ``positions`` for GPT-2)."""
    if fe.kind == "gpt2":
        return {"tokens": fe._k("wte.weight"), "positions": fe._k("wpe.weight")}
    return {"tokens": "model.embed_tokens.weight"}


def embed(tables: dict[str, np.ndarray], roles: dict[str, str], ids: np.ndarray) -> np.ndarray:
    """``[S, C]`` input rows for token ``ids`` at positions ``0..S-1``."""
    x = tables[roles["tokens"]][ids]
    if "positions" in roles:
        x = x + tables[roles["positions"]][: len(ids)]
    return x.astype(np.float32)


def embed_adjoint(grads: dict[str, np.ndarray], roles: dict[str, str], ids: np.ndarray, dx: np.ndarray) -> None:
    """Add the gradient of the rows (``dx [S, C]``) into the embedding tables' gradients."""
    np.add.at(grads[roles["tokens"]], ids, dx)
    if "positions" in roles:
        grads[roles["positions"]][: len(ids)] += dx


def cross_entropy(logits: np.ndarray, targets: np.ndarray, valid: np.ndarray
                  ) -> tuple[float, np.ndarray, int]:
    """Summed next-token loss over the valid positions, its gradient w.r.t. ``logits [S, V]``
    and the number of valid positions (fp64 softmax; the caller divides by the token count)."""
    return _softmax_loss(np.asarray(logits), targets, valid)


def cross_entropy_bc1s(logits: np.ndarray, targets: np.ndarray, valid: np.ndarray, grad_scale: float
                       ) -> tuple[float, np.ndarray, int]:
    """:func:`cross_entropy` of logits in the programs' layout ``[1, V, 1, S]``, the gradient
    times ``grad_scale`` (in fp64) returned as fp32 in the same layout: bit for bit
    ``to_bc1s((d * grad_scale).astype(np.float32))``, without the layout round trips (C
    passes around numpy's exp when the runtime is built)."""
    logits = np.asarray(logits)
    _, v, _, s = logits.shape
    out = np.empty((1, v, 1, s), np.float32)
    lv = logits[0, :, 0, :]
    if native.available() and lv.dtype == np.float32 and lv.flags.c_contiguous and v and s:
        ffi, lib = native.ffi, native.lib
        z = np.empty((v, s), np.float64)
        cols = np.empty((3, s), np.float64)  # column maxima, then sums; picked probabilities
        rc = lib.anec_xent_shift(ffi.from_buffer("float[]", lv), v, s, ffi.from_buffer("double[]", z),
                                 ffi.from_buffer("double[]", cols[0]))
        if rc == 0:
            np.exp(z, out=z)
            t = np.ascontiguousarray(targets, np.int64)
            ok = np.ascontiguousarray(valid, np.uint8)
            rc = lib.anec_xent_grad(ffi.from_buffer("double[]", z), v, s, ffi.from_buffer("int64_t[]", t),
                                    ffi.from_buffer("uint8_t[]", ok), float(grad_scale),
                                    ffi.from_buffer("float[]", out, require_writable=True),
                                    ffi.from_buffer("double[]", cols[2]), ffi.from_buffer("double[]", cols[1]))
        if rc != 0:
            raise native.failure(rc, "cross-entropy: a target outside the vocabulary")
        rows = np.nonzero(valid)[0]
        return -float(np.sum(np.log(np.maximum(cols[2][rows], 1e-300)))), out, len(rows)
    loss, d, n = _softmax_loss(lv.T, targets, valid)
    np.multiply(d.T, grad_scale, out=out[0, :, 0, :])  # fp64 product, rounded once to fp32
    return loss, out, n


def _softmax_loss(logits: np.ndarray, targets: np.ndarray, valid: np.ndarray) -> tuple[float, np.ndarray, int]:
    """The loss and fp64 gradient of ``logits [S, V]``, every pass but the first in place. The
    fp64 copy keeps the logits' memory order, and with it the order numpy sums each row in:
    logits in the programs' layout (a transposed view) are summed position by position."""
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    rows = np.nonzero(valid)[0]
    loss = -float(np.sum(np.log(np.maximum(z[rows, targets[rows]], 1e-300))))
    z[rows, targets[rows]] -= 1.0
    z[~valid] = 0.0
    return loss, z, len(rows)


__all__ = ["Layout", "causal_lm_graph", "cross_entropy", "cross_entropy_bc1s", "embed", "embed_adjoint",
           "embedding_keys"]
