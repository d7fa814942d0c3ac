"""The host work of a training step (csrc/rt_host.c and its numpy fallback) is bit for bit the
numpy implementation it replaced.

Each reference below is the previous implementation, kept verbatim: AdamW as ~10 numpy passes
per tensor with a ``check`` callback for the fp16 range, clipping with a float64 temporary per
tensor, the softmax cross-entropy on the transposed logits, the weight-gradient gather through
zero-filled full tensors. Both paths of each new function (the C kernel, and numpy when the
runtime is not built) are compared with it on random inputs, including Inf, NaN, -0 and values
that leave the fp16 range.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from anec.autodiff import _add_view, unview
from anec.models.layout import from_bc1s, to_bc1s
from anec.runtime import native
from anec.training import graphs, kernels, optim
from anec.training.optim import FP16_MAX, AdamW, clip_, clip_factor, global_norm

pytestmark = pytest.mark.skipif(not native.available(), reason="the C runtime extension is not built")


CSRC = Path(__file__).resolve().parents[2] / "csrc"


@pytest.fixture(scope="session")
def portable(tmp_path_factory):
    """csrc/rt_host.c built alone without its AVX paths (-DANEC_HOST_SCALAR): the code non-x86
    machines run, as (ffi, lib)."""
    cffi = pytest.importorskip("cffi")
    build = importlib.util.spec_from_file_location("_ffi_build", CSRC.parent / "anec" / "runtime" / "_ffi_build.py")
    flags = importlib.util.module_from_spec(build)
    build.loader.exec_module(flags)  # the extension's compiler flags (this checkout's, whichever anec is imported)

    cdef = (CSRC / "anec_rt.cdef.h").read_text()
    ffi = cffi.FFI()
    ffi.cdef(cdef[cdef.index("/* ---- host work of a training step"):])
    ffi.set_source("_rt_host_portable", '#include "anec_rt.h"', sources=[str(CSRC / "rt_host.c")],
                   include_dirs=[str(CSRC)], define_macros=[("ANEC_HOST_SCALAR", None)],
                   extra_compile_args=flags.CFLAGS, libraries=["m"])
    tmp = tmp_path_factory.mktemp("rt_host_portable")
    try:
        so = ffi.compile(tmpdir=str(tmp))
    except Exception as e:  # noqa: BLE001 - no compiler here: the in-place build's tests still run
        pytest.skip(f"cannot build rt_host.c alone: {e}")
    spec = importlib.util.spec_from_file_location("_rt_host_portable", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


@pytest.fixture(params=["c", "portable", "numpy"])
def path(request, monkeypatch):
    """Run a test on the C kernels (AVX where the CPU has it), on their portable code, and on the
    numpy fallback."""
    if request.param == "portable":
        ffi, lib = request.getfixturevalue("portable")
        monkeypatch.setattr(native, "ffi", ffi)
        monkeypatch.setattr(native, "lib", lib)
    if request.param == "numpy":
        monkeypatch.setattr(native, "available", lambda: False)
    return request.param


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


# ---- the previous implementations --------------------------------------------------------------

class RefAdamW:
    def __init__(self, lr=3e-4, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
        self.lr, self.beta1, self.beta2, self.eps, self.weight_decay = lr, beta1, beta2, eps, weight_decay
        self.step_count = 0
        self.m, self.v = {}, {}

    def step(self, params, grads, decay=None, lr=None, check=None):
        t = self.step_count + 1
        lr = self.lr if lr is None else lr
        step_size = np.float32(lr / (1.0 - self.beta1 ** t))
        inv_bc2 = np.float32(1.0 / (1.0 - self.beta2 ** t))
        b1, b2 = np.float32(self.beta1), np.float32(self.beta2)
        c1, c2 = np.float32(1.0 - self.beta1), np.float32(1.0 - self.beta2)
        new = {}
        for k, g in grads.items():
            p = params[k]
            g = np.asarray(g, np.float32)
            pn, mn, vn, tmp = (np.empty_like(p, dtype=np.float32) for _ in range(4))
            m, v = self.m.get(k), self.v.get(k)
            np.multiply(g, c1, out=mn)
            if m is not None:
                np.multiply(m, b1, out=tmp)
                mn += tmp
            np.multiply(g, g, out=vn)
            vn *= c2
            if v is not None:
                np.multiply(v, b2, out=tmp)
                vn += tmp
            np.multiply(vn, inv_bc2, out=tmp)
            np.sqrt(tmp, out=tmp)
            tmp += np.float32(self.eps)
            np.divide(mn, tmp, out=tmp)
            tmp *= step_size
            if self.weight_decay and (decay is None or decay.get(k, True)):
                np.multiply(p, np.float32(1.0 - lr * self.weight_decay), out=pn)
            else:
                np.copyto(pn, p)
            pn -= tmp
            if check is not None and not check(k, pn):
                return False
            new[k] = (pn, mn, vn)
        self.step_count = t
        for k, (pn, mn, vn) in new.items():
            params[k], self.m[k], self.v[k] = pn, mn, vn
        return True


def ref_fp16_ok(key, arr):
    return bool(np.isfinite(arr).all()) and float(np.max(np.abs(arr), initial=0.0)) <= FP16_MAX


def ref_all_finite(grads):
    return all(bool(np.isfinite(g).all()) for g in grads.values())


def ref_global_norm(grads):
    return math.sqrt(sum(float(np.square(g, dtype=np.float64).sum()) for g in grads.values()))


def ref_clip_(grads, max_norm):
    norm = ref_global_norm(grads)
    if max_norm > 0 and norm > max_norm:
        f = np.float32(max_norm / (norm + 1e-6))
        for g in grads.values():
            g *= f
    return norm


def ref_cross_entropy(logits, targets, valid):
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.nonzero(valid)[0]
    loss = -float(np.sum(np.log(np.maximum(p[rows, targets[rows]], 1e-300))))
    d = p
    d[rows, targets[rows]] -= 1.0
    d[~valid] = 0.0
    return loss, d, len(rows)


def ref_unview(g, shape, perm, sl):
    shape = tuple(shape)
    pshape = tuple(shape[i] for i in perm) if perm is not None else shape
    full = np.zeros(pshape, np.float32)
    if sl is not None:
        axis, start, stop = (int(v) for v in sl)
        part = list(pshape)
        part[axis] = stop - start
        idx = [slice(None)] * len(pshape)
        idx[axis] = slice(start, stop)
        full[tuple(idx)] = g.reshape(part)
    else:
        full = g.reshape(pshape).astype(np.float32)
    if perm is not None:
        full = np.transpose(full, np.argsort(perm))
    return np.ascontiguousarray(full)


# ---- AdamW ---------------------------------------------------------------------------------------

SHAPES = {"w": (37, 19), "b": (19,), "big": (1031,), "one": (1,), "seven": (7,)}


def _grads(rng, shapes, spread=True):
    return {k: (rng.standard_normal(s) * (10.0 ** rng.uniform(-8, 2) if spread else 1.0)).astype(np.float32)
            for k, s in shapes.items()}


@pytest.mark.parametrize("seed", range(6))
def test_adamw_is_bit_for_bit_the_numpy_optimizer(path, seed):
    """Clipping folded in (grad_scale), the fp16 range checked in the pass (limit), the new weights
    rounded to fp16 (half): parameters, moments, half copies and accept/refuse equal the previous
    clip_ + AdamW(check=...) over steps, with and without weight decay, from fresh moments on."""
    rng = np.random.default_rng(seed)
    wd = 0.1 if seed % 2 else 0.0
    p0 = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    new, ref = AdamW(lr=1e-2, weight_decay=wd, beta2=0.95), RefAdamW(lr=1e-2, weight_decay=wd, beta2=0.95)
    pa, pb = {k: v.copy() for k, v in p0.items()}, {k: v.copy() for k, v in p0.items()}
    decay = {"b": False}
    for i in range(8):
        g = _grads(rng, SHAPES)
        half = {k: np.empty(s, np.float16) for k, s in SHAPES.items()}
        norm = global_norm(g)
        assert norm == ref_global_norm(g)
        ok = new.step(pa, g, decay, lr=1e-2 * (1 + i % 3), grad_scale=clip_factor(norm, 1.0), limit=FP16_MAX,
                      half=half)
        gr = {k: v.copy() for k, v in g.items()}
        ref_clip_(gr, 1.0)
        assert ok == ref.step(pb, gr, decay, lr=1e-2 * (1 + i % 3), check=ref_fp16_ok)
        assert ok and new.step_count == ref.step_count
        for k in SHAPES:
            assert bits(pa[k]) == bits(pb[k]) and bits(new.m[k]) == bits(ref.m[k]) and bits(new.v[k]) == bits(ref.v[k])
            assert bits(half[k]) == bits(pb[k].astype(np.float16))


@pytest.mark.parametrize("bad", ["inf", "nan", "overflow", "just_over", "last_tensor"])
def test_a_refused_step_changes_nothing_and_agrees_with_the_numpy_check(path, bad):
    """A new weight beyond +-65504 (or Inf/NaN) anywhere, in any tensor, refuses the whole step exactly
    when the previous check did; parameters, moments and step count stay as they were."""
    rng = np.random.default_rng(3)
    p0 = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    new, ref = AdamW(lr=1.0), RefAdamW(lr=1.0)
    pa, pb = {k: v.copy() for k, v in p0.items()}, {k: v.copy() for k, v in p0.items()}
    g = _grads(rng, SHAPES, spread=False)
    assert new.step(pa, g, limit=FP16_MAX) and ref.step(pb, g, check=ref_fp16_ok)
    key = "seven" if bad == "last_tensor" else "big"  # the last tensor: every other one passed first
    at = 6 if key == "seven" else (1029 if bad == "nan" else 100)  # in the scalar tail / an 8-lane block
    val = {"inf": np.inf, "nan": np.nan, "overflow": 1e6, "just_over": 65505.0, "last_tensor": 7e4}[bad]
    pa[key].reshape(-1)[at] = val
    pb[key].reshape(-1)[at] = val
    snap = ({k: v.copy() for k, v in pa.items()}, {k: v.copy() for k, v in new.m.items()},
            {k: v.copy() for k, v in new.v.items()}, new.step_count)
    g = _grads(rng, SHAPES, spread=False)  # every other weight would move (by ~lr), the bad one stays bad
    refused_ref = not ref.step(pb, g, lr=1e-3, check=ref_fp16_ok)
    refused = not new.step(pa, g, lr=1e-3, limit=FP16_MAX)
    assert refused and refused_ref
    for k in SHAPES:
        assert bits(pa[k]) == bits(snap[0][k]) and bits(new.m[k]) == bits(snap[1][k])
        assert bits(new.v[k]) == bits(snap[2][k])
    assert new.step_count == snap[3]


def test_the_largest_fp16_value_is_accepted(path):
    p = {"w": np.full(9, FP16_MAX, np.float32)}
    assert AdamW(lr=0.0).step(p, {"w": np.zeros(9, np.float32)}, limit=FP16_MAX)


def test_adamw_refuses_bad_arguments():
    with pytest.raises(ValueError, match="limit"):
        AdamW().step({"w": np.zeros(3, np.float32)}, {"w": np.zeros(3, np.float32)}, limit=float("inf"))
    with pytest.raises(ValueError, match="half"):
        AdamW().step({"w": np.zeros(3, np.float32)}, {"w": np.zeros(3, np.float32)},
                     half={"w": np.zeros(3, np.float32)})


def test_the_c_kernel_refuses_bad_arguments():
    ffi, lib = native.ffi, native.lib
    c = ffi.new("anec_adamw_coef *", {"check": 1, "limit": float("nan")})
    x = np.zeros(4, np.float32)
    buf = ffi.from_buffer("float[]", x)
    assert lib.anec_adamw_f32(buf, buf, ffi.NULL, ffi.NULL, buf, buf, buf, ffi.NULL, 4, c) == lib.ANEC_EINVAL
    assert lib.anec_adamw_f32(buf, buf, ffi.NULL, ffi.NULL, buf, buf, buf, ffi.NULL, 4, ffi.NULL) == lib.ANEC_EINVAL
    assert lib.anec_add_scaled(buf, buf, 3, 1.0, 4, 0) == lib.ANEC_EINVAL
    assert lib.anec_xent_grad(ffi.NULL, 1, 1, ffi.NULL, ffi.NULL, 1.0, ffi.NULL, ffi.NULL, ffi.NULL) == lib.ANEC_EINVAL


# ---- norm and clipping ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (9,), (128,), (129,), (1000,), (8193,), (256, 688), (3, 5, 7)])
def test_the_sum_of_squares_is_numpys_pairwise_sum(path, shape):
    rng = np.random.default_rng(len(shape) * 1000 + shape[0])
    for scale in (1e-30, 1e-3, 1.0, 1e30):
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        x.reshape(-1)[0] = -0.0
        assert kernels.sum_squares(x) == float(np.square(x, dtype=np.float64).sum())


def test_the_global_norm_is_not_finite_exactly_when_a_gradient_is_not(path):
    rng = np.random.default_rng(5)
    for bad in (None, np.inf, -np.inf, np.nan, np.float32(3.4e38)):
        g = _grads(rng, SHAPES)
        if bad is not None:
            g["big"][517] = bad
        assert math.isfinite(global_norm(g)) == ref_all_finite(g)
        assert (global_norm(g) == ref_global_norm(g)) or math.isnan(ref_global_norm(g))


def test_clip_scales_in_place_as_before(path):
    rng = np.random.default_rng(6)
    g = {k: v * 100 for k, v in _grads(rng, SHAPES, spread=False).items()}
    ref = {k: v.copy() for k, v in g.items()}
    assert clip_(g, 1.0) == ref_clip_(ref, 1.0)
    assert all(bits(g[k]) == bits(ref[k]) for k in g)
    assert optim.clip_factor(0.5, 1.0) is None and optim.clip_factor(2.0, 0.0) is None


# ---- gradient accumulation ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_add_scaled_is_adding_into_zeros_then_accumulating(path, dtype):
    """``0 + x * s``, then ``acc + x * s``: as the previous ``grads[k] += to_checkpoint(gather(...) * inv)``
    gave (gather's ``0 + unview(g)`` turns -0 into +0; after the scale and the add it cannot show)."""
    if path == "numpy":
        assert not kernels.add_scaled(np.zeros(4, np.float32), np.zeros(4, np.float32), np.float32(1), False)
        return  # the caller adds the gradient itself (tests/training/test_gradients.py covers that path)
    rng = np.random.default_rng(7)
    for n in (1, 7, 8, 9, 1031):
        g = rng.standard_normal(n).astype(dtype)
        g[0] = -0.0
        if n > 3:
            g[1], g[2] = np.inf, np.nan
        inv = np.float32(1 / 1024)
        acc = np.zeros(n, np.float32)
        acc += (np.zeros(n, np.float32) + g.astype(np.float32)) * inv
        dst = np.full(n, 7.0, np.float32)
        assert kernels.add_scaled(dst, g, inv, accumulate=False)
        assert bits(dst) == bits(acc)
        acc += (np.zeros(n, np.float32) + g.astype(np.float32)) * inv
        assert kernels.add_scaled(dst, g, inv, accumulate=True)
        assert bits(dst) == bits(acc)
    assert not kernels.add_scaled(np.zeros(4, np.float32), np.zeros(5, np.float32), inv, True)  # size mismatch
    assert not kernels.add_scaled(np.zeros(4, np.float32), np.zeros(4, np.float64), inv, True)


def test_gather_and_unview_read_each_view_once_with_the_same_bits():
    rng = np.random.default_rng(8)
    for _ in range(300):
        nd = int(rng.integers(1, 5))
        shape = tuple(int(x) for x in rng.integers(1, 6, nd))
        perm = None if rng.random() < 0.4 else [int(i) for i in rng.permutation(nd)]
        pshape = [shape[i] for i in perm] if perm else list(shape)
        sl = None
        if rng.random() < 0.5:
            ax = int(rng.integers(nd))
            a = int(rng.integers(0, pshape[ax]))
            sl = (ax, a, int(rng.integers(a + 1, pshape[ax] + 1)))
        vshape = list(pshape)
        if sl:
            vshape[sl[0]] = sl[2] - sl[1]
        g = rng.standard_normal(vshape).astype(np.float16 if rng.random() < 0.5 else np.float32)
        flat = g.reshape(-1)
        flat[rng.random(g.size) < 0.2] = -0.0
        if g.size > 2:
            flat[0], flat[1] = np.inf, np.nan
        assert bits(unview(g, shape, perm, sl)) == bits(ref_unview(g, shape, perm, sl))
        out: dict[str, np.ndarray] = {}
        ref = np.zeros(shape, np.float32)
        for _ in range(2):  # a key read under two views: summed
            _add_view(out, "k", g, shape, perm, sl)
            ref += ref_unview(g, shape, perm, sl)
            assert bits(out["k"]) == bits(ref)


# ---- cross-entropy -------------------------------------------------------------------------------

@pytest.mark.parametrize("v,s", [(4096, 64), (320, 16), (7, 1), (300, 1), (1000, 2), (5, 3), (200, 9), (33, 13)])
def test_cross_entropy_in_the_programs_layout_is_bit_for_bit(path, v, s):
    """Loss and scaled fp32 gradient equal the fp64 softmax on the transposed logits (whose sums run
    class by class for several positions and pairwise for one); Inf/NaN logits give NaN where it did."""
    rng = np.random.default_rng(v + s)
    for trial in range(6):
        logits = (rng.standard_normal((1, v, 1, s)) * rng.uniform(0.1, 30)).astype(np.float32)
        if trial == 3:
            logits[0, 3 % v, 0, 0] = np.inf
        if trial == 4:
            logits[0, 1 % v, 0, s - 1] = np.nan
        if trial == 5:
            logits[0, :, 0, 0] = -np.inf
        targets = rng.integers(0, v, s)
        valid = rng.random(s) < 0.8
        valid[0] = True
        c = float(rng.uniform(1, 100))
        with np.errstate(invalid="ignore"):
            loss, d, n = ref_cross_entropy(from_bc1s(logits), targets, valid)
            ref = to_bc1s((d * c).astype(np.float32), s)
            got_loss, got, got_n = graphs.cross_entropy_bc1s(logits, targets, valid, c)
        assert n == got_n and (loss == got_loss or (math.isnan(loss) and math.isnan(got_loss)))
        nan = np.isnan(ref)
        assert np.array_equal(nan, np.isnan(got)) and bits(ref[~nan]) == bits(got[~nan])


def test_cross_entropy_refuses_a_target_outside_the_vocabulary():
    logits = np.zeros((1, 5, 1, 3), np.float32)
    with pytest.raises(Exception, match="outside the vocabulary"):
        graphs.cross_entropy_bc1s(logits, np.array([0, 5, 1]), np.ones(3, bool), 1.0)


# ---- the trainer's step as a whole -----------------------------------------------------------------

def ref_gradients(tr, input_ids):
    """The previous Trainer.gradients, on the same programs: per sequence, the loss on the transposed
    logits, the weight gradients gathered through zero-filled tensors and added after the unscale,
    the embedding rows scattered after them, the host conv gradients added at the end."""
    from anec.autodiff import host_conv_grad

    ids = tr._check_ids(input_ids)
    tr._ensure_programs()
    s, scale = tr.seq_len, tr.scaler.scale
    inv = np.float32(1.0 / scale)
    grads = {k: np.zeros_like(v) for k, v in tr.params.items()}
    pos = tr._position_feed()
    n_tokens = ids.shape[0] * (ids.shape[1] - 1)
    total, later = 0.0, []

    def gather(bout, views, conv):
        out = {}
        for w in views:
            shape = tr.layouts[w.key].ir_shape
            g = host_conv_grad(bout[w.x], bout[w.g]) if conv else np.asarray(bout[w.output], dtype=np.float32)
            out.setdefault(w.key, np.zeros(shape, np.float32))
            out[w.key] += ref_unview(g, shape, w.perm, w.slice)
        return out

    for row in ids:
        inp = np.zeros(s, np.int64)
        inp[: len(row) - 1] = row[:-1]
        x = to_bc1s(graphs.embed({k: tr.params[k] for k in tr.roles.values()}, tr.roles, inp), s)
        feed = {"x": x, **pos}
        fout = tr._run(0, feed)
        targets = np.zeros(s, np.int64)
        targets[: len(row) - 1] = row[1:]
        valid = np.zeros(s, bool)
        valid[: len(row) - 1] = True
        loss, d, _ = ref_cross_entropy(from_bc1s(np.asarray(fout["logits"], np.float32)), targets, valid)
        total += loss
        bfeed = {**feed, tr.bw.cotangents["logits"]: to_bc1s((d * (scale / n_tokens)).astype(np.float32), s)}
        bfeed.update({name: fout[name] for name in tr.bw.saved})
        bout = tr._run(1, bfeed)
        for k, g in gather(bout, tr.bw.weight_grads, False).items():
            grads[k] += tr.layouts[k].to_checkpoint(g * inv)
        later.append(gather(bout, tr.bw.host_grads, True))
        dx = from_bc1s(np.asarray(bout[tr.bw.input_grads["x"]], np.float32)) * inv
        graphs.embed_adjoint(grads, tr.roles, inp[: len(row) - 1], dx[: len(row) - 1])
    for part in later:
        for k, g in part.items():
            grads[k] += tr.layouts[k].to_checkpoint(g * inv)
    return grads, total / n_tokens


@pytest.mark.parametrize("which,weight_grads,activations", [
    ("gpt2_ckpt", "device", "recompute"),  # tied embedding table, transposed (Conv1D) layouts
    ("llama_ckpt", "host", "save"),
])
def test_a_trainer_step_is_bit_for_bit_the_previous_one(request, corpus, which, weight_grads, activations):
    """Gradients, loss, and the step (finiteness, clipping, AdamW with weight decay, the fp16 range
    check) of the trainer equal the previous implementation's over several steps of 3 sequences."""
    from anec.training import Trainer
    from anec.training.data import Batches, load_tokens

    ckpt = request.getfixturevalue(which)
    data = Batches(load_tokens(corpus, ckpt, 320), 16, 3, seed=1)
    with Trainer(ckpt, backend="sim", seq_len=16, batch_size=3, lr=3e-3, weight_decay=0.1, grad_clip=0.5,
                 weight_grads=weight_grads, activations=activations) as tr:
        ref_opt = RefAdamW(lr=3e-3, weight_decay=0.1)
        for k in range(4):
            ids = data.batch(k)
            ref, ref_loss = ref_gradients(tr, ids)
            got = tr.gradients(ids)
            assert tr.last_loss == ref_loss and got.keys() == ref.keys()
            assert all(bits(got[key]) == bits(ref[key]) for key in ref), [key for key in ref if bits(got[key]) != bits(ref[key])]
            params = {key: v.copy() for key, v in tr.params.items()}
            assert ref_all_finite(ref)
            norm = ref_clip_(ref, 0.5)
            assert ref_opt.step(params, ref, {key: v.ndim >= 2 for key, v in params.items()}, check=ref_fp16_ok)
            tr.step(ids)
            assert tr.history[-1]["grad_norm"] == norm and not tr.history[-1]["skipped"]
            assert all(bits(tr.params[key]) == bits(params[key]) for key in params)
            assert all(bits(tr.opt.m[key]) == bits(ref_opt.m[key]) and bits(tr.opt.v[key]) == bits(ref_opt.v[key])
                       for key in params)
