"""common.body_budget: the bytes of request bodies one web process holds, taken before a body is kept
and given back after; past the budget a busy 503 whose body is read to its end and dropped."""

from __future__ import annotations

import asyncio

import pytest

from common.asgi_http import HttpError, read_body
from common.body_budget import BodyBudget


def receiver(chunks: list[bytes]):
    """An ASGI receive() giving `chunks` as one body; `left` says how many were not read."""
    queue = list(chunks)

    async def receive() -> dict:
        chunk = queue.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(queue)}

    receive.left = queue  # type: ignore[attr-defined]
    return receive


def test_a_body_is_held_while_its_request_runs_and_given_back_after():
    budget = BodyBudget(100, "WEB_BODIES_MAX_BYTES")
    with budget.hold() as first:
        body = asyncio.run(read_body(receiver([b"a" * 30, b"b" * 30]), 1000, "limit", first, declared=60))
        assert body == b"a" * 30 + b"b" * 30 and budget.held == 60
        with budget.hold() as second:
            second.grow_to(40)  # fits: 100 in all
            assert budget.held == 100
        assert budget.held == 60
    assert budget.held == 0 and budget.peak == 100


def test_past_the_budget_a_request_gets_a_busy_503_and_its_body_is_drained():
    budget = BodyBudget(100, "WEB_BODIES_MAX_BYTES")
    with budget.hold() as first:
        first.grow_to(80)
        receive = receiver([b"x" * 10] * 5)
        with budget.hold() as second, pytest.raises(HttpError) as info:
            asyncio.run(read_body(receive, 1000, "limit", second, declared=50))
        assert info.value.status == 503 and info.value.retry_after > 0
        assert "WEB_BODIES_MAX_BYTES" in info.value.detail and "80 bytes" in info.value.detail
        assert receive.left == [] and budget.held == 80 and budget.refused == 1  # read to the end, nothing held
        # a body that declares no length is counted as it arrives, and refused once it would pass
        receive = receiver([b"y" * 15, b"y" * 15, b"y" * 15])
        with budget.hold() as third, pytest.raises(HttpError):
            asyncio.run(read_body(receive, 1000, "limit", third))
        assert receive.left == [] and budget.held == 80
    assert budget.held == 0


def test_a_request_alone_may_pass_the_budget():
    """A valid body larger than the budget is never refused for ever: alone, it is taken."""
    budget = BodyBudget(100, "WEB_BODIES_MAX_BYTES")
    with budget.hold() as only:
        assert asyncio.run(read_body(receiver([b"z" * 150]), 1000, "limit", only, declared=150)) == b"z" * 150
        assert budget.held == 150
    assert budget.held == 0
