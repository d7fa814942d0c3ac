"""The layout algebra of the importer against numpy, on random tensors and views.

A logical tensor is held transposed in a physical IR input; random chains of
view ops (reshape, permute, merges) are applied to the View and the result is
materialized, converted to the channel layout, or aligned to another view's
frame. The interpreter evaluates the IR; numpy says what it must be. The
emitter's folding is checked to cost no transposes where none are needed.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from anec.frontends.tensor_views import (
    Emitter,
    View,
    align_view,
    channel_view,
    materialize,
    merge_group,
    permute_view,
    reshape_view,
    to_channels,
)
from anec.ir.interp import interpret
from anec.ir.types import DType, TensorType

SIZES = (1, 2, 3, 4, 6)


def _factor(n: int, rng: random.Random, rank: int) -> tuple[int, ...]:
    """A random shape of ``rank`` dims with product ``n``."""
    dims = []
    for _ in range(rank - 1):
        divs = [d for d in range(1, n + 1) if n % d == 0]
        d = rng.choice(divs)
        dims.append(d)
        n //= d
    dims.append(n)
    rng.shuffle(dims)
    return tuple(dims)


def _held(rng: random.Random, em: Emitter, shape: tuple[int, ...]):
    """A random logical array and a View of it held transposed in an input."""
    logical = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) + 1
    perm = list(range(len(shape)))
    rng.shuffle(perm)
    phys = np.transpose(logical, perm)
    x = em.input("x", TensorType(DType.fp32, phys.shape))
    order = tuple(perm.index(i) for i in range(len(shape)) if shape[i] != 1)
    return logical, phys, View(x, order, shape)


def _run(em: Emitter, value, phys: np.ndarray) -> np.ndarray:
    em.builder.ret(value)
    return interpret(em.graph, {"x": phys})[value.name]


def _refines(psizes, lsizes) -> bool:
    cuts = set()
    for sizes in (psizes, lsizes):
        c = 1
        for d in sizes:
            c *= d
            cuts.add(c)
    prev = 1
    for b in sorted(cuts):
        if b % prev:
            return False
        prev = b
    return True


@pytest.mark.parametrize("seed", range(60))
def test_view_chains_materialize_to_the_numpy_result(seed):
    rng = random.Random(seed)
    em = Emitter("f")
    shape = tuple(rng.choice(SIZES) for _ in range(rng.randint(1, 4)))
    want, phys, v = _held(rng, em, shape)
    clashes = 0
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.5:
            new = _factor(want.size, rng, rng.randint(1, 5))
            clashes += not _refines([v.phys.type.shape[a] for a in v.order], [d for d in new if d != 1])
            v, want = reshape_view(em, v, new), want.reshape(new)
        else:
            dims = list(range(want.ndim))
            rng.shuffle(dims)
            v, want = permute_view(v, dims), np.transpose(want, dims)
        assert v.shape == want.shape
        assert v.phys.type.rank <= max(4, want.ndim)
    got = _run(em, materialize(em, v), phys)
    np.testing.assert_array_equal(got, want)
    # a chain costs one transpose at most, plus one per reshape that regroups across axes
    assert em.stats["transposes"] <= 1 + clashes


@pytest.mark.parametrize("seed", range(30))
def test_to_channels_and_back(seed):
    rng = random.Random(100 + seed)
    em = Emitter("f")
    shape = tuple(rng.choice(SIZES[1:]) for _ in range(rng.randint(2, 4)))
    want, phys, v = _held(rng, em, shape)
    ch = to_channels(em, v)
    k = shape[-1]
    assert ch.type.shape == (1, k, 1, want.size // k)
    back = materialize(em, channel_view(em, ch, shape))
    em.builder.ret(ch, back)
    out = interpret(em.graph, {"x": phys})
    np.testing.assert_array_equal(out[ch.name].reshape(k, -1), want.reshape(-1, k).T)
    np.testing.assert_array_equal(out[back.name], want)


@pytest.mark.parametrize("seed", range(30))
def test_align_view_places_a_broadcast_operand_in_the_frame(seed):
    rng = random.Random(200 + seed)
    em = Emitter("f")
    shape = tuple(rng.choice(SIZES[1:]) for _ in range(rng.randint(2, 4)))
    lead_np, phys, lead = _held(rng, em, shape)
    other_shape = tuple(d if rng.random() < 0.6 else 1 for d in shape)[rng.randint(0, 1):]
    other_np = np.arange(math.prod(other_shape), dtype=np.float32).reshape(other_shape) * 10
    y = em.input("y", TensorType(DType.fp32, other_shape))
    aligned = align_view(em, View(y, tuple(i for i, d in enumerate(other_shape) if d != 1), other_shape), lead)
    summed = em.op("add", lead.phys, aligned)
    res = materialize(em, View(summed, lead.order, lead.shape))
    em.builder.ret(res)
    got = interpret(em.graph, {"x": phys, "y": other_np})[res.name]
    np.testing.assert_array_equal(got, lead_np + other_np)


def test_folding_costs_nothing_for_pure_relabelling():
    em = Emitter("f")
    x = em.input("x", TensorType(DType.fp32, (1, 64, 1, 16)))
    v = channel_view(em, x, (1, 16, 64))          # [1, S, C] held as [1, C, 1, S]
    heads = reshape_view(em, v, (1, 16, 4, 16))    # split channels into heads
    t = permute_view(heads, (0, 2, 1, 3))          # [1, H, S, D]
    back = reshape_view(em, permute_view(t, (0, 2, 1, 3)), (1, 16, 64))
    y = to_channels(em, back)
    assert y is x or (y.producer.op == "reshape" and em.stats["transposes"] == 0)
    assert em.stats["transposes"] == 0


def test_merge_group_only_merges_adjacent_axes():
    em = Emitter("f")
    x = em.input("x", TensorType(DType.fp32, (2, 3, 4)))
    v = View(x, (0, 1, 2), (6, 4))
    m = merge_group(em, v, 0)
    assert m is not None and m.phys.type.shape == (6, 4) and m.order == (0, 1)
    w = View(x, (0, 2, 1), (2, 12))  # logical dim 1 = axes (2, 1): not ascending
    assert merge_group(em, w, 1) is None


def test_emitter_folds_and_reuses():
    em = Emitter("f")
    x = em.input("x", TensorType(DType.fp32, (2, 3, 4)))
    t1 = em.transpose(x, [2, 0, 1])
    t2 = em.transpose(t1, [1, 2, 0])
    assert t2 is x  # transpose(transpose(x)) = x
    assert em.reshape(em.reshape(x, (6, 4)), (2, 3, 4)) is x
    assert em.transpose(x, [2, 0, 1]) is t1  # CSE
    u = em.input("u", TensorType(DType.fp32, (1, 5, 1, 7)))
    r = em.transpose(u, [1, 0, 2, 3])  # only a unit axis moves: a reshape
    assert r.producer.op == "reshape"
