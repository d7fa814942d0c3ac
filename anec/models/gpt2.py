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

import numpy as np

from anec.ir.graph import Value
from anec.models.blocks import ModelBuilder
from anec.models.common import ModelError
from anec.models.decoder import DecoderConfig, DecoderFrontend
from anec.models.hf import Checkpoint, cfg_get

_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh", "gelu": "exact"}


def gpt2_config(config: dict) -> DecoderConfig:
    d = int(cfg_get(config, "n_embd", "hidden_size"))
    h = int(cfg_get(config, "n_head", "num_attention_heads"))
    if config.get("scale_attn_by_inverse_layer_idx") or config.get("add_cross_attention"):
        raise ModelError("this GPT-2 variant (inverse-layer attention scaling or cross attention) is not supported")
    return DecoderConfig(
        n_layer=int(cfg_get(config, "n_layer", "num_hidden_layers")),
        d_model=d, n_head=h, n_kv_head=h, head_dim=d // h,
        d_ffn=int(config.get("n_inner") or 4 * d),
        vocab=int(cfg_get(config, "vocab_size")),
        max_pos=int(cfg_get(config, "n_positions", "max_position_embeddings")),
        eps=float(cfg_get(config, "layer_norm_epsilon", default=1e-5)),
    )


class GPT2(DecoderFrontend):
    """GPT-2 programs and host glue for one checkpoint."""

    kind = "gpt2"

    def __init__(self, ckpt: Checkpoint, min_surface: int | None = None) -> None:
        super().__init__(ckpt, gpt2_config(ckpt.config), min_surface)
        act = ckpt.config.get("activation_function", "gelu_new")
        if act not in _GELU:
            raise ModelError(f"GPT-2 activation '{act}' is not supported", hint=f"supported: {', '.join(_GELU)}")
        self.gelu_mode = _GELU[act]
        self.prefix = "transformer." if "transformer.wte.weight" in ckpt else ""
        ckpt.find(self.prefix + "wte.weight")

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
        wte = self._table("wte.weight")
        wpe = self._table("wpe.weight")
        return (wte[ids] + wpe[positions]).astype(np.float32)

    def _table(self, name: str) -> np.ndarray:
        key = "host." + name
        if key not in self._cache:
            self._cache[key] = self.ckpt.get_f32(self._k(name))
        return self._cache[key]

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
