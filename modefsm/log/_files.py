"""The files that hold sessions and prompts: private to their user, and who locks them.

modefsm's own files (the transition log, the conversation journal, the restore index and
SQLite's ``-wal``/``-shm`` beside it, an export) are created ``0600`` whatever the umask
(SQLite gives its side files the mode of the index). An existing one that other users
may write is refused: anyone who can write it can forge or erase the history. (One they
may only read is used as it is: the mode is the owner's choice.)

:func:`lock_holders` names the processes holding a ``flock`` or POSIX lock on a file (from
``/proc/locks``), for the error of a change that waited for one in vain.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from modefsm.errors import LogError

__all__ = ["check_private", "create_private", "lock_holders", "open_private"]

PRIVATE = 0o600
"""The mode of the files modefsm creates."""
_OTHERS_WRITE = 0o022


def open_private(path: Path, flags: int, what: str) -> int:
    """Open *path* with *flags* (no ``O_CREAT``), creating it ``0600`` if it is missing.

    Args:
        path: the file.
        flags: ``os.open`` flags to open it with (``O_RDWR | O_APPEND``, ...).
        what: what the file is, for the error (``"the transition log"``).

    Returns:
        The descriptor.

    Raises:
        LogError: the file exists and users other than its owner may write it.
        OSError: it cannot be opened or created (the caller words the error).
    """
    for _attempt in range(3):
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE)
        except FileExistsError:
            pass
        else:
            try:
                os.fchmod(fd, PRIVATE)  # the umask may have taken bits from the owner
            except OSError:
                os.close(fd)
                raise
            return fd
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except FileNotFoundError:  # removed in between: create it after all
            continue
        try:
            check_private(os.fstat(fd), path, what)
        except LogError:
            os.close(fd)
            raise
        return fd
    return os.open(path, flags | os.O_CLOEXEC)  # still racing: let the error say so


def check_private(status: os.stat_result, path: Path | str, what: str) -> None:
    """Refuse a regular file that users other than its owner may write.

    Raises:
        LogError: group or others have write permission on it.
    """
    mode = stat.S_IMODE(status.st_mode)
    if stat.S_ISREG(status.st_mode) and mode & _OTHERS_WRITE:
        msg = (
            f"other users may write {what} (mode {mode:04o}): not used; remove their write "
            "permission (chmod go-w)"
        )
        raise LogError(msg, str(path))


def create_private(path: Path, what: str) -> None:
    """Create *path* empty and ``0600`` unless it exists; refuse it if others may write it.

    Raises:
        LogError: it exists and others may write it, or it cannot be opened or created.
    """
    try:
        fd = open_private(path, os.O_WRONLY | os.O_NONBLOCK, what)
    except OSError as exc:
        raise LogError(f"cannot open {what}: {exc.strerror}", str(path)) from None
    os.close(fd)


def lock_holders(fd: int) -> str:
    """Who holds a lock on the file open as *fd*: ``"pid 42, flock, user alice"``, or ``""``.

    Read from ``/proc/locks`` (Linux), matched on the file's device and inode; each
    holder's command and user come from ``/proc/PID``. Locks of this process are left out;
    ``""`` when nothing can be told.
    """
    try:
        status = os.fstat(fd)
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
    wanted = (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
    found: list[str] = []
    for line in table.splitlines():
        fields = line.split()
        if "->" in fields:  # a waiter, not a holder
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
        except (IndexError, ValueError):
            continue
        if key != wanted or pid in (os.getpid(), -1):
            continue
        who = _process(pid)
        entry = f"pid {pid}, {who}" if who else f"pid {pid}"
        if entry not in found:
            found.append(entry)
    return "; ".join(found)


def _process(pid: int) -> str:
    """``"COMMAND, user NAME"`` of process *pid*, as much as can be read."""
    import pwd  # noqa: PLC0415 - only when a lock is in the way

    parts = []
    with contextlib.suppress(OSError):
        parts.append(Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip())
    try:
        uid = Path(f"/proc/{pid}").stat().st_uid
    except OSError:
        return ", ".join(parts)
    try:
        parts.append(f"user {pwd.getpwuid(uid).pw_name}")
    except KeyError:
        parts.append(f"uid {uid}")
    return ", ".join(parts)
