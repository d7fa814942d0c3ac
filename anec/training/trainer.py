"""Training a decoder checkpoint on the ANE: forward and backward programs, host optimizer.

One step for a batch of B sequences::

    host    rows = embed(ids)                          (embedding lookup)
    ANE     logits = forward(rows)                     (one program call per sequence)
    host    loss, dlogits = cross_entropy(logits)      (fp64 softmax, mean over tokens)
    ANE     drows, dW = backward(rows, dlogits * s)    (s: the dynamic loss scale)
    host    dW /= s; embedding gradient from drows; skip the step on Inf/NaN;
            clip; AdamW on fp32 master weights; fp16 range check
    ANE     new weights into both programs             (a surface write per weight)

The backward func is derived from the forward one by :mod:`anec.autodiff`
(weight gradients computed on the device: the backward program returns them).
Both funcs go through the ordinary compiler (legalize cuts them into pipelines
of programs) and are compiled once: weights are program inputs
(``weights="inputs"``, the default), so an optimizer step writes input
surfaces and never compiles. The process compile budget is spent once, at the
first step, however long the run. ``weights="baked"`` bakes them as
BLOBFILEs and reloads by the runtime's verified strategy; it is accepted only
when every program reloads by data patch (no compile per step), which the
public evidence establishes only for single-weight programs.

LoRA (``lora_rank > 0``): the base weights stay baked; the adapters of the
target projections are program inputs (:func:`anec.models.lora.apply_lora`),
their gradients are input gradients, and a step changes inputs only. The
adapters save in PEFT's format.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from anec.autodiff import Backward, grad
from anec.diagnostics import TrainingError
from anec.ir.graph import Graph, Module
from anec.mil.manifest_types import Manifest
from anec.models.layout import from_bc1s, to_bc1s
from anec.training.graphs import (Layout, causal_lm_graph, cross_entropy_bc1s, embed, embed_adjoint,
                                  embedding_keys)
from anec.training.kernels import add_scaled, to_fp16
from anec.training.optim import FP16_MAX, AdamW, LossScaler, clip_factor, global_norm


def _fe_for(checkpoint: str | os.PathLike, target: str | None) -> Any:
    from anec.models.buckets import target_limits
    from anec.models.generate import decoder_frontend
    from anec.models.hf import load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    _, min_surface = target_limits(target)
    fe = decoder_frontend(ckpt, min_surface)
    fe.check_tensors()  # every tensor the model reads present, none left over, before anything is built
    return fe


class Trainer:
    """Train a GPT-2 or Llama-family checkpoint (see the module docstring).

    ``input_ids`` given to :meth:`gradients` and :meth:`step` are ``[B, T]``
    token ids with ``2 <= T <= seq_len + 1``: positions ``0..T-2`` predict
    tokens ``1..T-1`` (next-token cross-entropy, mean over the ``B * (T-1)``
    tokens, as transformers computes it with ``labels=input_ids``).
    """

    def __init__(self, checkpoint_dir: str | os.PathLike, *, backend: str = "auto", seq_len: int = 64,
                 batch_size: int = 1, lr: float = 3e-4, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, grad_clip: float = 1.0,
                 lora_rank: int = 0, lora_alpha: float | None = None,
                 lora_targets: Sequence[str] | None = None, activations: str = "recompute",
                 weights: str = "inputs", target: str | None = None, loss_scale: float = 2.0 ** 10,
                 weight_grads: str = "device", runtime: Any = None) -> None:
        if seq_len < 1:
            raise TrainingError(f"seq_len must be >= 1, got {seq_len}")
        if batch_size < 1:
            raise TrainingError(f"batch_size must be >= 1, got {batch_size}")
        if weights not in ("inputs", "baked"):
            raise TrainingError(f"unknown weights mode '{weights}'", hint="use inputs or baked")
        self.checkpoint_dir = Path(checkpoint_dir)
        self.fe = _fe_for(checkpoint_dir, target)
        self.seq_len, self.batch_size = int(seq_len), int(batch_size)
        self.backend, self.target, self.weights_mode = backend, target, weights
        self.grad_clip = float(grad_clip)
        self.opt = AdamW(lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=weight_decay)
        self.scaler = LossScaler(scale=float(loss_scale))
        self.last_loss = float("nan")
        self.step_index = 0
        self.history: list[dict[str, Any]] = []
        self.timings: dict[str, float] = {}
        self.lora_rank = int(lora_rank)
        self.roles = embedding_keys(self.fe)

        forward = causal_lm_graph(self.fe, self.seq_len, name="forward")
        ckpt = self.fe.ckpt
        ir_keys = sorted({n.attrs["weight"] for n in forward.nodes if n.op == "const" and "weight" in n.attrs})
        self.generated = [k for k in ir_keys if k.startswith("anec.")]
        self.layouts = {k: Layout(self.fe, k, ckpt.get(k).shape) for k in ir_keys if not k.startswith("anec.")}
        self.lora_slots: list[Any] = []
        self.params: dict[str, np.ndarray] = {}
        """fp32 master weights in checkpoint layout (LoRA: the adapters, PEFT shapes)."""
        if self.lora_rank > 0:
            self._setup_lora(forward, lora_targets, lora_alpha)
            self.trainable: list[str] = []
            wrt_inputs = [n for s in self.lora_slots for n in (s.a_input, s.b_input)]
            bw = grad(forward, weights=None, inputs=wrt_inputs, mode=activations)
        else:
            self.trainable = list(self.layouts)
            bw = grad(forward, weights=self.trainable, inputs=["x"], mode=activations,
                      weight_shapes={k: lay.ir_shape for k, lay in self.layouts.items()},
                      weight_grads=weight_grads)
        self.bw: Backward = bw
        if self.lora_rank == 0:  # every trainable IR tensor and the host tables
            for k in [*self.trainable, *self.roles.values()]:
                self.params.setdefault(k, ckpt.get_f32(k).copy())
        self.decay = {k: v.ndim >= 2 for k, v in self.params.items()}  # no decay for norms and biases
        self._programs: tuple[Any, Any] | None = None
        self._runtime = runtime
        self._own_runtime = runtime is None
        self._store: dict[str, np.ndarray] | None = None
        self._plan: tuple[dict[str, str], list[str]] | None = None
        self._grad_bufs: dict[str, np.ndarray] = {}
        self._half: dict[str, np.ndarray] | None = None

    # ---- LoRA ---------------------------------------------------------------------------
    def _setup_lora(self, forward: Graph, targets: Sequence[str] | None, alpha: float | None) -> None:
        from anec.models.lora import apply_lora

        if targets is None:
            targets = ["c_attn"] if self.fe.kind == "gpt2" else ["q_proj", "v_proj"]
        self.lora_slots = apply_lora(forward, targets, self.lora_rank)
        if not self.lora_slots:
            raise TrainingError(f"no projection matches the LoRA targets {list(targets)}",
                                hint="name projection modules, e.g. q_proj, v_proj (Llama) or c_attn (GPT-2)")
        self.lora_alpha = float(alpha if alpha is not None else self.lora_rank)
        rng = np.random.default_rng(0)
        self.lora_targets = list(targets)
        for sl in self.lora_slots:
            # PEFT's init and shapes: A [r, in] Kaiming-uniform, B [out, r] zero (starts as the base model)
            bound = 1.0 / math.sqrt(sl.cin)
            self.params[sl.a_input] = rng.uniform(-bound, bound, (sl.rank, sl.cin)).astype(np.float32)
            self.params[sl.b_input] = np.zeros((sl.cout, sl.rank), np.float32)

    # ---- programs -----------------------------------------------------------------------
    def _ir_store(self) -> dict[str, np.ndarray]:
        store = {k: self.fe.weight(k) for k in self.generated}
        for k, lay in self.layouts.items():
            src = self.params.get(k)
            store[k] = lay.to_ir(src) if src is not None else self.fe.weight(k)
        return store

    def _ensure_programs(self) -> None:
        if self._programs is not None or self.backend == "interp":
            if self._store is None:
                self._store = self._ir_store()
            return
        from anec.compiler import compile_module
        from anec.runtime import Runtime

        t0 = time.perf_counter()
        module = Module()
        module.add_func(self.bw.forward)
        module.add_func(self.bw.backward)
        as_inputs = list(self.trainable) if self.weights_mode == "inputs" and self.trainable else None
        kw: dict[str, Any] = {}
        if self.target is not None:
            kw["target"] = self.target
        res = compile_module(module, weights=self._ir_store(), weights_as_inputs=as_inputs, **kw)
        if self._runtime is None:
            self._runtime = Runtime(self.backend)
        fwd = self._runtime.load(res.artifacts[self.bw.forward.name])
        bwd = self._runtime.load(res.artifacts[self.bw.backward.name])
        self._programs = (fwd, bwd)
        if self.weights_mode == "baked" and self.trainable:
            for p in self._programs:
                for st in getattr(p, "stages", [p]):
                    info = st.reload_info
                    if st.manifest.weights and info["strategy"] != "data-patch":
                        raise TrainingError(
                            f"program '{st.name}' would recompile on every step ({info['why']})",
                            hint="train with weights='inputs' (the default): a step is then a surface write")
        self.timings["compile_s"] = time.perf_counter() - t0

    def _run(self, which: int, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.backend == "interp":
            from anec.ir.interp import interpret

            g = self.bw.forward if which == 0 else self.bw.backward
            store = dict(self._store or {})
            feed = dict(feed)
            for s in self.lora_slots:
                for n in (s.a_input, s.b_input):
                    if n in {v.name for v in g.inputs} and n not in feed:
                        feed[n] = self._lora_value(n)
            return interpret(g, feed, store, mode="fp16")
        assert self._programs is not None
        prog = self._programs[which]
        if self.lora_slots:
            feed = dict(feed)
            names = set(prog.input_names)
            for s in self.lora_slots:
                for n in (s.a_input, s.b_input):
                    if n in names:
                        feed[n] = self._lora_value(n)
        return prog(**feed)

    def _lora_value(self, name: str) -> np.ndarray:
        """Adapter ``name`` as the program input: ``[1, 1, r, in]`` / ``[1, 1, out, r]``, the
        scale alpha / r folded into B (as inference feeds PEFT adapters)."""
        arr = self.params[name]
        if any(name == sl.b_input for sl in self.lora_slots):
            arr = arr * np.float32(self.lora_alpha / self.lora_rank)
        return arr.reshape(1, 1, *arr.shape).astype(np.float16)

    def _position_feed(self) -> dict[str, np.ndarray]:
        return self.fe.position_inputs(np.arange(self.seq_len), self.seq_len)

    # ---- the public steps --------------------------------------------------------------------
    def _check_ids(self, input_ids: Any) -> np.ndarray:
        ids = np.asarray(input_ids)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise TrainingError(f"input_ids must be a [B, T] array of token ids, got {ids.dtype} {list(ids.shape)}")
        b, t = ids.shape
        if not 2 <= t <= self.seq_len + 1:
            raise TrainingError(f"sequences of {t} tokens do not fit: give 2..{self.seq_len + 1} "
                                f"(seq_len {self.seq_len} positions predict the next token)")
        if ids.size and (ids.min() < 0 or ids.max() >= self.fe.cfg.vocab):
            raise TrainingError(f"token ids must be in [0, {self.fe.cfg.vocab})")
        return ids.astype(np.int64)

    def gradients(self, input_ids: Any) -> dict[str, np.ndarray]:
        """Gradients of the mean next-token loss, keyed by checkpoint parameter name, in the
        checkpoint's shapes (fp32); LoRA mode: keyed by PEFT adapter key. Sets :attr:`last_loss`."""
        return self._gradients(input_ids, reuse=False)

    def _gradients(self, input_ids: Any, reuse: bool) -> dict[str, np.ndarray]:
        """:meth:`gradients`; ``reuse``: into the trainer's own buffers (overwritten by the next
        step), so that a step allocates no gradient memory."""
        ids = self._check_ids(input_ids)
        self._ensure_programs()
        s = self.seq_len
        scale = self.scaler.scale
        inv = np.float32(1.0 / scale)
        pos = self._position_feed()
        n_tokens = ids.shape[0] * (ids.shape[1] - 1)
        total = 0.0
        shapes = {k: lay.ir_shape for k, lay in self.layouts.items()}
        if self.lora_rank:
            grads = {k: np.zeros_like(v) for k, v in self.params.items()}
        else:  # embedding tables accumulate by row: zeros; the weights are written by their first gradient
            grads = {k: self._grad_buffer(k, reuse, zero=True) for k in self.roles.values() if k in self.params}
        direct, gathered = self._grad_plan()
        pending: list[Any] = []
        t_fwd = t_bwd = t_host = t_embed = t_loss = 0.0
        for row in ids:
            t0 = time.perf_counter()
            inp = np.zeros(s, np.int64)
            inp[: len(row) - 1] = row[:-1]
            tables = {k: self.params.get(k) if k in self.params else self.fe.ckpt.get_f32(k)
                      for k in self.roles.values()}
            x = to_bc1s(embed(tables, self.roles, inp), s)
            feed = {"x": x, **pos}
            t1 = time.perf_counter()
            t_embed += t1 - t0
            fout = self._run(0, feed)
            t2 = time.perf_counter()
            targets = np.zeros(s, np.int64)
            targets[: len(row) - 1] = row[1:]
            valid = np.zeros(s, bool)
            valid[: len(row) - 1] = True
            loss, dlog, _ = cross_entropy_bc1s(fout["logits"], targets, valid, scale / n_tokens)
            total += loss
            bfeed = {**feed, self.bw.cotangents["logits"]: dlog}
            for name in self.bw.saved:
                bfeed[name] = fout[name]
            t3 = time.perf_counter()
            t_loss += t3 - t2
            bout = self._run(1, bfeed)
            t4 = time.perf_counter()
            if self.lora_rank:
                for name, out in self.bw.input_grads.items():
                    g = np.asarray(bout[out], np.float32).reshape(grads[name].shape) * inv
                    if any(name == sl.b_input for sl in self.lora_slots):
                        g = g * np.float32(self.lora_alpha / self.lora_rank)
                    grads[name] += g
            else:
                for k, out in direct.items():
                    self._accumulate(grads, k, bout[out], inv, reuse)
                if gathered:
                    for k, g in self.bw.gather(bout, shapes, host=False, keys=gathered).items():
                        self._accumulate(grads, k, g, inv, reuse)
                te = time.perf_counter()  # a tied embedding table adds the rows' gradient after the head's
                dx = from_bc1s(np.asarray(bout[self.bw.input_grads["x"]], np.float32)) * inv
                embed_adjoint(grads, self.roles, inp[: len(row) - 1], dx[: len(row) - 1])
                t_embed += time.perf_counter() - te
                # (submitted after the scatter, so that it does not compete with the worker thread)
                if self.bw.host_grads:  # conv weight gradients in fp32 BLAS, while the device runs on
                    pending.append(_host_pool().submit(self.bw.gather, bout, shapes, False, True))
            t_fwd += t2 - t1
            t_bwd += t4 - t3
            t_host += (t1 - t0) + (t3 - t2) + (time.perf_counter() - t4)
        t5 = time.perf_counter()
        for fut in pending:
            for k, g in fut.result().items():
                self._accumulate(grads, k, g, inv, reuse)
        t_wait = time.perf_counter() - t5
        for k in self.params:  # parameters no output reaches
            if k not in grads:
                grads[k] = self._grad_buffer(k, reuse, zero=True)
        self.last_loss = total / n_tokens
        # host_s is the whole of the calling thread's host work; embed_s (gather and scatter of
        # the embedding rows) and loss_s (loss and its gradient) are parts of it, the rest is
        # gathering the weight gradients from the backward program's outputs
        self.timings.update(forward_s=t_fwd, backward_s=t_bwd, host_s=t_host, embed_s=t_embed, loss_s=t_loss,
                            grads_s=t_host - t_embed - t_loss, weight_grads_wait_s=t_wait)
        if self.lora_rank:
            return {self.peft_key(k): v for k, v in grads.items()}
        return {k: grads[k] for k in self.params}

    def _grad_plan(self) -> tuple[dict[str, str], list[str]]:
        """Device weight gradients as (key -> backward output read as it is, keys gathered): a key
        with one whole, unpermuted view in an identity layout is its output's elements in the
        checkpoint's order, added straight into the key's gradient."""
        if self._plan is None:
            views: dict[str, list[Any]] = {}
            for w in self.bw.weight_grads:
                views.setdefault(w.key, []).append(w)
            direct = {k: ws[0].output for k, ws in views.items()
                      if len(ws) == 1 and ws[0].perm is None and ws[0].slice is None and self.layouts[k].identity}
            self._plan = (direct, [k for k in views if k not in direct])
        return self._plan

    def _grad_buffer(self, k: str, reuse: bool, zero: bool = False) -> np.ndarray:
        shape = self.params[k].shape
        buf = self._grad_bufs.get(k) if reuse else None
        if buf is None:
            buf = np.zeros(shape, np.float32) if zero else np.empty(shape, np.float32)
            if reuse:
                self._grad_bufs[k] = buf
        elif zero:
            buf.fill(0.0)
        return buf

    def _accumulate(self, grads: dict[str, np.ndarray], k: str, g: np.ndarray, inv: np.float32, reuse: bool) -> None:
        """``grads[k] += to_checkpoint(g * inv)`` for ``g`` in the IR layout (fp16 or fp32), the
        first gradient of ``k`` written into its buffer (``0 + x``, as adding into zeros gives)."""
        dst = grads.get(k)
        first = dst is None
        if first:
            dst = grads[k] = self._grad_buffer(k, reuse)
        lay = self.layouts[k]
        if lay.identity and add_scaled(dst, g, inv, accumulate=not first):
            return
        t = lay.to_checkpoint(np.asarray(g, np.float32) * inv)
        if first:
            np.add(t, np.float32(0.0), out=dst)
        else:
            dst += t

    def step(self, input_ids: Any, lr: float | None = None) -> float:
        """One optimizer step on ``input_ids``; returns the loss (before the step). A step whose
        gradients are not finite, or whose new weights leave the fp16 range, is skipped (the
        loss scale halves) and changes nothing."""
        grads = self._gradients(input_ids, reuse=True)
        if self.lora_rank:
            grads = {self._param_of_peft(k): v for k, v in grads.items()}
        t0 = time.perf_counter()
        norm = global_norm(grads)  # Inf or NaN exactly when some gradient is
        finite = math.isfinite(norm)
        skipped = not finite
        tc = time.perf_counter()
        if finite:
            if not self.opt.step(self.params, grads, self.decay, lr=lr, grad_scale=clip_factor(norm, self.grad_clip),
                                 limit=FP16_MAX, half=self._half_buffers()):
                skipped = True
        else:
            norm = float("nan")
        t1 = time.perf_counter()
        self.scaler.update(not skipped)
        if not skipped:
            self._push_weights(self._half)
        t2 = time.perf_counter()
        # optimizer_s = clip_s (finiteness check and the gradients' norm) + AdamW (clipping, the
        # update, its fp16-range check and the new weights in fp16, one pass per tensor)
        self.timings.update(optimizer_s=t1 - t0, clip_s=tc - t0, reload_s=t2 - t1)
        self.step_index += 1
        self.history.append({"step": self.step_index, "loss": self.last_loss, "grad_norm": norm,
                             "loss_scale": self.scaler.scale, "skipped": skipped})
        return self.last_loss

    def _half_buffers(self) -> dict[str, np.ndarray] | None:
        """fp16 copies of the trainable weights, written by the optimizer step (None when no
        program takes them as they are)."""
        if self.lora_rank or self.backend == "interp" or not self.trainable:
            return None
        if self._half is None:
            self._half = {k: np.empty(self.params[k].shape, np.float16) for k in self.trainable}
        return self._half

    def _push_weights(self, half: dict[str, np.ndarray] | None = None) -> None:
        """The new weights into the programs: input surfaces (or a verified reload when baked).
        ``half``: the weights already in fp16 (the optimizer's output), else converted here."""
        if self.lora_rank:
            return  # adapters are inputs of every call
        if self.backend == "interp":
            self._store = self._ir_store()
            return
        if self._programs is None:
            return
        if half is None:
            half = {k: to_fp16(self.params[k]) for k in self.trainable}
        new = {k: self.layouts[k].to_ir(half[k]) for k in self.trainable}
        for p in self._programs:
            keys = _weight_keys(p)  # a program need not read every weight (saved activations)
            p.reload_weights({k: a for k, a in new.items() if k in keys})

    # ---- state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs, as live references (not copies): the step index, the fp32
        parameters, AdamW's moments, step count and hyper-parameters, the loss scaler and the
        gradient clip. :func:`anec.training.state.save_state` writes it to disk."""
        o, s = self.opt, self.scaler
        return {
            "step": self.step_index, "params": self.params, "grad_clip": self.grad_clip,
            "adam": {"lr": o.lr, "beta1": o.beta1, "beta2": o.beta2, "eps": o.eps,
                     "weight_decay": o.weight_decay, "step_count": o.step_count, "m": o.m, "v": o.v},
            "scaler": {"scale": s.scale, "good_steps": s.good_steps, "skipped": s.skipped,
                       "growth_interval": s.growth_interval},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state`` (the layout of :meth:`state_dict`; AdamW's hyper-parameters and
        the scaler's growth interval are the run's own and are not read). The caller has checked
        the values (:func:`anec.training.state.load_state` does). The arrays are copied, so
        two trainers never share one; the programs get the new weights at once."""
        adam, scaler = state["adam"], state["scaler"]

        def own(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
            return {k: np.array(a, np.float32) for k, a in arrays.items()}

        self.params.update(own(state["params"]))
        self.opt.m, self.opt.v = own(adam["m"]), own(adam["v"])
        self.opt.step_count = adam["step_count"]
        self.scaler.scale, self.scaler.good_steps = scaler["scale"], scaler["good_steps"]
        self.scaler.skipped = scaler["skipped"]
        self.step_index = state["step"]
        self._store = None
        if self._programs is not None:
            self._push_weights()

    # ---- saving -------------------------------------------------------------------------
    def peft_key(self, input_name: str) -> str:
        """The PEFT tensor name of a LoRA adapter input of the programs."""
        for s in self.lora_slots:
            if input_name in (s.a_input, s.b_input):
                part = "lora_A" if input_name == s.a_input else "lora_B"
                return f"base_model.model.{s.module}.{part}.weight"
        raise KeyError(input_name)

    def _param_of_peft(self, key: str) -> str:
        for s in self.lora_slots:
            for n in (s.a_input, s.b_input):
                if self.peft_key(n) == key:
                    return n
        raise KeyError(key)

    def save(self, directory: str | os.PathLike) -> Path:
        """A Hugging Face checkpoint (config, safetensors, tokenizer files) that transformers
        loads; in LoRA mode a PEFT adapter (adapter_config.json + adapter_model.safetensors).
        Written atomically."""
        from anec.training.state import save_hf, save_peft

        if self.lora_rank:
            return save_peft(self, directory)
        return save_hf(self, directory)

    def close(self) -> None:
        if self._programs is not None:
            for p in self._programs:
                p.close()
            self._programs = None
        if self._own_runtime and self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _weight_keys(prog: Any) -> set[str]:
    """The checkpoint keys a loaded program (or pipeline of programs) reads, by its manifest."""
    keys: set[str] = set()
    for p in [prog, *getattr(prog, "stages", [])]:
        m = p.manifest
        if m is not None:
            keys.update(w.key for w in m.weight_inputs)
            if isinstance(m, Manifest):  # a pipeline's weights are its stages'
                keys.update(w.key for w in m.weights)
    return keys


_POOL: Any = None


def _host_pool() -> Any:
    """One worker thread for host weight gradients (numpy's BLAS releases the GIL)."""
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="anec-wgrad")
    return _POOL


__all__ = ["Trainer", "TrainingError"]
