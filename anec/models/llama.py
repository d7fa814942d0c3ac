"""Llama-family frontend (Llama 2/3 shapes, Stories110M, TinyLlama).

Per layer: RMSNorm, q/k/v projections, rotary positions (RoPE), grouped-query
attention, o_proj; then RMSNorm and the SwiGLU MLP
``down(silu(gate(x)) * up(x))``. Linear weights ``[out, in]`` become convs
``[out, in, 1, 1]``; keys stay the checkpoint's
(``model.layers.0.self_attn.q_proj.weight``).

RoPE follows Hugging Face's rotate-half convention::

    q' = q * cos + rotate_half(q) * sin,   rotate_half([a, b]) = [-b, a]

per head, with ``cos``/``sin`` of ``position * theta ** (-2i / D)`` repeated
over both halves. ``rotate_half`` is a concat of two slices, and concat is
illegal on the ANE unless it feeds a conv. We write it instead as a constant
linear map: ``rotate_half(x) = P x`` with ``P [D, D]`` a permutation with signs
(``P[i, i + D/2] = -1``, ``P[i + D/2, i] = 1``), applied as a 1x1 conv over the
head dimension. To make that a conv over exactly D channels, the heads are
moved into a spatial axis first::

    [1, H*D, 1, S] -reshape-> [1, H, D, S] -transpose-> [1, D, H, S] -reshape-> [1, D, 1, H*S]
    r = conv1x1(x, P)                                      # rotate_half, exact (entries are +-1)
    q' = x * cos + r * sin                                 # cos/sin inputs [1, D, 1, S], broadcast over heads
    [1, D, H, S] -transpose(0, 2, 3, 1)-> [1, H, S, D]     # the attention layout

``P`` is one generated weight (``anec.rope.rotate_half.D``) shared by q and k of every layer;
the ``cos``/``sin`` tables are program inputs computed by the host for the
block's positions, so one decode program serves every position.

Grouped-query attention (fewer KV heads than query heads) never repeats K/V:
the G query heads sharing a KV head are reshaped into the rows of one matmul
(see :meth:`ModelBuilder.attention`).
"""

from __future__ import annotations

import re

import numpy as np

from anec.ir.nodes import Value
from anec.models.blocks import ModelBuilder
from anec.models.common import ModelError
from anec.models.decoder import DecoderConfig, DecoderFrontend
from anec.models.config import MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, Fields, TensorSpec, check_tensors
from anec.models.config import check_layer_bound, show
from anec.models.hf import Checkpoint


_LAYER = re.compile(r"model\.layers\.(\d+)\.")
_IGNORED = (re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq"),)  # older checkpoints' buffer


def llama_config(config: dict, file: str = "config.json") -> DecoderConfig:
    """The checked shape of a Llama-family model from its ``config.json`` object."""
    f = Fields(config, file)
    d = f.int("hidden_size", "dim")
    heads = ("num_attention_heads", "n_heads")
    h = f.int(*heads, hi=MAX_HEADS)
    kv = f.int("num_key_value_heads", default=h, hi=MAX_HEADS)
    if h % kv:
        raise f.fail("num_key_value_heads", f"{kv} KV heads do not divide the {h} attention heads")
    if config.get("head_dim") is None and d % h:
        raise f.fail(f.pick(heads)[0], f"{h} heads do not divide the hidden size {d}")
    head_dim = f.int("head_dim", default=d // h)
    if head_dim % 2:
        raise f.fail("head_dim" if "head_dim" in config else f.pick(heads)[0],
                     f"RoPE needs an even head dim, got {head_dim}")
    max_pos = f.int("max_position_embeddings", default=2048, hi=MAX_POSITIONS)
    # Mistral's sliding window equals full attention up to the window: cap the context there
    window = f.int("sliding_window", default=max_pos, hi=MAX_POSITIONS)
    return DecoderConfig(
        n_layer=f.int("num_hidden_layers", "n_layers", hi=MAX_LAYERS),
        d_model=d, n_head=h, n_kv_head=kv, head_dim=head_dim,
        d_ffn=f.int("intermediate_size"),
        vocab=f.int("vocab_size", hi=MAX_VOCAB),
        max_pos=min(max_pos, window),
        eps=f.float("rms_norm_eps", default=1e-6, hi=1.0),
    )


def rope_theta(config: dict, file: str = "config.json") -> float:
    """The RoPE base (a finite number > 0), rejecting scaled variants we do not implement."""
    f = Fields(config, file)
    for name in ("rope_scaling", "rope_parameters"):
        spec = config.get(name)
        if spec is None:
            continue
        if not isinstance(spec, dict):
            raise f.fail(name, f"{show(spec)} is not an object")
        kind = Fields(spec, f"{file}: {name}").str("rope_type", None) or \
            Fields(spec, f"{file}: {name}").str("type", None) or "default"
        if kind != "default":
            raise ModelError(f"{file}: {name}: RoPE scaling '{kind}' is not supported",
                             hint="only plain RoPE (rope_type default)")
    params = config.get("rope_parameters")
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return Fields(params, f"{file}: rope_parameters").float("rope_theta", hi=1e30)
    return f.float("rope_theta", default=10000.0, hi=1e30)


def rotate_half_matrix(d: int) -> np.ndarray:
    """``P [d, d]`` with ``P @ [a, b] = [-b, a]`` (halves of length d/2)."""
    h = d // 2
    p = np.zeros((d, d), np.float32)
    p[np.arange(h), np.arange(h) + h] = -1.0
    p[np.arange(h) + h, np.arange(h)] = 1.0
    return p


class Llama(DecoderFrontend):
    """Llama programs and host glue for one checkpoint."""

    kind = "llama"

    def __init__(self, ckpt: Checkpoint, min_surface: int | None = None) -> None:
        super().__init__(ckpt, llama_config(ckpt.config, ckpt.config_file), min_surface)
        f = Fields(ckpt.config, ckpt.config_file)
        f.str("hidden_act", "silu", ("silu",), "Llama activation (only SwiGLU with silu)")
        self.theta = rope_theta(ckpt.config, ckpt.config_file)
        self.attn_bias = f.bool("attention_bias")
        self.mlp_bias = f.bool("mlp_bias")
        self.tied = f.bool("tie_word_embeddings")
        tied = self.tied or "lm_head.weight" not in ckpt
        self.head_key = "model.embed_tokens.weight" if tied else "lm_head.weight"
        ckpt.find("model.embed_tokens.weight")
        check_layer_bound(ckpt, _LAYER, self.cfg.n_layer, self._layer_field())

    def _layer_field(self) -> str:
        return Fields(self.ckpt.config).pick(("num_hidden_layers", "n_layers"))[0]

    def tensor_spec(self) -> TensorSpec:
        """Every tensor the model reads, with its shape as stored (Linear weights ``[out, in]``)."""
        c = self.cfg
        d, f, q, kv = c.d_model, c.d_ffn, c.n_head * c.head_dim, c.d_kv
        shapes = {"model.embed_tokens.weight": (c.vocab, d), "model.norm.weight": (d,)}
        if self.head_key == "lm_head.weight" or "lm_head.weight" in self.ckpt:
            shapes["lm_head.weight"] = (c.vocab, d)  # read, or the tied head saved twice: checked either way
        for i in range(c.n_layer):
            a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            shapes |= {
                f"model.layers.{i}.input_layernorm.weight": (d,),
                f"model.layers.{i}.post_attention_layernorm.weight": (d,),
                a + "q_proj.weight": (q, d), a + "k_proj.weight": (kv, d), a + "v_proj.weight": (kv, d),
                a + "o_proj.weight": (d, q),
                m + "gate_proj.weight": (f, d), m + "up_proj.weight": (f, d), m + "down_proj.weight": (d, f),
            }
            if self.attn_bias:
                shapes |= {a + "q_proj.bias": (q,), a + "k_proj.bias": (kv,), a + "v_proj.bias": (kv,),
                           a + "o_proj.bias": (d,)}
            if self.mlp_bias:
                shapes |= {m + "gate_proj.bias": (f,), m + "up_proj.bias": (f,), m + "down_proj.bias": (d,)}
        return TensorSpec(shapes, _LAYER, c.n_layer, self._layer_field(), _IGNORED)

    def check_tensors(self) -> None:
        """The checkpoint holds exactly the tensors this config reads (CheckpointError otherwise)."""
        check_tensors(self.ckpt, self.tensor_spec, _LAYER, self.cfg.n_layer, self._layer_field())

    def linear_shape(self, key: str) -> tuple[int, int] | None:
        """``(out, in)`` of the projection whose weight is ``key`` (None if it is none)."""
        if not re.fullmatch(r"model\.layers\.\d+\.(?:self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)\.weight", key) \
                or key not in self.ckpt:
            return None
        out, cin = self.ckpt.shape(key)
        return out, cin

    def _generated(self, key: str) -> np.ndarray:
        m = re.fullmatch(r"anec\.rope\.rotate_half\.(\d+)", key)
        if m:
            return rotate_half_matrix(int(m.group(1))).reshape(int(m.group(1)), int(m.group(1)), 1, 1)
        return super()._generated(key)

    # ---- host side
    def embed(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= self.cfg.vocab):
            raise ModelError(f"token ids must be in [0, {self.cfg.vocab})")
        return self.ckpt.rows("model.embed_tokens.weight", ids)  # only these rows are read

    def rope_tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``cos, sin [len(positions), D]`` in fp32, as Hugging Face computes them."""
        d = self.cfg.head_dim
        inv = 1.0 / (self.theta ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / d))
        f = np.asarray(positions, np.float32)[:, None] * inv[None, :]
        emb = np.concatenate([f, f], axis=1)
        return np.cos(emb), np.sin(emb)

    def position_inputs(self, positions: np.ndarray, width: int) -> dict[str, np.ndarray]:
        cos, sin = self.rope_tables(positions)
        d = self.cfg.head_dim
        return {"cos": cos.T.reshape(1, d, 1, width).astype(np.float16),
                "sin": sin.T.reshape(1, d, 1, width).astype(np.float16)}

    # ---- hooks
    def _position_input_values(self, b: ModelBuilder, s: int) -> dict[str, Value]:
        d = self.cfg.head_dim
        return {"cos": b.input("cos", "fp16", [1, d, 1, s]), "sin": b.input("sin", "fp16", [1, d, 1, s])}

    def _rotation(self, b: ModelBuilder) -> Value:
        d = self.cfg.head_dim
        return b.weight(f"anec.rope.rotate_half.{d}", [d, d, 1, 1], "rot")  # one const per func

    def _shared(self, b: ModelBuilder, s: int, decode: bool) -> dict[str, Value]:
        shared = super()._shared(b, s, decode)
        shared["rot"] = self._rotation(b)
        return shared

    def _positions(self, b: ModelBuilder, q: Value, k: Value, pos_in: dict[str, Value]) -> tuple[Value, Value]:
        p = self._rotation(b)
        return (self._rope(b, q, self.cfg.n_head, p, pos_in, "q", "qh"),
                self._rope(b, k, self.cfg.n_kv_head, p, pos_in, "k", "k"))

    def _rope(self, b: ModelBuilder, x: Value, heads: int, p: Value, pos_in: dict[str, Value],
              name: str, out: str) -> Value:
        d = self.cfg.head_dim
        s = x.type.shape[3]
        x4 = b.reshape(x, shape=[1, heads, d, s], name=f"{name}4")
        xd = b.transpose(x4, perm=[0, 2, 1, 3], name=f"{name}d")          # [1, D, H, S]
        xf = b.reshape(xd, shape=[1, d, 1, heads * s], name=f"{name}f")   # conv layout
        rf = b.conv1x1(xf, p, name=f"{name}rf")                            # rotate_half
        rd = b.reshape(rf, shape=[1, d, heads, s], name=f"{name}rd")
        xc = b.mul(xd, pos_in["cos"], name=f"{name}cos")
        rs = b.mul(rd, pos_in["sin"], name=f"{name}sin")
        xe = b.add(xc, rs, name=f"{name}e")
        return b.transpose(xe, perm=[0, 2, 3, 1], name=out)               # [1, H, S, D]

    def _norm(self, b: ModelBuilder, x: Value, keys: tuple[str, str | None], name: str) -> Value:
        return b.rms_norm(x, keys[0], self.cfg.eps, name)

    def _attn_norm_keys(self, layer: int) -> tuple[str, str | None]:
        return f"model.layers.{layer}.input_layernorm.weight", None

    def _mlp_norm_keys(self, layer: int) -> tuple[str, str | None]:
        return f"model.layers.{layer}.post_attention_layernorm.weight", None

    def _final_norm_keys(self) -> tuple[str, str | None]:
        return "model.norm.weight", None

    def _lm_head_key(self) -> str:
        return self.head_key

    def _proj(self, b: ModelBuilder, x: Value, module: str, cout: int, bias: bool, name: str) -> Value:
        return b.linear(x, f"{module}.weight", cout, f"{module}.bias" if bias else None, name)

    def _qkv(self, b: ModelBuilder, n: Value, layer: int) -> tuple[Value, Value, Value]:
        c, p = self.cfg, f"model.layers.{layer}.self_attn"
        q = self._proj(b, n, f"{p}.q_proj", c.n_head * c.head_dim, self.attn_bias, "q")
        k = self._proj(b, n, f"{p}.k_proj", c.d_kv, self.attn_bias, "kp")
        v = self._proj(b, n, f"{p}.v_proj", c.d_kv, self.attn_bias, "vp")
        return q, k, v

    def _out_proj(self, b: ModelBuilder, ctx: Value, layer: int) -> Value:
        return self._proj(b, ctx, f"model.layers.{layer}.self_attn.o_proj", self.cfg.d_model, self.attn_bias, "o")

    def _mlp_body(self, b: ModelBuilder, n: Value, layer: int) -> Value:
        c, p = self.cfg, f"model.layers.{layer}.mlp"
        g = self._proj(b, n, f"{p}.gate_proj", c.d_ffn, self.mlp_bias, "gate")
        u = self._proj(b, n, f"{p}.up_proj", c.d_ffn, self.mlp_bias, "up")
        a = b.mul(b.silu(g, "silu"), u, name="gated")
        return self._proj(b, a, f"{p}.down_proj", c.d_model, self.mlp_bias, "down")
