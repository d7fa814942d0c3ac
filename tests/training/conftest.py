"""Tiny random GPT-2 and Llama (GQA) checkpoints saved by transformers, a text corpus from the
standard library's docstrings, and a byte-level BPE tokenizer trained on it (saved with each
checkpoint): everything local, nothing downloaded."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


def corpus_text() -> str:
    import argparse
    import csv
    import difflib
    import json
    import string
    import textwrap

    return "\n".join(inspect.getdoc(m) or "" for m in (argparse, json, csv, string, textwrap, difflib, inspect))


def _tokenizer(path: Path, corpus: Path) -> None:
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([str(corpus)], trainers.BpeTrainer(vocab_size=320, show_progress=False,
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(path / "tokenizer.json"))


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("data") / "corpus.txt"
    p.write_text(corpus_text(), "utf-8")
    return p


@pytest.fixture(scope="session")
def gpt2_ckpt(tmp_path_factory, corpus) -> Path:
    torch.manual_seed(16)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=320, n_positions=128,
                                  initializer_range=0.05, bos_token_id=0, eos_token_id=0)
    d = tmp_path_factory.mktemp("gpt2")
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(d, safe_serialization=True)
    _tokenizer(d, corpus)
    return d


@pytest.fixture(scope="session")
def llama_ckpt(tmp_path_factory, corpus) -> Path:
    torch.manual_seed(5)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=320,
                                   max_position_embeddings=128, initializer_range=0.05)
    d = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(d, safe_serialization=True)
    _tokenizer(d, corpus)
    return d


def hf(path: Path):
    m = transformers.AutoModelForCausalLM.from_pretrained(path).float()
    m.train(False)
    return m
