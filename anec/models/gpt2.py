"""GPT-2 frontend: Hugging Face GPT-2 checkpoints as anec programs.

Per layer: LayerNorm, the fused ``c_attn`` projection split into q/k/v,
causal attention over learned positions, ``c_proj``; then LayerNorm, ``c_fc``,
GELU (tanh form: GPT-2's ``gelu_new``), ``c_proj``. The LM head is tied to
the token embedding ``wte`` and runs on the ANE as a 1x1 conv with vocab
output channels; legalize chunks it (50257 > 16384 channels on GPT-2 small).

Weight layout: GPT-2 stores its linear layers as ``Conv1D`` with weight
``[in, out]``; the IR declares convs ``[out, in, 1, 1]``, so export
transposes them. Keys stay the checkpoint's keys (``transformer.h.0.attn.c_attn.weight``).
Host side: ``wte[ids] + wpe[positions]``.
"""

from __future__ import annotations

import re

import numpy as np

from anec.ir.nodes import Value
from anec.models.blocks import ModelBuilder
from anec.models.common import ModelError
from anec.models.decoder import DecoderConfig, DecoderFrontend
from anec.models.config import MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, Fields, TensorSpec, check_tensors
from anec.models.config import check_layer_bound
from anec.models.hf import Checkpoint

_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh", "gelu": "exact"}


_LAYER = re.compile(r"(?:transformer\.)?h\.(\d+)\.")
_IGNORED = (re.compile(r"(?:transformer\.)?h\.\d+\.attn\.(?:masked_)?bias"),)  # old checkpoints' mask buffers


def gpt2_config(config: dict, file: str = "config.json") -> DecoderConfig:
    """The checked shape of a GPT-2 model from its ``config.json`` object."""
    f = Fields(config, file)
    d = f.int("n_embd", "hidden_size")
    h = f.int("n_head", "num_attention_heads", hi=MAX_HEADS)
    if d % h:
        name = f.pick(("n_head", "num_attention_heads"))[0]
        raise f.fail(name, f"{h} heads do not divide the hidden size {d}")
    if f.bool("scale_attn_by_inverse_layer_idx") or f.bool("add_cross_attention"):
        raise ModelError(f"{file}: this GPT-2 variant (scale_attn_by_inverse_layer_idx or add_cross_attention) "
                         "is not supported")
    return DecoderConfig(
        n_layer=f.int("n_layer", "num_hidden_layers", hi=MAX_LAYERS),
        d_model=d, n_head=h, n_kv_head=h, head_dim=d // h,
        d_ffn=f.int("n_inner", default=4 * d),
        vocab=f.int("vocab_size", hi=MAX_VOCAB),
        max_pos=f.int("n_positions", "max_position_embeddings", hi=MAX_POSITIONS),
        eps=f.float("layer_norm_epsilon", default=1e-5, hi=1.0),
    )


class GPT2(DecoderFrontend):
    """GPT-2 programs and host glue for one checkpoint."""

    kind = "gpt2"

    def __init__(self, ckpt: Checkpoint, min_surface: int | None = None) -> None:
        super().__init__(ckpt, gpt2_config(ckpt.config, ckpt.config_file), min_surface)
        act = Fields(ckpt.config, ckpt.config_file).str("activation_function", "gelu_new", _GELU, "GPT-2 activation")
        self.gelu_mode = _GELU[act]
        self.prefix = "transformer." if "transformer.wte.weight" in ckpt else ""
        ckpt.find(self.prefix + "wte.weight")
        check_layer_bound(ckpt, _LAYER, self.cfg.n_layer, self._layer_field())

    def _layer_field(self) -> str:
        return Fields(self.ckpt.config).pick(("n_layer", "num_hidden_layers"))[0]

    def tensor_spec(self) -> TensorSpec:
        """Every tensor the model reads, with its shape as stored (Conv1D weights ``[in, out]``)."""
        c, k = self.cfg, self._k
        d, f = c.d_model, c.d_ffn
        shapes = {k("wte.weight"): (c.vocab, d), k("wpe.weight"): (c.max_pos, d),
                  k("ln_f.weight"): (d,), k("ln_f.bias"): (d,)}
        for i in range(c.n_layer):
            p = f"h.{i}."
            shapes |= {
                k(p + "ln_1.weight"): (d,), k(p + "ln_1.bias"): (d,),
                k(p + "ln_2.weight"): (d,), k(p + "ln_2.bias"): (d,),
                k(p + "attn.c_attn.weight"): (d, 3 * d), k(p + "attn.c_attn.bias"): (3 * d,),
                k(p + "attn.c_proj.weight"): (d, d), k(p + "attn.c_proj.bias"): (d,),
                k(p + "mlp.c_fc.weight"): (d, f), k(p + "mlp.c_fc.bias"): (f,),
                k(p + "mlp.c_proj.weight"): (f, d), k(p + "mlp.c_proj.bias"): (d,),
            }
        ignored = _IGNORED
        if "lm_head.weight" in self.ckpt and self.ckpt.shape("lm_head.weight") == (c.vocab, d):
            ignored += (re.compile(r"lm_head\.weight"),)  # the tied head, saved twice by some versions
        return TensorSpec(shapes, _LAYER, c.n_layer, self._layer_field(), ignored)

    def check_tensors(self) -> None:
        """The checkpoint holds exactly the tensors this config reads (CheckpointError otherwise)."""
        check_tensors(self.ckpt, self.tensor_spec, _LAYER, self.cfg.n_layer, self._layer_field())

    def linear_shape(self, key: str) -> tuple[int, int] | None:
        """``(out, in)`` of the projection whose weight is ``key`` (None if it is none)."""
        if not key.endswith(_CONV1D) or key not in self.ckpt:
            return None
        cin, cout = self.ckpt.shape(key)
        return cout, cin

    def _k(self, key: str) -> str:
        return self.prefix + key

    def _layout(self, key: str, arr: np.ndarray) -> np.ndarray:
        if key.endswith(_CONV1D):
            arr = arr.T  # Conv1D [in, out] -> [out, in]
        return super()._layout(key, arr)

    def embed(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        ids, positions = np.asarray(ids), np.asarray(positions)
        if ids.size and (ids.min() < 0 or ids.max() >= self.cfg.vocab):
            raise ModelError(f"token ids must be in [0, {self.cfg.vocab})")
        if positions.size and positions.max() >= self.cfg.max_pos:
            raise ModelError(f"position {int(positions.max())} exceeds the model's {self.cfg.max_pos} positions")
        # only the rows looked up are read from the memory-mapped tables
        return (self.ckpt.rows(self._k("wte.weight"), ids)
                + self.ckpt.rows(self._k("wpe.weight"), positions)).astype(np.float32)

    # ---- hooks
    def _norm(self, b: ModelBuilder, x: Value, keys: tuple[str, str | None], name: str) -> Value:
        return b.layer_norm(x, keys[0], keys[1], self.cfg.eps, name)

    def _attn_norm_keys(self, layer: int) -> tuple[str, str | None]:
        return self._k(f"h.{layer}.ln_1.weight"), self._k(f"h.{layer}.ln_1.bias")

    def _mlp_norm_keys(self, layer: int) -> tuple[str, str | None]:
        return self._k(f"h.{layer}.ln_2.weight"), self._k(f"h.{layer}.ln_2.bias")

    def _final_norm_keys(self) -> tuple[str, str | None]:
        return self._k("ln_f.weight"), self._k("ln_f.bias")

    def _lm_head_key(self) -> str:
        return self._k("wte.weight")

    def _qkv(self, b: ModelBuilder, n: Value, layer: int) -> tuple[Value, Value, Value]:
        d = self.cfg.d_model
        p = self._k(f"h.{layer}.attn.c_attn")
        qkv = b.linear(n, f"{p}.weight", 3 * d, f"{p}.bias", "qkv")
        q, k, v = b.split(qkv, axis=1, sizes=[d, d, d], names=["q", "kp", "vp"])
        return q, k, v

    def _out_proj(self, b: ModelBuilder, ctx: Value, layer: int) -> Value:
        p = self._k(f"h.{layer}.attn.c_proj")
        return b.linear(ctx, f"{p}.weight", self.cfg.d_model, f"{p}.bias", "o")

    def _mlp_body(self, b: ModelBuilder, n: Value, layer: int) -> Value:
        p = self._k(f"h.{layer}.mlp")
        h = b.linear(n, f"{p}.c_fc.weight", self.cfg.d_ffn, f"{p}.c_fc.bias", "fc")
        a = b.gelu(h, mode=self.gelu_mode, name="act")
        return b.linear(a, f"{p}.c_proj.weight", self.cfg.d_model, f"{p}.c_proj.bias", "proj")
