"""Mirror the project into mutmut's working copy of one scope (``make mutate-py``).

    python tools/mutation/stage.py SCOPE DEST

Copies the files mutmut and the selected tests need into DEST, keeping file
times (mutmut regenerates the mutants of a source file only when it is newer
than its mutated copy), copying only files that changed, deleting files that are
gone, and writing ``tools/mutation/mutmut.cfg`` plus the scope's modules and
covering tests (``SCOPES``) as DEST/setup.cfg. Caches and mutmut's own output
(DEST/mutants) are left alone.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
ITEMS = ["anec", "tests", "examples", "docs", "csrc", "benchmarks", "mk", "README.md", "Makefile", "pyproject.toml"]
SKIP = {"__pycache__", ".hypothesis", ".pytest_cache"}

# scope -> (the modules mutmut mutates, the tests each mutant can meet). The tests
# are the suites that check the scope's modules on real inputs; a function no
# selected test calls shows as "no tests" in the report (a survivor).
SCOPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "interp": (
        ("anec/ir/interp.py",),
        ("tests/ir", "tests/passes/test_pipeline_properties.py", "tests/acceptance/test_acc_passes.py",
         "tests/runtime/test_rt_every_op.py", "tests/runtime/test_rt_differential.py"),
    ),
    "passes": (
        ("anec/passes/*",),
        ("tests/passes", "tests/acceptance", "tests/mil", "tests/ir/test_core_cli_ir_tools.py",
         "tests/runtime/test_rt_every_op.py", "tests/runtime/test_rt_differential.py"),
    ),
    "mil": (
        ("anec/mil/*",),
        ("tests/mil", "tests/runtime/test_hostile_artifacts.py", "tests/runtime/test_mutations.py",
         "tests/fsutil", "tests/acceptance", "tests/passes",
         "tests/runtime/test_rt_every_op.py", "tests/runtime/test_rt_pipeline.py",
         "tests/runtime/test_rt_weight_inputs.py", "tests/runtime/test_rt_reload.py",
         # 75 s of the 95 s a survivor of the artifact writer would spend: killing compiles at
         # random points, and concurrent compiles. They stay in `make test`; the file's other
         # tests (whole replace, keep-funcs, a failed write, stale temporaries) stay here.
         *(f"--deselect=tests/mil/test_output_atomic.py::{t}" for t in (
             "test_kill_at_random_points_never_leaves_a_partial_output",
             "test_concurrent_compiles_take_turns_and_readers_see_whole_outputs"))),
    ),
}


def config(scope: str) -> str:
    """setup.cfg for ``scope``: the common settings plus its modules and tests."""
    mods, tests = SCOPES[scope]
    base = (ROOT / "tests" / "mutation" / "mutmut.cfg").read_text(encoding="utf-8")
    lines = ["only_mutate ="] + [f"    {m}" for m in mods]
    lines += ["pytest_add_cli_args_test_selection ="] + [f"    {t}" for t in tests]
    return base.rstrip("\n") + "\n" + "\n".join(lines) + "\n"


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return a.st_size == b.st_size and int(a.st_mtime) == int(b.st_mtime)


def sync(src: Path, dst: Path) -> int:
    """Make dst a copy of src; returns the number of files copied."""
    if src.is_file():
        if not dst.exists() or not _same(src.stat(), dst.stat()):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            return 1
        return 0
    copied = 0
    dst.mkdir(parents=True, exist_ok=True)
    names = {n for n in os.listdir(src) if n not in SKIP}
    for name in os.listdir(dst):
        if name not in names and name not in SKIP:
            p = dst / name
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for name in sorted(names):
        s = src / name
        if s.is_symlink():
            continue
        copied += sync(s, dst / name)
    return copied


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in SCOPES:
        print(__doc__.strip().splitlines()[2].strip(), f"(SCOPE: {', '.join(SCOPES)})", file=sys.stderr)
        return 2
    scope, dest = argv[0], Path(argv[1])
    copied = sum(sync(ROOT / item, dest / item) for item in ITEMS if (ROOT / item).exists())
    # mutmut copies the package into DEST/mutants once and refreshes only Python sources:
    # the compiled extension there must follow the one just built
    runtime = dest / "mutants" / "anec" / "runtime"
    if runtime.is_dir():
        for so in (ROOT / "anec" / "runtime").glob("_native*.so"):
            copied += sync(so, runtime / so.name)
    cfg = dest / "setup.cfg"
    tmp = cfg.with_suffix(".tmp")
    tmp.write_text(config(scope), encoding="utf-8")
    tmp.replace(cfg)
    print(f"stage: scope {scope}: {copied} files copied to {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
