"""Reading files beneath a directory without following anything out of it.

An artifact directory may come from anywhere, so every file of it is read
through a :class:`Beneath`, the Python twin of the C runtime's
``rt_read_beneath``::

    with Beneath.open("out/mlp") as d:
        text = d.read("model.mil", limit=MIL_MAX_BYTES, what="MIL text")

The directory is opened once; each path below it is walked one component at
a time with ``openat(O_NOFOLLOW)``, so no symbolic link is followed (final or
intermediate) and nothing outside the directory is ever opened. The file must
be a regular file: a FIFO, a socket or a device is refused without blocking
(``O_NONBLOCK``). Files larger than the caller's bound are refused before a
byte is read. Every failure is an :class:`~anec.diagnostics.ArtifactError`
that names the path and never quotes the file's content.

The directory itself (the path the caller names) is opened normally: a link
*to* an artifact directory is the user's choice; links *inside* it are not.
A hard link inside the directory is indistinguishable from a file (it is one).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from anec.diagnostics import ArtifactError

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_FILE = os.O_RDONLY | _O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | _O_CLOEXEC
_READ_CHUNK = 1 << 30


def kind_of(mode: int) -> str:
    """``file``, ``directory``, ``symbolic link``, ``FIFO``, ``socket``, ``device`` or ``special file``."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def check_rel(rel: str, what: str = "artifact path") -> tuple[str, ...]:
    """The components of a relative path inside a directory; ArtifactError for anything
    else (absolute, '..', '.', empty components, backslashes, NUL)."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel or rel.startswith("/"):
        raise ArtifactError(f"{what} {_show(rel)} is not a relative path inside the artifact directory")
    parts = tuple(rel.split("/"))
    if any(p in ("", ".", "..") for p in parts):
        raise ArtifactError(f"{what} {_show(rel)} points outside the artifact directory "
                            "(every component must be a plain name)")
    return parts


def _show(value: object, limit: int = 60) -> str:
    """A value from a hostile file, quoted and shortened for a message."""
    s = repr(value)
    return s if len(s) <= limit else s[: limit - 3] + "..."


class Beneath:
    """An open directory; files beneath it are read without following symbolic links."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Beneath":
        """Open the directory ``path`` (ArtifactError if it is missing or not a directory)."""
        p = Path(os.fspath(path))
        try:
            fd = os.open(p, _O_DIR)
        except FileNotFoundError:
            raise ArtifactError(f"artifact '{p}' does not exist",
                                hint="compile first: anec compile model.ir -o DIR") from None
        except NotADirectoryError:
            raise ArtifactError(f"'{p}' is not a directory") from None
        except OSError as e:
            raise ArtifactError(f"cannot open '{p}': {e.strerror}") from None
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # platforms without O_DIRECTORY
            os.close(fd)
            raise ArtifactError(f"'{p}' is not a directory")
        return cls(fd, p)

    # ---- lifetime ------------------------------------------------------------
    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "Beneath":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - closed explicitly everywhere
        try:
            self.close()
        except OSError:
            pass

    @property
    def fileno(self) -> int:
        """The directory's descriptor (valid until :meth:`close`)."""
        return self._fd

    @property
    def replaced(self) -> bool:
        """True once the path no longer names the directory that was opened (an output
        replaced by a newer compile: this view is being deleted, read the path again)."""
        try:
            mine, now = os.fstat(self._fd), os.stat(self.path)
        except OSError:
            return True
        return (mine.st_dev, mine.st_ino) != (now.st_dev, now.st_ino) or mine.st_nlink == 0

    # ---- entries ---------------------------------------------------------------
    def names(self) -> list[str]:
        """The entry names of the directory, sorted."""
        try:
            return sorted(os.listdir(self._fd))
        except OSError as e:
            raise ArtifactError(f"cannot list '{self.path}': {e.strerror}") from None

    def kind(self, name: str) -> str | None:
        """What entry ``name`` (one component) is (see :func:`kind_of`), without following it;
        None if absent."""
        if len(check_rel(name)) != 1:
            raise ArtifactError(f"'{name}' is not a name of an entry of '{self.path}'")
        try:
            st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise ArtifactError(f"cannot inspect '{self.path / name}': {e.strerror}") from None
        return kind_of(st.st_mode)

    def subdir(self, rel: str, what: str = "directory") -> "Beneath":
        """The directory ``rel`` below this one (no symbolic link followed)."""
        fd = self._walk(check_rel(rel, what), rel, what, whole=True)
        return Beneath(fd, self.path / rel)

    def _walk(self, parts: tuple[str, ...], rel: str, what: str, whole: bool) -> int:
        """A new fd of the directory holding the last component (``whole``: of ``rel`` itself)."""
        fd = os.dup(self._fd)
        todo = parts if whole else parts[:-1]
        try:
            for i, name in enumerate(todo):
                try:
                    nfd = os.open(name, _O_DIR | _O_NOFOLLOW, dir_fd=fd)
                except OSError as e:
                    shown = "/".join(parts[: i + 1])
                    raise self._error(e, fd, name, shown, rel, what, expect_dir=True) from None
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _error(self, e: OSError, dfd: int, name: str, shown: str, rel: str, what: str,
               expect_dir: bool) -> ArtifactError:
        where = self.path / rel
        part = f" ('{shown}' is a {{}})" if shown != rel else " (it is a {})"
        if e.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR, errno.EISDIR, errno.ENXIO):
            try:
                k = kind_of(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
            except OSError:
                k = "special file"
            if k == "symbolic link":
                return ArtifactError(f"cannot read {what} '{where}'" + part.format("symbolic link"),
                                     hint="artifact files are never followed through links; copy the real "
                                          "files into the artifact directory")
            expected = "directory" if expect_dir else "regular file"
            return ArtifactError(f"cannot read {what} '{where}'" + part.format(k) + f"; expected a {expected}")
        if e.errno == errno.ENOENT:
            return ArtifactError(f"cannot read {what} '{where}': it is missing")
        return ArtifactError(f"cannot read {what} '{where}': {e.strerror}")

    # ---- files -------------------------------------------------------------------
    def read(self, rel: str, limit: int, what: str = "file") -> bytes:
        """The bytes of the regular file ``rel`` (at most ``limit`` bytes)."""
        fd, size = self.open_file(rel, limit, what)
        try:
            return _read_exactly(fd, size, limit, f"{what} '{self.path / rel}'")
        except OSError as e:
            raise ArtifactError(f"cannot read {what} '{self.path / rel}': {e.strerror}") from None
        finally:
            os.close(fd)

    def open_file(self, rel: str, limit: int, what: str = "file") -> tuple[int, int]:
        """A new read-only descriptor of the regular file ``rel`` and its size (at most
        ``limit`` bytes), reached as :meth:`read` reaches it; the caller closes it. For
        files too large to read whole (memory-mapped weights)."""
        parts = check_rel(rel, what)
        dfd = self._walk(parts, rel, what, whole=False)
        try:
            try:
                fd = os.open(parts[-1], _O_FILE, dir_fd=dfd)
            except OSError as e:
                raise self._error(e, dfd, parts[-1], rel, rel, what, expect_dir=False) from None
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ArtifactError(f"cannot read {what} '{self.path / rel}' (it is a {kind_of(st.st_mode)}); "
                                    "expected a regular file")
            if st.st_size > limit:
                raise ArtifactError(f"{what} '{self.path / rel}' is {st.st_size} bytes, above the limit of "
                                    f"{limit} bytes")
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size


def _read_exactly(fd: int, size: int, limit: int, what: str) -> bytes:
    """The whole file (``size`` bytes by fstat); an error if it grows past ``limit`` meanwhile."""
    first = os.read(fd, min(size, _READ_CHUNK)) if size else b""
    extra = os.read(fd, 1) if len(first) == size else None
    if extra == b"":
        return first  # the common case: one read, no copy
    chunks, got = [first], len(first)
    while True:
        chunk = extra if extra else os.read(fd, min(_READ_CHUNK, limit + 1 - got))
        extra = None
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
        if got > limit:
            raise ArtifactError(f"{what} grew above the limit of {limit} bytes while it was read")
    return b"".join(chunks)
