"""The sqlite backend beyond the contract: URL parsing, the file it makes, workers sharing it,
lazy purging, failures, and never blocking the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from blockbuster import blockbuster_ctx

from gateway.store import sqlite_kv
from gateway.store.kv import StoreMisconfigured
from gateway.store.kv import StoreUnavailable
from gateway.store.kv import make_kv
from gateway.store.kv import sqlite_path
from gateway.store.sqlite_kv import SqliteKV


def rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        count: int = conn.execute("SELECT count(*) FROM kv").fetchone()[0]
    conn.close()
    return count


def test_paths_read_as_sqlalchemy_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_path("sqlite:///./gateway.db") == str(tmp_path / "gateway.db")
    assert sqlite_path("sqlite:///data/gw.db") == str(tmp_path / "data" / "gw.db")
    assert sqlite_path("sqlite:////var/lib/gw.db") == "/var/lib/gw.db"
    assert sqlite_path("sqlite:///:memory:") == ":memory:"


async def test_file_and_table_made_on_first_use_in_wal_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    kv = make_kv("sqlite:///./gateway.db")
    assert not (tmp_path / "gateway.db").exists()  # nothing is opened before the first call
    try:
        await kv.put("k", b"v", 60)
    finally:
        await kv.close()
    with sqlite3.connect(tmp_path / "gateway.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT key, value FROM kv").fetchall() == [("k", b"v")]
    conn.close()


async def test_missing_directory_is_a_clear_startup_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    with pytest.raises(StoreMisconfigured) as raised:
        make_kv(f"sqlite:///{missing}/gw.db")
    assert str(raised.value) == (
        f"store.url: the directory of the sqlite database does not exist: {missing}"
    )
    with pytest.raises(StoreMisconfigured, match="is a directory"):
        make_kv(f"sqlite:///{tmp_path}")


def files_in(directory: Path) -> list[Path]:
    return list(directory.iterdir())


def test_a_url_of_no_backend_is_refused_without_quoting_it() -> None:
    for url in ("sqlite://relative.db", "mysql://root:hunter2-0077@db/gw"):
        with pytest.raises(StoreMisconfigured) as raised:
            make_kv(url)
        assert str(raised.value) == (
            "store.url: expected memory://, sqlite:///PATH, redis://, rediss:// or redis+cluster://"
        )


async def test_in_memory_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    kv = make_kv("sqlite:///:memory:")
    try:
        await kv.put("k", b"v", 60)
        assert await kv.get("k") == b"v"
    finally:
        await kv.close()
    assert files_in(tmp_path) == []  # no file named ':memory:' in the working directory


async def test_workers_writing_at_once_wait_for_each_other(tmp_path: Path) -> None:
    # Two stores, two connections, two threads on one file: the lock contention of two
    # worker processes. The busy timeout makes each writer wait instead of failing.
    path = str(tmp_path / "gw.db")
    one, two = SqliteKV(path), SqliteKV(path)
    try:
        await asyncio.gather(
            *(one.put(f"one-{i}", b"1", 60) for i in range(150)),
            *(two.put(f"two-{i}", b"2", 60) for i in range(150)),
        )
        seen = await asyncio.gather(*(one.get(f"two-{i}") for i in range(150)))
        assert seen == [b"2"] * 150
    finally:
        await one.close()
        await two.close()
    assert rows(tmp_path / "gw.db") == 300


async def test_expired_rows_are_purged_lazily_and_boundedly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_kv, "PURGE_BATCH", 10)
    kv = SqliteKV(str(tmp_path / "gw.db"))
    try:
        await asyncio.gather(*(kv.put(f"old-{i}", b"x", 0.1) for i in range(25)))
        await asyncio.sleep(0.2)
        assert rows(tmp_path / "gw.db") == 25  # expired rows stay until a put comes by
        assert await kv.get("old-0") is None  # but are invisible at once
        await kv.put("new-1", b"y", 60)
        assert rows(tmp_path / "gw.db") == 25 - 10 + 1
        await kv.put("new-2", b"y", 60)
        await kv.put("new-3", b"y", 60)
        assert rows(tmp_path / "gw.db") == 3
    finally:
        await kv.close()


async def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "gw.db"
    path.write_bytes(b"this is not a sqlite database, it is a text file of some length" * 20)
    kv = SqliteKV(str(path))
    try:
        assert await kv.ping() is False
        with pytest.raises(StoreUnavailable, match=r"^sqlite store .*gw\.db: file is not a"):
            await kv.get("k")
        with pytest.raises(StoreUnavailable):
            await kv.put("k", b"v", 60)
        # Repaired: the next call opens it again.
        path.unlink()
        assert await kv.ping() is True
    finally:
        await kv.close()


async def test_calls_after_close_are_unavailable(tmp_path: Path) -> None:
    kv = SqliteKV(str(tmp_path / "gw.db"))
    await kv.put("k", b"v", 60)
    await kv.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        await kv.get("k")
    assert await kv.ping() is False


async def test_never_blocks_the_event_loop(tmp_path: Path) -> None:
    path = str(tmp_path / "gw.db")
    kv = SqliteKV(path)
    try:
        with blockbuster_ctx(scanned_modules=["gateway"]):
            assert await kv.ping() is True  # the first call opens the file and makes the table
            await asyncio.gather(*(kv.put(f"k{i}", b"v", 60) for i in range(20)))
            assert await kv.get("k3") == b"v"
    finally:
        await kv.close()


def test_switching_to_wal_waits_for_another_connections_lock(tmp_path: Path) -> None:
    """The switch to WAL can fail at once with "database is locked" when another process
    holds the new file (sqlite's busy handler does not cover it): use_wal tries again."""
    import sqlite3
    import threading

    from gateway.store.sqlite_kv import use_wal

    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        impatient = sqlite3.connect(path, timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            use_wal(impatient, within_s=0)  # no retries: what the bare pragma does
        use_wal(impatient, within_s=5)
        assert impatient.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        impatient.close()
    finally:
        release.join()
        holder.close()
