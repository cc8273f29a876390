"""Coalescing concurrent calls into one (no Django, no Redis)."""

from __future__ import annotations

import asyncio

import pytest

from inference.coalesce import Coalescer


class Recorder:
    """A send that records each joint call and answers every item with (key, item)."""

    def __init__(self, fail: Exception | None = None):
        self.calls: list[tuple[str, list[int]]] = []
        self.fail = fail

    async def __call__(self, key: str, items: list[int]) -> list[tuple[str, int]]:
        self.calls.append((key, list(items)))
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        return [(key, item) for item in items]


def test_calls_in_the_same_turn_go_out_as_one_and_each_gets_its_own_results():
    send = Recorder()
    joint = Coalescer(send)

    async def main():
        return await asyncio.gather(joint("d", [1, 2]), joint("d", [3]), joint("other", [4]), joint("d", [5, 6]))

    assert asyncio.run(main()) == [[("d", 1), ("d", 2)], [("d", 3)], [("other", 4)], [("d", 5), ("d", 6)]]
    assert sorted(send.calls) == [("d", [1, 2, 3, 5, 6]), ("other", [4])]  # one call per key


def test_a_lone_call_goes_out_without_waiting_for_company():
    send = Recorder()
    joint = Coalescer(send)

    async def main():
        task = asyncio.create_task(joint("d", [1]))
        for _ in range(3):  # the call registers, the next turn flushes it, the send starts: no timer involved
            await asyncio.sleep(0)
        assert send.calls == [("d", [1])]
        return await task

    assert asyncio.run(main()) == [("d", 1)]


def test_calls_after_a_send_started_go_out_in_the_next_one():
    send = Recorder()
    joint = Coalescer(send)

    async def main():
        first = asyncio.create_task(joint("d", [1]))
        for _ in range(3):
            await asyncio.sleep(0)
        return await asyncio.gather(first, joint("d", [2]))

    assert asyncio.run(main()) == [[("d", 1)], [("d", 2)]]
    assert send.calls == [("d", [1]), ("d", [2])]


def test_a_failed_joint_call_fails_every_caller_in_it():
    joint = Coalescer(Recorder(fail=RuntimeError("no worker answered")))

    async def main():
        return await asyncio.gather(joint("d", [1]), joint("d", [2]), return_exceptions=True)

    errors = asyncio.run(main())
    assert [str(e) for e in errors] == ["no worker answered"] * 2


def test_a_send_that_answers_the_wrong_number_of_items_is_an_error():
    async def short(key, items):
        return items[:-1]

    async def main():
        return await Coalescer(short)("d", [1, 2])

    with pytest.raises(RuntimeError, match="1 results for 2 items"):
        asyncio.run(main())


def test_a_caller_that_gave_up_does_not_spoil_the_others():
    send = Recorder()
    joint = Coalescer(send)

    async def main():
        quitter = asyncio.create_task(joint("d", [1]))
        stayer = asyncio.create_task(joint("d", [2]))
        await asyncio.sleep(0)
        quitter.cancel()
        return await stayer

    assert asyncio.run(main()) == [("d", 2)]
    assert send.calls == [("d", [1, 2])]
