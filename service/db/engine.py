"""Engine and sessions for SQLite (embedded, WAL) and PostgreSQL (psycopg 3)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Column, Engine, Table, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from service.db.loop_reads import AsyncReader, SqliteReader

POOL_SIZE, MAX_OVERFLOW, POOL_TIMEOUT_S = 16, 32, 10.0
"""The connection pool's defaults (``PLACER_DB_POOL_SIZE``, ``PLACER_DB_MAX_OVERFLOW``,
``PLACER_DB_POOL_TIMEOUT_S``; docs/operations.md): at most 48 connections, and a request waits at
most 10 s for one (then 503), below the 30 s request deadline."""


def make_engine(url: str, pool_size: int = POOL_SIZE, max_overflow: int = MAX_OVERFLOW,
                pool_timeout_s: float = POOL_TIMEOUT_S) -> Engine:
    """An engine for ``url`` with a pool of ``pool_size`` + ``max_overflow`` connections; a
    checkout waits at most ``pool_timeout_s`` (SQLite's busy timeout is the same).

    SQLite runs in WAL mode with a busy timeout and foreign keys on.  Transactions that may
    write start with ``BEGIN IMMEDIATE`` so that concurrent writers wait for each other instead
    of failing; read-only ones (execution option ``placer_read_only``) start a deferred ``BEGIN``
    and never block anyone.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": pool_timeout_s},
                               pool_size=pool_size, max_overflow=max_overflow, pool_timeout=pool_timeout_s)
        _configure_sqlite(engine, pool_timeout_s)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    engine = create_engine(url, pool_size=pool_size, max_overflow=max_overflow, pool_timeout=pool_timeout_s)
    _ping_idle_connections(engine)
    return engine


PING_AFTER_IDLE_S = 1.0
"""A pooled connection idle longer than this is pinged before use; busier ones are not."""


def _ping_idle_connections(engine: Engine) -> None:
    """Pessimistic disconnect handling for connections that sat idle in the pool.

    A connection the database dropped (restart, failover, idle timeout) is found by a ping at
    checkout and replaced by a fresh one, so that no request sees it.  Unlike ``pool_pre_ping``,
    a connection checked in less than :data:`PING_AFTER_IDLE_S` ago is used without a ping: under
    load that round trip would double the cost of a primary-key read.
    """
    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["placer_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("placer_idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:  # any failure: the pool discards this connection and opens another
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc


def _configure_sqlite(engine: Engine, busy_timeout_s: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # transactions are begun below, not by the driver
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        read_only = conn.get_execution_options().get("placer_read_only", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


class Database:
    """An engine plus its session factories (read-write and read-only).

    ``read_engine`` is the engine of read-only sessions: on SQLite its transactions begin
    deferred (no write lock), on PostgreSQL it runs in autocommit.
    """

    def __init__(self, url: str, pool_size: int = POOL_SIZE, max_overflow: int = MAX_OVERFLOW,
                 pool_timeout_s: float = POOL_TIMEOUT_S) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size, max_overflow, pool_timeout_s)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.read_engine = self.engine.execution_options(placer_read_only=True)
        self.async_reader: AsyncReader | None = None  # reads on the event loop (service.db.loop_reads)
        self.sqlite_reader: SqliteReader | None = None
        if url.startswith("sqlite"):
            self.sqlite_reader = SqliteReader(self.engine)
        else:
            # a read needs no transaction of its own: without BEGIN and COMMIT a primary-key
            # read is one round trip instead of three (each statement sees committed data)
            self.read_engine = self.read_engine.execution_options(isolation_level="AUTOCOMMIT")
            self.async_reader = AsyncReader(url, self.engine.dialect)
        self.read_sessions = sessionmaker(self.read_engine, expire_on_commit=False)

    @contextmanager
    def session(self, read_only: bool = False) -> Iterator[Session]:
        """A session committed on success and rolled back on error.

        ``read_only`` sessions must not write (on SQLite they do not take the write lock).
        """
        with (self.read_sessions if read_only else self.sessions)() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    async def read_row(self, table: Table, columns: Sequence[Column[Any]], row_id: str) -> SimpleNamespace | None:
        """The ``columns`` of the row of ``table`` whose ``id`` is ``row_id``, read on the event loop.

        One statement and no ORM session: on PostgreSQL awaited on the autocommit connections of
        :class:`~service.db.loop_reads.AsyncReader` (the loop serves other requests during the
        round trip), on SQLite one ``sqlite3`` call on :class:`~service.db.loop_reads.SqliteReader`'s
        connection.  An outage raises :class:`~service.errors.DatabaseUnavailable` (503).

        Parameters
        ----------
        table
            The table, whose primary key is ``id``.
        columns
            The columns to read (only those the answer needs).
        row_id
            The primary key.

        Returns
        -------
        SimpleNamespace or None
            The values by column name, converted as the ORM converts them; ``None`` if there is no
            such row.
        """
        if self.async_reader is not None:
            return await self.async_reader.row(table, columns, row_id)
        assert self.sqlite_reader is not None  # one of the two, by the URL
        return self.sqlite_reader.row(table, columns, row_id)

    def dispose(self) -> None:
        if self.sqlite_reader is not None:
            self.sqlite_reader.close()
        self.engine.dispose()
