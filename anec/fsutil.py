"""Files anec writes and reads: atomic writes, the write lock, bounded reads and bounded JSON.

A reader never sees half of what anec writes. Everything anec writes for a
user (artifacts, compile outputs, exports, reformatted IR, arrays, checkpoints,
verdict caches, benchmark results) goes through here:

* :func:`replace_file` writes a temporary file next to the destination (same
  file system), fsyncs it and renames it over the destination; on any error
  the temporary file is removed and the destination is left as it was;
  :func:`write_bytes_atomic` and :func:`write_text_atomic` are that for bytes
  and text;
* :func:`write_tree_atomic` does the same for a whole directory: under a lock
  file ``.<name>.anec-lock`` (writers of one destination take turns, and each
  removes the temporary directories killed writers left) the files are written
  and fsynced on worker threads into a temporary directory
  ``.<name>.anec-tmp-*`` (:func:`is_temp_name`) that replaces the destination in
  one rename, swapped in atomically where the OS allows it (Linux
  ``renameat2``). A file is bytes, or a streamed file: an object with ``size``,
  ``write_to(f)`` and ``written(fd)`` (:class:`anec.mil.blobfile.BlobWriter`).

And the reads of hostile input: :func:`read_regular` reads a file the user
named (an IR file, an input array): a regular file only, opened without
blocking (a FIFO or a device is refused at once, never waited on),
size-bounded before a byte is read; :func:`parse_json` reads strict JSON from
untrusted bytes (UTF-8; no duplicate keys, NaN/Infinity or numbers beyond
:data:`JSON_MAX_INT_DIGITS` digits; at most :data:`JSON_MAX_DEPTH` levels).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
from concurrent import futures
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Union

from anec.diagnostics import AnecError, ArtifactError
from anec.signals import held
from anec.thread_pools import write_pool

__all__ = ["JSON_MAX_DEPTH", "JSON_MAX_INT_DIGITS", "discard", "fsync_dir", "is_temp_name", "json_depth",
           "move_into_place", "parse_json", "read_regular", "real_dir", "replace_file", "replace_file_at",
           "write_bytes_atomic", "write_new_file", "write_text_atomic", "write_tree_atomic"]

TreeFile = Union[bytes, Any]
"""A file of :func:`write_tree_atomic`: bytes, or a streamed file (``size``, ``write_to(f)``,
``written(fd)``)."""

def read_regular(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (a file the user named), at most ``limit``.

    Opened with ``O_NONBLOCK``: a FIFO, socket, device or directory is refused
    at once; a file larger than ``limit`` is refused before it is read. Every
    failure is an :class:`~anec.diagnostics.AnecError` naming ``what`` and the path.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise AnecError(f"cannot read {what} '{path}': {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) \
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
            raise AnecError(f"{what} '{path}' is {kind}, not a regular file",
                            hint="give the path of a file")
        if st.st_size > limit:
            raise AnecError(f"{what} '{path}' is {st.st_size} bytes, more than the {limit} anec reads")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 24, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise AnecError(f"{what} '{path}' is more than the {limit} bytes anec reads")
        return b"".join(chunks)
    except OSError as e:
        raise AnecError(f"cannot read {what} '{path}': {e.strerror or e}") from None
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory's entries (after a rename into it); best effort."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replace_file_at(dir_fd: int, name: str, write: Callable[[IO[bytes]], object], *, mode: int = 0o600,
                    keep_mode: bool = False, suffix: str = ".tmp") -> None:
    """Replace the entry ``name`` of the directory open as ``dir_fd`` by what
    ``write(binary_file)`` writes, all or nothing.

    The bytes go to a new temporary file ``.<name>.XXXXXXXX<suffix>`` next to it
    (created with ``mode``, the umask applying; never an existing file, never
    through a link), are fsynced, and the file is renamed over ``name`` (a link
    there is replaced, not followed); then the directory is fsynced. On any
    error the temporary file is removed and ``name`` is left as it was.
    ``keep_mode`` gives the new file the permissions of the one it replaces.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    tmp = ""
    try:
        with held():  # a signal lands once the cleanup below knows the temporary file
            tmp, fd = _temp_file(dir_fd, name, suffix, flags, mode)
            f = os.fdopen(fd, "wb")  # owns fd from here (closed when dropped)
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if keep_mode:
            try:
                st = os.stat(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            else:
                os.chmod(tmp, st.st_mode & 0o7777, dir_fd=dir_fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if tmp:
            with held(), contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        raise
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def _temp_file(dir_fd: int, name: str, suffix: str, flags: int, mode: int) -> tuple[str, int]:
    """A new file ``.<name>.XXXXXXXX<suffix>`` in the directory ``dir_fd``: its name and fd."""
    for _ in range(100):
        tmp = f".{name}.{secrets.token_hex(4)}{suffix}"
        try:
            return tmp, os.open(tmp, flags, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary name", name)


def replace_file(path: str | os.PathLike, write: Callable[[IO[bytes]], object], *,
                 keep_mode: bool = False, suffix: str = ".tmp") -> None:
    """Replace ``path`` by what ``write(binary_file)`` writes, all or nothing
    (:func:`replace_file_at` in its directory; the new file is private to the user unless
    ``keep_mode`` gives it the permissions of the one it replaces)."""
    path = os.path.abspath(os.fspath(path))
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        replace_file_at(dir_fd, os.path.basename(path), write, keep_mode=keep_mode, suffix=suffix)
    finally:
        os.close(dir_fd)


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, keep_mode: bool = False) -> None:
    """Replace ``path`` by ``data`` atomically."""
    replace_file(path, lambda f: f.write(data), keep_mode=keep_mode)


def write_text_atomic(path: str | os.PathLike, text: str, *, keep_mode: bool = False) -> None:
    """Replace ``path`` by ``text`` (UTF-8, newlines as given) atomically."""
    write_bytes_atomic(path, text.encode("utf-8"), keep_mode=keep_mode)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def move_into_place(src: str | os.PathLike, dest: str | os.PathLike, *,
                    aside: Callable[[Path], Path] | None = None) -> Path | None:
    """Rename the finished directory ``src`` to ``dest`` (same file system) and fsync the
    parent. An existing ``dest`` (a link counts as itself) is swapped out atomically where
    the OS allows it (renameat2), otherwise moved aside first (to ``aside(dest)``, a new
    empty directory next to it; a ``.<name>.XXXX.old`` one by default) and put back if the
    rename fails. Returns what now holds the previous entry, for :func:`discard`, or None."""
    src, dest = Path(src), Path(dest)
    old: Path | None = None
    if os.path.lexists(dest):
        if _exchange(src, dest):
            old = src  # src now holds the previous tree
        else:
            if aside is None:
                old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
            else:
                old = aside(dest)
            os.rmdir(old)
            os.rename(dest, old)
            try:
                os.rename(src, dest)
            except BaseException:
                os.rename(old, dest)
                raise
    else:
        os.rename(src, dest)
    fsync_dir(dest.parent)
    return old


def remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` (a file, a link, or a directory and all it holds) in the directory open
    as ``dir_fd``, never following a link: a link is removed, not what it names. Unlike
    ``shutil.rmtree(dir_fd=...)`` it runs on Python 3.10. Raises OSError when an entry cannot
    be removed (or a directory turns into a link meanwhile: it is opened with O_NOFOLLOW)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0), dir_fd=dir_fd)
    try:
        for entry in os.listdir(fd):
            remove_tree_at(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def discard(path: str | os.PathLike | None) -> None:
    """Remove what :func:`move_into_place` moved aside (a tree, or a link itself); best effort."""
    if path is None:
        return
    if os.path.islink(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------
# bounded JSON


JSON_MAX_DEPTH = 32
"""Nesting of JSON objects and arrays :func:`parse_json` reads (a manifest needs 4)."""
JSON_MAX_INT_DIGITS = 20


def _show_key(value: str) -> str:
    """A key from a hostile file, quoted and shortened for a message."""
    s = json.dumps(value)
    return s if len(s) <= 60 else s[:57] + "..."


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > JSON_MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(text)} digits is too large")
    return int(text)


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"number {text[:40]} is out of range")
    return v


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {_show_key(k)} appears twice in one object")
        out[k] = v
    return out


def json_depth(obj: Any) -> int:
    """Nesting depth of a JSON value (iterative: a hostile value cannot exhaust the stack)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d > JSON_MAX_DEPTH:
                return d
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_json(data: bytes, where: str, what: str = "manifest") -> Any:
    """Strict JSON from untrusted bytes (see the module docstring); ArtifactError otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ArtifactError(f"{where}: the {what} is not valid UTF-8 (byte {e.start})") from None
    try:
        obj = json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant, parse_int=_int,
                         parse_float=_float)
    except RecursionError:
        raise ArtifactError(f"{where}: the {what} is nested too deeply (at most {JSON_MAX_DEPTH} levels)") from None
    except ValueError as e:  # JSONDecodeError included: its message has line and column, not content
        raise ArtifactError(f"{where}: the {what} is not valid JSON ({str(e)[:200]})") from None
    if json_depth(obj) > JSON_MAX_DEPTH:
        raise ArtifactError(f"{where}: the {what} is nested too deeply (at most {JSON_MAX_DEPTH} levels)")
    return obj


# ---------------------------------------------------------------------------
# atomic directory replacement


_TEMP = re.compile(r"\..+\.(anec-tmp-[A-Za-z0-9_]+|[A-Za-z0-9_]{8}\.(tmp|old))\Z")


def is_temp_name(name: str) -> bool:
    """True for the temporary directories of a write (``.out.anec-tmp-*``; older versions
    wrote ``.out.XXXXXXXX.tmp``/``.old``): never an output or an artifact."""
    return bool(_TEMP.match(name))


def _temp_of(dest_name: str, name: str) -> bool:
    """True if ``name`` is a temporary directory of a write of ``dest_name``."""
    if not name.startswith(f".{dest_name}."):
        return False
    rest = name[len(dest_name) + 2:]
    return rest.startswith("anec-tmp-") or bool(re.fullmatch(r"[A-Za-z0-9_]{8}\.(tmp|old)", rest))


def real_dir(dest: Path) -> Path:
    """``dest`` if it is a real directory (not a link to one); ArtifactError otherwise."""
    st = os.lstat(dest)
    if stat.S_ISLNK(st.st_mode):
        raise ArtifactError(f"cannot write to '{dest}': it is a symbolic link",
                            hint="give the real directory: a write replaces the path it is given")
    if not stat.S_ISDIR(st.st_mode):
        raise ArtifactError(f"cannot write artifact to '{dest}': it is a file")
    return dest


def _start_writes(root: Path, files: Mapping[str, TreeFile], jobs: list) -> None:
    """Start writing and fsyncing every file under ``root`` (bytes, or a streamed file written
    by itself), largest first, on the writer threads, adding their jobs to ``jobs`` (for
    :func:`_finish`); a few files are written here and now. A write or an fsync releases the
    GIL, so the disk's latencies overlap each other and the caller's work. The directories are
    made here first (a file's creation never stats or makes its parents: on the writer threads
    that was one more call per file, each waiting for the directory that other threads were
    creating files in)."""
    for parent in sorted({(root / rel).parent for rel in files}):
        parent.mkdir(parents=True, exist_ok=True)
    if len(files) < 4:
        for rel, data in files.items():
            write_new_file(root / rel, data)
        return
    for rel in sorted(files, key=lambda rel: -_size(files[rel])):
        jobs.append(write_pool().submit(write_new_file, root / rel, files[rel]))


def _finish(jobs: list) -> None:
    """Wait for every job of ``jobs``; then raise the first error among them (in their order)."""
    errors = [job.exception() for job in jobs]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


def _fsync_dirs(dirs: list[Path]) -> None:
    """fsync every directory of ``dirs`` (their entries are durable when this returns),
    on worker threads when there are several."""
    if len(dirs) < 4:
        for d in dirs:
            fsync_dir(d)
        return
    _on_writers(fsync_dir, [(d,) for d in dirs])


def _on_writers(fn: Callable[..., Any], calls: list[tuple]) -> None:
    """``fn(*args)`` for every ``args`` of ``calls`` on the writer threads; once all have
    finished, the first error (in the order of ``calls``) is raised."""
    _finish([write_pool().submit(fn, *args) for args in calls])


def _streamed(data: TreeFile) -> bool:
    """True for a streamed file (not bytes)."""
    return not isinstance(data, (bytes, bytearray, memoryview))


def _size(data: TreeFile) -> int:
    return data.size if _streamed(data) else len(data)


def write_new_file(path: Path, data: TreeFile) -> None:
    """Create ``path`` (its directory exists), write ``data`` and fsync it."""
    mode = os.O_RDWR if _streamed(data) else os.O_WRONLY  # readable: mapped once written
    fd = os.open(path, mode | os.O_CREAT | os.O_EXCL, 0o666)  # not inherited (os.open: PEP 446)
    with os.fdopen(fd, "wb") as f:
        if _streamed(data):
            data.write_to(f)
        else:
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
        if _streamed(data):
            data.written(f.fileno())  # its bytes are now this file's


class _WriteLock:
    """The exclusive right to write ``dest``: ``flock`` on ``.<name>.anec-lock`` next to it.

    Writers wait for each other. The holder deletes the lock file when done;
    a writer that locked a file deleted meanwhile locks the new one. A killed
    writer's lock is released by the kernel (the next writer removes its file).
    Whoever holds the flock of the lock file may delete it, which is what lets
    :meth:`abandon` remove a file that a signal left unused.
    """

    _FLAGS = os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)

    def __init__(self, dest: Path) -> None:
        self.path = dest.parent / f".{dest.name}.anec-lock"
        self.fd = -1
        self.owned = False

    def acquire(self) -> None:
        """Wait for the lock (interruptible: a signal in the wait is cleaned up by :meth:`abandon`)."""
        while True:
            try:
                with held():  # a signal lands once the descriptor is recorded
                    self.fd = os.open(self.path, self._FLAGS | os.O_CREAT, 0o600)
            except OSError as e:
                raise ArtifactError(f"cannot lock '{self.path}': {e.strerror}") from None
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            if _same_file(self.path, self.fd):
                self.owned = True
                return
            os.close(self.fd)
            self.fd = -1

    def release(self) -> None:
        """Delete the lock file and let the next writer in; nothing when not held."""
        if self.owned:
            self.owned = False
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def abandon(self) -> None:
        """After an error or a signal anywhere in :meth:`acquire` or :meth:`release`: let go of
        the lock, then delete the lock file if nobody holds it (one this writer created, or
        held, and a signal kept it from deleting; a writer still waiting for it finds it gone
        once it gets it, and makes a new one)."""
        self.release()
        try:
            fd = os.open(self.path, self._FLAGS)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(self.path, fd):
                os.unlink(self.path)
        except OSError:
            pass  # another writer holds it, and deletes it when done
        finally:
            os.close(fd)


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` is still the file open as ``fd`` (not deleted or replaced meanwhile)."""
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _remove_stale(dest: Path) -> None:
    """Remove the temporary directories that earlier, killed writes of ``dest`` left."""
    try:
        names = os.listdir(dest.parent)
    except OSError:
        return
    for n in names:
        if _temp_of(dest.name, n):
            p = dest.parent / n
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except OSError:
                    pass


def write_tree_atomic(dest: Path, files: Mapping[str, TreeFile],
                      last: Callable[[Path], Mapping[str, bytes]] | None = None) -> None:
    """Make ``dest`` a directory holding exactly ``files``, all or nothing.

    Under the write lock of ``dest``, the temporary directories of killed
    writes are removed, then the files go to a fresh temporary directory next
    to ``dest`` (same file system); while they are written, ``last(tmp)`` makes
    the files that complete the tree (it may also add to ``tmp``), which go
    there too; once every file and directory is fsynced, the directory is
    renamed into place. An
    existing ``dest`` is swapped out atomically where the OS allows it
    (renameat2), otherwise moved aside and replaced (a reader may then find
    no ``dest`` for a moment, never a partial one) and then deleted. On any
    error the temporary directory is removed and ``dest`` is left as it was.
    """
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(f"cannot create '{parent}': {e.strerror}") from None
    lock = _WriteLock(dest)
    try:
        lock.acquire()
        _remove_stale(dest)
        discard(_swap_in(dest, files, last))
        lock.release()
    except BaseException:
        # wherever the error or signal found the write (the lock being taken, the temporary
        # directory just made, the previous tree half removed, the lock being given back), the
        # cleanup runs whole: under the lock every temporary directory of dest is this
        # write's or a killed writer's; then the lock and its file go
        with held():
            if lock.owned:
                _remove_stale(dest)
            lock.abandon()
        raise


def _temp_dir(dest: Path) -> Path:
    """A new directory ``.<name>.anec-tmp-XXXXXXXX`` next to ``dest``, with the mode a plain
    ``mkdir`` gives (the umask applies, as for the directory it becomes)."""
    for _ in range(100):
        p = dest.parent / f".{dest.name}.anec-tmp-{secrets.token_hex(4)}"
        try:
            os.mkdir(p, 0o777)
            return p
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary name", str(dest.parent))


def _swap_in(dest: Path, files: Mapping[str, TreeFile],
             last: Callable[[Path], Mapping[str, bytes]] | None) -> Path | None:
    """Write the tree into a new temporary directory and move it into place; what now holds
    the previous ``dest`` (for :func:`discard`), or None. On an error or a signal the writes
    still queued are cancelled and the running ones waited for, so that nothing writes into
    the temporary directory once it is removed."""
    parent = dest.parent
    try:
        tmp = _temp_dir(dest)
    except OSError as e:
        raise ArtifactError(f"cannot write to '{parent}': {e.strerror}") from None
    jobs: list = []
    try:
        _start_writes(tmp, files, jobs)
        # while those are written and fsynced, last() makes the files that complete the
        # tree (the manifests wait for the weight hashes), and their writes start too
        _start_writes(tmp, last(tmp) if last is not None else {}, jobs)
        _finish(jobs)
        dirs = {tmp} | {Path(root) for root, _, _ in os.walk(tmp)}
        _fsync_dirs(sorted(dirs, key=lambda p: -len(p.parts)))
        return move_into_place(tmp, dest, aside=_temp_dir)
    except BaseException as e:
        with held():
            for job in jobs:
                job.cancel()
            futures.wait(jobs)
        if isinstance(e, OSError):
            raise ArtifactError(f"cannot write artifact '{dest}': {e.strerror or e}") from None
        raise
