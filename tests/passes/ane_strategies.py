"""Hypothesis strategy: random valid programs in the ANE layout that exercise legalize.

Activations are fp16 ``[1, C, 1, S]`` (one S per program). Steps are drawn
from the patterns legalize rewrites (gelu, rsqrt, neg, conv bias, matmul
with a constant weight on either side, channel concat feeding convs,
reduce_mean, fp32 I/O casts, too-wide convs under a tight channel limit) and
from ops it must leave alone. Values stay in a numerically tame range
(rsqrt of ``x*x + 1``, exp of ``tanh``), so interpreter outputs compare with
a small tolerance before and after the pipeline.
"""

from __future__ import annotations

from hypothesis import strategies as st

from anec.ir.builder import Builder
from anec.ir.graph import Graph, Value
from anec.ir.types import DType, TensorType

CHANNELS = st.sampled_from([2, 4, 6, 8])


class _Program:
    def __init__(self, draw, s: int) -> None:
        self.draw = draw
        self.s = s
        self.b = Builder("g")
        self.pool: list[Value] = []
        self.n = 0
        self.exact_gelu = False

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def pick(self, channels: int | None = None) -> Value:
        values = [v for v in self.pool if channels is None or v.type.shape[1] == channels]
        return self.draw(st.sampled_from(values or self.pool))

    def add(self, v: Value) -> Value:
        self.pool.append(v)
        return v

    def scalar(self, value: float) -> Value:
        return self.b.const_value(value, TensorType(DType.fp16, ()), name=self.name("k"))

    def weight(self, shape: tuple[int, ...]) -> Value:
        return self.b.const_weight(self.name("w"), TensorType(DType.fp16, shape), name=self.name("w"))

    # ---- steps
    def unary(self) -> None:
        op = self.draw(st.sampled_from(["relu", "tanh", "sigmoid", "neg", "gelu", "identity"]))
        kw = {}
        if op == "gelu":
            kw["mode"] = self.draw(st.sampled_from(["exact", "tanh"]))
            self.exact_gelu |= kw["mode"] == "exact"
        self.add(self.b.op(op, self.pick(), name=self.name(op), **kw))

    def safe_rsqrt(self) -> None:
        x = self.pick()
        sq = self.b.mul(x, x, name=self.name("sq"))
        p = self.b.add(sq, self.scalar(1.0), name=self.name("p"))
        self.add(self.b.rsqrt(p, name=self.name("rs")))

    def safe_exp(self) -> None:
        t = self.b.tanh(self.pick(), name=self.name("t"))
        self.add(self.b.exp(t, name=self.name("e")))

    def scalar_binary(self) -> None:
        op = self.draw(st.sampled_from(["add", "sub", "mul"]))
        c = self.scalar(self.draw(st.sampled_from([0.5, -1.25, 2.0, 0.125])))
        self.add(self.b.op(op, self.pick(), c, name=self.name(op)))

    def binary(self) -> None:
        x = self.pick()
        y = self.pick(x.type.shape[1])
        if y.type != x.type:
            return
        op = self.draw(st.sampled_from(["add", "sub", "mul"]))
        self.add(self.b.op(op, x, y, name=self.name(op)))

    def conv(self, returned_wide: bool = False) -> Value:
        x = self.pick()
        cout = 12 if returned_wide else self.draw(st.sampled_from([2, 4, 6, 8]))
        w = self.weight((cout, x.type.shape[1], 1, 1))
        kw = {}
        if self.draw(st.booleans()):
            kw["bias"] = self.weight((1, cout, 1, 1))
        return self.add(self.b.conv1x1(x, w, name=self.name("conv"), **kw))

    def matmul_right(self) -> None:
        x = self.pick()
        c, s = x.type.shape[1], self.s
        n = self.draw(st.sampled_from([2, 4, 8]))
        x3 = self.b.reshape(x, shape=[1, c, s], name=self.name("x3"))
        if self.draw(st.booleans()):
            w = self.weight((c, n))
            m = self.b.matmul(x3, w, transpose_x=True, name=self.name("mm"))
        else:
            rows = self.b.transpose(x3, perm=[0, 2, 1], name=self.name("rows"))
            w = self.weight((n, c))
            m = self.b.matmul(rows, w, transpose_y=True, name=self.name("mm"))
        back = self.b.transpose(m, perm=[0, 2, 1], name=self.name("back"))
        self.add(self.b.reshape(back, shape=[1, n, 1, s], name=self.name("r4")))

    def matmul_left(self) -> None:
        x = self.pick()
        c, s = x.type.shape[1], self.s
        n = self.draw(st.sampled_from([2, 4, 8]))
        x3 = self.b.reshape(x, shape=[1, c, s], name=self.name("x3"))
        w = self.weight((n, c))
        m = self.b.matmul(w, x3, name=self.name("mm"))
        self.add(self.b.reshape(m, shape=[1, n, 1, s], name=self.name("r4")))

    def concat_conv(self) -> None:
        a, b = self.pick(), self.pick()
        cat = self.b.concat(a, b, axis=1, name=self.name("cat"))
        cin = cat.type.shape[1]
        for _ in range(self.draw(st.integers(1, 2))):
            cout = self.draw(st.sampled_from([2, 4]))
            w = self.weight((cout, cin, 1, 1))
            kw = {"bias": self.weight((1, cout, 1, 1))} if self.draw(st.booleans()) else {}
            self.add(self.b.conv1x1(cat, w, name=self.name("cc"), **kw))

    def norm(self) -> None:
        x = self.pick()
        mu = self.b.reduce_mean(x, axes=[1], keep_dims=True, name=self.name("mu"))
        self.add(self.b.sub(x, mu, name=self.name("xc")))

    def softmax(self) -> None:
        self.add(self.b.softmax(self.pick(), axis=-1, name=self.name("sm")))

    def cast_chain(self) -> None:
        up = self.b.cast(self.pick(), dtype="fp32", name=self.name("up"))
        self.add(self.b.cast(up, dtype="fp16", name=self.name("down")))

    def dead(self) -> None:
        self.b.relu(self.pick(), name=self.name("dead"))


STEPS = ["unary", "unary", "safe_rsqrt", "safe_exp", "scalar_binary", "binary", "conv", "conv",
         "matmul_right", "matmul_left", "concat_conv", "norm", "softmax", "cast_chain", "dead"]


@st.composite
def ane_programs(draw, max_steps: int = 7, wide_output: bool = False) -> tuple[Graph, bool]:
    """(graph, uses exact gelu). ``wide_output`` returns a 12-channel conv (chunk it at 8)."""
    s = draw(st.sampled_from([2, 4]))
    p = _Program(draw, s)
    for i in range(draw(st.integers(1, 2))):
        c = draw(CHANNELS)
        if draw(st.booleans()):
            x = p.b.input(f"in{i}", "fp32", [1, c, 1, s])
            p.add(p.b.cast(x, dtype="fp16", name=f"in{i}h"))
        else:
            p.add(p.b.input(f"in{i}", "fp16", [1, c, 1, s]))
    for _ in range(draw(st.integers(1, max_steps))):
        getattr(p, draw(st.sampled_from(STEPS)))()
    produced = [v for v in p.pool if v.producer is not None]
    if not produced:
        produced = [p.add(p.b.identity(p.pick(), name=p.name("id")))]
    outs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=2, unique_by=id))
    if wide_output:
        outs = [p.conv(returned_wide=True)] + [o for o in outs if o.producer is not None]
    if draw(st.booleans()):
        outs[-1] = p.b.cast(outs[-1], dtype="fp32", name=p.name("out"))
    p.b.ret(*outs)
    return p.b.graph, p.exact_gelu
