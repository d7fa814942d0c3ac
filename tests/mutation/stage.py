"""Mirror the project into mutmut's working copy (``make mutate-py``).

    python tests/mutation/stage.py DEST

Copies the files mutmut and the selected tests need into DEST, keeping file
times (mutmut regenerates the mutants of a source file only when it is newer
than its mutated copy), copying only files that changed, deleting files that are
gone, and writing ``tests/mutation/mutmut.cfg`` as DEST/setup.cfg. Caches and
mutmut's own output (DEST/mutants) are left alone.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
ITEMS = ["anec", "tests", "examples", "docs", "csrc", "benchmarks", "mk", "README.md", "Makefile", "pyproject.toml"]
SKIP = {"__pycache__", ".hypothesis", ".pytest_cache"}


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
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    dest = Path(argv[0])
    copied = sum(sync(ROOT / item, dest / item) for item in ITEMS if (ROOT / item).exists())
    shutil.copyfile(ROOT / "tests" / "mutation" / "mutmut.cfg", dest / "setup.cfg")
    print(f"stage: {copied} files copied to {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
