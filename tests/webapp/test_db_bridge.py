"""Database threads that keep their connection (common.db_bridge), against the real database."""

from __future__ import annotations

import asyncio

import pytest
from django.db import OperationalError, connection

from common.db_bridge import DatabaseThreads
from projects.models import Project

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def threads():
    made = DatabaseThreads("test-db", 1)
    yield made
    made.stop()


def server_pid() -> int:
    """The database server process behind this thread's connection (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def connection_object() -> int:
    connection.ensure_connection()
    return id(connection.connection)


def test_calls_share_one_connection_and_see_each_others_writes(threads):
    async def scenario():
        first = await threads.call(connection_object)
        await threads.call(Project.objects.create, name="made on a database thread")
        names = await threads.call(lambda: list(Project.objects.values_list("name", flat=True)))
        return first, await threads.call(connection_object), names

    first, second, names = asyncio.run(scenario())
    assert first == second  # no connection opened per call
    assert names == ["made on a database thread"]
    assert Project.objects.filter(name="made on a database thread").exists()  # committed, seen from here


def test_keyword_arguments_reach_the_function(threads):
    def describe(*args, **kwargs):
        return args, kwargs

    assert asyncio.run(threads.call(describe, 1, retry=True, size=2)) == ((1,), {"size": 2})


def terminate(pid: int) -> None:
    """The server ends that session, as a restart or an idle timeout would."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


def dies_once(calls: list[int]):
    """A call whose connection the server ends during its first run (its own backend terminated)."""

    def call() -> int:
        calls.append(1)
        with connection.cursor() as cursor:
            if len(calls) == 1:
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    return call


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize("retry", [False, True])
def test_a_connection_the_server_ended_while_idle_is_replaced_before_the_call(threads, retry):
    pid = asyncio.run(threads.call(server_pid))
    terminate(pid)
    calls = []

    def counted():
        calls.append(1)
        return server_pid()

    assert asyncio.run(threads.call(counted, retry=retry)) != pid and len(calls) == 1  # no failed first run


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_connection_dropped_during_a_repeatable_call_runs_it_again_on_a_new_one(threads):
    pid = asyncio.run(threads.call(server_pid))
    calls: list[int] = []
    assert asyncio.run(threads.call(dies_once(calls), retry=True)) != pid and len(calls) == 2


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_call_that_may_not_repeat_gets_the_error_and_the_next_call_reconnects(threads):
    pid = asyncio.run(threads.call(server_pid))
    calls: list[int] = []
    with pytest.raises(OperationalError):
        asyncio.run(threads.call(dies_once(calls)))
    assert len(calls) == 1
    assert asyncio.run(threads.call(server_pid)) != pid
