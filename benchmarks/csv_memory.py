"""What a CSV upload costs the server's memory: resident memory before, after reading a wide file, and after
the table is dropped, with the peak of Python's own allocations while reading (tracemalloc: numpy's and
pandas' arrays, the file's bytes and text), for the issue's 3.9 MB file of 10,000 columns (refused at its
header now) and for files at the 256-column bound: 3.9 MB, and near the 64 MiB upload limit.

    python -m benchmarks.csv_memory
"""

from __future__ import annotations

import gc
import os
import tempfile
import tracemalloc

from fitcore.core import csvdata
from fitcore.core.errors import ConfigError

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "houses.csv")


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def wide_file(columns: int, size: int) -> str:
    """A CSV of `columns` columns (the last is y) and about `size` bytes of "1.5," cells."""
    header = ",".join(f"c{i}" for i in range(columns - 1)) + ",y\n"
    row = ",".join(["1.5"] * columns) + "\n"
    handle, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(handle, "w") as f:
        f.write(header + row * max(2, (size - len(header)) // len(row)))
    return path


def measure(columns: int, size: int = 3_900_000) -> None:
    path = wide_file(columns, size)
    gc.collect()
    before = rss_mib()
    tracemalloc.start()
    try:
        table = csvdata.read_table(path, "y", tuple(f"c{i}" for i in range(csvdata.MAX_FEATURES)))
        outcome = f"read: {table.X.shape[0]} rows, {len(table.features)} features used"
    except ConfigError as exc:
        table, outcome = None, f"refused: {exc.allowed}"
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    during = rss_mib()
    del table
    gc.collect()
    after = rss_mib()
    print(f"{columns:>6} columns, {os.path.getsize(path) / 1e6:.1f} MB: {outcome}")
    print(f"  peak allocated while reading {peak:.0f} MiB")
    print(f"  RSS {before:.0f} MiB before, {during:.0f} MiB after reading, {after:.0f} MiB once dropped")
    os.unlink(path)


def replaced_upload() -> None:
    """Two uploads in turn, the first replaced as the page replaces it: which tables load still keeps."""
    first, second = wide_file(csvdata.MAX_COLUMNS, 3_900_000), wide_file(csvdata.MAX_COLUMNS, 3_900_000)
    features = tuple(f"c{i}" for i in range(csvdata.MAX_FEATURES))
    csvdata.load(first, "y", features)
    csvdata.load(second, "y", features)
    csvdata.forget(first)  # as dashboard/data.py does when the upload is replaced
    kept = ["first" if p == first else "second" for p in csvdata.cached_paths()]
    print(f"a replaced upload: the tables kept are the {' and '.join(kept) or 'none'}")
    os.unlink(first)
    os.unlink(second)


def main() -> None:
    csvdata.read_table(EXAMPLE, "price")  # pandas and numpy loaded: what follows is the file's own cost
    print(f"process RSS with the readers loaded: {rss_mib():.0f} MiB")
    measure(10_000)
    measure(csvdata.MAX_COLUMNS)
    measure(csvdata.MAX_COLUMNS, 60_000_000)
    replaced_upload()


if __name__ == "__main__":
    main()
