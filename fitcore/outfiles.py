"""The files a command writes (a recording, a trace): never one of its inputs or another output, and
written whole or not at all.

A recording written straight over `--data X.csv` empties the CSV before the run reads it, and a run that
fails half-way leaves half a file where a good one was. So an output is written to a temporary file beside
it and renamed over it only once it is whole; a run that dies leaves the old file as it was.
"""

from __future__ import annotations

import errno
import os
import secrets
from typing import IO, Mapping

from fitcore.errors import ConfigError, Text
from fitcore.uploads import shown_path


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
    folder, name = os.path.split(os.path.abspath(str(path)))
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
    """An output being written: a temporary file beside `path`, renamed over it by commit().

    Made before the run, so that a path that cannot be written is refused before any work (ConfigError
    naming `flag`); nothing at `path` changes until commit().
    """

    def __init__(self, path: str, flag: str):
        self.path = str(path)
        shown = shown_path(self.path)  # as given (a page's recording by its own name), its file's name kept
        if os.path.isdir(self.path):
            raise ConfigError(flag, shown, Text("recording.writable", why=os.strerror(errno.EISDIR)))
        folder, name = os.path.split(os.path.abspath(self.path))
        try:
            fd, self.temp = _new_file(folder, name)
        except OSError as exc:
            raise ConfigError(flag, shown, Text("recording.writable", why=exc.strerror or exc)) from None
        self.file: IO[str] | None = os.fdopen(fd, "w", encoding="utf-8")

    def commit(self) -> None:
        """The file is whole: put it where it was asked for."""
        if self.file is None:
            return
        self.file.close()
        self.file = None
        os.replace(self.temp, self.path)

    def discard(self) -> None:
        """The file will not be whole: remove it, and leave `path` as it was."""
        if self.file is None:
            return
        self.file.close()
        self.file = None
        try:
            os.unlink(self.temp)
        except FileNotFoundError:
            pass
