"""Atomic file and directory writes: a reader never sees half of what anec writes.

Everything anec writes for a user (artifacts, reformatted IR, arrays,
checkpoints, verdict caches, benchmark results) goes through here:

* :func:`replace_file` writes a temporary file next to the destination (same
  file system), fsyncs it and renames it over the destination; on any error
  the temporary file is removed and the destination is left as it was;
* :func:`write_bytes_atomic` and :func:`write_text_atomic` are that for bytes
  and text;
* :func:`write_tree_atomic` does the same for a whole directory (an artifact):
  the files go to a temporary directory that is swapped in atomically where
  the OS allows it (Linux ``renameat2``), otherwise moved into place.

And one read: :func:`read_regular` reads a file the user named (an IR file, an
input array) as hostile input: a regular file only, opened without blocking (a
FIFO or a device is refused at once, never waited on), size-bounded before a
byte is read.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Callable, Mapping

__all__ = ["discard", "fsync_dir", "move_into_place", "read_regular", "replace_file", "write_bytes_atomic",
           "write_text_atomic", "write_tree_atomic"]


def read_regular(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (a file the user named), at most ``limit``.

    Opened with ``O_NONBLOCK``: a FIFO, socket, device or directory is refused
    at once; a file larger than ``limit`` is refused before it is read. Every
    failure is an :class:`~anec.diagnostics.AnecError` naming ``what`` and the path.
    """
    import stat

    from anec.diagnostics import AnecError

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


def replace_file(path: str | os.PathLike, write: Callable[[IO[bytes]], object], *,
                 keep_mode: bool = False, suffix: str = ".tmp") -> None:
    """Replace ``path`` by what ``write(binary_file)`` writes, all or nothing.

    ``keep_mode`` gives the new file the permissions of the one it replaces.
    """
    path = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=suffix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if keep_mode and os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


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


def discard(path: str | os.PathLike | None) -> None:
    """Remove what :func:`move_into_place` moved aside (a tree, or a link itself); best effort."""
    if path is None:
        return
    if os.path.islink(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _write_synced(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_tree_atomic(dest: str | os.PathLike, files: Mapping[str, bytes]) -> None:
    """Make ``dest`` a directory holding exactly ``files`` (relative path -> bytes), all or nothing.

    The files go to a fresh temporary directory next to ``dest`` (same file
    system), are fsynced, and the directory is renamed into place. An existing
    ``dest`` is swapped out atomically where the OS allows it (renameat2),
    otherwise moved aside, replaced and then deleted; on any error the
    temporary directory is removed, ``dest`` is left as it was and the
    ``OSError`` propagates.
    """
    dest = Path(dest)
    parent = dest.parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=parent))
    old: Path | None = None
    try:
        for rel, data in files.items():
            _write_synced(tmp / rel, data)
        for sub in sorted({(tmp / rel).parent for rel in files}, key=lambda p: -len(p.parts)):
            fsync_dir(sub)
        old = move_into_place(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    discard(old)
