"""Run the scripted C mutations (``c_mutants.py``) one at a time against the tests that cover them.

    python tools/mutation/cmutate.py [--only ID,ID] [--out FILE]

The runtime is built once, unmutated, into ``build/mutate/c`` (objects of every
csrc/*.c, the cffi wrapper, the C test programs' own sources; the runtime once
more with the fake of the Apple side, -DANEC_ANE_TESTING, for the ane driver's
protocol programs). For each mutant only the mutated file is compiled again
(from a copy: csrc/ is never written), in the flavours its tests need, then
linked into

  * the C test programs that cover the file (``c_mutants.program``: the unit
    tests tests/c/test_*.c, the ane protocol programs of mk/ane.mk, built
    without sanitizers), run directly, and
  * a copy of the ``anec`` package holding the mutated ``_native`` extension, on
    which the covering Python test files run (first failure stops them).

A mutant is *killed* when a test fails, crashes or times out, *survived* when
every covering test passes, *invalid* when it does not compile (a broken
mutant entry). The unmutated build goes through the same steps first and must
pass, so a kill is the mutant's doing. Results go to ``--out`` as JSON (one
record per mutant); ``report.py`` turns them into REPORT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from c_mutants import MUTANTS, TESTS, CMutant, program  # noqa: E402

CC = os.environ.get("CC", "gcc")
# the C unit tests' and the extension's flags (mk/c.mk, anec/runtime/_ffi_build.py), without
# -Werror: a mutant that only draws a warning is still a mutant
CFLAGS = ["-std=c11", "-O2", "-fPIC", "-fno-strict-aliasing", "-Wall", "-Wextra", "-DNDEBUG",
          f"-I{ROOT / 'csrc'}", f"-I{ROOT / 'tests' / 'c'}"]
LIBS = ["-lm", "-lpthread", "-ldl"]
# the flavour the ane protocol programs are built in (mk/ane.mk): the driver's fake symbol table,
# under ASan + UBSan as there (the fake counts retains; the sanitizers see what it cannot)
ANE_SAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
ANE_FLAGS = ["-DANEC_ANE_TESTING", f"-I{ROOT / 'tests' / 'ane_protocol'}", *ANE_SAN]
ANE_ENV = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
C_TIMEOUT = 300
PY_TIMEOUT = 900


def _run(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def _compile(src: Path, obj: Path, extra: list[str] = ()) -> None:
    obj.parent.mkdir(parents=True, exist_ok=True)
    p = _run([CC, *CFLAGS, *extra, "-c", str(src), "-o", str(obj)], 300)
    if p.returncode:
        raise RuntimeError(f"{src}: does not compile:\n{p.stderr[-3000:]}")


class Build:
    """The unmutated objects, and the link steps that swap one of them for a mutant's."""

    def __init__(self, work: Path, python: str, files: list[str]):
        self.work = work
        self.python = python
        self.sources = sorted(p.name for p in (ROOT / "csrc").glob("*.c") if not p.name.startswith("fuzz_"))
        self.defs = [] if "driver_ane.c" in self.sources else ["-DANEC_NO_ANE_DRIVER"]
        self.obj = work / "obj"
        self.pkg = work / "pkg"
        self.so_name = next((ROOT / "anec" / "runtime").glob("_native*.so"), Path("_native.abi3.so")).name
        # the C test programs the chosen files' mutants are judged by
        self.programs = sorted({t for f in files for t in TESTS[f][0]})
        self.flavours = sorted({"ane" if program(t).ane else "plain" for t in self.programs} | {"plain"})

    def flags(self, flavour: str) -> list[str]:
        return self.defs + (ANE_FLAGS if flavour == "ane" else [])

    def obj_dir(self, flavour: str) -> Path:
        return self.obj if flavour == "plain" else self.work / f"obj-{flavour}"

    def prepare(self) -> None:
        for flavour in self.flavours:
            for name in self.sources:
                _compile(ROOT / "csrc" / name, self.obj_dir(flavour) / (name[:-2] + ".o"), self.flags(flavour))
        # the cffi wrapper of anec/runtime/_ffi_build.py, compiled like its sources
        wrapper = self.work / "_native.c"
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import _ffi_build as b; "
                "b.make_builder(absolute=True).emit_c_code(sys.argv[2])")
        p = _run([self.python, "-c", code, str(ROOT / "anec" / "runtime"), str(wrapper)], 300)
        if p.returncode:
            raise RuntimeError(f"cffi wrapper: {p.stderr[-3000:]}")
        _compile(wrapper, self.obj / "_native_wrapper.o", [f"-I{sysconfig.get_paths()['include']}", "-w"])
        for t in self.programs:
            prog = program(t)
            for src in prog.mains:
                _compile(ROOT / src, self.obj / "tests" / t / (Path(src).stem + ".o"),
                         self.flags("ane" if prog.ane else "plain"))
        # a copy of the package without the extension: each mutant's extension is put into it
        if self.pkg.exists():
            shutil.rmtree(self.pkg)
        shutil.copytree(ROOT / "anec", self.pkg / "anec",
                        ignore=shutil.ignore_patterns("__pycache__", "_native*.so", "_native.c"))

    def objects(self, flavour: str, swap: dict[tuple[str, str], Path], only=None) -> list[str]:
        names = self.sources if only is None else [n for n in self.sources if n in only]
        return [str(swap.get((flavour, n), self.obj_dir(flavour) / (n[:-2] + ".o"))) for n in names]

    def link(self, out: Path, swap: dict[tuple[str, str], Path], programs: list[str], extension: bool) -> None:
        """The extension and the C test programs with the objects in ``swap`` ((flavour, file) ->
        object) replaced."""
        out.mkdir(parents=True, exist_ok=True)
        if extension:
            p = _run([CC, "-shared", str(self.obj / "_native_wrapper.o"), *self.objects("plain", swap),
                      "-o", str(out / self.so_name), *LIBS], 300)
            if p.returncode:
                raise RuntimeError(f"link of the extension failed:\n{p.stderr[-3000:]}")
        for t in programs:
            prog = program(t)
            mains = [str(self.obj / "tests" / t / (Path(src).stem + ".o")) for src in prog.mains]
            objs = self.objects("ane" if prog.ane else "plain", swap, prog.runtime)
            p = _run([CC, *(ANE_SAN if prog.ane else []), *mains, *objs, "-o", str(out / t), *LIBS], 300)
            if p.returncode:
                raise RuntimeError(f"link of {t} failed:\n{p.stderr[-3000:]}")

    def run_tests(self, out: Path, file: str, py_timeout: float) -> tuple[str, str]:
        """('killed' | 'survived' | 'timeout', detail) of the tests that cover ``file``."""
        c_tests, py_tests = TESTS[file]
        for t in c_tests:
            try:
                p = _run([str(out / t)], C_TIMEOUT, cwd=ROOT, env=dict(os.environ, **ANE_ENV))
            except subprocess.TimeoutExpired:
                return "timeout", f"{t} ran over {C_TIMEOUT} s"
            if p.returncode:
                lines = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
                # a TAP program names its first failing test (and the check after it)
                at = next((i for i, ln in enumerate(lines) if ln.startswith("not ok")), None)
                shown = lines[at - 1:at + 1] if at else lines[-2:]
                return "killed", f"{t} (exit {p.returncode}): " + " | ".join(shown)[:300]
        if not py_tests:
            return "survived", f"{', '.join(c_tests)} passed"
        shutil.copy2(out / self.so_name, self.pkg / "anec" / "runtime" / self.so_name)
        env = dict(os.environ, PYTHONPATH=f"{self.pkg}{os.pathsep}{ROOT}", OMP_NUM_THREADS="1")
        pytest = str(Path(self.python).parent / "pytest")
        try:
            p = _run([pytest, "-q", "-x", "-p", "no:cacheprovider", "--hypothesis-seed=0", *py_tests],
                     py_timeout, cwd=ROOT, env=env)
        except subprocess.TimeoutExpired:
            return "timeout", f"python tests ran over {py_timeout:.0f} s"
        if p.returncode:
            failed = [ln for ln in p.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
            return "killed", (failed[0] if failed else p.stdout.strip().splitlines()[-1])[:300]
        return "survived", p.stdout.strip().splitlines()[-1][:200] if p.stdout.strip() else ""

    def check_package(self, out: Path) -> None:
        """The tests must import the copy, not the project's own extension."""
        shutil.copy2(out / self.so_name, self.pkg / "anec" / "runtime" / self.so_name)
        env = dict(os.environ, PYTHONPATH=f"{self.pkg}{os.pathsep}{ROOT}")
        p = _run([self.python, "-c", "import anec.runtime._native as m; print(m.__file__)"], 120, cwd="/", env=env)
        if p.returncode or not p.stdout.strip().startswith(str(self.pkg)):
            raise RuntimeError(f"the package copy is not the one imported: {p.stdout}{p.stderr}")


def apply(m: CMutant) -> str:
    text = (ROOT / m.file).read_text(encoding="utf-8")
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"c_mutants.py: mutant {m.id}: the snippet occurs {n} times in {m.file} "
                         f"(it must occur once): update the entry")
    return text.replace(m.old, m.new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated mutant ids (default: all)")
    ap.add_argument("--work", default=str(ROOT / "build" / "mutate" / "c"))
    ap.add_argument("--out", default=str(ROOT / "build" / "mutate" / "c-results.json"))
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)

    chosen = [m for m in MUTANTS if not args.only or m.id in args.only.split(",")]
    unknown = set(filter(None, args.only.split(","))) - {m.id for m in MUTANTS}
    if unknown:
        raise SystemExit(f"unknown mutant ids: {', '.join(sorted(unknown))}")
    ids = [m.id for m in MUTANTS]
    if len(set(ids)) != len(ids):
        raise SystemExit("c_mutants.py: duplicate mutant ids")
    texts = {m.id: apply(m) for m in chosen}  # every entry applies before anything runs

    work = Path(args.work)
    files = sorted({m.file for m in chosen})
    build = Build(work, args.python, files)
    t0 = time.monotonic()
    build.prepare()
    build.link(work / "base", {}, build.programs, True)
    build.check_package(work / "base")

    # the unmutated build must pass everything the mutants are judged by
    base_time: dict[str, float] = {}
    for file in files:
        t = time.monotonic()
        out = work / "base"
        status, detail = build.run_tests(out, file, PY_TIMEOUT)
        if status != "survived":
            raise SystemExit(f"the unmutated runtime fails the tests of {file}: {detail}")
        base_time[file] = time.monotonic() - t
        print(f"baseline {file}: {base_time[file]:.1f} s ({detail})", flush=True)

    results = {}
    full_seconds = prev_count = None
    out_path = Path(args.out)
    if out_path.exists() and args.only:  # a partial run updates the previous results
        prev = json.loads(out_path.read_text())
        results, full_seconds, prev_count = prev["mutants"], prev.get("seconds"), prev.get("count")
    for i, m in enumerate(chosen, 1):
        t = time.monotonic()
        mdir = work / "m" / m.id
        if mdir.exists():
            shutil.rmtree(mdir)
        src = mdir / "src" / Path(m.file).name
        src.parent.mkdir(parents=True)
        src.write_text(texts[m.id], encoding="utf-8")
        c_tests, py_tests = TESTS[m.file]
        flavours = {"ane" if program(t).ane else "plain" for t in c_tests} | ({"plain"} if py_tests else set())
        try:
            swap = {}
            for flavour in sorted(flavours):
                obj = mdir / f"obj-{flavour}" / (src.stem + ".o")
                _compile(src, obj, build.flags(flavour))
                swap[(flavour, src.name)] = obj
            build.link(mdir, swap, list(c_tests), bool(py_tests))
        except RuntimeError as e:
            status, detail = "invalid", str(e).splitlines()[0][:300]
        else:
            status, detail = build.run_tests(mdir, m.file, max(60.0, 5 * base_time[m.file]))
        secs = time.monotonic() - t
        detail = detail.replace(f"{ROOT}/", "")  # the programs print their sources' absolute paths
        results[m.id] = {"file": m.file, "what": m.what, "status": status, "detail": detail,
                         "seconds": round(secs, 1)}
        print(f"[{i}/{len(chosen)}] {m.id}: {status} ({secs:.1f} s) {detail if status != 'killed' else ''}", flush=True)
        shutil.rmtree(mdir, ignore_errors=True)

    secs = round(time.monotonic() - t0, 1)
    # "seconds", "count": the last run over every mutant; a partial run records its own time beside it
    doc = {"seconds": full_seconds if args.only else secs, "mutants": results}
    if args.only:
        doc["partial_seconds"] = secs
        if prev_count is not None:
            doc["count"] = prev_count
    else:
        doc["count"] = len(results)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(out_path)
    survived = [k for k, v in results.items() if v["status"] == "survived"]
    print(f"{len(results)} C mutants: {len(survived)} survived ({', '.join(survived) or 'none'}); {secs:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
