"""Writing files safely and reading safetensors, shared by ``io.checkpoint`` (our checkpoints)
and ``io.huggingface`` (HuggingFace directories)."""
from __future__ import annotations

import contextlib
import os
import re
import secrets

__all__ = ["atomic_write", "path_inside", "safetensors_numpy"]


def atomic_write(path, write):
    """Call ``write(file)`` on a new temporary file next to ``path``, then rename it over ``path``:
    readers see the old file or the complete new one, never a half-written one."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {path}: the folder {directory} does not exist; "
                                "create it first (os.makedirs)")
    _remove_stale_temp_files(directory, os.path.basename(path))
    fd, temp_path = _create_temp_file(directory, os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_path)
        raise
    _fsync_directory(directory)


def path_inside(folder, name, source):
    """``folder/name`` for a ``name`` read from the file ``source``: a relative path that stays
    inside ``folder`` (links resolved). An absolute path, or one that climbs out (``../x``), is
    a ``ValueError`` naming ``source``: a file only ever points within its own folder."""
    if not isinstance(name, str) or not name or os.path.isabs(name):
        raise ValueError(f"{source} names {name!r}; only a relative path inside {folder} is "
                         "followed")
    root = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, target]) != root:
        raise ValueError(f"{source} names {name!r}, which leads out of {folder}; only a path "
                         "inside it is followed")
    return target


def _temp_name(name, token):
    return f".{name[:64]}.{token}.tmp"


def _writer_is_gone(pid: int) -> bool:
    """Whether the process ``pid`` (on this machine) has ended."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:             # it exists, owned by another user
        return False
    return False


def _remove_stale_temp_files(directory, name):
    """Remove what earlier writes to ``name`` left when they were killed mid-write: the
    temporary files of writers that are no longer running (each name carries its writer's pid),
    so that a second process writing the same file at the same time keeps its own (the last
    rename wins). Names of the earlier form, without a pid, are always leftovers."""
    stale = re.compile(re.escape(_temp_name(name, "@"))
                       .replace("@", "(?:([0-9]+)-)?[0-9a-f]{12}"))
    for entry in os.listdir(directory):
        match = stale.fullmatch(entry)
        if match and (match.group(1) is None or _writer_is_gone(int(match.group(1)))):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, entry))


def _create_temp_file(directory, name):
    """A new file next to the target; created with mode 0o666 so the umask applies as usual."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        temp_path = os.path.join(directory, _temp_name(
            name, f"{os.getpid()}-{secrets.token_hex(6)}"))
        try:
            return os.open(temp_path, flags, 0o666), temp_path
        except FileExistsError:
            continue


def _fsync_directory(directory):
    """Make the rename itself durable (POSIX; other systems have no directory handles)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def safetensors_numpy():
    """``safetensors.numpy``, or an ImportError saying how to install it."""
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError("HuggingFace checkpoints need the safetensors package: "
                          "pip install 'minitorch-nlp[hf]'") from None
    return safetensors.numpy
