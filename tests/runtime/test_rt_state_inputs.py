"""State inputs: inputs that live in a program's surfaces across calls, written whole once and
then a few rows at a time in place (``write_input``, ``write_input_slice``; C:
``anec_write_input_slice``), for one program and for a pipeline (every stage surface that reads
the input), and the bytes the runtime counts per call.

The func is a decode step in miniature: queries against a cache ``kc [1, 1, T, 32]`` with an
additive mask ``[1, 1, 16, T]``, through a few layers that each hold a weight, so a small blob
budget cuts it into stages that all read the cache and the mask. Reference: the same loaded
artifact called with the whole cache and mask on every step (the old way), compared bit for bit
(both store every value in fp16 and run the same kernels), and the fp16 interpreter within the
tolerance policy (tests/tolerances.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.diagnostics import RuntimeFailure
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.ir.weight_binding import random_weights
from anec.runtime import Runtime, native
from anec.runtime.staged_program import PipelineProgram
from anec.targets import get_target
from tolerances import assert_close

W, D, LAYERS, NEG = 16, 32, 3, -1e4
OUT = f"h{LAYERS - 1}"


def attention_ir(t: int) -> str:
    """LAYERS residual layers ``h + softmax(((h @ w) @ kc^T) + mask) @ kc``."""
    lines = [f"func f(%x: fp16[1, 1, {W}, {D}], %kc: fp16[1, 1, {t}, {D}], %mask: fp16[1, 1, {W}, {t}]) {{"]
    prev = "%x"
    for i in range(LAYERS):
        lines += [f'  %w{i} = const(weight="l{i}.w") : fp16[1, 1, {D}, {D}]',
                  f"  %a{i} = matmul({prev}, %w{i})",
                  f"  %s{i} = matmul(%a{i}, %kc, transpose_y=true)",
                  f"  %m{i} = add(%s{i}, %mask)",
                  f"  %e{i} = softmax(%m{i}, axis=-1)",
                  f"  %c{i} = matmul(%e{i}, %kc)",
                  f"  %h{i} = add({prev}, %c{i})"]
        prev = f"%h{i}"
    lines.append(f"  return {prev}\n}}\n")
    return "\n".join(lines)


def build(t: int, cut: bool):
    """(graph, weights, artifact): one program, or a pipeline cut by a one-blob budget."""
    module = parse(attention_ir(t))
    store = random_weights(module, 1)
    tgt = get_target("m4").replace(max_blob_tensors=1) if cut else get_target("m4")
    art = compile_module(module, weights=store, target=tgt).artifacts["f"]
    return module.funcs["f"], store, art


def consumers(prog, name: str) -> int:
    """How many surfaces hold input ``name``: 1, or the pipeline stages that read it."""
    if not isinstance(prog, PipelineProgram):
        return 1
    return sum(1 for st in prog.artifact.manifest.stages for e in st.inputs if e.source.input == name)


def io_counts(prog) -> dict[str, int]:
    st = prog.stats
    return {k: st[k] for k in ("host_in_bytes", "host_out_bytes", "surface_copy_bytes")}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def steps(t: int, n: int, seed: int = 0):
    """n decode steps: (x, the new cache row), O(1) values."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((1, 1, W, D)).astype(np.float16),
             rng.standard_normal((1, 1, 1, D)).astype(np.float16)) for _ in range(n)]


@pytest.mark.constraint("ANE-INPUT-RESIDENT")
@pytest.mark.parametrize("cut", [False, True], ids=["program", "pipeline"])
def test_rows_written_in_place_compute_what_whole_inputs_compute(rt, cut):
    t, first = 64, 5
    graph, store, art = build(t, cut)
    state, whole = rt.load(art), rt.load(art)  # two model objects of one artifact
    assert isinstance(state, PipelineProgram) == cut
    if cut:
        assert consumers(state, "kc") >= 2 and consumers(state, "mask") >= 2  # several surfaces each
    rng = np.random.default_rng(7)
    kc = np.zeros((1, 1, t, D), np.float16)
    kc[:, :, :first] = rng.standard_normal((1, 1, first, D))
    mask = np.full((1, 1, W, t), NEG, np.float16)
    mask[..., :first] = 0
    state.write_input("kc", kc)
    state.write_input("mask", mask)
    assert state.state_inputs == {"kc", "mask"}
    for pos, (x, row) in enumerate(steps(t, 12), start=first):
        got = state(x=x)[OUT]
        want = whole(x=x, kc=kc, mask=mask)[OUT]
        assert np.array_equal(got, want), f"step at position {pos}"
        if pos == first:
            ref = interpret(graph, {"x": x, "kc": kc, "mask": mask}, store, mode="fp16")[OUT]
            assert_close(got, ref, "runtime/state-inputs:h", 2)
        # the step's new row and the mask column of its position, in place and on the host copy
        state.write_input_slice("kc", row, axis=2, start=pos)
        state.write_input_slice("mask", np.zeros((1, 1, W, 1), np.float16), axis=-1, start=pos)
        kc[:, :, pos] = row[:, :, 0]
        mask[..., pos] = 0
    # a call that passes a state input writes it whole, and it stays state
    x = steps(t, 1, seed=9)[0][0]
    assert np.array_equal(state(x=x, kc=np.zeros_like(kc))[OUT],
                          whole(x=x, kc=np.zeros_like(kc), mask=mask)[OUT])
    assert state.state_inputs == {"kc", "mask"}
    state.close()
    whole.close()


@pytest.mark.constraint("ANE-INPUT-RESIDENT")
@pytest.mark.parametrize("cut", [False, True], ids=["program", "pipeline"])
def test_bytes_per_step_do_not_grow_with_the_cache(rt, cut):
    per_step, old_per_step = {}, {}
    for t in (64, 256):
        _, _, art = build(t, cut)
        prog = rt.load(art)
        prog.write_input("kc", np.zeros((1, 1, t, D), np.float16))
        prog.write_input("mask", np.full((1, 1, W, t), NEG, np.float16))
        seen, old = [], []
        for pos, (x, row) in enumerate(steps(t, 3)):
            before = io_counts(prog)
            prog(x=x)
            prog.write_input_slice("kc", row, axis=2, start=pos)
            prog.write_input_slice("mask", np.zeros((1, 1, W, 1), np.float32), axis=3, start=pos)  # converted
            seen.append(delta(io_counts(prog), before))
            before = io_counts(prog)
            prog(x=x, kc=np.zeros((1, 1, t, D), np.float16), mask=np.zeros((1, 1, W, t), np.float16))
            old.append(delta(io_counts(prog), before))
        assert all(s == seen[0] for s in seen) and all(o == old[0] for o in old)
        per_step[t], old_per_step[t] = seen[0], old[0]
        # by hand: x in, the row and the mask column into every surface that holds them, h out
        x_bytes, h_bytes = W * D * 2, W * D * 2
        assert seen[0]["host_in_bytes"] == x_bytes + consumers(prog, "kc") * D * 2 + consumers(prog, "mask") * W * 2
        assert seen[0]["host_out_bytes"] == h_bytes
        prog.close()
    assert per_step[64] == per_step[256]
    # the whole cache and mask every step: the host writes each once (a pipeline copies it to
    # the other stages that read it), so the bytes grow with T
    kc_grown, mask_grown = (256 - 64) * D * 2, (256 - 64) * W * 2
    assert old_per_step[256]["host_in_bytes"] - old_per_step[64]["host_in_bytes"] == kc_grown + mask_grown
    assert old_per_step[256]["surface_copy_bytes"] - old_per_step[64]["surface_copy_bytes"] == \
        (consumers(prog, "kc") - 1) * kc_grown + (consumers(prog, "mask") - 1) * mask_grown


def test_a_call_counts_the_bytes_it_moves(rt):
    _, _, art = build(64, False)
    p = rt.load(art)
    before, rt_before = io_counts(p), rt.stats
    x = np.ones((1, 1, W, D), np.float32)  # fp32 on the host: 2 bytes per element land
    p(x=x, kc=np.zeros((1, 1, 64, D), np.float16), mask=np.zeros((1, 1, W, 64), np.float16))
    d = delta(io_counts(p), before)
    assert d == {"host_in_bytes": W * D * 2 + 64 * D * 2 + W * 64 * 2, "host_out_bytes": W * D * 2,
                 "surface_copy_bytes": 0}
    assert {k: rt.stats[k] - rt_before[k] for k in d} == d
    p.close()


def test_a_call_leaves_out_only_inputs_written_before(rt):
    _, _, art = build(64, True)
    p = rt.load(art)
    x = np.ones((1, 1, W, D), np.float16)
    with pytest.raises(RuntimeFailure, match="missing input 'kc'") as e:
        p(x=x, mask=np.zeros((1, 1, W, 64), np.float16))
    assert "write_input" in (e.value.hint or "")
    p.write_input_slice("kc", np.ones((1, 1, 2, D), np.float16), axis=2, start=62)  # the rest stays zero
    assert p.state_inputs == {"kc"}
    y = p(x=x, mask=np.zeros((1, 1, W, 64), np.float16))[OUT]
    kc = np.zeros((1, 1, 64, D), np.float16)
    kc[:, :, 62:] = 1
    assert np.array_equal(y, p(x=x, kc=kc, mask=np.zeros((1, 1, W, 64), np.float16))[OUT])
    p.close()


@pytest.mark.parametrize("cut", [False, True], ids=["program", "pipeline"])
def test_bad_slice_writes_are_refused_with_the_reason(rt, cut):
    _, _, art = build(64, cut)
    p = rt.load(art)
    row = np.ones((1, 1, 1, D), np.float16)
    cases = [
        (dict(name="kx", value=row, axis=2, start=0), "no input 'kx'"),
        (dict(name="kc", value=row, axis=4, start=0), "has 4 axes; got axis 4"),
        (dict(name="kc", value=row, axis=True, start=0), "got axis True"),
        (dict(name="kc", value=row, axis=2, start=64), "1 rows from row 64 do not fit its 64"),
        (dict(name="kc", value=np.ones((1, 1, 2, D)), axis=2, start=63), "2 rows from row 63"),
        (dict(name="kc", value=row, axis=2, start=-1), "from row -1"),
        (dict(name="kc", value=row, axis=2, start=1.0), "from row 1.0"),
        (dict(name="kc", value=np.ones((1, 1, 1, D - 1)), axis=2, start=0), "must have the shape"),
        (dict(name="kc", value=np.ones((1, 1, 0, D)), axis=2, start=0), "must have the shape"),
        (dict(name="kc", value=np.ones((1, D)), axis=1, start=0), "must have the shape"),
        (dict(name="kc", value=np.full((1, 1, 1, D), "a"), axis=2, start=0), "numeric array"),
    ]
    for kw, message in cases:
        with pytest.raises(RuntimeFailure, match=message):
            p.write_input_slice(**kw)
    assert p.state_inputs == frozenset()
    p.close()


def _native_slice(p, index, view, dtype, data, nbytes=None, *, target="program"):
    """anec_write_input_slice on the C handle, arguments as given (no Python checks)."""
    ffi, lib = native.ffi, native.lib
    sl = ffi.new("anec_slice *")
    sl.outer, sl.extent, sl.inner, sl.start, sl.count = view
    io = ffi.new("anec_io *")
    buf = ffi.from_buffer("uint8_t[]", data) if data is not None else ffi.NULL
    io.dtype, io.data, io.bytes = dtype, buf, len(data) if nbytes is None else nbytes
    if target == "both":
        return lib.anec_write_input_slice(p.stages[0]._native.ptr, p._native.pipe.ptr, index, sl, io)
    if target == "neither":
        return lib.anec_write_input_slice(ffi.NULL, ffi.NULL, index, sl, io)
    if isinstance(p, PipelineProgram):
        return lib.anec_write_input_slice(ffi.NULL, p._native.pipe.ptr, index, sl, io)
    return lib.anec_write_input_slice(p._native.ptr, ffi.NULL, index, sl, io)


@pytest.mark.parametrize("cut", [False, True], ids=["program", "pipeline"])
def test_hostile_slice_writes_are_refused_in_c_and_write_nothing(rt, cut):
    _, _, art = build(64, cut)
    p = rt.load(art)
    lib = native.lib
    kc_index = [i["name"] for i in p.inputs].index("kc")
    fp16, fp32, i32 = (native.DTYPE_CODES[n] for n in ("fp16", "fp32", "int32"))
    kc = np.random.default_rng(3).standard_normal((1, 1, 64, D)).astype(np.float16)
    mask = np.zeros((1, 1, W, 64), np.float16)
    p.write_input("kc", kc)
    p.write_input("mask", mask)
    x = np.ones((1, 1, W, D), np.float16)
    y0 = p(x=x)[OUT]
    row = bytes(D * 2)
    big = 1 << 63
    cases = [  # (index, (outer, extent, inner, start, count), dtype, data, bytes, what the message says)
        (len(p.inputs), (1, 64, D, 0, 1), fp16, row, None, "inputs; got input"),
        (kc_index, (1, 64, D, 64, 1), fp16, row, None, "do not fit"),
        (kc_index, (1, 64, D, 63, 2), fp16, row, None, "do not fit"),
        (kc_index, (1, 64, D, (1 << 64) - 1, 2), fp16, row, None, "do not fit"),  # start + count wraps
        (kc_index, (1, 64, D, 0, 0), fp16, b"", None, "do not fit"),
        (kc_index, (1, 64, D - 1, 0, 1), fp16, row, None, "element count is not the input's"),
        (kc_index, (big, big, 4, 0, 1), fp16, row, None, "element count is not the input's"),  # product wraps
        (kc_index, (1, 64, 0, 0, 1), fp16, row, None, "empty axis"),
        (kc_index, (1, 64, D, 0, 1), i32, row, None, "only fp32 -> fp16"),
        (kc_index, (1, 64, D, 0, 1), fp16, row, D * 2 - 2, "got 62 bytes"),
        (kc_index, (1, 64, D, 0, 1), fp32, row, None, "got 64 bytes"),
        (kc_index, (1, 64, D, 0, 1), fp16, None, 64, "needs a slice and data"),
    ]
    for index, view, dtype, data, nbytes, what in cases:
        before = io_counts(p)
        assert _native_slice(p, index, view, dtype, data, nbytes) == lib.ANEC_EINVAL, (view, what)
        assert what in native.last_error(), (native.last_error(), what)
        assert io_counts(p) == before
    for target in ("both", "neither"):
        if target == "both" and not cut:
            continue
        assert _native_slice(p, kc_index, (1, 64, D, 0, 1), fp16, row, target=target) == lib.ANEC_EINVAL
        assert "one program or one pipeline" in native.last_error()
    assert np.array_equal(p(x=x)[OUT], y0)  # nothing was written
    # the same call with a good view writes exactly its row
    assert _native_slice(p, kc_index, (1, 64, D, 10, 1), fp16, row) == lib.ANEC_OK
    kc[:, :, 10] = 0
    assert np.array_equal(p(x=x)[OUT], p(x=x, kc=kc)[OUT])
    p.close()


def test_slice_writes_on_a_closed_program_fail_cleanly(rt):
    _, _, art = build(64, False)
    p = rt.load(art)
    p.close()
    with pytest.raises(RuntimeFailure, match="closed"):
        p.write_input_slice("kc", np.ones((1, 1, 1, D), np.float16), axis=2, start=0)
    with Runtime("sim") as other:
        q = other.load(art)
    with pytest.raises(RuntimeFailure, match="closed"):
        q.write_input("kc", np.ones((1, 1, 64, D), np.float16))
