"""The small programs ``python -m anec.selftest`` compiles and runs, as IR and hand-written MIL.

Each IR text exercises one device claim (legalized ops, binding order, small surfaces,
reloadable weights, inputs that stay in their surfaces, compressed weights, int8
activations, norms near the fp16 limit, a native concat);
:func:`raw_mil` and :func:`raw_max_pool` write MIL the emitter never writes (rejected
ops, a pooling window one step beyond the limits), in either dialect.
"""

from __future__ import annotations

from anec.ir.ops import SPATIAL_LIMITS
from anec.mil.emitter import DIALECTS

N = 192  # sequence length: fp32 [1, 64, 1, 192] = 49152 bytes, the minimum surface

LEGALIZED_IR = f"""\
// selftest (legalized): ops the ANE rejects, rewritten by legalize
func block(%x: fp32[1, 64, 1, {N}]) {{
  %xh = cast(%x, dtype=fp16)
  %mu = reduce_mean(%xh, axes=[1], keep_dims=true)
  %xc = sub(%xh, %mu)
  %sq = mul(%xc, %xc)
  %var = reduce_mean(%sq, axes=[1], keep_dims=true)
  %eps = const(value=1e-05) : fp16[]
  %ve = add(%var, %eps)
  %rstd = rsqrt(%ve)
  %xn = mul(%xc, %rstd)
  %w1 = const(weight="fc.weight") : fp16[128, 64, 1, 1]
  %b1 = const(weight="fc.bias") : fp16[1, 128, 1, 1]
  %h = conv1x1(%xn, %w1, bias=%b1)
  %a = gelu(%h, mode="tanh")
  %cat = concat(%a, %h, axis=1)
  %w2 = const(weight="proj.weight") : fp16[64, 256, 1, 1]
  %o = conv1x1(%cat, %w2)
  %s = softmax(%o, axis=1)
  %r = add(%xh, %s)
  %y = cast(%r, dtype=fp32)
  return %y
}}
"""

BINDING_IR = f"""\
// selftest (binding): declaration order zeta, alpha / zdiff, ahalf; alphabetical is the reverse
func bind(%zeta: fp32[1, 64, 1, {N}], %alpha: fp32[1, 64, 1, {N}]) {{
  %zh = cast(%zeta, dtype=fp16)
  %ah = cast(%alpha, dtype=fp16)
  %d = sub(%zh, %ah)
  %half = const(value=0.5) : fp16[]
  %hh = mul(%ah, %half)
  %zdiff = cast(%d, dtype=fp32)
  %ahalf = cast(%hh, dtype=fp32)
  return %zdiff, %ahalf
}}
"""

SMALL_IR = """\
// selftest (min-surface): 64-byte tensors, far below the minimum surface
func small(%x: fp32[1, 4, 1, 4]) {
  %xh = cast(%x, dtype=fp16)
  %r = relu(%xh)
  %two = const(value=2.0) : fp16[]
  %m = mul(%r, %two)
  %y = cast(%m, dtype=fp32)
  return %y
}
"""

DENSE_IR = f"""\
// selftest (reload, shared): weights that a reload can swap
func dense(%x: fp32[1, 64, 1, {N}]) {{
  %xh = cast(%x, dtype=fp16)
  %w = const(weight="dense.weight") : fp16[64, 64, 1, 1]
  %b = const(weight="dense.bias") : fp16[1, 64, 1, 1]
  %h = conv1x1(%xh, %w, bias=%b)
  %y = cast(%h, dtype=fp32)
  return %y
}}
"""

ONE_IR = f"""\
// selftest (reload): one weight tensor, so the compiled data is the BLOBFILE itself
func one(%x: fp32[1, 64, 1, {N}]) {{
  %xh = cast(%x, dtype=fp16)
  %w = const(weight="one.weight") : fp16[64, 64, 1, 1]
  %h = conv1x1(%xh, %w)
  %y = cast(%h, dtype=fp32)
  return %y
}}
"""

STATE_T = 256
"""Cache positions of STATE_IR."""

STATE_IR = f"""\
// selftest (state): queries against a cache and a mask that stay in the program between calls
func state(%q: fp16[1, 1, 16, 64], %kc: fp16[1, 1, {STATE_T}, 64], %mask: fp16[1, 1, 16, {STATE_T}]) {{
  %s = matmul(%q, %kc, transpose_y=true)
  %m = add(%s, %mask)
  %e = softmax(%m, axis=-1)
  %y = matmul(%e, %kc)
  return %y
}}
"""

COMPRESSED_IR = f"""\
// selftest (compressed): a conv weight and a matmul weight, stored compressed
func compressed(%x: fp32[1, 64, 1, {N}], %a: fp32[1, 1, {N}, 64]) {{
  %xh = cast(%x, dtype=fp16)
  %w = const(weight="conv.weight") : fp16[64, 64, 1, 1]
  %h = conv1x1(%xh, %w)
  %y = cast(%h, dtype=fp32)
  %ah = cast(%a, dtype=fp16)
  %wm = const(weight="matmul.weight") : fp16[1, 1, 64, 64]
  %m = matmul(%ah, %wm)
  %z = cast(%m, dtype=fp32)
  return %y, %z
}}
"""

COMPRESSED_PROBES: tuple[tuple[str, str | None], ...] = (
    ("int8", "affine"), ("int8", "blockwise"), ("lut4", None), ("lut6", None), ("sparse50", None),
    ("sparse50+int8", None), ("sparse50+lut4", None))
"""(format, int8 form) pairs the compressed check compiles: the two MIL ops of int8 weights
(ANE-COMPRESSED-WEIGHTS), two LUT widths and sparse weights (ANE-COMPRESSED-SPARSE:
constexpr_sparse_to_dense over a uint1 mask, or the ios16 packed mask; with int8 or LUT
values through constexpr_sparse_blockwise_shift_scale / constexpr_lut_to_sparse, ios18 only)."""

W8A8_IR = f"""\
// selftest (int8-activations): three 1x1 convs, int8 weights, int8 activations between them
func w8a8(%x: fp32[1, 64, 1, {N}]) {{
  %xh = cast(%x, dtype=fp16)
  %w1 = const(weight="c1.weight") : fp16[64, 64, 1, 1]
  %h1 = conv1x1(%xh, %w1)
  %a1 = relu(%h1)
  %w2 = const(weight="c2.weight") : fp16[64, 64, 1, 1]
  %h2 = conv1x1(%a1, %w2)
  %a2 = relu(%h2)
  %w3 = const(weight="c3.weight") : fp16[64, 64, 1, 1]
  %h3 = conv1x1(%a2, %w3)
  %y = cast(%h3, dtype=fp32)
  return %y
}}
"""
"""The maderix W8A8 form (ane_int8_bench.m): quantize/dequantize between convs over int8
weights; compiled with --compress int8 --activations int8 (ANE-INT8-ACTIVATIONS)."""

ROUND_SCALE = 0.300048828125
"""fp16(0.3): quotients by it fall between fp16 values, so the fp16 quotient and the exact
one round apart on some inputs."""

INT8_ROUND_IR = f"""\
// selftest (int8-activations): x through int8 into an identity 1x1 conv: y is x dequantized
func int8_round(%x: fp32[1, 64, 1, {N}]) {{
  %xh = cast(%x, dtype=fp16)
  %eye = const(weight="eye") : fp16[64, 64, 1, 1]
  %h = conv1x1(%xh, %eye) @{{int8_x={ROUND_SCALE!r}}}
  %y = cast(%h, dtype=fp32)
  return %y
}}
"""
"""How the device rounds ``quantize``: each output is one input's int8 round trip."""

INT8_ROUND_X = (-1.5, -1.3505859375, -0.75, -0.1688232421875, -0.1500244140625, 0.1500244140625, 0.75,
                -36.15625, 100.0, -100.0, 0.0, 1.0)
"""Inputs of the rounding probe (tiled over x), chosen so that every two of the roundings
the check tells apart (half to even, half away from zero or toward zero, of the fp16 or the
exact quotient by :data:`ROUND_SCALE`) give another result on one of them: -0.75 / s is
-2.4996 exact and -2.5 in fp16, +-s/2 is an exact tie, -36.15625 / s is -120.5012 exact and
-120.5 in fp16; and values past the int8 range."""

NORMS_IR = f"""\
// selftest (fp16-range): norms written as mean(x * x), made range-safe by the compiler
func norms(%x: fp32[1, 64, 1, {N}]) {{
  %xh = cast(%x, dtype=fp16)
  %sq = mul(%xh, %xh)
  %ms = reduce_mean(%sq, axes=[1], keep_dims=true)
  %eps = const(value=1e-05) : fp16[]
  %me = add(%ms, %eps)
  %r = rsqrt(%me)
  %rn = mul(%xh, %r)
  %mu = reduce_mean(%xh, axes=[1], keep_dims=true)
  %xc = sub(%xh, %mu)
  %sq2 = mul(%xc, %xc)
  %var = reduce_mean(%sq2, axes=[1], keep_dims=true)
  %ve = add(%var, %eps)
  %rs = rsqrt(%ve)
  %ln = mul(%xc, %rs)
  %rms = cast(%rn, dtype=fp32)
  %lnorm = cast(%ln, dtype=fp32)
  return %lnorm, %rms
}}
"""

_T = "tensor<fp16, [1, 64, 1, 384]>"  # 49152 bytes: the surfaces are not the problem


def _mil_header(dialect: str) -> str:
    """The program header exactly as the emitter writes it for ``dialect``."""
    d = DIALECTS[dialect]
    return f"program({d.program_version})\n{d.build_info}\n{{\n"


def raw_mil(op: str, dialect: str) -> str:
    """Hand-written MIL using `op` ("concat", "gelu", "rsqrt", or the control
    "relu") in the target's dialect: the emitter never writes these ops."""
    old = dialect == "ios16"

    def name(n: str) -> str:
        return f'tensor<string, []>("{n}")' if old else f'string("{n}")'

    def scalar(dtype: str, n: str, literal: str) -> str:
        t = f"tensor<{dtype}, []>" if old else dtype
        return f"        {t} {n} = const()[name = {name(n)}, val = {t}({literal})];\n"

    body = {
        "concat": (f"    func main<{dialect}>({_T} a, {_T} b) {{\n"
                   + scalar("int32", "c_axis", "1") + scalar("bool", "c_interleave", "false")
                   + "        tensor<fp16, [1, 128, 1, 384]> c = concat(axis = c_axis, interleave = c_interleave, "
                   f"values = (a, b))[name = {name('c')}];\n    }} -> (c);\n}}\n"),
        "gelu": (f"    func main<{dialect}>({_T} x) {{\n"
                 + scalar("string", "g_mode", '"TANH_APPROXIMATION"')
                 + f"        {_T} g = gelu(mode = g_mode, x = x)[name = {name('g')}];\n    }} -> (g);\n}}\n"),
        "rsqrt": (f"    func main<{dialect}>({_T} x) {{\n"
                  + scalar("fp16", "r_epsilon", "0x1.5p-17")
                  + f"        {_T} r = rsqrt(epsilon = r_epsilon, x = x)[name = {name('r')}];\n    }} -> (r);\n}}\n"),
        "relu": (f"    func main<{dialect}>({_T} x) {{\n"
                 f"        {_T} r = relu(x = x)[name = {name('r')}];\n    }} -> (r);\n}}\n"),
    }[op]
    return _mil_header(dialect) + body


def raw_max_pool(kernel: int, dialect: str) -> str:
    """Hand-written MIL: one max_pool with a 1 x ``kernel`` window along W."""
    old = dialect == "ios16"

    def name(n: str) -> str:
        return f'tensor<string, []>("{n}")' if old else f'string("{n}")'

    def const(t: str, n: str, literal: str) -> str:
        return f"        {t} {n} = const()[name = {name(n)}, val = {t}({literal})];\n"

    s = "tensor<string, []>" if old else "string"
    b = "tensor<bool, []>" if old else "bool"
    return (_mil_header(dialect) + f"    func main<{dialect}>({_T} x) {{\n"
            + const("tensor<int32, [2]>", "p_k", f"[1, {kernel}]") + const("tensor<int32, [2]>", "p_s", "[1, 1]")
            + const("tensor<int32, [4]>", "p_pad", f"[0, 0, {kernel // 2}, {kernel - 1 - kernel // 2}]")
            + const(s, "p_pt", '"custom"') + const(b, "p_ceil", "false")
            + f"        {_T} p = max_pool(ceil_mode = p_ceil, kernel_sizes = p_k, pad = p_pad, pad_type = p_pt, "
            f"strides = p_s, x = x)[name = {name('p')}];\n    }} -> (p);\n}}\n")


RAW_OPS = ("concat", "gelu", "rsqrt", "relu")
"""The ops :func:`raw_mil` writes: concat (contested, probed by the concat check), the ops the
catalog verifies rejected, then the control (same shapes, an op the ANE accepts)."""

UNLEGALIZED_OPS = ("gelu", "rsqrt")
"""The ops the unlegalized check expects the device compiler to reject."""

CONCAT_IR = f"""\
// selftest (concat): a channel concat kept as MIL (the native reading of ANE-CONCAT)
func cat(%a: fp32[1, 64, 1, {N}], %b: fp32[1, 32, 1, {N}]) {{
  %ah = cast(%a, dtype=fp16)
  %bh = cast(%b, dtype=fp16)
  %c = concat(%ah, %bh, axis=1)
  %r = relu(%c)
  %y = cast(%r, dtype=fp32)
  return %y
}}
"""


TRIVIAL_MIL = {
    "ios18": "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 64, 1, 384]> x) {\n"
             '        tensor<fp16, [1, 64, 1, 384]> r = relu(x = x)[name = string("r")];\n    } -> (r);\n}\n',
    "ios16": "program(1.0)\n{\n    func main<ios16>(tensor<fp16, [1, 64, 1, 384]> x) {\n"
             '        tensor<fp16, [1, 64, 1, 384]> r = relu(x = x)[name = tensor<string, []>("r")];\n'
             "    } -> (r);\n}\n",
}
"""A one-relu program per dialect, written as the emitter writes it (the dialect check)."""


def spatial_ir(kernel: int) -> str:
    """Target forms at the limits (ANE-SPATIAL-LIMITS), kernel ``kernel`` along W."""
    L = SPATIAL_LIMITS
    k, s, d, up = kernel, L.stride, L.dilation, L.upsample_scale
    n = 24 * s  # the pooled width times the stride
    return f"""\
// selftest (spatial): native spatial ops at anec's limits
func spatial(%x: fp32[1, 64, 1, {n}]) {{
  %xh = cast(%x, dtype=fp16)
  %wk = const(weight="dw.weight") : fp16[64, 1, 1, {k}]
  %a = conv(%xh, %wk, pad=[0, 0, {k - 1}, 0], groups=64)
  %wd = const(weight="dil.weight") : fp16[64, 64, 1, 3]
  %b = conv(%a, %wd, dilations=[1, {d}], pad=[0, 0, {2 * d}, 0])
  %c = max_pool(%b, kernel_sizes=[1, {k}], strides=[1, {s}], pad=[0, 0, {k // 2}, {k - 1 - k // 2}])
  %wt = const(weight="up.weight") : fp16[64, 64, 1, {2 * s}]
  %t = conv_transpose(%c, %wt, strides=[1, {s}], pad=[0, 0, {s // 2}, {s // 2}])
  %v = avg_pool(%t, kernel_sizes=[1, {k}], strides=[1, 1], pad=[0, 0, {k // 2}, {k - 1 - k // 2}],
                exclude_padding_from_average=true)
  %u = upsample_nearest(%c, scales=[1, {up}])
  %z = upsample_bilinear(%c, size=[1, {n}])
  %y = cast(%v, dtype=fp32)
  %yu = cast(%u, dtype=fp32)
  %yz = cast(%z, dtype=fp32)
  return %y, %yu, %yz
}}
"""
