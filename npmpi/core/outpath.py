"""Output files, checked by trying: reserved at start-up, one writer per path, published atomically.

`reserve_output` creates the output's temporary file itself, in the target's directory, with a
short unpredictable name (mkstemp: O_CREAT|O_EXCL|O_NOFOLLOW, so a planted link is never
followed), and takes two advisory locks: `flock` on the temporary (kept on the file once it has
its name, until the writer closes it) and a lock on the target's name (a small hidden lock file
beside it, named from a hash of the name, removed at the end). Any problem (a name too long, a
directory that refuses files: /proc, /sys, read-only mounts; a dangling link or any non-regular
file at the target, even with --force; a file another run is writing) is a UsageError at
start-up, before anything is measured. `publish` gives the temporary its name with a link (no
--force: never over an existing file) or a rename (--force), neither of which follows a link
planted at either name, then checks that the name holds this run's file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from npmpi.core.errors import UsageError

TEMP_PREFIX = ".npmpi-"
LOCK_PREFIX = ".npmpi-lock-"
BALLAST_SUFFIX = ".reserve"


class OutputExists(UsageError, FileExistsError):
    """The output names an existing file and --force was not given."""


@dataclass
class Reservation:
    """An output reserved at start-up: the open, locked temporary file and the lock on the name."""

    target: Path
    temp: Path
    fd: int
    force: bool
    what: str
    lock_path: Path
    lock_fd: int
    ballast: Path | None = None
    ballast_fd: int = -1
    published: bool = False
    absolute: str = ""  # the target's absolute path at start-up (the working directory may move)
    dir_fd: int = -1  # the target's directory, held open to find the file should the directory move

    @property
    def fd_path(self) -> str:
        """A path that opens this very file: its published name while that still leads to it, else
        /proc/self/fd/N (Linux: whatever happens to the temporary's name), else that name."""
        if self.published:
            with contextlib.suppress(OSError):
                if os.path.samestat(os.fstat(self.fd), os.lstat(self.target)):
                    return str(self.target)
        proc = f"/proc/self/fd/{self.fd}"
        return proc if os.path.exists(proc) else str(self.temp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _check_target(target: Path, force: bool, what: str) -> None:
    """UsageError unless `target` is absent, or (with force) a regular file no run is writing."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UsageError(
                f"{what} {target}: the name is longer than the file system allows "
                f"({len(os.fsencode(target.name))} bytes); choose a shorter name"
            ) from None
        raise UsageError(
            f"{what} {target}: cannot be checked ({_why(exc)}); choose another location"
        ) from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(
            f"{what} {target}: is a directory; give a file name inside it, e.g. {target / 'run.h5'}"
        )
    if stat.S_ISLNK(st.st_mode):
        dangling = "" if target.exists() else " (dangling)"
        raise UsageError(
            f"{what} {target}: is a symbolic link{dangling}; give the real file's path or another name"
        )
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(
            f"{what} {target}: exists and is not a regular file (a device, pipe or socket); "
            "it is never replaced, even with --force: choose another name"
        )
    if _being_written(target):
        raise UsageError(
            f"{what} {target}: another npmpi run is writing this file; "
            "wait for it to end or choose another name"
        )
    if not force:
        raise OutputExists(
            f"{what} {target}: the file exists; choose another name or add --force to overwrite it"
        )


def _being_written(target: Path) -> bool:
    """True if a run holds the write lock of the file at `target` (a finished file is not locked)."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _lock_name(directory: Path, name: str, target: Path, what: str) -> tuple[Path, int]:
    """Take the lock on a target's name: flock on `.npmpi-lock-HASH` beside it (retried if removed)."""
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    path = directory / f"{LOCK_PREFIX}{digest}"
    for _ in range(100):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644 & ~_umask())
        if not _flock_unless_held(fd, path):
            os.close(fd)
            raise UsageError(
                f"{what} {target}: another npmpi run is writing this file; wait for it to end or "
                "choose another name"
            ) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(path))
        except FileNotFoundError:
            same = False
        if same:  # not removed by its previous holder between our open and our lock
            return path, fd
        os.close(fd)
    raise UsageError(f"{what} {target}: cannot take the lock on its name; try again")


SWEEP_HOLD_S = 0.5  # a sweep (below) holds a lock for microseconds: a lock held longer is a live run's


def _flock_unless_held(fd: int, path: Path) -> bool:
    """Take the exclusive lock of `fd` (True), or False when a live run holds it. Another run's
    start-up sweep may hold it for a moment to remove the file: then the lock comes, or the name
    stops leading to the file, within SWEEP_HOLD_S (the caller checks the name again)."""
    deadline = time.monotonic() + SWEEP_HOLD_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            try:
                if not os.path.samestat(os.fstat(fd), os.lstat(path)):
                    return True  # removed meanwhile: the caller's check of the name starts again
            except FileNotFoundError:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


DEFAULT_DIRECTORY = "runs"  # where a run or map goes without -o
IGNORE_ALL = "# run files written by npmpi (its default output directory): not for version control\n*\n"


def default_directory() -> str:
    """runs/ in the current directory, created when missing with a .gitignore that ignores it all."""
    directory = Path(DEFAULT_DIRECTORY)
    try:
        if not directory.is_dir():
            directory.mkdir()
            (directory / ".gitignore").write_text(IGNORE_ALL)
    except OSError as exc:
        raise UsageError(
            f"cannot create the default output directory {directory}/ ({_why(exc)}); give -o FILE"
        ) from None
    return str(directory)


def remove_default_directory_if_unused() -> None:
    """Undo default_directory when nothing was written there: bad usage leaves no file behind."""
    directory = Path(DEFAULT_DIRECTORY)
    ignore = directory / ".gitignore"
    try:
        if sorted(p.name for p in directory.iterdir()) == [".gitignore"] and ignore.read_text() == IGNORE_ALL:
            ignore.unlink()
            directory.rmdir()
    except OSError:
        pass  # not ours, or in use: leave it


def reserve_output(
    path: str | os.PathLike, force: bool, what: str = "--output", ballast_bytes: int = 0, room_bytes: int = 0
) -> Reservation:
    """Create and lock the output's temporary file now; UsageError (one line) if it cannot be written.

    `ballast_bytes` > 0 also reserves that much disk space in a second hidden file, released by
    `free_ballast` when a write fails for lack of space so that the file can still be closed whole;
    `room_bytes` more must be free beside it (the file's first writes).
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    _check_target(target, force, what)
    if not directory.is_dir():
        raise UsageError(f"{what} {target}: directory {directory} does not exist; create it first")
    _sweep(directory)
    try:
        fd, temp = _locked_temp(directory, ".tmp")
    except OSError as exc:
        raise UsageError(
            f"{what} {target}: cannot create a file in {directory} ({_why(exc)}); choose another location"
        ) from None
    lock_fd = -1
    try:
        os.fchmod(fd, 0o644 & ~_umask())
        try:
            lock_path, lock_fd = _lock_name(directory, target.name, target, what)
        except OSError as exc:
            raise UsageError(f"{what} {target}: cannot lock its name in {directory} ({_why(exc)})") from None
        res = Reservation(target, temp, fd, force, what, lock_path, lock_fd, absolute=os.path.abspath(target))
        _check_target(target, force, what)  # again, now that the name is ours
        if ballast_bytes > 0:
            _check_room(directory, room_bytes, ballast_bytes, target, what)
            res.ballast, res.ballast_fd = _make_ballast(directory, ballast_bytes, target, what)
        with contextlib.suppress(OSError):
            res.dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return res
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        os.close(fd)
        if lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(lock_path)  # while still holding it: see _lock_name
            os.close(lock_fd)
        raise


def _locked_temp(directory: Path, suffix: str) -> tuple[int, Path]:
    """A new hidden file (mkstemp) with its exclusive lock taken: (descriptor, path). Another run's
    sweep may remove it between its creation and its lock (it is not locked yet): made again then."""
    for _ in range(100):
        fd, name = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX, suffix=suffix)
        try:
            if _flock_unless_held(fd, Path(name)) and os.path.samestat(os.fstat(fd), os.lstat(name)):
                return fd, Path(name)
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "its hidden files kept being removed by other runs' start-up")


def _check_room(directory: Path, room: int, ballast: int, target: Path, what: str) -> None:
    """UsageError when fewer than `room` bytes are free in `directory` beside the ballast to be made."""
    if room <= 0:
        return
    try:
        st = os.statvfs(directory)
    except OSError:
        return
    free = (st.f_bavail if os.geteuid() else st.f_bfree) * st.f_frsize
    if free < room + ballast:
        raise UsageError(
            f"{what} {target}: {directory} has less than {(room + ballast) // 1024} KiB free ({free // 1024} "
            f"KiB: the file's first writes and {ballast // 1024} KiB held back to close it on a full disk); "
            "free some space or choose another location"
        )


def _make_ballast(directory: Path, size: int, target: Path, what: str) -> tuple[Path, int]:
    """A hidden file holding `size` bytes of disk space, locked while the run lives (see _sweep)."""
    fd, path = _locked_temp(directory, BALLAST_SUFFIX)
    name = str(path)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            block = b"\0" * 65536  # no fallocate here: write the bytes
            left = size
            while left > 0:
                left -= os.write(fd, block[: min(left, len(block))])
            os.fsync(fd)
    except OSError as exc:
        os.unlink(name)
        os.close(fd)
        raise UsageError(
            f"{what} {target}: {directory} has less than {size // 1024} KiB free ({_why(exc)}); "
            "free some space or choose another location"
        ) from None
    return Path(name), fd


def free_ballast(res: Reservation) -> bool:
    """Give the reserved space back to the file system (after a write failed); True if there was some."""
    if res.ballast is None:
        return False
    with contextlib.suppress(OSError):
        os.unlink(res.ballast)
    os.close(res.ballast_fd)
    res.ballast, res.ballast_fd = None, -1
    return True


def _sweep(directory: Path) -> None:
    """Remove what runs and calibrations killed outright (SIGKILL, a node crash) left here: npmpi's
    hidden temporary, reserve and lock files that no live process holds locked. Its lock is how a
    file shows its owner alive, on this node or another sharing the file system (a pid would name a
    process of one node only); a file made but not yet locked is made again by its owner
    (`_locked_temp`, `_lock_name`), so none needs to be spared for its age."""
    try:
        entries = [e for e in os.scandir(directory) if e.name.startswith(TEMP_PREFIX)]
    except OSError:
        return
    for entry in entries:
        stale_kind = entry.name.endswith((".tmp", BALLAST_SUFFIX)) or entry.name.startswith(LOCK_PREFIX)
        with contextlib.suppress(OSError):
            if not stale_kind or not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live run: BlockingIOError
                if os.path.samestat(os.fstat(fd), os.lstat(entry.path)):
                    os.unlink(entry.path)
            finally:
                os.close(fd)


def check_temporary(res: Reservation) -> None:
    """UsageError unless the temporary's name still leads to the reserved (open) file."""
    own = os.fstat(res.fd)
    try:
        if not os.path.samestat(own, os.lstat(res.temp)):
            raise UsageError(
                f"{res.what} {res.target}: its temporary file {res.temp} was replaced; not published"
            )
    except FileNotFoundError:
        raise UsageError(
            f"{res.what} {res.target}: its temporary file {res.temp} was removed; not published"
        ) from None


def publish(res: Reservation) -> None:
    """Give the temporary file the target's name (see the module docstring); UsageError if it may not."""
    check_temporary(res)
    own = os.fstat(res.fd)
    _check_target(res.target, res.force, res.what)
    try:
        if res.force:
            os.replace(res.temp, res.target)
        else:
            try:
                os.link(res.temp, res.target, follow_symlinks=False)
            except FileExistsError:
                raise OutputExists(
                    f"{res.what} {res.target}: the file exists; "
                    "choose another name or add --force to overwrite it"
                ) from None
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                os.replace(res.temp, res.target)  # no hard links here; the name lock is ours
            else:
                os.unlink(res.temp)
    except OSError as exc:
        raise UsageError(f"{res.what} {res.target}: cannot be given its name ({_why(exc)})") from None
    try:
        ok = os.path.samestat(own, os.lstat(res.target))
    except OSError:
        ok = False
    if not ok:
        raise UsageError(f"{res.what} {res.target}: another file took its name while it was published")
    res.published = True


def published_problem(res: Reservation) -> str | None:
    """None while the published name still leads to the open file; else one line saying where the
    data is now (its directory was moved: the descriptor's path) or that it is lost (removed)."""
    own = os.fstat(res.fd)
    try:
        if os.path.samestat(own, os.lstat(res.absolute or res.target)):
            return None
    except OSError:
        pass
    where = ""
    if own.st_nlink > 0 and res.dir_fd >= 0:  # still linked: by its name, in its directory moved elsewhere
        with contextlib.suppress(OSError):
            if os.path.samestat(own, os.stat(res.target.name, dir_fd=res.dir_fd, follow_symlinks=False)):
                where = os.path.join(os.readlink(f"/proc/self/fd/{res.dir_fd}"), res.target.name)
    said = f"{res.what} {res.absolute or res.target} no longer leads to the file written"
    if where and " (deleted)" not in where and os.path.isabs(where):
        return f"{said} (its directory was moved or replaced during the run): the data is in {where}"
    return f"{said}: it was removed during the run (its directory deleted?), and the data with it is lost"


def release(res: Reservation) -> None:
    """Drop the temporary (if never published), the ballast and both locks; idempotent."""
    if res.fd < 0:
        return
    free_ballast(res)
    if not res.published:
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(res.fd), os.lstat(res.temp)):
                os.unlink(res.temp)
    if res.lock_fd >= 0:
        with contextlib.suppress(OSError):
            os.unlink(res.lock_path)  # while still holding it: see _lock_name
        os.close(res.lock_fd)
        res.lock_fd = -1
    if res.dir_fd >= 0:
        os.close(res.dir_fd)
        res.dir_fd = -1
    os.close(res.fd)
    res.fd = -1


def write_whole(res: Reservation, data: bytes) -> None:
    """Write `data` into the reserved temporary file and sync it (for small outputs such as JSON)."""
    view = memoryview(data)
    while view:
        view = view[os.write(res.fd, view) :]
    os.fsync(res.fd)
