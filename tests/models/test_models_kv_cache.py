"""The KV cache stays put: decode writes the prompt's rows into the decode program once, then
per step only the new position's keys and values and one mask column, in place.

References: the decode path before state inputs, written out here (:class:`OldDecode`: the
host keeps the whole cache and passes it, with a fresh mask, to every step, and gives the
padding columns the causal new-block mask and their own positions) and run on another
CausalLM of the same checkpoint (its own runtime and programs): every step's logits must be
equal bit for bit, since both feed the token's column the same values. The bytes a step moves are
read from the runtime's counters and computed here by hand from the shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.models.buckets import pick_bucket
from anec.models.generate import CausalLM, decoder_frontend
from anec.models.hf import load_checkpoint
from anec.models.layout import MASK_NEG, causal_mask, to_bc1s
from anec.runtime.staged_program import PipelineProgram
from anec.targets import get_target
from tests.models.conftest import BACKEND, PROMPT

MIN_SURFACE = 32768
"""Decode width 64 for hidden 128, so the cache buckets are 64, 128 and 256."""
CONT = [11, 250, 3, 77, 100, 9, 401, 42]
STAGES_M4, STAGES_SMALL = 2, 4
"""Stages of the 2-layer decode func: the M4 blob budget, and a budget of 6 BLOBFILE tensors."""


def make_lm(path, backend: str = BACKEND, blobs: int | None = None) -> CausalLM:
    target = None if blobs is None else get_target("m4").replace(max_blob_tensors=blobs)
    return CausalLM(decoder_frontend(load_checkpoint(path), MIN_SURFACE), backend=backend, target=target)


def decode_program(lm: CausalLM, t: int):
    return lm.programs.programs[lm.fe.decode_name(lm.fe.width, t)]


def io_counts(prog) -> dict[str, int]:
    st = prog.stats
    return {k: st[k] for k in ("host_in_bytes", "host_out_bytes")}


def consumers(prog, name: str) -> int:
    """The surfaces that hold decode input ``name``: 1, or each pipeline stage that reads it."""
    if not isinstance(prog, PipelineProgram):
        return 1
    return sum(1 for st in prog.artifact.manifest.stages for e in st.inputs if e.source.input == name)


class OldDecode:
    """The decode path before state inputs and the one-token step mask: a host cache passed
    whole to every step, the causal new-block mask and each column's own position (so the
    padding columns differ), as the decode func's constant mask and the host gave them."""

    def __init__(self, lm: CausalLM, t: int) -> None:
        self.lm, self.t, n, cfg = lm, t, len(PROMPT), lm.cfg
        s = pick_bucket(n, lm.fe.buckets)
        x = to_bc1s(lm.fe.embed(np.array(PROMPT), np.arange(n)), s)
        o = self.program(lm.fe.prefill_name(s))(x=x, **lm.fe.position_inputs(np.arange(s), s))
        self.k = [np.zeros((1, cfg.n_kv_head, t, cfg.head_dim), np.float16) for _ in range(cfg.n_layer)]
        self.v = [np.zeros_like(k) for k in self.k]
        for i in range(cfg.n_layer):
            self.k[i][:, :, :n] = o[f"L{i}_k"][:, :, :n]
            self.v[i][:, :, :n] = o[f"L{i}_v"][:, :, :n]
        self.pos = n
        self.prog = self.program(lm.fe.decode_name(lm.fe.width, t))

    def program(self, name: str):
        return self.lm.programs.get(name, lambda: self.lm.fe.program(name, self.lm.head_limit))

    def step(self, token: int) -> np.ndarray:
        lm, w, pos = self.lm, self.lm.fe.width, self.pos
        x = to_bc1s(lm.fe.embed(np.array([token]), np.array([pos])), w)
        mask = np.full((1, 1, w, self.t), MASK_NEG, np.float16)
        mask[..., :pos] = 0
        extra = lm.fe.position_inputs(np.arange(pos, pos + w), w)
        for i in range(lm.cfg.n_layer):
            extra[f"L{i}_kc"], extra[f"L{i}_vc"] = self.k[i], self.v[i]
        o = self.prog(x=x, mask=mask, mask_new=causal_mask(w), **extra)
        for i in range(lm.cfg.n_layer):
            self.k[i][:, :, pos] = o[f"L{i}_k"][:, :, 0]
            self.v[i][:, :, pos] = o[f"L{i}_v"][:, :, 0]
        self.pos += 1
        head = np.zeros((1, lm.cfg.d_model, 1, w), np.float32)
        head[:, :, :, 0] = o["h"][:, :, :, 0]
        out = self.program(lm.fe.lm_head_name(w))(x=head)
        return np.concatenate([out[n][0, :, 0, 0] for n in sorted(out, key=lambda n: int(n[8:]))],
                              dtype=np.float32)


@pytest.mark.constraint("ANE-INPUT-RESIDENT")
@pytest.mark.parametrize("blobs", [None, 6], ids=["m4", "cut-small"])
def test_every_decode_step_is_bit_identical_to_passing_the_whole_cache(llama_dir, blobs):
    new, old = make_lm(llama_dir, blobs=blobs), make_lm(llama_dir, blobs=blobs)
    try:
        t = 64
        new.prefill(PROMPT, cache_len=t)
        ref = OldDecode(old, t)
        for tok in CONT:
            got = new.decode(tok)
            assert np.array_equal(got, ref.step(tok)), f"decode at position {new.pos - 1}"
        prog = decode_program(new, t)
        assert isinstance(prog, PipelineProgram)  # the decode func is cut into stages
        assert len(prog.stages) == (STAGES_M4 if blobs is None else STAGES_SMALL)
        assert prog.state_inputs == {"mask", "mask_new"} | {f"L{i}_{kv}c" for i in range(new.cfg.n_layer) for kv in "kv"}
    finally:
        new.close()
        old.close()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_step_mask_leaves_the_token_column_bit_identical(gpt2_dir, llama_dir, kind):
    """Padding columns that see column 0 alone and the token's position change nothing the
    token's column computes: every step's logits equal those under the causal new-block mask
    and per-column positions, bit for bit (GPT-2: learned positions; Llama: RoPE inputs)."""
    path = gpt2_dir if kind == "gpt2" else llama_dir
    new, old = make_lm(path), make_lm(path)
    try:
        new.prefill(PROMPT, cache_len=64)
        ref = OldDecode(old, 64)
        for tok in CONT:
            assert np.array_equal(new.decode(tok), ref.step(tok)), f"decode at position {new.pos - 1}"
    finally:
        new.close()
        old.close()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_decode_steps_padding_columns_are_equal_at_every_layer(gpt2_dir, llama_dir, kind):
    """The padding columns of a one-token step get equal inputs and the same attention, so
    every layer's keys, values and the final hidden state hold one padding column repeated
    (the sim then computes each product's padding once): 2 distinct columns, not W."""
    lm = make_lm(gpt2_dir if kind == "gpt2" else llama_dir)
    try:
        lm.prefill(PROMPT, cache_len=64)
        w = lm.fe.width
        for tok in CONT[:3]:
            o = lm._decode_block(tok)
            blocks = [o["h"].transpose(0, 3, 1, 2)] + [o[f"L{i}_{kv}"].transpose(0, 2, 1, 3)
                                                      for i in range(lm.cfg.n_layer) for kv in "kv"]
            for blk in blocks:  # positions first: [1, W, ...]
                assert np.isfinite(blk).all()
                pad = blk[:, 1:].view(np.uint16 if blk.dtype == np.float16 else np.uint32)
                assert (pad == pad[:, :1]).all(), f"padding columns differ at position {lm.pos - 1}"
                assert not np.array_equal(blk[:, 0], blk[:, 1])
            assert blocks[0].shape[1] == w
    finally:
        lm.close()


def test_a_new_generation_starts_from_its_own_prompt(llama_dir):
    """The first step of a generation writes its prompt's rows and zeroes the rest of the cache:
    nothing an earlier generation left in the decode program reaches it (here rows of inf, which
    a masked position would still turn into NaN through 0 * inf), so the tokens equal a fresh
    model's."""
    lm, fresh = make_lm(llama_dir), make_lm(llama_dir)
    try:
        lm.generate(PROMPT + CONT, max_new_tokens=12)  # a cache of 64 positions
        prog, cfg = decode_program(lm, 64), lm.cfg
        for i in range(cfg.n_layer):
            prog.write_input_slice(f"L{i}_vc", np.full((1, cfg.n_kv_head, 60, cfg.head_dim), np.inf, np.float16),
                                   axis=2, start=4)
        want = fresh.generate(PROMPT[:3], max_new_tokens=12)
        assert lm.generate(PROMPT[:3], max_new_tokens=12) == want
    finally:
        lm.close()
        fresh.close()


def test_bytes_per_decode_step_do_not_grow_with_the_cache(llama_dir):
    cfg = None
    per_step, old_per_step = {}, {}
    for t in (64, 256):
        lm, old_lm = make_lm(llama_dir), make_lm(llama_dir)
        try:
            cfg, w = lm.cfg, lm.fe.width
            lm.prefill(PROMPT, cache_len=t)
            lm.decode(CONT[0])  # the first step writes the prompt's rows
            prog = decode_program(lm, t)
            seen = []
            for tok in CONT[1:4]:
                before = io_counts(prog)
                lm.decode(tok)
                seen.append({k: v - before[k] for k, v in io_counts(prog).items()})
            assert seen[0] == seen[1] == seen[2]
            per_step[t] = seen[0]
            # by hand: x (fp32), cos and sin (fp16) in; each layer's new K and V row and the mask's
            # column into every surface that holds them; h (fp32) and each layer's K and V block out
            rows = sum(consumers(prog, f"L{i}_{kv}c") for i in range(cfg.n_layer) for kv in "kv")
            assert seen[0]["host_in_bytes"] == (cfg.d_model * w * 4 + 2 * cfg.head_dim * w * 2
                                                + rows * cfg.n_kv_head * cfg.head_dim * 2
                                                + consumers(prog, "mask") * w * 2)
            assert seen[0]["host_out_bytes"] == cfg.d_model * w * 4 + cfg.n_layer * 2 * cfg.n_kv_head * w * cfg.head_dim * 2
            ref = OldDecode(old_lm, t)
            ref.step(CONT[0])
            before = io_counts(ref.prog)
            ref.step(CONT[1])
            old_per_step[t] = {k: v - before[k] for k, v in io_counts(ref.prog).items()}
        finally:
            lm.close()
            old_lm.close()
    assert cfg is not None
    assert per_step[64] == per_step[256]
    # the old path wrote the whole cache and mask every step
    grown = (256 - 64) * (cfg.n_layer * 2 * cfg.n_kv_head * cfg.head_dim * 2 + w * 2)
    assert old_per_step[256]["host_in_bytes"] - old_per_step[64]["host_in_bytes"] == grown
    assert old_per_step[64]["host_in_bytes"] > per_step[64]["host_in_bytes"]


def test_the_interpreter_backend_keeps_the_cache_the_same_way(llama_dir):
    new, old = make_lm(llama_dir, backend="interp"), make_lm(llama_dir, backend="interp")
    try:
        new.prefill(PROMPT, cache_len=64)
        ref = OldDecode(old, 64)
        for tok in CONT[:3]:
            assert np.array_equal(new.decode(tok), ref.step(tok))
    finally:
        new.close()
        old.close()
