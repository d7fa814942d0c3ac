"""Hostile checkpoint folders: every case of the corpus (tests/models/checkpoint_corpus.py) is
refused with its expected error, naming the file and the field, through the Python API that
``anec generate`` / ``anec embed`` use (in-process, under an audit hook: nothing outside the
folder is opened) and, for a representative subset, through the CLI in subprocesses (exit 1,
never 3, no traceback, no hang, bounded memory). Valid cases load, and generate or embed."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from anec.diagnostics import AnecError

from .checkpoint_corpus import SECRET, Case, build_corpus
from tests.runtime.hostile import Hang, child_env, opens_outside, watched

HANG_SECONDS = 20
CLI_SECONDS = 120
CLI_MEMORY = 4 << 30
LEAKS = (SECRET, "root:x:0:0")
"""Content of the files the corpus links to: never in a message."""

@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Case]:
    return build_corpus(tmp_path_factory.mktemp("checkpoints"))


def _load(case: Case) -> None:
    """What the CLI does with a checkpoint before it runs a program: the adapter, the model,
    its tensors checked against the config, the tokenizer."""
    from anec.models.bert import load_sentence_encoder
    from anec.models.generate import LoraSpec, load_causal_lm
    from anec.models.hf import load_tokenizer
    from anec.models.lora import LoraAdapter

    if case.kind == "bert":
        enc = load_sentence_encoder(str(case.path), backend="interp")
        try:
            if case.tokenizer:
                assert enc.tokenize(["hello world"])[0]
        finally:
            enc.close()
        return
    ad = LoraAdapter.load(case.adapter) if case.adapter is not None else None
    lora = LoraSpec(tuple(sorted(ad.targets)), ad.rank) if ad is not None else None
    lm = load_causal_lm(str(case.path), backend="interp", lora=lora)
    try:
        if ad is not None:
            lm.set_adapter(ad)
        if case.tokenizer:
            assert load_tokenizer(case.path).encode("hi")
    finally:
        lm.close()


def _audit_violations(case: Case, events: list[tuple]) -> list[str]:
    """Opens that could reach outside the folders the user named (checkpoint, adapter)."""
    named = {os.fspath(case.path)} | ({os.fspath(case.adapter)} if case.adapter is not None else set())
    return opens_outside(named, events)


def _check_message(case: Case, msg: str | None) -> list[str]:
    if case.expect is None:
        return [] if msg is None else [f"{case.name}: should load, got: {msg}"]
    problems = []
    if msg is None or not re.search(case.expect, msg):
        problems.append(f"{case.name}: expected /{case.expect}/, got: {msg}")
    elif not any(str(p) in msg for p in (case.path, case.adapter) if p is not None):
        problems.append(f"{case.name}: the message names no file of the case: {msg}")
    if msg and any(leak in msg for leak in LEAKS):
        problems.append(f"{case.name}: the message quotes a file outside the checkpoint: {msg}")
    return problems


def test_corpus_covers_the_hostile_cases(corpus):
    assert len(corpus) >= 80
    assert sum(c.expect is None for c in corpus) >= 5
    names = {c.name for c in corpus}
    for wanted in ("weights_link_passwd", "tokenizer_link_passwd", "adapter_weights_link", "index_shard_absolute",
                   "index_shard_dotdot", "shard_in_linked_dir", "weights_fifo", "gpt2_n_embd_zero",
                   "gpt2_n_embd_negative", "gpt2_n_layer_million", "gpt2_n_layer_true", "llama_rope_theta_nan",
                   "llama_rope_theta_zero", "llama_rope_theta_infinity", "adapter_alpha_nan", "adapter_layer_beyond",
                   "adapter_module_absent", "gpt2_n_head_zero", "config_array", "config_nested_1e5",
                   "gpt2_n_embd_string", "st_negative_shape", "st_reversed_offsets", "st_unknown_dtype",
                   "st_truncated_data", "st_header_length_2e40", "bert_heads_zero", "gpt2_tensor_unused"):
        assert wanted in names
    assert {c.kind for c in corpus} == {"gpt2", "llama", "bert"}


def test_api_refuses_every_hostile_checkpoint(corpus):
    for case in corpus:  # every import is done before the hook records
        if case.expect is None:
            _load(case)
    problems = []
    for case in corpus:
        try:
            with watched(HANG_SECONDS) as events:
                try:
                    _load(case)
                    msg = None
                except AnecError as e:
                    msg = e.render()
        except Hang:
            problems.append(f"{case.name}: hung for {HANG_SECONDS} s")
            continue
        except Exception as e:  # noqa: BLE001
            problems.append(f"{case.name}: {type(e).__name__} escaped: {e}")
            continue
        problems += _check_message(case, msg)
        problems += [f"{case.name}: {v}" for v in _audit_violations(case, events)]
    assert not problems, "\n".join(problems)


# ---- the CLI: exit codes, messages, no traceback, bounded time and memory ------------------

CLI_CASES = {
    # name: command (generate: gpt2/llama, embed: bert, export: `anec models export`)
    "llama_valid_adapter": "generate",
    "config_link_passwd": "generate", "weights_link_outside_model": "generate", "tokenizer_link_passwd": "generate",
    "weights_fifo": "generate", "index_shard_absolute": "generate", "index_shard_dotdot": "export",
    "config_nested_1e5": "generate", "gpt2_n_embd_zero": "generate", "gpt2_n_embd_negative": "export",
    "gpt2_n_layer_million": "generate", "gpt2_n_layer_more_than_present": "export",
    "gpt2_n_layer_true": "generate", "llama_rope_theta_nan": "generate", "llama_rope_theta_zero": "export",
    "st_header_length_2e40": "generate", "st_negative_shape": "export", "st_truncated_data": "generate",
    "adapter_alpha_nan": "generate", "adapter_layer_beyond": "generate", "bert_heads_zero": "embed",
    "bert_vocab_link_passwd": "embed", "bert_type_vocab_mismatch": "export",
}


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CLI_MEMORY, CLI_MEMORY))


def _cli(case: Case, command: str, out: Path) -> tuple[int, str]:
    anec = [sys.executable, "-m", "anec.cli"]
    if command == "embed":
        args = ["embed", str(case.path), "hello world", "a man is eating food", "--backend", "interp", "-q"]
    elif command == "export":
        args = ["models", "export", case.kind, str(case.path), "-o", str(out / case.name)]
    else:
        args = ["generate", str(case.path), "--max-new-tokens", "2", "--backend", "interp", "-q"]
        args += ["--prompt", "hi"] if case.tokenizer else ["--prompt-ids", "1,2"]
        if case.adapter is not None:
            args += ["--adapter", str(case.adapter)]
    env = child_env()
    env.pop("ANEC_TRACEBACK", None)
    try:
        proc = subprocess.run(anec + args, capture_output=True, text=True, timeout=CLI_SECONDS, env=env,
                              preexec_fn=_limits, cwd=out)
    except subprocess.TimeoutExpired:
        return -1, f"hung for {CLI_SECONDS} s"
    return proc.returncode, proc.stdout + proc.stderr


def test_cli_refuses_hostile_checkpoints(corpus, tmp_path):
    by_name = {c.name: c for c in corpus}
    jobs = [(by_name[n], cmd) for n, cmd in CLI_CASES.items()]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda j: _cli(j[0], j[1], tmp_path), jobs))
    problems = []
    for (case, command), (rc, out) in zip(jobs, results):
        where = f"{case.name} (anec {command})"
        if "Traceback" in out or "internal error" in out:
            problems.append(f"{where}: traceback or internal error: {out[-2000:]}")
        elif case.expect is None:
            if rc != 0:
                problems.append(f"{where}: should succeed, exit {rc}: {out[-2000:]}")
        elif rc != 1 or not out.startswith("error: ") or not re.search(case.expect, out):
            problems.append(f"{where}: exit {rc}, expected /{case.expect}/, got: {out[-2000:]}")
        if any(leak in out for leak in LEAKS):
            problems.append(f"{where}: the output quotes a file outside the checkpoint")
    assert not problems, "\n".join(problems)


def test_cli_runs_the_valid_checkpoints(corpus, tmp_path):
    """The valid folders really run: generated tokens, an embedding matrix, an export."""
    by_name = {c.name: c for c in corpus}
    rc, out = _cli(by_name["gpt2_valid"], "generate", tmp_path)
    assert rc == 0 and out.startswith("hi"), out
    rc, out = _cli(by_name["llama_valid_sharded"], "generate", tmp_path)
    assert rc == 0 and re.fullmatch(r"\d+,\d+\n", out), out
    rc, out = _cli(by_name["bert_valid"], "embed", tmp_path)
    assert rc == 0 and len(out.splitlines()) == 2, out
