"""One process at a time writes a run folder: an advisory lock on ``FOLDER/.lock``.

The lock is the operating system's (``fcntl.flock``, or ``msvcrt.locking`` on Windows) on an
open file, so it ends with the process that holds it, however that process ends (``kill -9``
included): a lock is never left behind by a dead process. The file also records who holds it
(pid, host, command, start time), so that a refusal can say who, and a process that finds the
record of a holder that has died says that it takes the folder over."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time

__all__ = ["FolderInUse", "LOCK_NAME", "hold_folder"]

LOCK_NAME = ".lock"


class FolderInUse(RuntimeError):
    """Another live process holds the folder's lock; the message names it."""


def _try_lock(file) -> bool:
    """Take the lock on ``file`` without waiting; False when another process holds it."""
    try:
        if sys.platform == "win32":
            import msvcrt
            msvcrt.locking(file.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _holder(file) -> dict:
    file.seek(0)
    try:
        return json.loads(file.read() or "{}")
    except ValueError:
        return {}


def _describe(holder: dict) -> str:
    if not holder:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
    return (f"process {holder.get('pid')} on {holder.get('host')} "
            f"(`{holder.get('command', '?')}`, since {since})")


@contextlib.contextmanager
def hold_folder(folder, command: str, *, announce=None):
    """Hold ``folder``'s lock for the ``with`` block (the folder is created if need be).

    Raises ``FolderInUse`` naming the holder when another live process holds it. ``announce``
    (default: print to stderr) is told when the record of a holder that is no longer running is
    taken over."""
    announce = announce or (lambda message: print(message, file=sys.stderr))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK_NAME)
    file = open(path, "a+", encoding="utf-8")
    try:
        if not _try_lock(file):
            raise FolderInUse(f"{folder} is in use by {_describe(_holder(file))}; wait for it "
                              "to finish, or choose another folder")
        previous = _holder(file)
        if previous:
            announce(f"{folder}: taking over from {_describe(previous)}, which is no longer "
                     "running")
        file.seek(0)
        file.truncate()
        json.dump({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                   "started": time.time()}, file)
        file.flush()
        try:
            yield
        finally:
            file.seek(0)
            file.truncate()
            file.flush()
    finally:
        file.close()
