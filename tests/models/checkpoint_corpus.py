"""A corpus of hostile and faulty checkpoint folders, generated (nothing checked in).

:func:`build_corpus` writes three small valid checkpoints -- a GPT-2 by
``examples/make_tiny_gpt2.py`` (byte-level ``tokenizer.json``), a sharded Llama
with a PEFT LoRA adapter, and a BERT with a WordPiece ``vocab.txt`` -- and then
one damaged copy per :class:`Case`: files that are symbolic links to
/etc/passwd, /dev/zero, a secret file or a copy of the model outside the folder,
links to files inside it, linked sub-folders, FIFOs and directories where files
belong; index files whose shard names are absolute or climb out with ``..``;
every class of malformed ``config.json`` value (zero, negative, bool, float,
string where an integer belongs, non-finite numbers, a million layers, heads
that do not divide the hidden size, a config that is an array or nested 10^5
deep); safetensors headers with impossible lengths, shapes, offsets and dtypes,
truncated files; tensors missing, of the wrong shape or dtype, or unused; and
adapters with a NaN alpha, a zero rank, or tensors for layers and modules the
model lacks. Every case names the error (a regex naming the file and the field)
that loading it must raise, or None for the valid ones.

Run ``python -m tests.models.checkpoint_corpus DIR`` to write the corpus to
DIR and list it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SECRET = "TOPSECRET-c0ffee42"
"""Content of the files outside the checkpoints: it must never appear in an error."""

D = 128          # hidden size of every model (128 wide: the smallest bucket is 128 positions)
LAYERS = 2
RANK = 2


@dataclass
class Case:
    name: str
    kind: str
    """``gpt2``, ``llama`` (decoders: ``anec generate``) or ``bert`` (``anec embed``)."""
    path: Path
    expect: str | None
    """Regex the error message must match (None: the checkpoint is valid and must load)."""
    adapter: Path | None = None
    tokenizer: bool = False
    """Whether the case reads the tokenizer (``--prompt``)."""


# ---- the valid checkpoints ------------------------------------------------------------


def _save(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    from safetensors.numpy import save_file

    save_file(tensors, str(path), metadata=metadata)


def make_gpt2(out: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_tiny_gpt2", ROOT / "examples" / "make_tiny_gpt2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.make(out, layers=LAYERS, dim=D, heads=4, positions=256)


LLAMA_CONFIG = {"model_type": "llama", "hidden_size": D, "intermediate_size": 256, "num_hidden_layers": LAYERS,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
                "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                "hidden_act": "silu", "tie_word_embeddings": False}


def llama_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def n(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    kv = 2 * (D // 4)
    t = {"model.embed_tokens.weight": n(300, D), "model.norm.weight": np.ones(D, np.float32),
         "lm_head.weight": n(300, D)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t |= {p + "input_layernorm.weight": np.ones(D, np.float32),
              p + "post_attention_layernorm.weight": np.ones(D, np.float32),
              p + "self_attn.q_proj.weight": n(D, D), p + "self_attn.k_proj.weight": n(kv, D),
              p + "self_attn.v_proj.weight": n(kv, D), p + "self_attn.o_proj.weight": n(D, D),
              p + "mlp.gate_proj.weight": n(256, D), p + "mlp.up_proj.weight": n(256, D),
              p + "mlp.down_proj.weight": n(D, 256)}
    return t


def make_llama(out: Path) -> None:
    """A two-shard Llama (model.safetensors.index.json) with GQA 4/2."""
    out.mkdir(parents=True)
    t = llama_tensors(np.random.default_rng(1))
    keys = sorted(t)
    half = {k for k in keys if k.startswith("model.layers.1.")}
    shards = {"model-00001-of-00002.safetensors": {k: t[k] for k in keys if k not in half},
              "model-00002-of-00002.safetensors": {k: t[k] for k in keys if k in half}}
    wmap = {}
    for name, part in shards.items():
        _save(out / name, part, {"format": "pt"})
        wmap |= {k: name for k in part}
    _json(out / "model.safetensors.index.json", {"metadata": {"total_size": 0}, "weight_map": wmap})
    _json(out / "config.json", LLAMA_CONFIG)


def adapter_tensors(rng: np.random.Generator, layers: range = range(LAYERS)) -> dict[str, np.ndarray]:
    t = {}
    for i in layers:
        for m, cout in (("q_proj", D), ("v_proj", D // 2)):
            p = f"base_model.model.model.layers.{i}.self_attn.{m}."
            t[p + "lora_A.weight"] = (rng.standard_normal((RANK, D)) * 0.05).astype(np.float32)
            t[p + "lora_B.weight"] = (rng.standard_normal((cout, RANK)) * 0.05).astype(np.float32)
    return t


ADAPTER_CONFIG = {"peft_type": "LORA", "r": RANK, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"],
                  "use_rslora": False, "use_dora": False}


def make_adapter(out: Path) -> None:
    out.mkdir(parents=True)
    _json(out / "adapter_config.json", ADAPTER_CONFIG)
    _save(out / "adapter_model.safetensors", adapter_tensors(np.random.default_rng(2)))


BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "a", "man", "is", "eating", "food",
              "the", "movie", "new", ".", ",", "!", "##s", "bread"]
BERT_CONFIG = {"model_type": "bert", "hidden_size": D, "num_attention_heads": 4, "num_hidden_layers": LAYERS,
               "intermediate_size": 256, "vocab_size": 32, "max_position_embeddings": 512, "type_vocab_size": 2,
               "layer_norm_eps": 1e-12, "hidden_act": "gelu", "pad_token_id": 0,
               "position_embedding_type": "absolute"}


def make_bert(out: Path) -> None:
    out.mkdir(parents=True)
    rng = np.random.default_rng(3)

    def n(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    t = {"embeddings.word_embeddings.weight": n(32, D), "embeddings.position_embeddings.weight": n(512, D),
         "embeddings.token_type_embeddings.weight": n(2, D), "embeddings.LayerNorm.weight": np.ones(D, np.float32),
         "embeddings.LayerNorm.bias": np.zeros(D, np.float32),
         "embeddings.position_ids": np.arange(512, dtype=np.int64).reshape(1, 512),
         "pooler.dense.weight": n(D, D), "pooler.dense.bias": n(D)}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for m, (o, c) in (("attention.self.query", (D, D)), ("attention.self.key", (D, D)),
                          ("attention.self.value", (D, D)), ("attention.output.dense", (D, D)),
                          ("intermediate.dense", (256, D)), ("output.dense", (D, 256))):
            t |= {p + m + ".weight": n(o, c), p + m + ".bias": n(o)}
        for m in ("attention.output.LayerNorm", "output.LayerNorm"):
            t |= {p + m + ".weight": np.ones(D, np.float32), p + m + ".bias": np.zeros(D, np.float32)}
    _save(out / "model.safetensors", t)
    _json(out / "config.json", BERT_CONFIG)
    (out / "vocab.txt").write_text("\n".join(BERT_VOCAB) + "\n")
    _json(out / "tokenizer_config.json", {"do_lower_case": True})
    _json(out / "sentence_bert_config.json", {"max_seq_length": 256, "do_lower_case": False})


# ---- file surgery -------------------------------------------------------------------------


def _json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1))


def replace(path: Path, kind: str, target: str | Path | None = None) -> None:
    """Make ``path`` a symlink to ``target``, a FIFO or a directory."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "symlink":
        os.symlink(target, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    else:
        raise ValueError(kind)


def read_st(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path: Path, header: Any, data: bytes, length: int | None = None, raw: bytes | None = None) -> None:
    text = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def edit_st(path: Path, edit: Callable[[dict], None]) -> None:
    header, data = read_st(path)
    edit(header)
    write_st(path, header, data)


def edit_tensors(path: Path, edit: Callable[[dict[str, np.ndarray]], None]) -> None:
    from safetensors.numpy import load_file

    t = dict(load_file(str(path)))
    edit(t)
    _save(path, t)


def nested(depth: int) -> str:
    return '{"model_type": "gpt2", "x": ' + "[" * depth + "]" * depth + "}"


# ---- the corpus -----------------------------------------------------------------------------


class Builder:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = root / "base"
        make_gpt2(self.base / "gpt2")
        make_llama(self.base / "llama")
        make_adapter(self.base / "adapter")
        make_bert(self.base / "bert")
        self.outside = root / "outside"
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text(SECRET + "\n")
        os.mkfifo(self.outside / "fifo")
        shutil.copy(self.base / "gpt2" / "model.safetensors", self.outside / "model.safetensors")
        shutil.copy(self.base / "llama" / "model-00002-of-00002.safetensors", self.outside / "shard.safetensors")
        shutil.copytree(self.base / "llama", self.outside / "llama")
        self.cases: list[Case] = []

    def copy(self, name: str, base: str) -> Path:
        d = self.root / "cases" / name
        shutil.copytree(self.base / base, d, symlinks=True)
        return d

    def add(self, name: str, kind: str, path: Path, expect: str | None, adapter: Path | None = None,
            tokenizer: bool = False) -> None:
        self.cases.append(Case(name, kind, path, expect, adapter, tokenizer))

    def config(self, name: str, kind: str, edit: Callable[[dict], None], expect: str) -> None:
        """A case whose config.json is the base one, edited."""
        d = self.copy(name, kind)
        cfg = json.loads((d / "config.json").read_text())
        edit(cfg)
        _json(d / "config.json", cfg)
        self.add(name, kind, d, expect)

    def config_text(self, name: str, kind: str, text: str | bytes, expect: str) -> None:
        d = self.copy(name, kind)
        (d / "config.json").write_bytes(text.encode() if isinstance(text, str) else text)
        self.add(name, kind, d, expect)

    def adapter(self, name: str, edit: Callable[[Path], None], expect: str) -> None:
        """A valid Llama with a damaged adapter."""
        a = self.root / "cases" / name
        shutil.copytree(self.base / "adapter", a)
        edit(a)
        self.add(name, "llama", self.base / "llama", expect, adapter=a)


def _set(**values: Any) -> Callable[[dict], None]:
    return lambda cfg: cfg.update(values)


def _drop(*names: str) -> Callable[[dict], None]:
    return lambda cfg: [cfg.pop(n, None) for n in names]


def build_corpus(root: Path) -> list[Case]:
    b = Builder(root)
    passwd, secret, outside = "/etc/passwd", b.outside / "secret.txt", b.outside

    # -- valid checkpoints (must load) and a link *to* the checkpoint (the user's choice)
    b.add("gpt2_valid", "gpt2", b.base / "gpt2", None, tokenizer=True)
    b.add("llama_valid_sharded", "llama", b.base / "llama", None)
    b.add("llama_valid_adapter", "llama", b.base / "llama", None, adapter=b.base / "adapter")
    b.add("bert_valid", "bert", b.base / "bert", None, tokenizer=True)
    link = root / "cases" / "gpt2_dir_is_a_link"
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(b.base / "gpt2", link)
    b.add("gpt2_dir_is_a_link", "gpt2", link, None, tokenizer=True)
    d = b.copy("gpt2_legacy_buffers", "gpt2")
    edit_tensors(d / "model.safetensors", lambda t: t.update(
        {f"transformer.h.{i}.attn.bias": np.tril(np.ones((1, 1, 256, 256), np.float32)) for i in range(LAYERS)}))
    b.add("gpt2_legacy_buffers", "gpt2", d, None)
    d = b.copy("gpt2_vocab_merges", "gpt2")
    (d / "tokenizer.json").unlink()
    _json(d / "vocab.json", _byte_vocab())
    (d / "merges.txt").write_text("#version: 0.2\n")
    b.add("gpt2_vocab_merges", "gpt2", d, None, tokenizer=True)

    # -- links, FIFOs, directories: nothing is followed out of (or inside) the folder
    for name, base, rel, target, what in (
        ("config_link_passwd", "gpt2", "config.json", passwd, "config.json"),
        ("config_link_secret_relative", "gpt2", "config.json", "../../outside/secret.txt", "config.json"),
        ("weights_link_passwd", "gpt2", "model.safetensors", passwd, "model.safetensors"),
        ("weights_link_outside_model", "gpt2", "model.safetensors", outside / "model.safetensors",
         "model.safetensors"),
        ("weights_link_dev_zero", "gpt2", "model.safetensors", "/dev/zero", "model.safetensors"),
        ("weights_link_inside", "gpt2", "model.safetensors", "weights.bin", "model.safetensors"),
        ("tokenizer_link_passwd", "gpt2", "tokenizer.json", passwd, "tokenizer.json"),
        ("tokenizer_link_secret", "gpt2", "tokenizer.json", secret, "tokenizer.json"),
        ("index_link_outside", "llama", "model.safetensors.index.json",
         outside / "llama" / "model.safetensors.index.json", "model.safetensors.index.json"),
        ("shard_link_outside", "llama", "model-00002-of-00002.safetensors", outside / "shard.safetensors",
         "model-00002-of-00002.safetensors"),
        ("bert_vocab_link_passwd", "bert", "vocab.txt", passwd, "vocab.txt"),
        ("bert_sbert_config_link_secret", "bert", "sentence_bert_config.json", secret, "sentence_bert_config.json"),
        ("bert_tokenizer_config_link", "bert", "tokenizer_config.json", secret, "tokenizer_config.json"),
    ):
        d = b.copy(name, base)
        if rel == "model.safetensors" and target == "weights.bin":
            shutil.copy(d / rel, d / "weights.bin")
        replace(d / rel, "symlink", target)
        b.add(name, base, d, rf"{what}'? .*\(it is a symbolic link\)", tokenizer=base == "bert" or "tokenizer" in name)
    d = b.copy("shard_in_linked_dir", "llama")
    os.symlink(outside / "llama", d / "sub")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"] = {k: "sub/" + v for k, v in idx["weight_map"].items()}
    _json(d / "model.safetensors.index.json", idx)
    b.add("shard_in_linked_dir", "llama", d, r"'sub' is a symbolic link")
    for name, rel, kind, what in (("config_fifo", "config.json", "fifo", "FIFO"),
                                  ("config_dir", "config.json", "dir", "directory"),
                                  ("weights_fifo", "model.safetensors", "fifo", "FIFO"),
                                  ("weights_dir", "model.safetensors", "dir", "directory"),
                                  ("tokenizer_fifo", "tokenizer.json", "fifo", "FIFO")):
        d = b.copy(name, "gpt2")
        replace(d / rel, kind)
        b.add(name, "gpt2", d, rf"{rel}.*\(it is a {what}\)", tokenizer=rel == "tokenizer.json")
    d = b.copy("config_too_large", "gpt2")
    with open(d / "config.json", "r+b") as f:
        f.truncate(17 << 20)  # sparse
    b.add("config_too_large", "gpt2", d, r"config\.json.* is 17825792 bytes, above the limit")
    d = b.copy("config_missing", "gpt2")
    (d / "config.json").unlink()
    b.add("config_missing", "gpt2", d, r"has no config\.json")
    b.add("dir_missing", "gpt2", root / "cases" / "no-such-dir", r"checkpoint directory .*no-such-dir' does not exist")

    # -- the index: shard names stay inside the folder, and agree with the shards
    for name, shard, expect in (
        ("index_shard_absolute", "/etc/passwd", r"weight_map\['model\.embed_tokens\.weight'\]: shard '/etc/passwd' "
                                                r"is not a relative path inside the checkpoint"),
        ("index_shard_dotdot", "../../outside/shard.safetensors", r"shard '\.\./\.\./outside/shard\.safetensors' "
                                                                  r"is not a relative path"),
        ("index_shard_dot_inside", "sub/../model-00001-of-00002.safetensors", r"is not a relative path"),
        ("index_shard_empty", "", r"weight_map\['model\.embed_tokens\.weight'\]: shard '' is not a relative"),
        ("index_shard_number", 7, r"weight_map\['model\.embed_tokens\.weight'\]: expected a shard file name, got 7"),
        ("index_shard_missing", "model-00003-of-00002.safetensors",
         r"model-00003-of-00002\.safetensors' ?: it is missing|model-00003-of-00002\.safetensors': it is missing"),
    ):
        d = b.copy(name, "llama")
        idx = json.loads((d / "model.safetensors.index.json").read_text())
        idx["weight_map"]["model.embed_tokens.weight"] = shard
        _json(d / "model.safetensors.index.json", idx)
        b.add(name, "llama", d, expect)
    for name, wmap, expect in (("index_map_list", [], r"index\.json: weight_map: expected a non-empty object"),
                               ("index_map_missing", None, r"index\.json: weight_map: expected")):
        d = b.copy(name, "llama")
        _json(d / "model.safetensors.index.json", {} if wmap is None else {"weight_map": wmap})
        b.add(name, "llama", d, expect)
    d = b.copy("index_names_absent_tensor", "llama")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.ghost.weight"] = "model-00001-of-00002.safetensors"
    _json(d / "model.safetensors.index.json", idx)
    b.add("index_names_absent_tensor", "llama", d, r"index\.json: weight_map\['model\.ghost\.weight'\]: the tensor "
                                                   r"is not in shard")
    d = b.copy("index_omits_tensor", "llama")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    del idx["weight_map"]["model.norm.weight"]
    _json(d / "model.safetensors.index.json", idx)
    b.add("index_omits_tensor", "llama", d, r"model-00001-of-00002\.safetensors: tensor 'model\.norm\.weight' is "
                                            r"not listed for this shard")
    for name, text, expect in (("index_not_json", "{weight_map: 1", r"index\.json: the file is not valid JSON"),
                               ("index_nan", '{"weight_map": {"a": NaN}}', r"index\.json: .*NaN is not a JSON number")):
        d = b.copy(name, "llama")
        (d / "model.safetensors.index.json").write_text(text)
        b.add(name, "llama", d, expect)

    # -- config.json: the document
    b.config_text("config_array", "gpt2", "[1, 2, 3]", r"config\.json: expected a JSON object, got an array")
    b.config_text("config_nested_1e5", "gpt2", nested(100_000), r"config\.json: the file is nested too deeply")
    b.config_text("config_not_utf8", "gpt2", b'{"model_type": "\xff\xfe"}', r"config\.json: the file is not valid UTF-8")
    b.config_text("config_not_json", "gpt2", "{model_type: gpt2}", r"config\.json: the file is not valid JSON")
    b.config_text("config_nan", "gpt2", json.dumps(json.loads((b.base / "gpt2" / "config.json").read_text()))
                  .replace('"layer_norm_epsilon": 1e-05', '"layer_norm_epsilon": NaN'),
                  r"config\.json: .*NaN is not a JSON number")
    b.config_text("gpt2_eps_underflow", "gpt2", (b.base / "gpt2" / "config.json").read_text()
                  .replace('"layer_norm_epsilon": 1e-05', '"layer_norm_epsilon": 1e-400'),
                  r"config\.json: layer_norm_epsilon: 0\.0 is not a finite number in \(0, 1\]")
    b.config_text("config_duplicate_key", "gpt2", '{"model_type": "gpt2", "model_type": "llama"}',
                  r"config\.json: .*appears twice")
    b.config_text("config_huge_int", "gpt2", '{"model_type": "gpt2", "n_layer": ' + "9" * 40 + "}",
                  r"config\.json: .*too large")

    # -- config.json: GPT-2 fields
    for name, edit, expect in (
        ("gpt2_n_embd_zero", _set(n_embd=0), r"n_embd: 0 is not a positive integer"),
        ("gpt2_n_embd_negative", _set(n_embd=-128), r"n_embd: -128 is not a positive integer"),
        ("gpt2_n_embd_string", _set(n_embd="128"), r'n_embd: "128" is not an integer'),
        ("gpt2_n_embd_float", _set(n_embd=128.0), r"n_embd: 128\.0 is not an integer"),
        ("gpt2_n_embd_list", _set(n_embd=[128]), r"n_embd: an array of 1 items is not an integer"),
        ("gpt2_n_layer_true", _set(n_layer=True), r"n_layer: true is not an integer"),
        ("gpt2_n_layer_million", _set(n_layer=10**6), r"n_layer: 1000000 is above anec's limit of 1024"),
        ("gpt2_n_layer_more_than_present", _set(n_layer=1000),
         r"config\.json: n_layer: 1000 layers, but the checkpoint has no tensors for layer 2"),
        ("gpt2_n_layer_fewer_than_present", _set(n_layer=1),
         r"tensor 'transformer\.h\.1\.[a-z_.0-9]+' belongs to layer 1, but .*config\.json: n_layer is 1"),
        ("gpt2_n_layer_zero", _set(n_layer=0), r"n_layer: 0 is not a positive integer"),
        ("gpt2_n_head_zero", _set(n_head=0), r"n_head: 0 is not a positive integer"),
        ("gpt2_n_head_not_dividing", _set(n_head=3), r"n_head: 3 heads do not divide the hidden size 128"),
        ("gpt2_vocab_zero", _set(vocab_size=0), r"vocab_size: 0 is not a positive integer"),
        ("gpt2_vocab_mismatch", _set(vocab_size=300),
         r"model\.safetensors: tensor 'transformer\.wte\.weight' is \[257, 128\], but .*config\.json makes it "
         r"\[300, 128\]"),
        ("gpt2_n_inner_zero", _set(n_inner=0), r"n_inner: 0 is not a positive integer"),
        ("gpt2_n_inner_mismatch", _set(n_inner=256), r"tensor 'transformer\.h\.0\.mlp\.c_fc\.weight' is "
                                                     r"\[128, 512\], but .*makes it \[128, 256\]"),
        ("gpt2_positions_missing", _drop("n_positions"), r"config\.json has none of: n_positions, "
                                                         r"max_position_embeddings"),
        ("gpt2_positions_negative", _set(n_positions=-1), r"n_positions: -1 is not a positive integer"),
        ("gpt2_eps_zero", _set(layer_norm_epsilon=0), r"layer_norm_epsilon: 0 is not a finite number in \(0, 1\]"),
        ("gpt2_eps_negative", _set(layer_norm_epsilon=-1e-5), r"layer_norm_epsilon: -1e-05 is not a finite number"),
        ("gpt2_eps_string", _set(layer_norm_epsilon="1e-5"), r'layer_norm_epsilon: "1e-5" is not a number'),
        ("gpt2_activation_relu", _set(activation_function="relu"),
         r'activation_function: GPT-2 activation "relu" is not supported'),
        ("gpt2_activation_number", _set(activation_function=1), r"activation_function: 1 is not a string"),
        ("gpt2_model_type_number", _set(model_type=5), r"config\.json: model_type: 5 is not a string"),
        ("gpt2_model_type_t5", _set(model_type="t5"), r"model type 't5' is not a supported decoder"),
        ("gpt2_cross_attention_string", _set(add_cross_attention="yes"),
         r'add_cross_attention: "yes" is not true or false'),
    ):
        b.config(name, "gpt2", edit, expect)

    # -- config.json: Llama fields
    for name, edit, expect in (
        ("llama_rope_theta_zero", _set(rope_theta=0), r"rope_theta: 0 is not a finite number"),
        ("llama_rope_theta_negative", _set(rope_theta=-10000.0), r"rope_theta: -10000\.0 is not a finite number"),
        ("llama_rope_theta_string", _set(rope_theta="1e4"), r'rope_theta: "1e4" is not a number'),
        ("llama_rope_theta_param_zero", _set(rope_parameters={"rope_type": "default", "rope_theta": 0}),
         r"config\.json: rope_parameters: rope_theta: 0 is not a finite number"),
        ("llama_rope_scaling_llama3", _set(rope_scaling={"rope_type": "llama3", "factor": 8.0}),
         r"RoPE scaling 'llama3' is not supported"),
        ("llama_rope_scaling_string", _set(rope_scaling="linear"), r'rope_scaling: "linear" is not an object'),
        ("llama_kv_heads_not_dividing", _set(num_key_value_heads=3),
         r"num_key_value_heads: 3 KV heads do not divide the 4 attention heads"),
        ("llama_kv_heads_zero", _set(num_key_value_heads=0), r"num_key_value_heads: 0 is not a positive integer"),
        ("llama_heads_zero", _set(num_attention_heads=0), r"num_attention_heads: 0 is not a positive integer"),
        ("llama_heads_float", _set(num_attention_heads=4.5), r"num_attention_heads: 4\.5 is not an integer"),
        ("llama_head_dim_odd", _set(head_dim=31), r"head_dim: RoPE needs an even head dim, got 31"),
        ("llama_eps_above_one", _set(rms_norm_eps=2.0), r"rms_norm_eps: 2\.0 is not a finite number in \(0, 1\]"),
        ("llama_layers_bool", _set(num_hidden_layers=False), r"num_hidden_layers: false is not an integer"),
        ("llama_ffn_mismatch", _set(intermediate_size=512),
         r"tensor 'model\.layers\.0\.mlp\.gate_proj\.weight' is \[256, 128\], but .*makes it \[512, 128\]"),
        ("llama_hidden_act_gelu", _set(hidden_act="gelu"), r'hidden_act: Llama activation .*"gelu" is not supported'),
        ("llama_tie_string", _set(tie_word_embeddings="no"), r'tie_word_embeddings: "no" is not true or false'),
        ("llama_sliding_window_zero", _set(sliding_window=0), r"sliding_window: 0 is not a positive integer"),
        ("llama_attention_bias_missing_tensors", _set(attention_bias=True),
         r"has no tensor 'model\.layers\.0\.self_attn\.q_proj\.bias'"),
    ):
        b.config(name, "llama", edit, expect)
    b.config_text("llama_rope_theta_nan", "llama", json.dumps(LLAMA_CONFIG).replace("10000.0", "NaN"),
                  r"config\.json: .*NaN is not a JSON number")
    b.config_text("llama_rope_theta_infinity", "llama", json.dumps(LLAMA_CONFIG).replace("10000.0", "Infinity"),
                  r"config\.json: .*Infinity is not a JSON number")
    b.config_text("llama_rope_theta_1e999", "llama", json.dumps(LLAMA_CONFIG).replace("10000.0", "1e999"),
                  r"config\.json: .*out of range")

    # -- tensors against the config
    shard1 = "model-00001-of-00002.safetensors"
    for name, edit, expect in (
        ("llama_tensor_missing", lambda t: t.pop("model.norm.weight"),
         r"has no tensor 'model\.norm\.weight', which the model reads"),
        ("llama_tensor_int_dtype", lambda t: t.update({"model.norm.weight": np.ones(D, np.int32)}),
         r"model-00001-of-00002\.safetensors: tensor 'model\.norm\.weight' is I32; a model weight must be"),
        ("llama_tensor_wrong_rank", lambda t: t.update({"model.norm.weight": np.ones((D, 1), np.float32)}),
         r"tensor 'model\.norm\.weight' is \[128, 1\], but .*config\.json makes it \[128\]"),
    ):
        d = b.copy(name, "llama")
        edit_tensors(d / shard1, edit)
        idx = json.loads((d / "model.safetensors.index.json").read_text())
        if name == "llama_tensor_missing":
            del idx["weight_map"]["model.norm.weight"]
        _json(d / "model.safetensors.index.json", idx)
        b.add(name, "llama", d, expect)
    d = b.copy("gpt2_tensor_unused", "gpt2")
    edit_tensors(d / "model.safetensors", lambda t: t.update({"transformer.extra.weight": np.ones(4, np.float32)}))
    b.add("gpt2_tensor_unused", "gpt2", d, r"model\.safetensors: tensor 'transformer\.extra\.weight' is not used by "
                                         r"this model")
    d = b.copy("gpt2_tensor_layer_beyond", "gpt2")
    edit_tensors(d / "model.safetensors", lambda t: t.update({"transformer.h.7.ln_1.weight": np.ones(D, np.float32)}))
    b.add("gpt2_tensor_layer_beyond", "gpt2", d, r"tensor 'transformer\.h\.7\.ln_1\.weight' belongs to layer 7, but "
                                                r".*config\.json: n_layer is 2")
    d = b.copy("gpt2_tensor_layer_missing", "gpt2")
    edit_tensors(d / "model.safetensors", lambda t: [t.pop(k) for k in list(t) if k.startswith("transformer.h.1.")])
    b.add("gpt2_tensor_layer_missing", "gpt2", d, r"config\.json: n_layer: 2 layers, but the checkpoint has no "
                                                 r"tensors for layer 1")

    # -- safetensors headers (GPT-2's model.safetensors)
    st = b.base / "gpt2" / "model.safetensors"
    header, data = read_st(st)
    wte = "transformer.wte.weight"
    for name, mutate, expect in (
        ("st_negative_shape", lambda h: h[wte].update(shape=[-257, 128]), r"tensor 'transformer\.wte\.weight' has a "
                                                                          r"malformed shape"),
        ("st_float_shape", lambda h: h[wte].update(shape=[257.0, 128]), r"malformed shape"),
        ("st_bool_shape", lambda h: h[wte].update(shape=[True, 128]), r"malformed shape"),
        ("st_reversed_offsets", lambda h: h[wte].update(data_offsets=h[wte]["data_offsets"][::-1]),
         r"tensor 'transformer\.wte\.weight': data_offsets .* do not hold"),
        ("st_offsets_past_end", lambda h: h[wte].update(data_offsets=[len(data), len(data) + 257 * 128 * 4]),
         r"do not hold F32\[257, 128\] inside the"),
        ("st_size_mismatch", lambda h: h[wte].update(dtype="F16"), r"do not hold F16\[257, 128\]"),
        ("st_unknown_dtype", lambda h: h[wte].update(dtype="Q4_K"), r"has unsupported dtype 'Q4_K'"),
        ("st_dtype_number", lambda h: h[wte].update(dtype=4), r"has unsupported dtype 4"),
        ("st_overlap", lambda h: h["transformer.ln_f.bias"].update(
            data_offsets=[h["transformer.ln_f.weight"]["data_offsets"][0],
                          h["transformer.ln_f.weight"]["data_offsets"][1]]), r"overlap"),
        ("st_extra_entry_key", lambda h: h[wte].update(extra=1), r"has a malformed entry"),
        ("st_entry_list", lambda h: h.update({wte: [1, 2]}), r"has a malformed entry"),
        ("st_metadata_not_strings", lambda h: h.update({"__metadata__": {"format": 1}}),
         r"__metadata__ is not a table of strings"),
        ("st_offsets_huge", lambda h: h[wte].update(data_offsets=[0, 2**62]), r"do not hold"),
        ("st_shape_huge", lambda h: h[wte].update(shape=[2**40, 2**40]), r"do not hold"),
    ):
        d = b.copy(name, "gpt2")
        h = json.loads(json.dumps(header))
        mutate(h)
        write_st(d / "model.safetensors", h, data)
        b.add(name, "gpt2", d, r"model\.safetensors: cannot read safetensors file: .*" + expect)
    for name, length, raw, tail, expect in (
        ("st_header_length_2e40", 1 << 40, None, data, r"header length 1099511627776 runs past the end"),
        ("st_header_not_json", None, b"{not json", data, r"unreadable header"),
        ("st_header_array", None, b"[1, 2]", data, r"the header is not a table"),
        ("st_header_nested", None, b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"",
         r"unreadable header: the safetensors header is nested too deeply"),
        ("st_header_nan", None, b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 0]}}', b"",
         r"unreadable header: .*NaN is not a JSON number"),
        ("st_truncated_data", None, None, data[: len(data) // 2], r"do not hold"),
    ):
        d = b.copy(name, "gpt2")
        write_st(d / "model.safetensors", header, tail, length=length, raw=raw)
        b.add(name, "gpt2", d, r"model\.safetensors: (?:not a safetensors file|cannot read safetensors file).*"
                              + expect)
    d = b.copy("st_three_bytes", "gpt2")
    (d / "model.safetensors").write_bytes(b"\1\2\3")
    b.add("st_three_bytes", "gpt2", d, r"model\.safetensors: not a safetensors file \(shorter than the 8-byte")
    d = b.copy("st_header_cut", "gpt2")
    raw = (b.base / "gpt2" / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(raw[:100])
    b.add("st_header_cut", "gpt2", d, r"model\.safetensors: not a safetensors file \(header length \d+ runs past")
    d = b.copy("shard_header_corrupt", "llama")
    hh, dd = read_st(d / shard1)
    hh["model.norm.weight"]["shape"] = [-1]
    write_st(d / shard1, hh, dd)
    b.add("shard_header_corrupt", "llama", d, r"model-00001-of-00002\.safetensors: cannot read safetensors file: "
                                              r"tensor 'model\.norm\.weight' has a malformed shape")

    # -- BERT
    for name, edit, expect in (
        ("bert_heads_zero", _set(num_attention_heads=0), r"num_attention_heads: 0 is not a positive integer"),
        ("bert_heads_not_dividing", _set(num_attention_heads=5), r"num_attention_heads: 5 heads do not divide"),
        ("bert_pad_negative", _set(pad_token_id=-1), r"pad_token_id: -1 is not an integer >= 0"),
        ("bert_pad_beyond_vocab", _set(pad_token_id=32), r"pad_token_id: 32 is not a token id below vocab_size 32"),
        ("bert_eps_list", _set(layer_norm_eps=[1e-12]), r"layer_norm_eps: an array of 1 items is not a number"),
        ("bert_layers_more", _set(num_hidden_layers=3), r"num_hidden_layers: 3 layers, but the checkpoint has no "
                                                        r"tensors for layer 2"),
        ("bert_positions_relative", _set(position_embedding_type="relative_key"), r"only absolute position"),
        ("bert_type_vocab_mismatch", _set(type_vocab_size=3),
         r"tensor 'embeddings\.token_type_embeddings\.weight' is \[2, 128\], but .*makes it \[3, 128\]"),
    ):
        b.config(name, "bert", edit, expect)
    d = b.copy("bert_max_seq_zero", "bert")
    _json(d / "sentence_bert_config.json", {"max_seq_length": 0})
    b.add("bert_max_seq_zero", "bert", d, r"sentence_bert_config\.json: max_seq_length: 0 is not a positive integer")
    d = b.copy("bert_lower_case_string", "bert")
    _json(d / "tokenizer_config.json", {"do_lower_case": "yes"})
    b.add("bert_lower_case_string", "bert", d, r'tokenizer_config\.json: do_lower_case: "yes" is not true or false',
          tokenizer=True)

    # -- tokenizers
    d = b.copy("tokenizer_not_json", "gpt2")
    (d / "tokenizer.json").write_text("{not json")
    b.add("tokenizer_not_json", "gpt2", d, r"cannot read .*tokenizer\.json: ", tokenizer=True)
    d = b.copy("tokenizer_nested", "gpt2")
    (d / "tokenizer.json").write_text("[" * 100_000 + "]" * 100_000)
    b.add("tokenizer_nested", "gpt2", d, r"cannot read .*tokenizer\.json: ", tokenizer=True)
    d = b.copy("vocab_json_array", "gpt2")
    (d / "tokenizer.json").unlink()
    _json(d / "vocab.json", ["a", "b"])
    (d / "merges.txt").write_text("#version: 0.2\n")
    b.add("vocab_json_array", "gpt2", d, r"vocab\.json: expected an object of token -> non-negative id", tokenizer=True)
    d = b.copy("merges_bad_line", "gpt2")
    (d / "tokenizer.json").unlink()
    _json(d / "vocab.json", _byte_vocab())
    (d / "merges.txt").write_text("#version: 0.2\na b c\n")
    b.add("merges_bad_line", "gpt2", d, r"merges\.txt:2: expected two tokens", tokenizer=True)
    d = b.copy("merges_link_passwd", "gpt2")
    (d / "tokenizer.json").unlink()
    _json(d / "vocab.json", _byte_vocab())
    os.symlink(passwd, d / "merges.txt")
    b.add("merges_link_passwd", "gpt2", d, r"merges\.txt'? .*\(it is a symbolic link\)", tokenizer=True)

    # -- LoRA adapters (for the valid Llama)
    def cfg_edit(**values: Any) -> Callable[[Path], None]:
        def edit(a: Path) -> None:
            c = json.loads((a / "adapter_config.json").read_text())
            c.update(values)
            _json(a / "adapter_config.json", c)
        return edit

    def cfg_text(text: str) -> Callable[[Path], None]:
        return lambda a: (a / "adapter_config.json").write_text(text)

    def tensors(edit: Callable[[dict], None]) -> Callable[[Path], None]:
        return lambda a: edit_tensors(a / "adapter_model.safetensors", edit)

    qa = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    for name, edit, expect in (
        ("adapter_alpha_nan", cfg_text(json.dumps(ADAPTER_CONFIG).replace('"lora_alpha": 4', '"lora_alpha": NaN')),
         r"adapter_config\.json: .*NaN is not a JSON number"),
        ("adapter_alpha_zero", cfg_edit(lora_alpha=0), r"adapter_config\.json: lora_alpha: 0 is not a finite number"),
        ("adapter_alpha_negative", cfg_edit(lora_alpha=-16), r"adapter_config\.json: lora_alpha: -16 is not a finite"),
        ("adapter_alpha_string", cfg_edit(lora_alpha="16"), r'adapter_config\.json: lora_alpha: "16" is not a number'),
        ("adapter_rank_zero", cfg_edit(r=0), r"adapter_config\.json: r: 0 is not a positive integer"),
        ("adapter_rank_bool", cfg_edit(r=True), r"adapter_config\.json: r: true is not an integer"),
        ("adapter_rank_mismatch", cfg_edit(r=4), r"adapter_model\.safetensors: tensor '.*lora_A\.weight' is \[2, 128\], "
                                                 r"but adapter_config\.json: r is 4"),
        ("adapter_targets_number", cfg_edit(target_modules=5), r"adapter_config\.json: target_modules: expected a list"),
        ("adapter_module_not_targeted", cfg_edit(target_modules=["q_proj"]),
         r"module model\.layers\.0\.self_attn\.v_proj is not one of adapter_config\.json: target_modules"),
        ("adapter_config_array", cfg_text("[]"), r"adapter_config\.json: expected a JSON object, got an array"),
        ("adapter_layer_beyond", tensors(lambda t: t.update(adapter_tensors(np.random.default_rng(4), range(5, 6)))),
         r"module model\.layers\.5\.self_attn\.q_proj is in layer 5, but the model has 2 layers"),
        ("adapter_module_absent", tensors(lambda t: t.update({
            "base_model.model.model.layers.0.self_attn.x_proj.lora_A.weight": np.zeros((RANK, D), np.float32),
            "base_model.model.model.layers.0.self_attn.x_proj.lora_B.weight": np.zeros((D, RANK), np.float32)})),
         r"module model\.layers\.0\.self_attn\.x_proj is not one of|x_proj is not a linear layer"),
        ("adapter_wrong_in_dim", tensors(lambda t: t.update({qa: np.zeros((RANK, 64), np.float32)})),
         r"model\.layers\.0\.self_attn\.q_proj is 128x64, the model's projection is 128x128"),
        ("adapter_nan_values", tensors(lambda t: t.update({qa: np.full((RANK, D), np.nan, np.float32)})),
         r"tensor '.*q_proj\.lora_A\.weight' holds NaN or infinite values"),
        ("adapter_int_tensor", tensors(lambda t: t.update({qa: np.zeros((RANK, D), np.int32)})),
         r"tensor '.*q_proj\.lora_A\.weight' is I32, not a float type"),
        ("adapter_lacks_b", tensors(lambda t: t.pop(qa.replace("lora_A", "lora_B"))),
         r"adapter module model\.layers\.0\.self_attn\.q_proj lacks lora_B"),
        ("adapter_foreign_tensor", tensors(lambda t: t.update({"model.embed_tokens.weight": np.zeros((2, 2), np.float32)})),
         r"tensor 'model\.embed_tokens\.weight' is not a LoRA A/B matrix"),
        ("adapter_config_link", lambda a: replace(a / "adapter_config.json", "symlink", secret),
         r"adapter_config\.json'? .*\(it is a symbolic link\)"),
        ("adapter_weights_link", lambda a: replace(a / "adapter_model.safetensors", "symlink", passwd),
         r"adapter_model\.safetensors'? .*\(it is a symbolic link\)"),
        ("adapter_weights_fifo", lambda a: replace(a / "adapter_model.safetensors", "fifo"),
         r"adapter_model\.safetensors.*\(it is a FIFO\)"),
        ("adapter_header_corrupt", lambda a: (a / "adapter_model.safetensors").write_bytes(b"\xff" * 64),
         r"adapter_model\.safetensors: not a safetensors file"),
    ):
        b.adapter(name, edit, expect)
    d = b.copy("adapter_targets_absent_module", "llama")
    a = root / "cases" / "adapter_targets_absent_module_adapter"
    shutil.copytree(b.base / "adapter", a)
    edit_tensors(a / "adapter_model.safetensors", lambda t: t.update({
        "base_model.model.model.layers.0.self_attn.x_proj.lora_A.weight": np.zeros((RANK, D), np.float32),
        "base_model.model.model.layers.0.self_attn.x_proj.lora_B.weight": np.zeros((D, RANK), np.float32)}))
    cfg = dict(ADAPTER_CONFIG, target_modules=["q_proj", "v_proj", "x_proj"])
    _json(a / "adapter_config.json", cfg)
    b.add("adapter_targets_absent_module", "llama", d, r"module model\.layers\.0\.self_attn\.x_proj is not a linear "
                                                       r"layer of this model", adapter=a)
    b.add("adapter_dir_missing", "llama", b.base / "llama", r"adapter directory .*no-such-adapter' does not exist",
          adapter=root / "cases" / "no-such-adapter")
    return b.cases


def _byte_vocab() -> dict[str, int]:
    spec = importlib.util.spec_from_file_location("make_tiny_gpt2", ROOT / "examples" / "make_tiny_gpt2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    vocab = {c: i for i, c in enumerate(mod.byte_alphabet())}
    vocab["<|endoftext|>"] = 256
    return vocab


def main() -> None:
    root = Path(sys.argv[1])
    root.mkdir(parents=True, exist_ok=True)
    for c in build_corpus(root):
        print(f"{c.name:40s} {c.kind:6s} {c.expect or 'valid'}")


if __name__ == "__main__":
    main()
