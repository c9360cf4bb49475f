"""The files a command writes (a recording, a trace): never one of its inputs or another output, and
written whole or not at all.

A recording written straight over `--data X.csv` empties the CSV before the run reads it, and a run that
fails half-way leaves half a file where a good one was. So an output is written to a temporary file beside
it and renamed over it only once it is whole; a run that dies leaves the old file as it was.

What sits at the path is never replaced by anything but a newer regular file:
- a symbolic link is followed: the file it names is written, the link stays a link;
- a character device (`/dev/null`) or a FIFO with a reader is written through, as a shell's `>` would; a FIFO
  with no reader is refused at once (never a hang), and so is a block device, a socket or a folder;
- a read-only file is refused, as `cp` refuses it, even for root (who could write it, but did not mean to).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from typing import IO, Mapping

from fitcore.core.errors import ConfigError, Text
from fitcore.core.uploads import shown_path


def same_file(a: str, b: str) -> bool:
    """Do two paths name one file? By inode where both exist (a link, `./x` and `x`), else by their path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def check_outputs(inputs: Mapping[str, str | None], outputs: Mapping[str, str | None]) -> None:
    """Refuse an output path that names an input or an earlier output, with ConfigError naming its flag.

    Args:
        inputs: the files read, by the flag or argument that named them ({"data": "X.csv"}).
        outputs: the files written, by flag ({"record": ..., "trace": ...}); None where not asked for.
    """
    seen = [(name, path) for name, path in inputs.items() if path]
    for name, path in outputs.items():
        if not path:
            continue
        for other, taken in seen:
            if same_file(path, taken):
                why = Text("outfiles.distinct", other=_named(other), path=taken)
                raise ConfigError(name, shown_path(path), why)
        seen.append((name, path))


def _named(name: str) -> Text | str:
    """How the message names the other file: replay's positional argument in words, a flag as typed."""
    return Text("outfiles.recording") if name == "recording" else "--" + name.replace("_", "-")


def being_written(path: str) -> list[str]:
    """The temporary files a Pending is writing for `path` now (a run in progress), then `path` itself if it
    exists: what a reader that follows a run's recording as it grows opens."""
    folder, name = os.path.split(os.path.realpath(str(path)))  # a link's file is the one written
    try:
        parts = sorted(f for f in os.listdir(folder) if f.startswith(f".{name}.") and f.endswith(".part"))
    except OSError:
        return []
    found = [os.path.join(folder, f) for f in parts]
    return found + ([str(path)] if os.path.exists(path) else [])


def _new_file(folder: str, name: str) -> tuple[int, str]:
    """A new file `.{name}.<random>.part` in `folder`, created exclusively with the mode a plain open()
    gives (0666 less the umask; mkstemp's would be 0600, and reading the umask means setting it)."""
    while True:
        temp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.part")
        try:
            return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), temp
        except FileExistsError:
            continue


class Pending:
    """An output being written: a temporary file beside `path` (beside the file a link names), renamed over
    it by commit(); or, for a character device or a FIFO with a reader, the path itself, written through.

    Made before the run, so that a path that cannot be written is refused before any work (ConfigError
    naming `flag`); nothing at `path` changes until commit().
    """

    def __init__(self, path: str, flag: str):
        self.path = str(path)
        self.temp: str | None = None  # None: written through, nothing to rename
        shown = shown_path(self.path)  # as given (a page's recording by its own name), its file's name kept
        target = os.path.realpath(self.path)  # a symlink is followed, never replaced by a file
        try:
            mode = _special(target)
            fd = _through(target, mode) if mode is not None else None
            if fd is None:
                folder, name = os.path.split(target)
                fd, self.temp = _new_file(folder, name)
        except _Refused as no:
            raise ConfigError(flag, shown, Text("recording.writable", why=no.why)) from None
        except OSError as exc:
            raise ConfigError(flag, shown, Text("recording.writable", why=exc.strerror or exc)) from None
        self.target = target
        self.file: IO[str] | None = os.fdopen(fd, "w", encoding="utf-8")

    def commit(self) -> None:
        """The file is whole: put it where it was asked for."""
        if self.file is None:
            return
        self.file.close()
        self.file = None
        if self.temp is not None:
            try:  # the file it replaces keeps its mode, as `cp` keeps it: a private file stays private
                os.chmod(self.temp, stat.S_IMODE(os.stat(self.target).st_mode))
            except FileNotFoundError:
                pass
            os.replace(self.temp, self.target)

    def discard(self) -> None:
        """The file will not be whole: remove it, and leave `path` as it was (a device's bytes are sent)."""
        if self.file is None:
            return
        self.file.close()
        self.file = None
        if self.temp is None:
            return
        try:
            os.unlink(self.temp)
        except FileNotFoundError:
            pass


class _Refused(Exception):
    def __init__(self, why: Text | str):
        self.why = why


def _special(target: str) -> int | None:
    """The mode of what sits at `target` where a rename must not replace it; None for a new file or a
    regular one that may be written. A read-only file and a folder are refused here."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return None  # a new file (a dangling link's target too)
    if stat.S_ISDIR(mode):
        raise _Refused(os.strerror(errno.EISDIR))
    if stat.S_ISREG(mode):
        # root may write anything: the file's own bits say whether its owner meant it to be written
        if not (mode & 0o222) or not os.access(target, os.W_OK):
            raise _Refused(Text("outfiles.read_only"))
        return None
    return mode


def _through(target: str, mode: int) -> int:
    """A descriptor that writes to a character device or a FIFO (`mode`) itself; anything else is refused."""
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # a block device, a socket: not a file to write
        raise _Refused(Text("outfiles.special"))
    try:  # O_NONBLOCK: a FIFO with no reader fails at once with ENXIO instead of waiting for one forever
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise _Refused(Text("outfiles.no_reader")) from None
        raise
    os.set_blocking(fd, True)  # a reader is there: write as a shell's `>` does, at the reader's pace
    return fd
