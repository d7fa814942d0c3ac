"""`anec models export -o OUT` is all or nothing, like `anec compile -o`: OUT holds the
complete previous export or the complete new one after a kill (SIGKILL, SIGINT), a full disk
or a concurrent export; leftovers of killed exports (and older versions' per-file ``*.tmp``)
are removed by the next export; the user's own files in OUT are kept and never followed;
every write error names its path (exit 1)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from anec.cli import main
from tests.runtime.hostile import go, ready_child, small_tmpfs
from tests.training.conftest import corpus, gpt2_ckpt  # noqa: F401 - fixtures

KILL_TRIALS = int(os.environ.get("ANEC_KILL_TRIALS", "4"))
LORA = ("--lora", "c_attn", "--lora-rank", "4")
"""The 'new' export differs from the 'old' one (plain) in every .ir file and model.json."""


def export_args(ckpt, out, *extra) -> list[str]:
    return ["models", "export", "gpt2", str(ckpt), "-o", str(out), *extra]


def export(ckpt, out, *extra, code: int = 0):
    res = CliRunner().invoke(main, export_args(ckpt, out, *extra))
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    return res


def tree(d: Path) -> dict[str, str]:
    """Relative path -> sha256 (or 'link:' + target), never following a link."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(root) / n
            rel = str(p.relative_to(d))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif not p.is_dir():
                out[rel] = "special"
    return out


def leftovers(parent: Path, name: str = "out") -> list[str]:
    return sorted(n for n in os.listdir(parent) if n.startswith(f".{name}."))


@pytest.fixture(scope="module")
def refs(gpt2_ckpt, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("refs")
    export(gpt2_ckpt, d / "old")
    export(gpt2_ckpt, d / "new", *LORA)
    old, new = tree(d / "old"), tree(d / "new")
    assert set(old) == set(new) and old != new and old["model.json"] != new["model.json"]
    return old, new


# ---- replacing an export ----------------------------------------------------------------------


def test_an_export_replaces_the_previous_one_as_a_whole(gpt2_ckpt, refs, tmp_path):  # noqa: F811
    old, new = refs
    out = tmp_path / "out"
    export(gpt2_ckpt, out)
    assert tree(out) == old
    (out / "prefill_s999.ir").write_text("// a file an older export listed\n")
    info = json.loads((out / "model.json").read_text())
    info["files"]["prefill_s999.ir"] = ["prefill_s999"]
    (out / "model.json").write_text(json.dumps(info))
    export(gpt2_ckpt, out, *LORA)
    assert tree(out) == new  # exactly the new export: what the old model.json listed is gone
    assert leftovers(tmp_path) == []  # no temporary directory, no lock file


def test_the_users_files_are_kept_and_never_followed(gpt2_ckpt, refs, tmp_path):  # noqa: F811
    old, new = refs
    out = tmp_path / "out"
    export(gpt2_ckpt, out)
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "a.ir").write_text("// mine\n")
    (out / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(out / "pipe")
    inode = (out / "notes.txt").stat().st_ino
    export(gpt2_ckpt, out, *LORA)
    got = tree(out)
    assert {k: got[k] for k in new} == new
    assert got["passwd"] == "link:/etc/passwd" and got["pipe"] == "special"
    assert (out / "notes.txt").stat().st_ino == inode  # the same file, linked, not copied
    assert (out / "mine" / "a.ir").read_text() == "// mine\n"
    assert set(got) == set(new) | {"notes.txt", "mine/a.ir", "passwd", "pipe"}


def test_leftovers_of_killed_exports_are_removed(gpt2_ckpt, refs, tmp_path):  # noqa: F811
    old, new = refs
    out = tmp_path / "out"
    export(gpt2_ckpt, out)
    # older versions wrote each file through a '.NAME.XXXXXXXX.tmp' inside OUT
    for name in (".weights.safetensors.k3j5h2a8.tmp", ".prefill_s256.ir.a_b2c3d4.tmp", ".model.json.zzzzzzzz.tmp"):
        (out / name).write_text("partial")
    shutil.copytree(out, tmp_path / ".out.anec-tmp-deadbeef")  # a killed export's temporary directory
    (tmp_path / ".out.anec-lock").write_text("")  # and its lock file
    shutil.copytree(out, tmp_path / ".other.anec-tmp-aaaa")  # another directory's: not ours to remove
    export(gpt2_ckpt, out, *LORA)
    assert tree(out) == new
    assert sorted(os.listdir(tmp_path)) == [".other.anec-tmp-aaaa", "out"]


def test_a_link_or_a_file_as_the_output_is_refused(gpt2_ckpt, refs, tmp_path):  # noqa: F811
    real = tmp_path / "real"
    export(gpt2_ckpt, real)
    before = tree(real)
    (tmp_path / "link").symlink_to(real)
    res = export(gpt2_ckpt, tmp_path / "link", code=1)
    assert res.output.startswith(f"error: cannot write the export to '{tmp_path / 'link'}': it is a symbolic link")
    assert tree(real) == before and (tmp_path / "link").is_symlink()
    (tmp_path / "file").write_text("x")
    res = export(gpt2_ckpt, tmp_path / "file", code=2)
    assert "is a file" in res.output and (tmp_path / "file").read_text() == "x"


def test_a_model_json_planted_as_a_link_is_not_read(gpt2_ckpt, refs, tmp_path):  # noqa: F811
    old, new = refs
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.json").symlink_to("/etc/passwd")
    (out / "weights.safetensors").symlink_to(tmp_path / "victim")
    (tmp_path / "victim").write_text("keep")
    export(gpt2_ckpt, out)
    assert tree(out) == old  # both links replaced by the export's files, nothing followed
    assert (tmp_path / "victim").read_text() == "keep"


def test_a_failed_write_names_the_path_and_changes_nothing(gpt2_ckpt, refs, tmp_path, monkeypatch):  # noqa: F811
    import anec.models.export as export_mod

    old, new = refs
    out = tmp_path / "out"
    export(gpt2_ckpt, out)

    def full(path, *args, **kwargs):
        Path(path).write_bytes(b"\0" * 100)  # a partial file in the temporary directory
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export_mod, "save_fp16", full)
    res = export(gpt2_ckpt, out, *LORA, code=1)
    assert res.output.startswith(f"error: cannot write '{out}/weights.safetensors': No space left on device\n")
    assert "hint: nothing was changed" in res.output
    assert tree(out) == old and leftovers(tmp_path) == []


def test_an_error_before_writing_touches_nothing(gpt2_ckpt, refs, tmp_path):  # noqa: F811
    old, _ = refs
    out = tmp_path / "out"
    export(gpt2_ckpt, out)
    res = export(gpt2_ckpt, out, "--lora", "no_such_proj", code=1)
    assert "no projection matches the LoRA targets no_such_proj" in res.output
    assert tree(out) == old and leftovers(tmp_path) == []


# ---- concurrent exports, kills ---------------------------------------------------------------

_PRELOAD = "anec.cli, anec.models.export, anec.models.generate, anec.models.hf, anec.ir.printer, anec.ir.verifier"


def _child(args: list[str], tmp: Path) -> subprocess.Popen:
    return ready_child(args, _PRELOAD, tmp)



def test_concurrent_exports_take_turns(gpt2_ckpt, refs, tmp_path):  # noqa: F811
    old, new = refs
    out = tmp_path / "out"
    finals = []
    for _ in range(2):
        kids = [_child(export_args(gpt2_ckpt, out), tmp_path),
                _child(export_args(gpt2_ckpt, out, *LORA), tmp_path)]
        go(*kids)
        for k in kids:
            _, err = k.communicate(timeout=300)
            assert k.returncode == 0, err
        finals.append(tree(out))
        assert finals[-1] in (old, new)  # one whole export, never a mix
        assert leftovers(tmp_path) == []


def test_kill_at_random_points_leaves_a_whole_export(gpt2_ckpt, refs, tmp_path):  # noqa: F811
    """SIGKILL or SIGINT an export at random moments (over nothing, and over a complete
    previous export): OUT is then absent, the previous export or the new one, each whole;
    SIGINT leaves no temporary directory; the next export cleans up and succeeds."""
    old, new = refs
    child = _child(export_args(gpt2_ckpt, tmp_path / "timing", *LORA), tmp_path)
    start = time.perf_counter()
    go(child)
    _, err = child.communicate(timeout=300)
    duration = time.perf_counter() - start
    assert child.returncode == 0, err
    rng = random.Random(3)
    seen = {"none": 0, "old": 0, "new": 0, "temp dirs left": 0}
    for trial in range(KILL_TRIALS + 2):
        sig = signal.SIGINT if trial >= KILL_TRIALS else signal.SIGKILL
        work = tmp_path / f"t{trial}"
        work.mkdir()
        out = work / "out"
        if trial % 2:
            export(gpt2_ckpt, out)
        child = _child(export_args(gpt2_ckpt, out, *LORA), tmp_path)
        go(child)
        time.sleep(rng.uniform(0, 1.2) * duration)
        child.send_signal(sig)
        _, err = child.communicate(timeout=120)
        assert "Traceback" not in err and "internal error" not in err, err
        if not out.exists():
            assert trial % 2 == 0, f"trial {trial}: the previous export is gone"
            seen["none"] += 1
        else:
            got = tree(out)
            which = [n for n, ref in (("old", old), ("new", new)) if got == ref]
            assert which, f"trial {trial} ({sig.name}): a partial or mixed export: {sorted(got)}"
            assert which[0] == "new" or trial % 2, f"trial {trial}: an export appeared that nobody completed"
            seen[which[0]] += 1
        temps = [n for n in os.listdir(work) if n != "out"]
        seen["temp dirs left"] += bool(temps)
        if sig == signal.SIGINT:
            # finished, Ctrl-C's "Aborted!" (exit 1), or ended by the signal itself; never exit 3
            assert child.returncode in (0, -signal.SIGINT, 128 + signal.SIGINT) or (
                child.returncode == 1 and "Aborted!" in err), (child.returncode, err)
            assert temps == [], f"trial {trial}: SIGINT left {temps}"
        export(gpt2_ckpt, out, *LORA)  # the next export cleans up
        assert tree(out) == new and os.listdir(work) == ["out"]
    print(f"\n{KILL_TRIALS + 2} interrupted exports ({duration:.2f} s each): {seen}")


# ---- a full disk ------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 600 KiB tmpfs: room for one export of the tiny GPT-2 (about 400 KiB), not for two."""
    with small_tmpfs(tmp_path, "600k") as mnt:
        yield mnt


def test_a_full_disk_names_the_path_and_keeps_the_previous_export(gpt2_ckpt, refs, small_disk):  # noqa: F811
    old, new = refs
    out = small_disk / "out"
    export(gpt2_ckpt, out)
    res = export(gpt2_ckpt, out, *LORA, code=1)
    assert res.output.startswith("error: cannot write"), res.output
    assert str(out) in res.output.splitlines()[0] and "No space left on device" in res.output
    assert tree(out) == old and leftovers(small_disk) == []
    shutil.rmtree(out)  # room again: the same command now succeeds
    export(gpt2_ckpt, out, *LORA)
    assert tree(out) == new
