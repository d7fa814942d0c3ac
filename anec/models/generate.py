"""Text generation on ANE programs: prefill, KV-cache decode, sampling.

Flow for a prompt of n tokens and N new tokens, one program call per step:

1. *Prefill* runs the prompt through ``prefill_s{S}`` (the whole layer stack)
   with S the smallest bucket >= n (the prompt zero-padded on the right; the
   causal mask keeps padding out of real positions). It returns every layer's
   keys and values (``L{i}_k``, ``L{i}_v``), which go into the host KV cache.
2. *Decode* feeds one token at a time in column 0 of a W-wide block (W = the
   smallest width whose surface reaches the ANE minimum, 16 for GPT-2 small)
   through ``decode_w{W}_t{T}``: every layer's cache of T past positions is
   an input (``L{i}_kc``, ``L{i}_vc``; a mask hides the unused tail), the new
   keys/values come back as outputs. The 15 padding columns are made equal:
   zero ``x``, the token's ``cos``/``sin``, and a new-block mask (``mask_new``,
   :func:`~anec.models.layout.step_mask`) under which each sees column 0 alone
   (as column 0 does), so every layer's product has 2 distinct columns and the
   sim computes the padding once. The cache stays put: those inputs are
   *state* of the decode program (docs/runtime.md, "State inputs"). The first
   decode step of a generation writes the prompt's rows (the rest zero) and the
   masks into the program once; every step after that passes only the token's
   block (``x``, and ``cos``/``sin`` for RoPE) and writes, in place, its new
   keys/values (one row per layer) and the one mask column that opens its
   position, so the bytes a step moves do not grow with T. T is one bucket
   chosen per generation (>= n + N - 1), so a generation compiles each program
   once.
3. The LM head (``lm_head_s{W}``) turns the last hidden column into logits,
   returned in vocabulary chunks within the target's conv channel limit (fp16);
   :func:`~anec.models.sampling.sample_chunks` picks the token from the chunks
   where they are (greedy, or temperature + top-k with a seeded numpy
   generator), so a 152k vocabulary is never one fp32 vector.

The compiler cuts ``prefill_s{S}`` and ``decode_w{W}_t{T}`` into pipelines of
ANE programs; the runtime runs each pipeline as one call. Programs are built,
compiled and loaded on first use and cached by name
(:class:`~anec.models.programs.ProgramCache`), so later generations with the
same buckets compile nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from anec.ir.graph import Graph
from anec.models.buckets import head_channel_limit, pick_bucket, vocab_chunks
from anec.models.common import ModelError
from anec.models.layout import MASK_NEG, from_bc1s, step_mask, to_bc1s
from anec.models.programs import ProgramCache
from anec.models.progress import Progress
from anec.models.decoder import DecoderFrontend
from anec.models.lora import LoraAdapter, LoraSlot, apply_lora
from anec.models.sampling import sample_chunks


def sample(logits: np.ndarray, temperature: float = 0.0, top_k: int = 0,
           rng: np.random.Generator | None = None) -> int:
    """Next token from ``logits``: argmax when ``temperature <= 0``, else softmax
    of ``logits / temperature`` restricted to the ``top_k`` largest (0 = all): the vector
    as one chunk of :func:`~anec.models.sampling.sample_chunks`."""
    return sample_chunks([np.asarray(logits).reshape(-1)], temperature, top_k, rng)


class KVCache:
    """A generation's KV cache of ``t`` positions: it lives in the decode program's cache
    inputs (``L{i}_kc``, ``L{i}_vc`` ``[1, KV, t, D]``), not on the host.

    Until the first decode step the prompt's rows wait here (``prompt``: per layer the
    ``[1, KV, n, D]`` keys and values prefill returned); that step writes them into the
    program, with the rest of the cache zeroed, and drops them (``program`` then names the
    program that holds the cache). The host keeps no copy: a generation's bucket is fixed,
    so no other program ever needs the rows, and a new generation starts from its own
    prefill."""

    def __init__(self, t: int, prompt: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.t = t
        self.prompt: list[tuple[np.ndarray, np.ndarray]] | None = prompt
        self.program: str | None = None

    def install(self, prog: Any, name: str, pos: int, width: int) -> None:
        """Write the prompt's rows (the rest zero), the mask of position ``pos`` and the
        one-token step's new-block mask (:func:`~anec.models.layout.step_mask`) into ``prog``."""
        assert self.prompt is not None
        for i, (k, v) in enumerate(self.prompt):
            for key, rows in ((f"L{i}_kc", k), (f"L{i}_vc", v)):
                whole = np.zeros(rows.shape[:2] + (self.t, rows.shape[3]), np.float16)
                whole[:, :, :rows.shape[2], :] = rows
                prog.write_input(key, whole)
        mask = np.full((1, 1, width, self.t), MASK_NEG, np.float16)
        mask[..., :pos] = 0
        prog.write_input("mask", mask)
        prog.write_input("mask_new", step_mask(width))
        self.prompt, self.program = None, name


@dataclass
class LoraSpec:
    """Which projections take adapters as inputs, and the programs' LoRA rank."""

    targets: tuple[str, ...]
    rank: int


class CausalLM:
    """A decoder-only model running as ANE programs (or in the reference interpreter).

    ``backend`` is ``"sim"``, ``"ane"``, ``"auto"`` (the runtime's choice) or
    ``"interp"`` (no compiler: the reference interpreter in fp16 mode).
    """

    def __init__(self, frontend: DecoderFrontend, backend: str = "auto", target: str | None = None,
                 progress: Progress | None = None, lora: LoraSpec | None = None,
                 cache_dir: str | None = None) -> None:
        self.fe = frontend
        self.cfg = frontend.cfg
        self.progress = progress or Progress(False)
        self.lora = lora
        self.adapter: LoraAdapter | None = None
        self._lora_inputs: dict[str, dict[str, np.ndarray]] = {}
        transform = None
        if lora is not None:
            transform = lambda g: apply_lora(g, lora.targets, lora.rank)  # noqa: E731
        self.programs = ProgramCache(frontend.weight, backend=backend, target=target, cache_dir=cache_dir,
                                     transform=transform, release=frontend.release_pages)
        self.cache: KVCache | None = None
        self.pos = 0
        self.head_limit = head_channel_limit(target)
        """The LM head's chunk size: the target's conv channel limit (ANE-CONV-CHANNELS)."""
        self._head_outputs = [f"logits_c{i}" for i in range(len(vocab_chunks(self.cfg.vocab, self.head_limit)))]

    # ---- adapters ----------------------------------------------------------------------
    def set_adapter(self, adapter: LoraAdapter | None) -> None:
        """Use ``adapter`` from the next evaluation on (None: the base model).

        Only program inputs change: nothing is compiled or reloaded."""
        if adapter is not None:
            if self.lora is None:
                raise ModelError("this model was built without LoRA inputs",
                                 hint="create it with lora=LoraSpec(targets, rank)")
            adapter.check_model(self.fe)
            adapter.check_targets(self.lora.targets, self.lora.rank)
        self.adapter = adapter
        self._lora_inputs.clear()

    def _adapter_inputs(self, name: str) -> dict[str, np.ndarray]:
        slots: list[LoraSlot] = self.programs.extras.get(name) or []
        if not slots:
            return {}
        cached = self._lora_inputs.get(name)
        if cached is None:
            cached = {}
            for s in slots:
                if self.adapter is None:
                    a = np.zeros((1, 1, s.rank, s.cin), np.float16)
                    b = np.zeros((1, 1, s.cout, s.rank), np.float16)
                else:
                    a, b = self.adapter.inputs_for(s)
                cached[s.a_input], cached[s.b_input] = a, b
            self._lora_inputs[name] = cached
        return cached

    # ---- programs ----------------------------------------------------------------------
    def _run(self, name: str, **inputs: Any) -> dict[str, np.ndarray]:
        prog = self.programs.get(name, lambda: self._program(name))
        return prog(**inputs, **self._adapter_inputs(name))

    def _program(self, name: str) -> Graph:
        return self.fe.program(name, self.head_limit)

    def program_names(self, prompt_len: int, cache_len: int | None) -> list[str]:
        """Programs a prefill of ``prompt_len`` (and decode with a ``cache_len`` cache) uses."""
        w = self.fe.width
        names = [self.fe.prefill_name(pick_bucket(prompt_len, self.fe.buckets, "prompt"))]
        if cache_len is not None:
            names.append(self.fe.decode_name(w, cache_len))
        names.append(self.fe.lm_head_name(w))
        return names

    def compile(self, names: Iterable[str]) -> None:
        """Build, compile and load ``names`` now (with a progress bar)."""
        self.programs.get_all(names, self._program, self.progress)

    # ---- forward ---------------------------------------------------------------------------
    def _check_ids(self, ids: Any) -> np.ndarray:
        ids = np.asarray(list(ids), dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ModelError("the prompt is empty", hint="give at least one token")
        if ids.min() < 0 or ids.max() >= self.cfg.vocab:
            raise ModelError(f"token ids must be in [0, {self.cfg.vocab})")
        return ids

    def _prefill_hidden(self, ids: np.ndarray, cache_len: int) -> tuple[np.ndarray, int]:
        n = ids.size
        s = pick_bucket(n, self.fe.buckets, "prompt")
        self.cache = None
        x = to_bc1s(self.fe.embed(ids, np.arange(n)), s)
        extra = self.fe.position_inputs(np.arange(s), s)
        o = self._run(self.fe.prefill_name(s), x=x, **extra)
        self.cache = KVCache(cache_len, [(o[f"L{i}_k"][:, :, :n, :].copy(), o[f"L{i}_v"][:, :, :n, :].copy())
                                         for i in range(self.cfg.n_layer)])
        self.pos = n
        return o["h"], s

    def prefill(self, ids: Iterable[int], cache_len: int | None = None) -> np.ndarray:
        """Run the prompt, fill the KV cache; returns the last position's logits ``[vocab]``
        (fp32; :meth:`generate` reads the head's chunks instead)."""
        return np.concatenate(self._prefill_chunks(ids, cache_len), dtype=np.float32)

    def _prefill_chunks(self, ids: Iterable[int], cache_len: int | None) -> list[np.ndarray]:
        ids = self._check_ids(ids)
        cache_len = cache_len or pick_bucket(ids.size, self.fe.buckets)
        if cache_len < ids.size:
            raise ModelError(f"a KV cache of {cache_len} positions cannot hold a prompt of {ids.size}")
        x, _ = self._prefill_hidden(ids, cache_len)
        return self._head_column(x[:, :, :, ids.size - 1])

    def check_ranges(self, ids: Iterable[int]) -> list:
        """The fp16 range analysis (:func:`anec.ranges.check_ranges`) of the prefill program on
        these token ids: a report whose ``findings`` name each node that overflows fp16 or
        loses bits on this prompt (the base model: LoRA inputs are not part of it)."""
        from anec.ir.builder import Builder
        from anec.ranges import check_ranges
        from anec.weight_store import WeightStore

        ids = self._check_ids(ids)
        s = pick_bucket(ids.size, self.fe.buckets, "prompt")
        feed = {"x": to_bc1s(self.fe.embed(ids, np.arange(ids.size)), s),
                **self.fe.position_inputs(np.arange(s), s)}
        graph = self.fe.program(self.fe.prefill_name(s))
        store = WeightStore(self.programs.weights_for(graph), source=f"<{graph.name} weights>")
        return check_ranges(Builder.module(graph), feed, store, funcs=[graph.name])

    def logits(self, ids: Iterable[int]) -> np.ndarray:
        """Logits ``[n, vocab]`` for every prompt position (prefill + the LM head at the prompt bucket)."""
        ids = self._check_ids(ids)
        x, s = self._prefill_hidden(ids, pick_bucket(ids.size, self.fe.buckets))
        out = self._run(self.fe.lm_head_name(s), x=x)
        return np.concatenate([from_bc1s(out[n], ids.size) for n in self._head_outputs], axis=1,
                              dtype=np.float32)

    def _head_column(self, col: np.ndarray) -> list[np.ndarray]:
        """The LM head on one hidden column: its logits as views of the head's chunk outputs
        (column 0 of each ``[1, V_i, 1, W]``), in vocabulary order, nothing copied."""
        w = self.fe.width
        x = np.zeros((1, self.cfg.d_model, 1, w), np.float32)
        x[:, :, :, 0] = col
        out = self._run(self.fe.lm_head_name(w), x=x)
        return [out[n][0, :, 0, 0] for n in self._head_outputs]

    def decode(self, token: int) -> np.ndarray:
        """Feed one token at the next position; returns its logits ``[vocab]`` (fp32;
        :meth:`generate` reads the head's chunks instead)."""
        return np.concatenate(self._decode_chunks(token), dtype=np.float32)

    def _decode_chunks(self, token: int) -> list[np.ndarray]:
        return self._head_column(self._decode_block(token)["h"][:, :, :, 0])

    def _decode_block(self, token: int) -> dict[str, np.ndarray]:
        """Run the decode program on ``token`` at the next position and advance: its outputs
        (the token's hidden column and keys/values in column 0, the padding after it)."""
        if self.cache is None:
            raise ModelError("decode needs a prefill first")
        pos, w, t = self.pos, self.fe.width, self.cache.t
        if pos >= t:
            raise ModelError(f"the KV cache holds {t} positions; position {pos} does not fit")
        tok = self._check_ids([token])
        name = self.fe.decode_name(w, t)
        prog = self.programs.get(name, lambda: self._program(name))
        if self.cache.program != name:  # this generation's first step: the prompt's rows go in once
            self.cache.install(prog, name, pos, w)
        # padding columns get equal inputs (zero x, the token's position) and, through the
        # step mask, the same attention, so every layer computes them as one column
        x = to_bc1s(self.fe.embed(tok, np.array([pos])), w)
        extra = self.fe.position_inputs(np.full(w, pos), w)
        o = prog(x=x, **extra, **self._adapter_inputs(name))  # the cache and the masks stay in the program
        # this position's keys and values, and the mask column that opens it to the next steps
        for i in range(self.cfg.n_layer):
            prog.write_input_slice(f"L{i}_kc", o[f"L{i}_k"][:, :, :1, :], axis=2, start=pos)
            prog.write_input_slice(f"L{i}_vc", o[f"L{i}_v"][:, :, :1, :], axis=2, start=pos)
        prog.write_input_slice("mask", np.zeros((1, 1, w, 1), np.float16), axis=3, start=pos)
        self.pos = pos + 1
        return o

    def generate(self, ids: Iterable[int], max_new_tokens: int = 32, temperature: float = 0.0,
                 top_k: int = 0, seed: int | None = 0, eos_id: int | None = None,
                 on_token: Callable[[int], None] | None = None) -> list[int]:
        """Generate up to ``max_new_tokens`` after ``ids``; returns the new tokens."""
        ids = self._check_ids(ids)
        if max_new_tokens < 1:
            raise ModelError("max_new_tokens must be >= 1")
        total = ids.size + max_new_tokens
        if total > self.cfg.max_pos:
            raise ModelError(f"prompt ({ids.size}) + new tokens ({max_new_tokens}) exceed the model's "
                             f"{self.cfg.max_pos} positions")
        cache_len = pick_bucket(total - 1, self.fe.buckets, "context")
        self.compile(self.program_names(ids.size, cache_len if max_new_tokens > 1 else None))
        rng = np.random.default_rng(seed)
        self.progress.start("generate", max_new_tokens)
        out: list[int] = []
        logits = self._prefill_chunks(ids, cache_len)
        while True:
            tok = sample_chunks(logits, temperature, top_k, rng)
            del logits  # this step's head outputs go before the next step's arrive
            out.append(tok)
            self.progress.step()
            if on_token is not None:
                on_token(tok)
            if len(out) >= max_new_tokens or (eos_id is not None and tok == eos_id):
                break
            logits = self._decode_chunks(tok)
        self.progress.finish()
        return out

    def stats(self) -> dict[str, Any]:
        return self.programs.stats()

    def close(self) -> None:
        self.programs.close()


def load_causal_lm(checkpoint: str, backend: str = "auto", target: str | None = None,
                   progress: Progress | None = None, lora: LoraSpec | None = None) -> CausalLM:
    """A :class:`CausalLM` for a GPT-2 or Llama-family checkpoint directory."""
    from anec.models.buckets import target_limits
    from anec.models.hf import load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    _, min_surface = target_limits(target)
    fe = decoder_frontend(ckpt, min_surface)
    fe.check_tensors()
    return CausalLM(fe, backend=backend, target=target, progress=progress, lora=lora)


def decoder_frontend(ckpt: Any, min_surface: int | None = None) -> DecoderFrontend:
    """The frontend class for a checkpoint's ``model_type``."""
    kind = ckpt.model_type
    if kind == "gpt2":
        from anec.models.gpt2 import GPT2

        return GPT2(ckpt, min_surface)
    if kind in ("llama", "mistral"):
        from anec.models.llama import Llama

        return Llama(ckpt, min_surface)
    raise ModelError(f"{ckpt.config_file}: model_type: model type '{kind}' is not a supported decoder",
                     hint="supported: gpt2, llama (Stories110M, TinyLlama and other Llama-family checkpoints)")
