"""Primary-key reads on the event loop, for the polled GETs (``/v1/jobs/{id}``, ``/v1/plans/{id}``,
``/v1/graphs/{id}``: :meth:`service.db.engine.Database.read_row`).

* PostgreSQL: a blocking driver call on the loop stops every other request for a database
  round trip; under load the loop would spend a third of its time waiting for PostgreSQL.
  :class:`AsyncReader` keeps a few autocommit ``psycopg.AsyncConnection`` of its own and awaits
  the answer instead, so the loop serves other requests meanwhile.
* SQLite: the read is in-process and short.  :class:`SqliteReader` keeps one connection of its
  own in autocommit, so a read is one ``sqlite3`` call (no ``BEGIN``, no ``ROLLBACK``, no pool
  checkout): each call into ``sqlite3`` lets another thread take the GIL, and the loop may then
  wait a switch interval to get it back.

Values are converted as the ORM converts them (the columns' result processing, e.g. timestamps
read back as aware UTC, JSON text parsed on SQLite).  On PostgreSQL only the TypeDecorators'
own step applies: the dialect's result processors expect the values of connections that
SQLAlchemy configured (its type adapters), which the reader's own psycopg connections are not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Column, Engine, Table, TypeDecorator
from sqlalchemy.engine import Dialect, make_url

from service.errors import DatabaseUnavailable, is_outage_message

if TYPE_CHECKING:
    import psycopg


class AsyncReader:
    """Up to ``size`` autocommit connections, opened on first use in the running event loop (the
    loop is single-threaded: the idle list needs no lock; a request finding none waits on a future
    that a released connection resolves)."""

    def __init__(self, url: str, dialect: Dialect, size: int = 8) -> None:
        import psycopg  # the postgres extra: only a PostgreSQL database needs it

        self._psycopg = psycopg
        self.conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.dialect = dialect
        self.size = size
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._opened = 0
        self._waiting: deque[asyncio.Future[None]] = deque()  # requests waiting for a connection
        self._sql: dict[tuple[str, tuple[str, ...]], str] = {}

    async def row(self, table: Table, columns: Sequence[Column[Any]], row_id: str) -> SimpleNamespace | None:
        """The ``columns`` of the row of ``table`` whose ``id`` is ``row_id`` (attributes by column name)."""
        names = tuple(c.name for c in columns)
        sql = self._sql.get((table.name, names))
        if sql is None:
            sql = self._sql[(table.name, names)] = _select_by_id(table, columns, "%s")  # names from the models
        conn = await self._acquire()
        try:
            cur = await conn.execute(sql, (row_id,), prepare=True)
            values = await cur.fetchone()
        except BaseException as exc:  # a broken or interrupted connection is not reused
            await self._discard(conn)
            if isinstance(exc, self._psycopg.OperationalError) and is_outage_message(str(exc)):
                raise DatabaseUnavailable(str(exc)) from exc
            raise
        await self._release(conn)
        if values is None:
            return None
        out = {}
        for column, value in zip(columns, values, strict=True):
            kind = column.type
            out[column.name] = kind.process_result_value(value, self.dialect) if isinstance(kind, TypeDecorator) \
                else value
        return SimpleNamespace(**out)

    async def _acquire(self) -> psycopg.AsyncConnection[Any]:
        while not self._idle and self._opened >= self.size:
            freed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(freed)
            try:
                await freed
            except asyncio.CancelledError:
                if freed.done() and not freed.cancelled():
                    self._wake()  # woken, then cancelled: pass the connection on
                raise
        if self._idle:
            return self._idle.pop()
        self._opened += 1
        try:
            return await self._psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        except BaseException as exc:
            await self._discard(None)
            if isinstance(exc, self._psycopg.OperationalError) and is_outage_message(str(exc)):
                raise DatabaseUnavailable(str(exc)) from exc
            raise

    async def _release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._idle.append(conn)
        self._wake()

    async def _discard(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        self._opened -= 1
        self._wake()
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing more to do
                await conn.close()

    def _wake(self) -> None:
        """Let the longest waiting request look for a connection again."""
        while self._waiting:
            freed = self._waiting.popleft()
            if not freed.done():
                freed.set_result(None)
                return

    async def close(self) -> None:
        """Close the idle connections (at shutdown)."""
        while self._idle:
            await self._idle.pop().close()
        self._opened = 0


def _select_by_id(table: Table, columns: Sequence[Column[Any]], placeholder: str) -> str:
    return f"SELECT {', '.join(c.name for c in columns)} FROM {table.name} WHERE id = {placeholder}"


class SqliteReader:
    """One autocommit connection of the engine's for reads on the event loop (SQLite).

    WAL readers never wait for a writer, so a read is short; the connection's busy timeout is
    lowered to ``busy_timeout_ms`` for the rare wait on a checkpoint or recovery, and running out
    of it is answered 503 (:class:`DatabaseUnavailable`) rather than holding the loop.
    """

    def __init__(self, engine: Engine, busy_timeout_ms: int = 2000) -> None:
        self.engine = engine
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: Any = None
        self._plans: dict[tuple[str, tuple[str, ...]], tuple[str, list[Any]]] = {}

    def row(self, table: Table, columns: Sequence[Column[Any]], row_id: str) -> SimpleNamespace | None:
        """The ``columns`` of the row of ``table`` whose ``id`` is ``row_id`` (attributes by column name)."""
        import sqlite3

        names = tuple(c.name for c in columns)
        plan = self._plans.get((table.name, names))
        if plan is None:
            dialect = self.engine.dialect
            plan = self._plans[(table.name, names)] = (
                _select_by_id(table, columns, "?"),
                [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns])
        sql, processors = plan
        try:
            if self._conn is None:
                proxy = self.engine.raw_connection()  # the engine's connect hooks: WAL, autocommit
                self._conn = proxy.driver_connection
                self._proxy = proxy  # kept out of the pool for good
                self._conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
            values = self._conn.execute(sql, (row_id,)).fetchone()
        except sqlite3.OperationalError as exc:
            if is_outage_message(str(exc)):
                raise DatabaseUnavailable(str(exc)) from exc
            raise
        if values is None:
            return None
        return SimpleNamespace(**{name: (proc(value) if proc is not None else value)
                                  for name, proc, value in zip(names, processors, values, strict=True)})

    def close(self) -> None:
        if self._conn is not None:
            self._proxy.close()
            self._conn = None
