"""Files a page uploads (a CSV file, a recording) and the recordings it makes, kept on the server per browser.

A run's config carries a CSV file's path (fitcore.core.csvdata), so an upload must be a file on the server,
not bytes in a session. Each file lies in a directory of its own under one temporary directory of this
process:

    <root>/<owner's digest>/<kind>/<random hex>/<the file's own name>

so a fresh upload never overwrites the file a queued or running run reads, and a refusal names the file as
the user knows it (`houses.csv`), not a temporary name. An owner keeps its latest KEEP_PER_KIND files of each
kind: the one in use and the one before it, which a run started a moment ago may still be reading; older
ones are deleted when replaced. Over all owners the store holds at most MAX_TOTAL_BYTES; past that the
oldest files go first. The directory is removed when the process exits.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

from fitcore.core.errors import PathValue

KEEP_PER_KIND = 2  # per owner and kind: the file in use and the one it replaced
MAX_TOTAL_BYTES = 512 * 2**20  # every owner's files together (eight CSV files at the upload limit)
MAX_NAME = 80  # characters of a file's own name kept
KINDS = ("csv", "fitrec", "record")


_ROOTS: set[Path] = set()  # every store's directory in this process: files a user knows by their own name


def shown_path(path: str | os.PathLike) -> PathValue:
    """A path as an error names it: as the user gave it (`./data/x.csv`, `~/runs/a.fitrec`), but an upload
    by its own name (`houses.csv`): the server's directory is not the user's, and is nobody's business."""
    text = str(path)
    try:
        resolved = Path(text).resolve()
    except (OSError, RuntimeError, ValueError):
        return PathValue(text)
    inside = any(resolved.is_relative_to(root) for root in _ROOTS)
    return PathValue(os.path.basename(text) if inside else text)


def safe_name(name: str, default: str) -> str:
    """The file's own name, reduced to letters, digits, '.', '-' and '_' (no directories, no dot first)."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(str(name).replace("\\", "/")))
    base = base.lstrip(".")[-MAX_NAME:]
    return base or default


class UploadStore:
    """Per-owner files under one directory; safe to share between the sessions of a server.

    Args:
        root: the directory to keep them in; a fresh temporary directory (removed at exit) when None.
        max_total_bytes: the bound on all files together.
    """

    def __init__(self, root: str | None = None, max_total_bytes: int = MAX_TOTAL_BYTES):
        if root is None:
            root = tempfile.mkdtemp(prefix="fitcore-uploads-")
            atexit.register(shutil.rmtree, root, True)
        self.root = Path(root)
        _ROOTS.add(self.root.resolve())
        self.max_total_bytes = max_total_bytes
        self._lock = threading.Lock()

    def _owner_dir(self, owner: str, kind: str) -> Path:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        digest = hashlib.sha256(str(owner).encode()).hexdigest()[:24]  # never the cookie's value itself
        return self.root / digest / kind

    def new_path(self, owner: str, kind: str, name: str) -> Path:
        """A fresh path for the owner's next file of `kind` (its directory made), older ones trimmed."""
        with self._lock:
            folder = self._owner_dir(owner, kind) / uuid.uuid4().hex
            folder.mkdir(parents=True)
            self._trim(self._owner_dir(owner, kind), keep=folder)
        return folder / safe_name(name, f"upload.{kind}")

    def save(self, owner: str, kind: str, name: str, data: bytes) -> Path:
        """Write `data` as the owner's latest file of `kind`; return its path."""
        path = self.new_path(owner, kind, name)
        path.write_bytes(data)
        with self._lock:
            self._bound_total(keep=path.parent)
        return path

    def files(self, owner: str, kind: str) -> list[Path]:
        """The owner's files of `kind`, oldest first."""
        folder = self._owner_dir(owner, kind)
        found = [f for d in folder.iterdir() if d.is_dir() for f in d.iterdir()] if folder.is_dir() else []
        return sorted(found, key=_mtime)

    def _trim(self, folder: Path, keep: Path) -> None:
        """Delete the owner's oldest directories of this kind beyond KEEP_PER_KIND (the new one counted)."""
        dirs = sorted((d for d in folder.iterdir() if d.is_dir() and d != keep), key=_mtime)
        for d in dirs[: max(0, len(dirs) - (KEEP_PER_KIND - 1))]:
            shutil.rmtree(d, ignore_errors=True)

    def _bound_total(self, keep: Path) -> None:
        """Delete the oldest files of any owner until all of them fit in max_total_bytes."""
        entries = []
        for path in self.root.glob("*/*/*/*"):
            try:
                entries.append((path.stat().st_mtime_ns, path.stat().st_size, path))
            except OSError:
                continue
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_total_bytes:
                break
            if path.parent == keep:
                continue
            shutil.rmtree(path.parent, ignore_errors=True)
            total -= size


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


_store: UploadStore | None = None
_store_lock = threading.Lock()


def server_store() -> UploadStore:
    """The one store of this process, made on first use."""
    global _store
    with _store_lock:
        if _store is None:
            _store = UploadStore()
        return _store
