"""Writing files into a runs/ tree so that a link planted there redirects
nothing: a temporary file of a name nobody could have chosen, created
exclusively (mkstemp: O_CREAT | O_EXCL, which never follows a link) in the
same directory, then renamed over the target. The rename replaces a link at
the target's name with the file; it never writes through it. A reader sees
the old file or the new one, never half of either."""

import os
import stat
import tempfile
from pathlib import Path

from .layout import file_kind


class CannotWrite(OSError):
    """A file zlstore was asked to write and could not, or would not (its
    errno kept, where the system gave one): str() names the file and says
    why. An environment error: exit 2."""

    def __str__(self):
        return self.strerror


def _cannot(what: str, error: OSError) -> CannotWrite:
    return CannotWrite(error.errno, f"cannot {what}: {error.strerror or error}")


def _refuse_special(path: Path) -> None:
    """A directory, FIFO or device at path is left as it is: replacing it
    would destroy what is there and write nothing anyone reads."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise _cannot(f"write {path}", error) from None
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise CannotWrite(None, f"cannot write {path}: it is {file_kind(mode)}, not a regular file; left as it is")


def replace_atomic(path, data: bytes) -> Path:
    """Write data to path whole or not at all (flushed to disk first). A
    directory, FIFO or device at path is refused, not replaced: renaming
    over it would destroy what is there and write nothing anyone reads."""
    path = Path(path)
    _refuse_special(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise _cannot(f"write {path}", error) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes it 0600: give it what open() would
        os.replace(tmp, path)
    except BaseException as error:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(error, OSError):
            raise _cannot(f"write {path}", error) from None
        raise
    return path


def check_replaceable(path) -> Path:
    """Refuse, before anything is written, what replace_atomic would: a
    directory, FIFO or device at path, or a directory to hold it that is
    missing or not writable. A command that writes several files checks
    each first, so that a refusal leaves nothing behind."""
    path = Path(path)
    _refuse_special(path)
    parent = path.parent
    if not parent.is_dir():
        raise CannotWrite(None, f"cannot write {path}: no directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CannotWrite(None, f"cannot write {path}: the directory {parent} is not writable")
    return path


def is_stream(path) -> bool:
    """Whether an output file a user named (-o) is a FIFO, a terminal or
    another device (or a link to one: /dev/stdout), written into as other
    tools do (write_stream), not replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_stream(path, data: bytes) -> Path:
    """Write data into the special file at path (is_stream): opened for
    writing, never created nor replaced."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError as error:
        raise _cannot(f"write {path}", error) from None
    return path


def keep_once(path, kept) -> bool:
    """Keep the file at path as kept, unless kept exists in any form (a file,
    a directory, a link, even a dangling one): what is there is never
    replaced, and nothing is written through a link. The file is linked, not
    read and copied: a link at path is kept as the link it is. Returns
    whether it kept one."""
    path, kept = Path(path), Path(kept)
    if not os.path.lexists(path) or os.path.lexists(kept):
        return False
    try:
        try:
            os.link(path, kept, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: copy the bytes, exclusively
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as source:
                data = source.read()
            try:
                out = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            except FileExistsError:
                return False
            with os.fdopen(out, "wb") as f:
                f.write(data)
    except OSError as error:
        raise _cannot(f"keep {path} as {kept}", error) from None
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import: setting it to read it is not thread-safe
