"""Small IR graphs shared by the MIL tests."""

from __future__ import annotations

from anec.ir import Builder


def small_mlp(name: str = "mlp", channels: int = 8, hidden: int = 16, seq: int = 4):
    """A legal (already legalized) func: cast, conv, scalar mul, relu, conv, cast."""
    b = Builder(name)
    x = b.input("x", "fp32", [1, channels, 1, seq])
    xh = b.cast(x, dtype="fp16", name="xh")
    w1 = b.const_weight("l0.w1", f"fp16[{hidden}, {channels}, 1, 1]", name="w1")
    h = b.conv1x1(xh, w1, name="h")
    s = b.const_value(0.5, "fp16[]", name="s")
    hs = b.mul(h, s, name="hs")
    a = b.relu(hs, name="a")
    w2 = b.const_weight("l0.w2", f"fp16[{channels}, {hidden}, 1, 1]", name="w2")
    o = b.conv1x1(a, w2, name="o")
    y = b.cast(o, dtype="fp32", name="y")
    b.ret(y)
    return b.graph


def two_io(name: str = "two"):
    """Two inputs and two outputs whose names sort differently from their order."""
    b = Builder(name)
    x = b.input("x", "fp16", [1, 4, 1, 8])
    mask = b.input("mask", "fp16", [1, 4, 1, 8])
    s = b.add(x, mask, name="sum")
    r = b.relu(s, name="b_out")
    t = b.tanh(s, name="a_out")
    b.ret(r, t)
    return b.graph
