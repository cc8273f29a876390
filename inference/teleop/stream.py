"""One live teleop stream, without sockets: the agent's session from hello to its end.

`TeleopStream` owns what the agent's socket used to: the session (hello, episodes, labels, bye), the
recording buffer and its flush policy (`record_now`), the newest-frame-wins scoring slot, the stream's
stats and the token watcher. It talks to the world through an `Outlet` (reply to the agent, publish to
the session's viewers, close the socket) and to the database through one bridge (`database()`: threads
that keep their connection), so it is tested with a plain object for an outlet
(tests/inference/teleop/test_stream.py). The consumer (consumers.py) only dispatches to it.

Bounds: one `hello` per stream (another is refused with a warning); every task the stream starts (status
ticker, token watcher, flushes, inference) is cancelled by `stop()`; images are checked and decoded in a
worker thread, never on the event loop; a frame whose image is bad is skipped and counted (`bad_frames`)
while its neighbours are kept; the agent's token is re-checked every TELEOP_TOKEN_CHECK_S seconds and a
revoked token's stream is closed (code 4401). Every value of a message is checked before it is used (step
headers by `step_header.step_read`, text messages within TEXT_MAX_CHARS and JSON_MAX_DEPTH); a bad one is
a warning to the agent. `stop()` closes the session whatever fails on the way.

Scoring frames needs the token's `rewards` scope (without it the session records without scores). Frames
are scored through the REST rewards path (`scoring.score_frame`), so they reach the gallery and the
reward-hacking monitor. Steps are recorded in groups (FLUSH_EVERY) between frames: while a frame is being
scored, its recording waits for the result (`record_now`), so the database write does not hold the
frame's result back.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable, Coroutine
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
from django.conf import settings
from django.db import DatabaseError

from common import metrics
from common.db_bridge import DatabaseThreads
from common.images.checks import CheckedImage, ImageError, check_image, decode_rgb
from common.json_limits import loads_bounded
from inference import permissions as inference_perms
from projects.models import Agent
from robot_agent.protocol import ProtocolError

from . import scoring, services
from .latest import LatestFrameSlot
from .step_header import MAX_STEP_INDEX, Step, step_read
from .stream_stats import StreamStats

log = logging.getLogger(__name__)

FLUSH_EVERY = 10  # steps recorded together; while a frame is being scored, up to FLUSH_LIMIT wait
FLUSH_LIMIT = 3 * FLUSH_EVERY
TICK_S = 1.0
MIME = {"jpeg": "image/jpeg", "png": "image/png"}
TEXT_MAX_CHARS = 64 * 1024  # hello, episode_start/end, label and bye are a few hundred bytes
CLOSE_BAD_HELLO = 4400
CLOSE_REVOKED = 4401
CLOSE_TRY_AGAIN = 1013  # RFC 6455 "try again later": the agent reconnects and says hello again


@lru_cache(maxsize=1)
def database() -> DatabaseThreads:
    """The threads that run every database call of the streams (session, recording, stats, labels, token
    checks), each keeping its connection: a connection opened per call would be a new PostgreSQL server
    process several times a second per session, and its CPU would slow the inference worker beside it."""
    return DatabaseThreads("teleop-db", 2)


def group_name(session_id: int) -> str:
    return f"teleop_{session_id}"


def frames_check(
    images: dict[str, bytes], *, decode: str | None = None
) -> tuple[dict[str, CheckedImage], np.ndarray | None]:
    """Every camera's image validated (size limits, format), and camera `decode`'s pixels (uint8 HxWx3) when
    named, for scoring: one thread hop per step and, for a PNG, one inflate (the check walks its chunks, the
    decode inflates). ImageError names the bad camera. Run in a thread."""
    checked, pixels = {}, None
    for camera, raw in images.items():
        try:
            checked[camera] = check_image(
                raw, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS, inflate=camera != decode
            )
            if camera == decode:
                pixels = decode_rgb(raw)
        except ImageError as exc:
            raise ImageError(f"camera {camera!r}: {exc}") from None
    return checked, pixels


def record_now(buffered: int, *, scoring: bool) -> bool:
    """Whether to record the buffered steps now. Recording (a database write in a thread) competes with
    the event loop for the GIL, so while a frame is being scored it waits for that frame's result, up to
    FLUSH_LIMIT steps (a stream that is always scoring, being faster than the model, still records)."""
    return buffered >= (FLUSH_LIMIT if scoring else FLUSH_EVERY)


def agent_active(agent_id: int) -> bool:
    return Agent.objects.filter(pk=agent_id, is_active=True).exists()


def frame_event(step: Step, images: dict[str, bytes]) -> dict:
    """The `frame` message viewers get: the step's values and its images as data URLs."""
    urls = {
        camera: f"data:{MIME.get(step.formats.get(camera, 'jpeg'), 'image/jpeg')};base64,{base64.b64encode(data).decode()}"
        for camera, data in images.items()
    }
    return {
        "type": "frame",
        "episode": step.episode,
        "index": step.index,
        "reward": step.reward,
        "success": step.success,
        "sent_at": step.sent_at,
        "images": urls,
    }


def recorded_step(step: Step, checked: dict[str, CheckedImage]) -> services.RecordedStep:
    return services.RecordedStep(
        episode=step.episode,
        index=step.index,
        action=step.action,
        reward=step.reward,
        success=step.success,
        terminated=step.terminated,
        truncated=step.truncated,
        info=step.info,
        images=checked,
    )


class Outlet(Protocol):
    """Where a stream's messages go: the agent's socket and the session's viewers."""

    async def reply(self, data: dict) -> None: ...  # to the agent

    async def publish(self, group: str, data: dict) -> None: ...  # to every viewer of the group

    async def close(self, code: int) -> None: ...  # the agent's socket


class TeleopStream:
    def __init__(self, agent: Agent, outlet: Outlet):
        self.agent = agent
        self.outlet = outlet
        self.session_id: int | None = None
        self.deployment_name = ""  # the session's, set by hello; empty: record without scoring
        self.main_camera = "main"
        self.buffer: list[services.RecordedStep] = []
        self.flush_lock = asyncio.Lock()
        self.stats = StreamStats()
        self.slot: LatestFrameSlot[tuple[Step, np.ndarray]] = LatestFrameSlot(self.infer)
        self.tasks: set[asyncio.Task] = set()
        self.ticker: asyncio.Task | None = None
        self.watcher: asyncio.Task | None = None
        self.hello_seen = False
        self.started = False
        self.ended = False
        self.stopped = False

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Watch the token (the socket is accepted)."""
        metrics.teleop_streams.inc()
        self.started = True
        self.watcher = self.start_task(self.watch_token())

    async def stop(self) -> None:
        """End the session (waiting for flushes in flight, then storing the rest) and cancel every task;
        once, whatever fails on the way."""
        if self.stopped:
            return
        self.stopped = True
        if self.started:
            metrics.teleop_streams.dec()
        if self.watcher is not None and self.watcher is not asyncio.current_task():
            self.watcher.cancel()
        try:
            await self.end_session()
        finally:
            await self.cancel_tasks()

    def start_task(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        """A task owned by this stream: cancelled by `stop()`."""
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def cancel_tasks(self) -> None:
        current = asyncio.current_task()
        pending = [task for task in list(self.tasks) if task is not current and not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def watch_token(self) -> None:
        """Close the stream within TELEOP_TOKEN_CHECK_S seconds of the agent's token being revoked."""
        while True:
            await asyncio.sleep(settings.TELEOP_TOKEN_CHECK_S)
            try:
                active = await database().call(agent_active, self.agent.pk, retry=True)
            except asyncio.CancelledError:
                raise
            except Exception:  # a database hiccup is not a revocation
                log.exception("teleop: token check failed")
                continue
            if not active:
                await self.reply_error("this agent's token was revoked; closing")
                await self.end_session()
                await self.outlet.close(CLOSE_REVOKED)
                return

    async def end_session(self) -> None:
        """Stop inference, store what is buffered, mark the session not live (once). Each part runs whatever
        the one before it raised; the session is closed in any case."""
        if self.session_id is None or self.ended:
            return
        self.ended = True
        if self.ticker is not None and self.ticker is not asyncio.current_task():
            self.ticker.cancel()
        parts: tuple[Callable[[], Coroutine[Any, Any, None]], ...] = (self.slot.close, self.flush, self.save_stats)
        try:
            for part in parts:
                try:
                    await part()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("teleop session %s: %s at its end failed", self.session_id, part.__name__)
        finally:
            await database().call(services.session_close, session_id=self.session_id, retry=True)
        await self.broadcast({"type": "status", "live": False, **self.status()})

    # -- messages from the agent ------------------------------------------------------------------
    async def on_text(self, text: str | None) -> None:
        if text is None or len(text) > TEXT_MAX_CHARS:
            await self.reply_error(f"text messages are at most {TEXT_MAX_CHARS} characters")
            return
        try:
            message = loads_bounded(text, max_depth=settings.JSON_MAX_DEPTH, what="message")
        except ValueError as exc:  # not JSON, or too deep
            await self.reply_error(f"text messages must be JSON objects with a 'type': {exc}")
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if not isinstance(kind, str):
            await self.reply_error("text messages must be JSON objects with a 'type'")
            return
        handler = {
            "episode_start": self.on_episode_start,
            "episode_end": self.on_episode_end,
            "label": self.on_label,
            "bye": self.on_bye,
        }.get(kind)
        if kind == "hello":
            await self.on_hello(message)
        elif self.session_id is None:
            await self.reply_error("say hello first")
        elif handler is None:
            await self.reply_error(f"unknown message type {kind!r}")
        else:
            await handler(message)

    async def on_hello(self, message: dict) -> None:
        if self.hello_seen:
            await self.reply_error(
                f"this socket already said hello (session {self.session_id}); one hello per socket: "
                "open a new socket for another session"
            )
            return
        self.hello_seen = True
        try:
            session = await database().call(services.session_open, agent=self.agent, hello=message)
        except services.TeleopError as exc:
            await self.outlet.reply({"type": "error", "message": str(exc)})
            await self.outlet.close(CLOSE_BAD_HELLO)
            return
        except DatabaseError:  # not the agent's fault: it reconnects (with backoff) and says hello again
            log.exception("teleop hello: the session could not be opened")
            self.hello_seen = False
            await self.outlet.close(CLOSE_TRY_AGAIN)
            return
        self.session_id = session.pk
        self.deployment_name = session.deployment_name
        cameras = session.cameras or ["main"]
        self.main_camera = "main" if "main" in cameras else cameras[0]
        await self.outlet.reply({"type": "session", "session": session.pk, "dashboard": f"/teleop/{session.pk}/"})
        if self.deployment_name and inference_perms.REWARDS.scope not in (self.agent.scopes or []):
            self.deployment_name = ""  # scoring is a reward request: the token needs the rewards scope
            await self.reply_error(
                f"frames are recorded but not scored: scoring with deployment {session.deployment_name!r} "
                f"needs the '{inference_perms.REWARDS.scope}' scope on this token"
            )
        await self.broadcast({"type": "status", "live": True, **self.status()})
        self.ticker = self.start_task(self.tick())

    async def on_bye(self, message: dict) -> None:
        await self.end_session()
        await self.outlet.close(1000)

    async def on_episode_start(self, message: dict) -> None:
        try:
            episode = await database().call(
                services.teleop_episode_start,
                session_id=self.session_id,
                episode_uuid=message.get("episode"),
                metadata=message,
                retry=True,
            )
        except services.TeleopError as exc:
            await self.reply_error(str(exc))
            return
        await self.broadcast({"type": "episode", "event": "start", "episode": str(episode.uuid), "at": time.time()})

    async def on_episode_end(self, message: dict) -> None:
        await self.flush()
        success = message.get("success")
        episode = await database().call(
            services.teleop_episode_end,
            episode_uuid=str(message.get("episode")),
            success=success if isinstance(success, bool) else None,
            session_id=self.session_id,
            retry=True,
        )
        if episode is not None:
            await self.broadcast(
                {
                    "type": "episode",
                    "event": "end",
                    "episode": str(episode.uuid),
                    "success": episode.success,
                    "steps": episode.num_steps,
                    "at": time.time(),
                }
            )

    async def on_label(self, message: dict) -> None:
        await self.flush()
        try:
            index = int(message["index"])
            if not 0 <= index <= MAX_STEP_INDEX:
                raise ValueError(f"index must be from 0 to {MAX_STEP_INDEX}")
            await database().call(
                services.teleop_label,
                session_id=self.session_id,
                episode_uuid=str(message["episode"]),
                index=index,
                value=str(message.get("value")),
            )
        except services.TeleopError as exc:
            await self.reply_error(str(exc))
            return
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            await self.reply_error(f"label needs episode, index and value: {exc}")
            return
        await self.broadcast(
            {"type": "label", "episode": str(message["episode"]), "index": index, "value": str(message["value"])}
        )

    async def on_step(self, raw: bytes) -> None:
        if self.session_id is None:
            await self.reply_error("say hello before sending steps")
            return
        try:
            step = step_read(raw, max_depth=settings.JSON_MAX_DEPTH, max_info_bytes=settings.JSON_FIELD_MAX_BYTES)
        except ProtocolError as exc:
            self.stats.bad_frame()
            await self.warn(f"step skipped: {exc}")
            return
        images = step.images
        scoring_camera = self.main_camera if self.deployment_name and self.main_camera in images else None
        try:
            checked, pixels = await asyncio.to_thread(frames_check, images, decode=scoring_camera)
        except ImageError as exc:
            self.stats.bad_frame()
            await self.warn(f"step {step.index} skipped: {exc}")
            return
        self.stats.step_received()
        metrics.teleop_steps.inc()
        # Inference first: the frame's trip to the model does not wait for the broadcast or the recording.
        if pixels is not None and self.slot.submit((step, pixels)):
            self.stats.frame_dropped()
            metrics.teleop_dropped_frames.inc()
        await self.broadcast(frame_event(step, images))
        self.buffer.append(recorded_step(step, checked))
        if record_now(len(self.buffer), scoring=self.slot.busy):
            self.start_task(self.flush())

    # -- inference, recording, stats --------------------------------------------------------------
    async def infer(self, item: tuple[Step, np.ndarray]) -> None:
        step, image = item
        try:
            score = await scoring.score_frame(
                self.deployment_name,
                image,
                env_reward=step.reward,
                stream=f"teleop-{self.session_id}",
                client=f"a{self.agent.pk}",
                env_success=step.success,
                episode=step.episode,
            )
        except (scoring.DeploymentNotFound, scoring.DeploymentUnavailable) as exc:
            await self.warn(str(exc))
            return
        self.stats.scored(inference_ms=score.inference_ms, probability=score.probability)
        result = {
            "type": "result",
            "episode": step.episode,
            "index": step.index,
            "probability": score.probability,
            "success": score.success,
            "reward": score.reward,
            "threshold": score.threshold,
            "sent_at": step.sent_at,
            "inference_ms": score.inference_ms,
            "ood": score.ood,
            "dropped": self.slot.dropped,
        }
        await asyncio.gather(self.broadcast(result), self.outlet.reply(result))
        if self.slot.pending is None and record_now(len(self.buffer), scoring=False):
            self.start_task(self.flush())  # between frames: the recording holds no frame's result back

    async def flush(self) -> None:
        async with self.flush_lock:
            steps, self.buffer = self.buffer, []
            if not steps:
                return
            try:
                await database().call(services.teleop_steps_record, session_id=self.session_id, steps=steps, retry=True)
            except services.TeleopError as exc:
                await self.warn(f"recording failed: {exc}")
            except Exception:  # a database hiccup must not end the live stream
                log.exception("teleop session %s: recording %d steps failed", self.session_id, len(steps))
                await self.warn(f"recording of {len(steps)} steps failed on the server (see its log)")

    def status(self) -> dict:
        return {"session": self.session_id, **self.stats.status()}

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                if self.buffer and not self.slot.busy:  # between frames (see record_now)
                    await self.flush()
                await self.broadcast({"type": "status", "live": True, **self.status()})
                await self.save_stats()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("teleop session %s: status update failed", self.session_id)

    async def save_stats(self) -> None:
        delta = self.stats.take_delta()
        await database().call(
            services.session_update_stats,
            session_id=self.session_id,
            steps=delta.steps,
            inferred=delta.inferred,
            dropped=delta.dropped,
            stats=self.status(),
        )

    # -- messages out -----------------------------------------------------------------------------
    async def broadcast(self, data: dict) -> None:
        if self.session_id is not None:
            await self.outlet.publish(group_name(self.session_id), data)

    async def reply_error(self, message: str) -> None:
        await self.outlet.reply({"type": "warning", "message": message})

    async def warn(self, message: str) -> None:
        """A warning to the agent and the viewers, the same text at most once per WARN_EVERY_S seconds."""
        if not self.stats.may_warn(message):
            return
        await self.reply_error(message)
        await self.broadcast({"type": "warning", "message": message})
