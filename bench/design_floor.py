"""The design's floor for one reward request: what the web server, the Redis hop and a second process cost
with nothing else to do.

`app` is a bare ASGI application for the Procfile's uvicorn command (`harness.start_web(app=APP)`): it reads
the body and hands it on as the service does, one Redis pipeline that SETs the payload and LPUSHes its key,
then waits for the answer with BLPOP. `echo_worker` (another process, as the inference worker is) pops the
key, GETs the payload and RPUSHes a one-item JSON answer. No token, rate limit, validation, batching,
bookkeeping or model: a service built on uvicorn, Redis and a worker process cannot answer faster than this,
so bench/serving_overhead.py prints it beside the reward endpoint's own round trip.
"""

from __future__ import annotations

import json
import os
import uuid

APP = "bench.design_floor:app"
QUEUE_ENV = "RS_FLOOR_QUEUE"  # the queue's name, one per run: a leftover "stop" cannot end the next run's worker
STOP = b"stop"
_clients: list = []


def _payload_key(key: str) -> str:
    return f"rs:bench:floor:payload:{key}"


def _reply_key(key: str) -> str:
    return f"rs:bench:floor:reply:{key}"


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if not _clients:
        import redis.asyncio

        _clients.append(redis.asyncio.Redis.from_url(os.environ["REDIS_URL"]))
    redis = _clients[0]
    key = uuid.uuid4().hex
    pipe = redis.pipeline(transaction=False)
    pipe.set(_payload_key(key), bytes(body), ex=60)
    pipe.lpush(os.environ[QUEUE_ENV], key)
    await pipe.execute()
    _, answer = await redis.blpop([_reply_key(key)], timeout=1)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def echo_worker(url: str, queue: str) -> None:
    """Answer every request on `queue` with one item, until `stop_echo_worker`."""
    import redis

    client = redis.Redis.from_url(url)
    while True:
        popped = client.brpop([queue], timeout=1)  # short waits: the client's socket timeout outlasts them
        if popped is None:
            continue
        key = popped[1]
        if key == STOP:
            return
        payload = (
            client.pipeline(transaction=False)
            .get(_payload_key(key.decode()))
            .delete(_payload_key(key.decode()))
            .execute()[0]
        )
        answer = {"items": [{"probability": len(payload or b"") % 2 / 2, "reward": 0.0}]}
        client.rpush(_reply_key(key.decode()), json.dumps(answer))


def stop_echo_worker(url: str, queue: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.lpush(queue, STOP)
    client.expire(queue, 60)
