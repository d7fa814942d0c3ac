"""Hostile ``.pt2`` files: every case of tests/frontends/pt2_corpus.py is refused by
``load_pt2`` with its expected error, while torch's loader is guarded (no unpickling, no
shared library, no ``eval``/``exec`` of shape expressions or guards, no process) and no
payload's marker file appears; a handful run through ``anec import`` in a subprocess under
an address-space limit and a timeout: exact exit code, no traceback, nothing written, no
``/tmp/aotinductor_*``. Genuine archives of real programs load under the same guard and
import exactly as ``torch.export.load`` of the same file does. Control tests show the
payloads are live: torch's own loader runs them."""

from __future__ import annotations

import glob
import io
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from anec.frontends import TorchImportError  # noqa: E402
from anec.frontends.pt2_archive import read_pt2  # noqa: E402
from anec.frontends.torch.fx_import import import_torch  # noqa: E402
from anec.frontends.torch.export import load_pt2  # noqa: E402

from . import pt2_corpus as pc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ADDRESS_SPACE = 4 << 30
CLI_TIMEOUT = 60
CASE_SECONDS = 5.0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = tmp_path_factory.mktemp("pt2")
    marker = base / "MARKER"
    cases = pc.build_corpus(base / "cases", marker)
    return {c.name: c for c in cases}, marker


def _names() -> list[str]:
    # the case list without building it: names are fixed in pt2_corpus.build_corpus
    src = Path(pc.__file__).read_text()
    import re

    return re.findall(r'^\s*case\("([a-z0-9_]+)"', src, re.M)


def test_corpus_is_large_and_names_are_unique(corpus):
    cases, _ = corpus
    assert len(cases) >= 60
    assert sorted(cases) == sorted(set(_names()))


@pytest.mark.parametrize("name", _names())
def test_case_is_refused_in_process(corpus, name):
    cases, marker = corpus
    c = cases[name]
    start = time.monotonic()
    with pc.code_guard() as trips:
        with pytest.raises(TorchImportError) as info:
            if c.limits:
                read_pt2(c.path, **c.limits)
            else:
                load_pt2(c.path)
    took = time.monotonic() - start
    msg = str(info.value)
    assert c.expect in msg, msg
    assert str(c.path) in msg, msg
    if c.member:
        assert c.member in msg, msg
    assert msg.startswith("error: ") and "hint: " in msg or "no such file" in msg, msg
    assert "Traceback" not in msg
    assert trips == [], trips
    assert not marker.exists(), "a payload ran"
    assert took < CASE_SECONDS, f"{name}: {took:.1f} s"


def test_a_pickle_sized_as_a_larger_storage_is_read_as_raw_bytes(tmp_path):
    # a weight member may hold more bytes than its tensor needs (a larger storage): a pickle
    # of such a size is data, read as floats, and nothing in it runs
    marker = tmp_path / "MARKER"
    base = pc.save_genuine(*pc.genuine_modules()["small"], tmp_path / "genuine.pt2").read_bytes()
    items = pc.members(base)
    pk = pc.pickle_payload(marker)
    pk += b"\0" * (-len(pk) % 4)
    path = tmp_path / "larger.pt2"
    path.write_bytes(pc.write_zip(pc.replace(items, "data/weights/weight_0", pk)))
    with pc.code_guard() as trips:
        load_pt2(path)
    assert trips == [] and not marker.exists()


# ---- genuine archives ---------------------------------------------------------------


@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    return pc.genuine_archives(tmp_path_factory.mktemp("genuine"))


@pytest.mark.parametrize("name", ["small", "mlp", "encoder"])
def test_genuine_archive_loads_under_the_guard_and_imports_as_before(genuine, name):
    path = genuine[name]
    with pc.code_guard() as trips:
        ep = load_pt2(path)
    assert trips == []
    assert ep.example_inputs is None  # dropped: never unpickled
    reference = torch.export.load(str(path))  # torch's own loader, on a file we wrote
    new, old = import_torch(ep), import_torch(reference)
    assert str(new.module) == str(old.module)
    assert new.weights.keys() == old.weights.keys()
    for k in old.weights:
        np.testing.assert_array_equal(new.weights[k], old.weights[k])
    x = reference.example_inputs[0]
    torch.testing.assert_close(ep.module()(*x), reference.module()(*x))


def test_rezipped_archive_with_directory_entries_loads(genuine, tmp_path):
    """`zip -r` style: deflated members and directory entries (dropped) still load."""
    items = pc.members(genuine["small"].read_bytes())
    dirs = sorted({n.rsplit("/", 1)[0] + "/" for n, _ in items})
    p = tmp_path / "rezipped.pt2"
    p.write_bytes(pc.write_zip([(d, b"") for d in dirs] + items, compress=8))
    with pc.code_guard() as trips:
        ep = load_pt2(p)
    assert trips == []
    ref = load_pt2(genuine["small"])
    assert str(import_torch(ep).module) == str(import_torch(ref).module)


def test_torch_sees_only_the_checked_members(genuine):
    arch = read_pt2(genuine["small"])
    import zipfile

    with zipfile.ZipFile(io.BytesIO(arch.torch_bytes())) as z:
        names = z.namelist()
        assert all(n.startswith("archive/") for n in names)
        assert z.read("archive/data/sample_inputs/model.pt") == b""
    assert {n.split("/", 1)[1] for n in names} == set(arch.members)


# ---- the payloads are live: torch's own loader runs them ---------------------------


def test_payloads_run_when_torch_loads_them(tmp_path, genuine):
    marker = tmp_path / "CONTROL"
    items = pc.members(genuine["small"].read_bytes())

    def attempt(data: bytes) -> bool:
        p = tmp_path / "control.pt2"
        p.write_bytes(data)
        try:
            torch.export.load(str(p))
        except Exception:
            pass
        ran = marker.exists()
        marker.unlink(missing_ok=True)
        return ran

    pickled = pc.edit_json(pc.replace(items, "data/weights/weight_0", pc.torch_save_payload(marker)),
                           pc.WEIGHTS_CFG, pc._set_meta("use_pickle", True))
    assert attempt(pc.write_zip(pickled)), "use_pickle weights"
    assert attempt(pc.write_zip(pc.replace(items, pc.SAMPLE, pc.torch_save_payload(marker)))), "sample inputs"
    expr = pc.edit_json(items, pc.PROGRAM, lambda p: pc._first_sym_int(
        p, f"__import__('builtins').exec({pc.marker_code(marker)!r})"))
    assert attempt(pc.write_zip(expr)), "symbolic shape expression"
    lib = tmp_path / "lib.so"
    lib.write_bytes(pc.shared_library(tmp_path, marker))
    if lib.read_bytes()[:4] == b"\x7fELF" and len(lib.read_bytes()) > 64:
        import ctypes

        ctypes.CDLL(str(lib))
        assert marker.exists(), "shared library constructor"


# ---- through the CLI, in a subprocess ---------------------------------------------


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _run_cli(path: Path, work: Path) -> tuple[subprocess.CompletedProcess, Path, Path]:
    work.mkdir()
    tmp = work / "tmp"
    tmp.mkdir()
    cwd = work / "cwd"
    cwd.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    env.pop("ANEC_TRACEBACK", None)
    res = subprocess.run([sys.executable, "-c", "from anec.cli import main; main()", "import", str(path),
                          "-o", str(cwd / "out")], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=CLI_TIMEOUT, preexec_fn=_limit)
    return res, cwd, tmp


def _cli_names() -> list[str]:
    src = Path(pc.__file__).read_text()
    import re

    return [m.group(1) for m in re.finditer(r'^\s*case\("([a-z0-9_]+)"(?:(?!^\s*case\().)*?cli=True', src, re.M | re.S)]


def test_cli_cases_are_chosen():
    assert len(_cli_names()) >= 8


@pytest.mark.parametrize("name", _cli_names())
def test_case_through_anec_import(corpus, tmp_path, name):
    cases, marker = corpus
    c = cases[name]
    assert c.cli
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "aotinductor_*")))
    res, cwd, tmp = _run_cli(c.path, tmp_path / "run")
    out = res.stdout + res.stderr
    assert res.returncode == c.exit_code, out
    assert c.expect in out, out
    assert "Traceback" not in out and "internal error" not in out, out
    assert not marker.exists(), "a payload ran"
    assert list(cwd.iterdir()) == [], "anec wrote something"
    assert list(tmp.iterdir()) == [], "anec left something in TMPDIR"
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "aotinductor_*"))) == before


def test_genuine_archive_through_anec_import_under_the_limit(genuine, tmp_path):
    res, cwd, tmp = _run_cli(genuine["mlp"], tmp_path / "run")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in (cwd / "out").iterdir()) == ["import.json", "model.ir", "weights.safetensors"]
    assert list(tmp.iterdir()) == []


def test_the_guard_catches_torch_unpickling(corpus):
    cases, marker = corpus
    # (torch reads the sample inputs before it parses shape expressions: the first trip is torch.load)
    for name, what in (("weights_use_pickle", "torch.load"), ("sample_inputs_torch_save", "torch.load"),
                       ("program_expr_eval", "torch.load"), ("aotinductor_so", "torch.load")):
        with pc.code_guard() as trips:
            try:
                torch.export.load(str(cases[name].path))
            except Exception:
                pass
        assert what in trips, (name, trips)
        assert not marker.exists()
    # without sample inputs torch reaches the shape expression, which it hands to sympify (eval)
    items = pc.replace(pc.members(cases["program_expr_eval"].path.read_bytes()), pc.SAMPLE, b"")
    bare = cases["program_expr_eval"].path.with_name("expr_no_sample_inputs.pt2")
    bare.write_bytes(pc.write_zip(items))
    with pc.code_guard() as trips:
        try:
            torch.export.load(str(bare))
        except Exception:
            pass
    assert "sympy.sympify(str)" in trips, trips
    assert not marker.exists()
