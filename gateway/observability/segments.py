"""Where metric values live: one memory segment per process, read by whoever is scraped.

A segment is a flat array of float64 values in an mmap, preceded by a header and laid out as
entries, one per series: `[u32 key length][u32 value count][key, padded to 8][values]`. The
header holds the magic and how many bytes of entries are in use. A process only ever writes
its own segment, from its event-loop thread, so updating a value is one store into memory:
no lock, no syscall. A new series writes its entry first and then bumps `used`, so a reader
in another process never sees a half-written entry (aligned 8-byte stores are atomic on
the platforms we run on, so it never sees a half-written value either).

With one process the segment is anonymous memory. With `--workers N` each worker's segment
is a file `worker-<pid>.seg` in a directory the supervisor made; `read_dir` reads every file
there. When a worker dies the supervisor puts a marker `worker-<pid>.dead` beside its file:
its counters and histograms still count (they must never go down), its gauges no longer do.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

MAGIC = b"GWMETR01"
_HEADER = struct.Struct("<8sQ")  # magic, bytes of entries in use
_ENTRY = struct.Struct("<II")  # key length, value count
HEADER_SIZE = _HEADER.size
INITIAL_SIZE = 1 << 20  # sparse: only the pages written to take memory
PREFIX, SUFFIX, DEAD = "worker-", ".seg", ".dead"

Values = dict[bytes, list[float]]  # series key -> its values


class Segment:
    """This process's values. `doubles` is replaced when the segment grows, so writers
    index it through the segment each time (`segment.doubles[i] += x`)."""

    def __init__(self, path: Path | None = None, size: int = INITIAL_SIZE) -> None:
        self.path = path
        self._fd = -1
        if path is not None:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.ftruncate(self._fd, size)
            self._map = mmap.mmap(self._fd, size)
        else:
            self._map = mmap.mmap(-1, size)
        self._size = size
        _HEADER.pack_into(self._map, 0, MAGIC, 0)
        self._used = 0
        self.doubles = memoryview(self._map).cast("d")

    def allocate(self, key: bytes, count: int) -> int:
        """Add a series of `count` values (all 0); the index of its first value."""
        padded = -(-len(key) // 8) * 8
        start = HEADER_SIZE + self._used
        end = start + _ENTRY.size + padded + 8 * count
        if end > self._size:
            self._grow(end)
        _ENTRY.pack_into(self._map, start, len(key), count)
        key_at = start + _ENTRY.size
        self._map[key_at : key_at + len(key)] = key
        self._used = end - HEADER_SIZE
        _HEADER.pack_into(self._map, 0, MAGIC, self._used)  # after the entry: readers see it whole
        return (key_at + padded) // 8

    def _grow(self, needed: int) -> None:
        size = self._size
        while size < needed:
            size *= 2
        old_map, old_view = self._map, self.doubles
        if self._fd >= 0:
            os.ftruncate(self._fd, size)
            new_map = mmap.mmap(self._fd, size)
        else:
            new_map = mmap.mmap(-1, size)
            new_map[: self._size] = old_map[: self._size]
        self._map, self._size = new_map, size
        self.doubles = memoryview(new_map).cast("d")
        old_view.release()
        old_map.close()

    def snapshot(self) -> bytes:
        """The header and entries in use, as they are now."""
        return bytes(self._map[: HEADER_SIZE + self._used])

    def close(self) -> None:
        self.doubles.release()
        self._map.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def parse(data: bytes) -> Iterator[tuple[bytes, list[float]]]:
    """The series of one segment's bytes (a file read by another process, or a snapshot)."""
    if len(data) < HEADER_SIZE:
        return
    magic, used = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        return
    end = min(HEADER_SIZE + used, len(data))
    at = HEADER_SIZE
    while at + _ENTRY.size <= end:
        key_len, count = _ENTRY.unpack_from(data, at)
        key_at = at + _ENTRY.size
        values_at = key_at + -(-key_len // 8) * 8
        after = values_at + 8 * count
        if after > end:
            break
        yield (
            data[key_at : key_at + key_len],
            list(struct.unpack_from(f"<{count}d", data, values_at)),
        )
        at = after


def merge_into(total: Values, series: Iterator[tuple[bytes, list[float]]]) -> None:
    for key, values in series:
        have = total.get(key)
        if have is None:
            total[key] = values
        elif len(have) == len(values):
            for i, value in enumerate(values):
                have[i] += value


def segment_path(directory: Path, pid: int) -> Path:
    return directory / f"{PREFIX}{pid}{SUFFIX}"


def retire(directory: Path, pid: int) -> None:
    """A worker died: keep its counters, drop its gauges (see the module docstring). The
    segment keeps its name (a reader listing the directory must never miss it); a marker
    beside it says it is dead."""
    (directory / f"{PREFIX}{pid}{DEAD}").touch()


def _read(path: Path) -> bytes:
    """The header and the entries in use (not the whole, mostly unused, file)."""
    with path.open("rb") as f:
        head = f.read(HEADER_SIZE)
        if len(head) < HEADER_SIZE:
            return b""
        return head + f.read(_HEADER.unpack(head)[1])


def read_dir(directory: Path) -> tuple[list[bytes], list[bytes]]:
    """The bytes of every live and every dead worker's segment in `directory`."""
    names = set(os.listdir(directory))
    live: list[bytes] = []
    dead: list[bytes] = []
    for name in sorted(names):
        if not (name.startswith(PREFIX) and name.endswith(SUFFIX)):
            continue
        try:
            data = _read(directory / name)
        except FileNotFoundError:
            continue
        (dead if name[: -len(SUFFIX)] + DEAD in names else live).append(data)
    return live, dead
