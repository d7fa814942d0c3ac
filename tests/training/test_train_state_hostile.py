"""A training run folder is hostile input: `anec train --resume` refuses damaged or planted
state, links, FIFOs and devices with exit 1 and a message naming the file and field, never
hangs, never reads or writes outside the folder, and changes nothing it refused; a run
killed (SIGKILL, SIGINT) at any moment, before or after its first save, or stopped by a full
disk, leaves the last complete state and is finished by running the command again.

The case generator (``CASES``) builds each hostile folder from one real run folder; every case
names the exact exit code and the message (with the folder's path) the command must print.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from tests.runtime.hostile import go, ready_child, small_tmpfs, watched
from tests.training.conftest import corpus, gpt2_ckpt  # noqa: F401 - fixtures

HANG_SECONDS = 20
STEPS = 4  # the good run: 4 steps, a state saved at steps 2 and 4
KILL_TRIALS = int(os.environ.get("ANEC_KILL_TRIALS", "4"))


def train_args(ckpt, data, out, steps, *extra) -> list[str]:
    return ["train", str(ckpt), "--data", str(data), "--steps", str(steps), "-o", str(out), "--seq-len", "16",
            "--batch-size", "2", "--lr", "1e-3", "--save-every", "2", "--backend", "sim", "-q", *extra]


def tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def save_tensors(path: Path, t: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    path.unlink()
    save_file(t, str(path))


def digest_tree(d: Path) -> dict[str, str]:
    """Relative path -> sha256 (or what a non-file entry is), never following a link."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in sorted(dirs + files):
            p = Path(root) / n
            rel = str(p.relative_to(d))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif not p.is_dir():
                out[rel] = "special"
    return out


@pytest.fixture(scope="module")
def good_run(gpt2_ckpt, corpus, tmp_path_factory) -> Path:  # noqa: F811
    run = tmp_path_factory.mktemp("good") / "run"
    res = CliRunner().invoke(main, train_args(gpt2_ckpt, corpus, run, STEPS))
    assert res.exit_code == 0, res.output
    shutil.rmtree(run / "model")  # a run folder as a kill after the last save leaves it
    return run


# ---- the case generator ---------------------------------------------------------------------


@dataclass
class Case:
    name: str
    edit: Callable[[Path, Path], None]
    """edit(run folder, an outside directory) makes the folder hostile."""
    code: int
    message: str
    """Must appear in the output; ``{run}`` is the run folder, ``{out}`` the outside directory."""
    resume: bool = True
    extra: tuple[str, ...] = ()


def meta(edit: Callable[[dict], None]) -> Callable[[Path, Path], None]:
    def apply(run: Path, outside: Path) -> None:
        p = run / "state" / "trainer.json"
        m = json.loads(p.read_text())
        edit(m)
        p.write_text(json.dumps(m))
    return apply


def setf(path: str, value) -> Callable[[Path, Path], None]:
    def edit(m: dict) -> None:
        *parents, last = path.split(".")
        obj = m
        for k in parents:
            obj = obj[k]
        obj[last] = value
    return meta(edit)


def delf(path: str) -> Callable[[Path, Path], None]:
    def edit(m: dict) -> None:
        *parents, last = path.split(".")
        obj = m
        for k in parents:
            obj = obj[k]
        del obj[last]
    return meta(edit)


def raw_json(data: bytes) -> Callable[[Path, Path], None]:
    def apply(run: Path, outside: Path) -> None:
        (run / "state" / "trainer.json").write_bytes(data)
    return apply


def tensor(file: str, edit: Callable[[dict[str, np.ndarray], str], None]) -> Callable[[Path, Path], None]:
    """Edit the tensors of state/<file>; ``edit(tensors, first key)``."""
    def apply(run: Path, outside: Path) -> None:
        p = run / "state" / file
        t = {k: v.copy() for k, v in tensors(p).items()}
        edit(t, sorted(t)[0])
        save_tensors(p, t)
    return apply


def poke(value):
    def edit(t, k):
        t[k].reshape(-1)[0] = value
    return edit


def replace_with(rel: str, make: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    """Replace run/<rel> (a file or a directory) by what ``make(path, outside)`` creates."""
    def apply(run: Path, outside: Path) -> None:
        p = run / rel
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif os.path.lexists(p):
            p.unlink()
        make(p, outside)
    return apply


def link_to(target: str) -> Callable[[Path, Path], None]:
    def make(p: Path, outside: Path) -> None:
        p.symlink_to(target.format(out=outside))
    return make


def fifo(p: Path, outside: Path) -> None:
    os.mkfifo(p)


def directory(p: Path, outside: Path) -> None:
    p.mkdir()


def a_file(p: Path, outside: Path) -> None:
    p.write_text("x")


def sock(p: Path, outside: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


def device(p: Path, outside: Path) -> None:
    try:
        os.mknod(p, 0o600 | 0o020000, os.makedev(1, 3))  # a character device, as /dev/null
    except OSError as e:
        pytest.skip(f"cannot make a device node here: {e.strerror}")


def outside_state(p: Path, outside: Path) -> None:
    shutil.copytree(p.parent.parent / "good-state", outside / "state")
    p.symlink_to(outside / "state")


def nothing(run: Path, outside: Path) -> None:
    pass


STATE = "{run}/state"
TJ = "{run}/state/trainer.json"
RANGE = "expected an integer in"


def _field_cases() -> list[Case]:
    bad_int = [("step", -1, "[0, 1000000000], got -1"), ("step", 10**18, "[0, 1000000000], got 1000000000000000000"),
               ("step", "12", '[0, 1000000000], got "12"'), ("step", 1.5, "[0, 1000000000], got 1.5"),
               ("step", True, "[0, 1000000000], got true"), ("step", None, "[0, 1000000000], got null"),
               ("adam.step_count", -3, "[0, 4], got -3"), ("adam.step_count", 5, "[0, 4], got 5"),
               ("scaler.good_steps", -1, "[0, 200], got -1"), ("scaler.skipped", 10**18, "[0, 4], got 10"),
               ("scaler.growth_interval", 0, "[1, 1000000000], got 0"), ("batch_size", 0, "[1, 2147483648], got 0")]
    cases = [Case(f"int {f}={v!r}", setf(f, v), 1, f"{TJ}: field '{f}': {RANGE} {msg}") for f, v, msg in bad_int]
    bad_float = [("scaler.scale", 0, "(0.0, 65536.0], got 0"), ("scaler.scale", -1024.0, "(0.0, 65536.0], got -1024.0"),
                 ("scaler.scale", 1e300, "(0.0, 65536.0], got 1e+300"),
                 ("scaler.scale", "big", '(0.0, 65536.0], got "big"'),
                 ("adam.lr", -1.0, "[0.0, 1000000.0], got -1.0"), ("adam.beta2", 2.0, "[0.0, 1.0], got 2.0"),
                 ("adam.eps", 0.0, "(0.0, 1.0], got 0.0"), ("grad_clip", -1.0, "[0.0, 1000000000000.0], got -1.0")]
    cases += [Case(f"float {f}={v!r}", setf(f, v), 1, f"{TJ}: field '{f}': expected a finite number in {msg}")
              for f, v, msg in bad_float]
    cases += [
        Case("missing step", delf("step"), 1, f"{TJ}: field 'step' is missing"),
        Case("missing scaler", delf("scaler"), 1, f"{TJ}: field 'scaler.scale' is missing"),
        Case("steps do not add up", meta(lambda m: m["scaler"].update(skipped=1)), 1,
             f"{TJ}: fields 'adam.step_count' (4) and 'scaler.skipped' (1) add up to more than 'step' (4)"),
        Case("other seq_len", setf("seq_len", 99), 1,
             f"{TJ}: field 'seq_len': the saved run has seq_len 99, this one 16"),
        Case("other lora_rank", setf("lora_rank", 4), 1,
             f"{TJ}: field 'lora_rank': the saved run has lora_rank 4, this one 0"),
        Case("unknown format", setf("format", "anec-train-state/9"), 1,
             f"{TJ} is not an anec training state (anec-train-state/2)"),
        Case("other model", setf("model_config_sha256", "0" * 64), 1,
             f"{TJ}: field 'model_config_sha256': the state was trained from another model than"),
        Case("no model identity", delf("model_config_sha256"), 1, f"{TJ}: field 'model_config_sha256' is missing"),
        Case("model identity not a digest", setf("model_config_sha256", 7), 1,
             f"{TJ}: field 'model_config_sha256': expected a sha256 hex digest, got 7"),
    ]
    return cases


def _json_cases() -> list[Case]:
    nj = f"{TJ} is not JSON: the training state is not valid JSON"
    return [
        Case("not JSON", raw_json(b"{not json"), 1, f"{nj} (Expecting property name"),
        Case("NaN scale", raw_json(b'{"format": "anec-train-state/2", "scaler": {"scale": NaN}}'), 1,
             f"{nj} (NaN is not a JSON number)"),
        Case("Infinity step", raw_json(b'{"step": Infinity}'), 1, f"{nj} (Infinity is not a JSON number)"),
        Case("duplicate key", raw_json(b'{"step": 1, "step": 2}'), 1, f'{nj} (key "step" appears twice in one object)'),
        Case("not UTF-8", raw_json(b"\xff\xfe{}"), 1,
             f"{TJ} is not JSON: the training state is not valid UTF-8 (byte 0)"),
        Case("deep nesting", raw_json(b"[" * 5000 + b"]" * 5000), 1, f"{TJ} is not JSON: the training state is nested"),
        Case("a list", raw_json(b"[]"), 1, f"{TJ} is not an anec training state"),
        Case("too large", raw_json(b" " * (1 << 20) + b"{}"), 1,
             f"training state '{TJ}' is 1048578 bytes, above the limit of 1048576 bytes"),
        Case("empty", raw_json(b""), 1, f"{nj} (Expecting value"),
    ]


def _tensor_cases() -> list[Case]:
    P, M, V = (f"{{run}}/state/{f}.safetensors" for f in ("params", "adam_m", "adam_v"))
    return [
        Case("NaN parameter", tensor("params.safetensors", poke(np.nan)), 1, f"{P}: tensor "),
        Case("Inf parameter", tensor("params.safetensors", poke(np.inf)), 1, "holds 1 NaN or infinite values"),
        Case("parameter beyond fp16", tensor("params.safetensors", poke(1e6)), 1,
             "has a value of magnitude 1e+06, beyond fp16's range (65504) the programs compute in"),
        Case("negative second moment", tensor("adam_v.safetensors", poke(-1.0)), 1,
             "holds 1 negative values (a second moment is a mean of squares, never negative)"),
        Case("NaN first moment", tensor("adam_m.safetensors", poke(np.nan)), 1, f"{M}: tensor "),
        Case("Inf second moment", tensor("adam_v.safetensors", poke(np.inf)), 1, f"{V}: tensor "),
        Case("wrong shape", tensor("params.safetensors", lambda t, k: t.__setitem__(k, np.zeros(3, np.float32))), 1,
             "is float32 [3], expected float32 ["),
        Case("wrong dtype", tensor("params.safetensors", lambda t, k: t.__setitem__(k, t[k].astype(np.float16))), 1,
             "is float16 ["),
        Case("missing parameter", tensor("params.safetensors", lambda t, k: t.pop(k)), 1,
             f"{P} does not hold this run's tensors; missing: "),
        Case("unknown tensor", tensor("params.safetensors", lambda t, k: t.__setitem__("bogus", t[k])), 1,
             f"{P} does not hold this run's tensors; unknown: bogus"),
        Case("moments missing", tensor("adam_m.safetensors", lambda t, k: t.clear()), 1,
             f"{STATE}: the AdamW moments do not match the step count 4 (first moments for 0"),
        Case("garbage", lambda run, o: (run / "state" / "adam_m.safetensors").write_bytes(b"\xff" * 64), 1,
             f"{M} is not a safetensors file"),
        Case("truncated", lambda run, o: _truncate(run / "state" / "params.safetensors"), 1,
             f"{P} is not a safetensors file"),
    ]


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _link_cases() -> list[Case]:
    link = "(it is a symbolic link)"
    return [
        Case("params a link", replace_with("state/params.safetensors", link_to("{out}/params.safetensors")), 1,
             f"cannot read training state '{{run}}/state/params.safetensors' {link}"),
        Case("trainer.json -> /etc/passwd", replace_with("state/trainer.json", link_to("/etc/passwd")), 1,
             f"cannot read training state '{TJ}' {link}"),
        Case("adam_v -> /dev/zero", replace_with("state/adam_v.safetensors", link_to("/dev/zero")), 1,
             f"cannot read training state '{{run}}/state/adam_v.safetensors' {link}"),
        Case("trainer.json a FIFO", replace_with("state/trainer.json", fifo), 1,
             f"cannot read training state '{TJ}' (it is a FIFO); expected a regular file"),
        Case("params a FIFO", replace_with("state/params.safetensors", fifo), 1, "(it is a FIFO)"),
        Case("trainer.json a socket", replace_with("state/trainer.json", sock), 1, "(it is a socket)"),
        Case("trainer.json a device", replace_with("state/trainer.json", device), 1, "(it is a device)"),
        Case("trainer.json a directory", replace_with("state/trainer.json", directory), 1,
             f"cannot read training state '{TJ}' (it is a directory)"),
        Case("trainer.json missing", replace_with("state/trainer.json", lambda p, o: None), 1,
             f"cannot read training state '{TJ}': it is missing"),
        Case("state a link", replace_with("state", outside_state), 1,
             f"cannot resume from '{STATE}': it is a symbolic link"),
        Case("state a file", replace_with("state", a_file), 1, f"cannot resume from '{STATE}': it is a file"),
        Case(".lock -> outside (new file)", replace_with(".lock", link_to("{out}/created-by-lock")), 1,
             "cannot open lock file '{run}/.lock': it is a symbolic link"),
        Case(".lock -> /etc/passwd", replace_with(".lock", link_to("/etc/passwd")), 1,
             "cannot open lock file '{run}/.lock': it is a symbolic link"),
        Case(".lock a FIFO", replace_with(".lock", fifo), 1,
             "cannot open lock file '{run}/.lock': it is a FIFO, not a regular file"),
        Case(".lock a directory", replace_with(".lock", directory), 1,
             "cannot open lock file '{run}/.lock': it is a directory"),
        Case("log.jsonl -> /etc/passwd", replace_with("log.jsonl", link_to("/etc/passwd")), 1,
             "cannot read training log '{run}/log.jsonl' (it is a symbolic link)"),
        Case("log.jsonl a FIFO", replace_with("log.jsonl", fifo), 1,
             "cannot read training log '{run}/log.jsonl' (it is a FIFO); expected a regular file"),
        Case("run.json -> outside", replace_with("run.json", link_to("{out}/run.json")), 1,
             "cannot read run settings '{run}/run.json' (it is a symbolic link)"),
        Case("run.json a FIFO", replace_with("run.json", fifo), 1,
             "cannot read run settings '{run}/run.json' (it is a FIFO); expected a regular file"),
        Case("run.json not JSON", lambda run, o: (run / "run.json").write_text("{"), 1,
             "{run}/run.json: the run settings is not valid JSON"),
        Case("run.json a list", lambda run, o: (run / "run.json").write_text("[]"), 1,
             "{run}/run.json: the run settings are not a JSON object"),
        Case("run.json other lr", lambda run, o: _edit_run_json(run, lr=0.5), 1,
             "the run in '{run}' was started with other settings: lr"),
        Case("run.json missing", replace_with("run.json", lambda p, o: None), 1, "'{run}' holds no run to resume"),
        Case("a new run into a used folder", nothing, 1, "'{run}' is not empty (it holds 'loss.png')", resume=False),
        Case("a negative seed", nothing, 2, "Invalid value for '--seed': -1 is not in the range",
             extra=("--seed", "-1")),
    ]


def _edit_run_json(run: Path, **changes) -> None:
    cfg = json.loads((run / "run.json").read_text())
    cfg.update(changes)
    (run / "run.json").write_text(json.dumps(cfg))


def _accepted_cases() -> list[Case]:
    """Folders that look odd but are not hostile: the resume goes on (exit 0)."""
    return [
        Case("loss.png -> outside is replaced, not followed", replace_with("loss.png", link_to("{out}/victim.png")),
             0, "6 steps, final loss"),
        Case("a killed run's temporary files", lambda run, o: (run / ".log.jsonl.tmp123-abcd1234").write_text("x"),
             0, "6 steps, final loss"),
        Case("log lines cut by a kill", lambda run, o: open(run / "log.jsonl", "a").write('{"step": 3, "lo'), 0,
             "6 steps, final loss"),
        Case("a format-1 state (no model identity)", meta(lambda m: (m.pop("model_config_sha256"),
                                                                      m.update(format="anec-train-state/1"))),
             0, "6 steps, final loss"),
    ]


CASES = _field_cases() + _json_cases() + _tensor_cases() + _link_cases() + _accepted_cases()


def test_the_generator_has_enough_cases():
    assert len(CASES) >= 40 and len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_run_folder(case: Case, good_run, gpt2_ckpt, corpus, tmp_path):  # noqa: F811
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(good_run, run, symlinks=True)
    outside.mkdir()
    shutil.copytree(good_run / "state", tmp_path / "good-state")
    shutil.copy(good_run / "state" / "params.safetensors", outside / "params.safetensors")
    shutil.copy(good_run / "run.json", outside / "run.json")
    (outside / "victim.png").write_bytes(b"not yours")
    case.edit(run, outside)
    before, outside_before = digest_tree(run), digest_tree(outside)
    args = train_args(gpt2_ckpt, corpus, run, STEPS + 2, *(("--resume",) if case.resume else ()), *case.extra)
    with watched(HANG_SECONDS):
        res = CliRunner().invoke(main, args)
    out = res.output
    expected = case.message.format(run=run, out=outside)
    assert res.exit_code == case.code, out
    assert expected in out, out
    assert "Traceback" not in out and "internal error" not in out
    assert "root:" not in out  # nothing of /etc/passwd is quoted
    assert digest_tree(outside) == outside_before  # nothing outside was written or created
    if case.code:
        assert digest_tree(run) == before  # a refused resume changes nothing
        assert out.startswith("error: ") or out.startswith("Usage:")
    else:
        assert (run / "model" / "model.safetensors").is_file()
        assert not (run / "loss.png").is_symlink()
        assert not [n for n in os.listdir(run) if ".tmp" in n]


# ---- a run killed before its first save -------------------------------------------------------


def _killed_before_first_save(run: Path, gpt2_ckpt, corpus) -> None:  # noqa: F811
    run.mkdir()
    cfg = dict(checkpoint=str(gpt2_ckpt), data=str(corpus), steps=STEPS, seq_len=16, batch_size=2, lr=1e-3,
               weight_decay=0.0, grad_clip=1.0, lora_rank=0, seed=0, save_every=2, backend="sim", target=None)
    (run / "run.json").write_text(json.dumps(cfg))
    (run / "log.jsonl").write_text('{"step": 1, "loss": 5.7}\n{"step": 2, "lo')
    (run / ".lock").write_text("")
    (run / ".log.jsonl.tmp4242-0badf00d").write_text("partial")


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_killed_before_its_first_save_runs_again(resume, good_run, gpt2_ckpt, corpus, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    _killed_before_first_save(run, gpt2_ckpt, corpus)
    res = CliRunner().invoke(main, train_args(gpt2_ckpt, corpus, run, STEPS,
                                                              *(("--resume",) if resume else ())))
    assert res.exit_code == 0, res.output + res.stderr
    if resume:
        assert f"note: '{run}' has no saved state yet (the run stopped before its first save): " \
               "starting it again from step 0" in res.stderr
    rows = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert sorted(os.listdir(run)) == [".lock", "log.jsonl", "loss.png", "model", "run.json", "state"]
    assert tensors(run / "state" / "params.safetensors").keys() == tensors(good_run / "state" /
                                                                           "params.safetensors").keys()
    for k, v in tensors(good_run / "state" / "params.safetensors").items():  # the same run, from scratch
        assert tensors(run / "state" / "params.safetensors")[k].tobytes() == v.tobytes(), k


def test_resume_of_nothing_says_so(gpt2_ckpt, corpus, tmp_path):  # noqa: F811
    for run in (tmp_path / "absent", tmp_path / "empty"):
        if run.name == "empty":
            run.mkdir()
        res = CliRunner().invoke(main, train_args(gpt2_ckpt, corpus, run, STEPS, "--resume"))
        assert res.exit_code == 1
        assert res.output.startswith(f"error: '{run}' holds no run to resume\nhint: start it without --resume")
    assert not (tmp_path / "absent").exists()


# ---- SIGKILL and SIGINT at random moments -----------------------------------------------------

_PRELOAD = "anec.cli, anec.training.run, anec.training.trainer, anec.compiler, anec.runtime, safetensors.numpy"


def _child(args: list[str], tmp: Path) -> subprocess.Popen:
    return ready_child(args, _PRELOAD, tmp)



def _state_ok(run: Path, gpt2_ckpt) -> bool:  # noqa: F811
    """Whether run/state is a complete state that load_state accepts."""
    from anec.training import Trainer
    from anec.training.state import load_state

    with Trainer(gpt2_ckpt, backend="interp", seq_len=16, batch_size=2) as tr:
        load_state(tr, run / "state")
    return True


def test_kill_at_random_points_then_run_again(good_run, gpt2_ckpt, corpus, tmp_path):  # noqa: F811
    """SIGKILL or SIGINT a 6-step run (from nothing, or resuming the 4-step state) at random
    moments: the folder holds the last complete state or none, never a partial one; SIGINT
    ends it as an interrupt (no traceback, never exit 3); running the command again
    (with --resume once run.json exists) finishes the run with the weights of a run that was
    never interrupted."""
    steps = STEPS + 2
    ref = tmp_path / "ref"
    child = _child(train_args(gpt2_ckpt, corpus, ref, steps)[:], tmp_path)
    start = time.perf_counter()
    go(child)
    _, err = child.communicate(timeout=300)
    duration = time.perf_counter() - start
    assert child.returncode == 0, err
    want = tensors(ref / "model" / "model.safetensors")
    rng = random.Random(7)
    seen = {"no state": 0, "state": 0, "model": 0}
    for trial in range(KILL_TRIALS + 2):
        sig = signal.SIGINT if trial >= KILL_TRIALS else signal.SIGKILL
        run = tmp_path / f"t{trial}"
        over_state = trial % 2 == 1
        if over_state:
            shutil.copytree(good_run, run)
        child = _child(train_args(gpt2_ckpt, corpus, run, steps, *(("--resume",) if over_state else ())), tmp_path)
        go(child)
        time.sleep(rng.uniform(0.1, 1.1) * duration)
        child.send_signal(sig)
        _, err = child.communicate(timeout=120)
        assert "Traceback" not in err and "internal error" not in err, err
        if sig == signal.SIGINT:
            # finished, Ctrl-C's "Aborted!" (exit 1), or ended by the signal itself; never exit 3
            assert child.returncode in (0, -signal.SIGINT, 128 + signal.SIGINT) or (
                child.returncode == 1 and "Aborted!" in err), (child.returncode, err)
        if (run / "state").exists():
            assert _state_ok(run, gpt2_ckpt)
            seen["state"] += 1
        else:
            seen["no state"] += 1
        if (run / "model").exists():
            seen["model"] += 1
            assert set(tensors(run / "model" / "model.safetensors")) == set(want)
        again = train_args(gpt2_ckpt, corpus, run, steps, *(("--resume",) if (run / "run.json").exists() else ()))
        res = CliRunner().invoke(main, again)
        assert res.exit_code == 0, f"trial {trial} ({sig.name}): {res.output}"
        got = tensors(run / "model" / "model.safetensors")
        for k in want:
            assert got[k].tobytes() == want[k].tobytes(), (trial, k)
        assert sorted(os.listdir(run)) == [".lock", "log.jsonl", "loss.png", "model", "run.json", "state"], trial
    print(f"\n{KILL_TRIALS + 2} interrupted runs ({duration:.2f} s each): {seen}")


# ---- a full disk ------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 2.5 MiB tmpfs: room for one saved state of the tiny GPT-2 (1.3 MiB), not for two."""
    with small_tmpfs(tmp_path, "2560k") as mnt:
        yield mnt


def test_a_full_disk_fails_naming_the_path_and_keeps_the_last_state(small_disk, gpt2_ckpt, corpus):  # noqa: F811
    run = small_disk / "run"
    res = CliRunner().invoke(main, train_args(gpt2_ckpt, corpus, run, STEPS))
    assert res.exit_code == 1, res.output
    assert "No space left on device" in res.output
    assert res.output.startswith(f"error: cannot write '{run}/"), res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    assert _state_ok(run, gpt2_ckpt)  # the state of step 2 is whole
    assert not [n for n in os.listdir(run) if "tmp" in n]
    trainer = json.loads((run / "state" / "trainer.json").read_text())
    assert trainer["step"] == 2
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    res = CliRunner().invoke(main, train_args(gpt2_ckpt, corpus, run, STEPS, "--resume"))
    assert res.exit_code == 0, res.output
    assert json.loads((run / "state" / "trainer.json").read_text())["step"] == STEPS


def test_leftovers_of_a_killed_save_are_removed_even_with_nothing_left_to_train(good_run, gpt2_ckpt, corpus,  # noqa: F811
                                                                                  tmp_path):
    """A kill during the last save or the model write leaves a temporary directory and a lock
    file of that write; the next run removes them though it has no step left to take."""
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    shutil.copytree(good_run / "state", run / ".state.anec-tmp-0badf00d")
    (run / ".model.anec-tmp-12345678").mkdir()
    (run / ".model.anec-tmp-12345678" / "model.safetensors").write_bytes(b"partial")
    (run / ".state.anec-lock").write_text("")
    (run / ".model.anec-tmp-linked").symlink_to(tmp_path / "outside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep").write_text("keep")
    res = CliRunner().invoke(main, train_args(gpt2_ckpt, corpus, run, STEPS, "--resume"))
    assert res.exit_code == 0, res.output
    assert sorted(os.listdir(run)) == [".lock", "log.jsonl", "loss.png", "model", "run.json", "state"]
    assert (tmp_path / "outside" / "keep").read_text() == "keep"  # a link is removed, not followed
