"""Every supported ATen op (and the compositions the spec names) against torch.

Each test imports one module computing many ops at once (a dict of outputs,
named by their keys) and checks every output against torch in fp32: through
the reference interpreter (fp32 mode) and, compiled, on the sim. Integer and
bool results must be exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anec
from tests.frontends.conftest import assert_close, reference

torch = pytest.importorskip("torch")
F = torch.nn.functional


class Fn(torch.nn.Module):
    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for k, v in params.items():
            setattr(self, k, v)

    def forward(self, *args):
        return self.fn(self, *args)


def _g(seed):
    return torch.Generator().manual_seed(seed)


def check(module, args, backends=("interp", "sim"), max_rel=2e-2, exact=()):
    im = anec.import_torch(module.eval(), args)
    ref = reference(module, args)
    for backend in backends:
        if backend == "interp":
            outs = im.runner(backend="interp", mode="fp32")(*args)
        else:
            with im.runner(backend="sim") as run:
                outs = run(*args)
        floats = [(n, o, r) for n, o, r in zip(im.output_names, outs, ref) if n not in exact]
        assert_close([o for _, o, _ in floats], [r for _, _, r in floats], [n for n, _, _ in floats],
                     backend, max_rel=max_rel)
        for n, o, r in zip(im.output_names, outs, ref):
            if n in exact:
                np.testing.assert_array_equal(np.asarray(o), r, err_msg=f"{backend} {n}")
    return im


def test_elementwise():
    def fn(m, x, y):
        p = x.abs() + 0.5
        return {
            "relu": F.relu(x), "tanh": torch.tanh(x), "sigmoid": torch.sigmoid(x), "exp": torch.exp(x),
            "sqrt": torch.sqrt(p), "rsqrt": torch.rsqrt(p), "neg": -x, "gelu": F.gelu(x),
            "gelu_tanh": F.gelu(x, approximate="tanh"), "silu": F.silu(x), "recip": 1.0 / p,
            "abs": torch.abs(x), "exp2": torch.exp2(x), "expm1": torch.expm1(x), "sq": x ** 2,
            "pow3": p ** 3, "pow_half": p ** 0.5, "pow_t": p ** y.abs(), "base_pow": 2.0 ** x,
            "add": x + y, "add_alpha": torch.add(x, y, alpha=0.5), "sub": x - y, "rsub": 1.0 - x,
            "mul": x * y, "div": x / 3.0, "div_t": x / (y.abs() + 1), "maximum": torch.maximum(x, y),
            "minimum": torch.minimum(x, y), "clamp": x.clamp(-0.5, 0.7), "clamp_min": x.clamp(min=0.1),
            "clamp_max": x.clamp(max=0.2), "relu6": F.relu6(3 * x), "hardtanh": F.hardtanh(x),
            "leaky": F.leaky_relu(x, 0.1), "elu": F.elu(x), "hardswish": F.hardswish(3 * x),
            "hardsigmoid": F.hardsigmoid(3 * x), "glu": F.glu(x, -1),
        }

    check(Fn(fn), (torch.randn(2, 8, 16, generator=_g(0)), torch.randn(2, 8, 16, generator=_g(1))))


def test_integer_and_bool_logic_is_exact():
    def fn(m, a, b, mask):
        return {
            "eq": (a == b).float(), "ne": (a != b).float(), "lt": (a < b).float(), "le": (a <= b).float(),
            "gt": (a > 2).float(), "ge": (a >= b).float(), "and": (mask & (a > 0)).float(),
            "or": (mask | (b > 3)).float(), "xor": (mask ^ (a > 0)).float(), "not": (~mask).float(),
            "any": mask.any(-1).float(), "to_bool": a.bool().float(), "where": torch.where(mask, a.float(), -1.0),
            "masked_fill": a.float().masked_fill(~mask, 7.0), "int_sum": (a + b).float(),
        }

    a = torch.randint(-5, 6, (3, 8), generator=_g(2))
    b = torch.randint(-5, 6, (3, 8), generator=_g(3))
    mask = torch.rand(3, 8, generator=_g(4)) > 0.5
    im = check(Fn(fn), (a, b, mask), exact=("eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor",
                                             "not", "any", "to_bool", "where", "masked_fill", "int_sum"))
    assert any("fp32 on the device" in n for n in im.notes)


def test_reductions_and_norms():
    ln = torch.nn.LayerNorm(16)
    ln2 = torch.nn.LayerNorm((4, 16), elementwise_affine=False)
    gn = torch.nn.GroupNorm(2, 4)
    bn = torch.nn.BatchNorm2d(4)
    rms = torch.nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        for mod in (ln, gn, bn, rms):
            for p in mod.parameters():
                p.copy_(torch.randn(p.shape, generator=_g(5)) * 0.3 + 1)
        bn.running_mean.copy_(torch.randn(4, generator=_g(6)))
        bn.running_var.copy_(torch.rand(4, generator=_g(7)) + 0.5)

    def fn(m, x, img):
        return {
            "sum": x.sum(-1), "sum_all": x.sum(), "sum_keep": x.sum((0, 2), keepdim=True),
            "mean": x.mean(1), "mean_all": x.mean(), "amax": x.amax(-1), "max_dim": x.max(1).values,
            "var": x.var(-1), "var0": x.var(-1, unbiased=False), "std": x.std(1), "norm": x.norm(dim=-1),
            "normalize": F.normalize(x, dim=-1), "softmax": x.softmax(-1), "softmax1": x.softmax(1),
            "var_mean": torch.var_mean(x, -1)[1], "ln": m.ln(x), "ln2": m.ln2(x), "rms": m.rms(x),
            "gn": m.gn(img), "bn": m.bn(img),
        }

    check(Fn(fn, ln=ln, ln2=ln2, gn=gn, bn=bn.eval(), rms=rms),
          (torch.randn(2, 4, 16, generator=_g(8)), torch.randn(1, 4, 6, 6, generator=_g(9))))


def test_linear_algebra():
    lin = torch.nn.Linear(16, 24)
    lin_nb = torch.nn.Linear(16, 8, bias=False)
    conv1 = torch.nn.Conv2d(4, 6, 1)
    patch = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4)
    w = torch.nn.Parameter(torch.randn(16, 5, generator=_g(10)) * 0.2)

    def fn(m, x, y, img, pix):
        return {
            "linear": m.lin(x), "linear_nb": m.lin_nb(x), "matmul_w": x @ m.w, "bmm": x @ y.transpose(1, 2),
            "einsum": torch.einsum("bsd,btd->bst", x, y), "matmul4": (x[None] @ y[None].transpose(-1, -2)),
            "baddbmm": torch.baddbmm(x[:, :, :4], x, y.transpose(1, 2)[:, :, :4], alpha=0.5),
            "conv1x1": m.conv1(img), "patchify": m.patch(pix), "addmm": torch.addmm(y[0, 0], x[0], m.w @ m.w.t()),
        }

    check(Fn(fn, lin=lin, lin_nb=lin_nb, conv1=conv1, patch=patch, w=w),
          (torch.randn(2, 4, 16, generator=_g(11)), torch.randn(2, 4, 16, generator=_g(12)),
           torch.randn(1, 4, 5, 5, generator=_g(13)), torch.randn(1, 3, 8, 12, generator=_g(14))))


def test_shapes_and_data_movement():
    table = torch.nn.Embedding(20, 16)
    cls = torch.nn.Parameter(torch.randn(1, 1, 16, generator=_g(15)))

    def fn(m, x):
        a, b = x.chunk(2, -1)
        p, q, r = x.split([3, 5, 8], -1)
        return {
            "view": x.view(2, 64), "reshape": x.reshape(8, 16), "flatten": x.flatten(1), "permute": x.permute(2, 0, 1),
            "transpose": x.transpose(0, 1), "t": x[0].t(), "unsqueeze": x.unsqueeze(1), "squeeze": x[:, :1].squeeze(1),
            "expand": x[:, :1].expand(2, 4, 16) * 1.0, "expand_add": x + x[:, :1].expand(2, 4, 16),
            "repeat": x.repeat(1, 2, 1), "slice": x[:, 1:3], "slice_step": x[..., ::2], "select": x[:, 2],
            "chunk_a": a, "chunk_b": b, "split_q": q, "split_r": r, "unbind": x.unbind(1)[3],
            "cat_last": torch.cat([b, a], -1), "cat_seq": torch.cat([m.cls.expand(2, 1, 16), x], 1),
            "cat_unit": torch.cat([x[:, :1], x[:, 3:]], 1), "stack": torch.stack([x, -x], 1),
            "pad": F.pad(x, (1, 2, 0, 1), value=0.5), "index": x[:, [0, 2, 3]], "index_sel": x.index_select(2, torch.tensor([1, 5, 7])),
            "gather_rows": x[:, torch.tensor([3, 0])], "embed_const": x + m.table(torch.arange(4))[None],
            "contiguous": x.transpose(1, 2).contiguous() * 2,
        }

    check(Fn(fn, table=table, cls=cls), (torch.randn(2, 4, 16, generator=_g(16)),))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def test_attention_variants():
    s, d = 8, 16
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    ang = torch.arange(s).float()[:, None] * inv[None]
    emb = torch.cat((ang, ang), -1)

    def fn(m, q, k, v, kv2, bool_mask, add_mask):
        rq = q * emb.cos() + _rotate_half(q) * emb.sin()
        rk = k * emb.cos() + _rotate_half(k) * emb.sin()
        const_mask = torch.ones(s, s, dtype=torch.bool).tril()
        return {
            "plain": F.scaled_dot_product_attention(q, k, v),
            "causal": F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "bool_const": F.scaled_dot_product_attention(q, k, v, attn_mask=const_mask),
            "bool_input": F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask),
            "additive": F.scaled_dot_product_attention(q, k, v, attn_mask=add_mask),
            "scale": F.scaled_dot_product_attention(q, k, v, scale=0.3),
            "gqa": F.scaled_dot_product_attention(q, kv2, kv2, enable_gqa=True, is_causal=True),
            "rope": F.scaled_dot_product_attention(rq, rk, v, is_causal=True),
            "cross": F.scaled_dot_product_attention(q, k[:, :, :5], v[:, :, :5]),
        }

    bool_mask = torch.rand(1, 1, s, s, generator=_g(17)) > 0.3
    bool_mask[..., 0] = True
    args = (torch.randn(1, 4, s, d, generator=_g(18)), torch.randn(1, 4, s, d, generator=_g(19)),
            torch.randn(1, 4, s, d, generator=_g(20)), torch.randn(1, 2, s, d, generator=_g(21)),
            bool_mask, torch.randn(1, 4, s, s, generator=_g(22)))
    check(Fn(fn), args)


def test_constant_folding_keeps_weight_views():
    """Transposed, sliced and reshaped parameters are weight consts with perm/slice,
    never copies; computations on constants are folded at import."""
    lin = torch.nn.Linear(16, 48)
    gpt2_conv1d_w = torch.nn.Parameter(torch.randn(16, 32, generator=_g(23)))
    pos = torch.nn.Embedding(64, 16)

    def fn(m, x):
        q, k, v = m.lin(x).split(16, -1)
        y = x @ m.w + x.mean() * 0
        z = x + m.pos(torch.arange(4)) + math.pi * torch.ones(16)
        return {"q": q, "v": v, "y": y, "z": z}

    im = check(Fn(fn, lin=lin, w=gpt2_conv1d_w, pos=pos), (torch.randn(1, 4, 16, generator=_g(24)),))
    consts = [n for n in im.func.nodes if n.op == "const" and "weight" in n.attrs]
    by_key = {n.attrs["weight"]: n.attrs for n in consts}
    assert by_key["w"].get("perm") == [1, 0]
    assert by_key["pos.weight"].get("slice") is not None  # rows 0..3 of the table, no copy
    assert set(im.weights) == {"lin.weight", "lin.bias", "w", "pos.weight"}


def test_wide_linear_becomes_matmul_above_the_conv_channel_limit():
    from anec.targets import get_target

    limit = get_target("m4").max_conv_out_channels
    lin = torch.nn.Linear(8, limit + 16, bias=False)
    im = anec.import_torch(Fn(lambda m, x: torch.tanh(m.lin(x)), lin=lin).eval(), (torch.randn(1, 2, 8),))
    ops = [n.op for n in im.func.nodes]
    assert "matmul" in ops and "conv1x1" not in ops
    narrow = anec.import_torch(Fn(lambda m, x: m.lin(x), lin=torch.nn.Linear(8, 32)).eval(), (torch.randn(1, 2, 8),))
    assert "conv1x1" in [n.op for n in narrow.func.nodes]
