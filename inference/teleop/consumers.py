"""WebSocket consumers for live teleop: the robot agent's stream and the dashboard viewers.

Agent (`/ws/teleop/agent/`, token auth): hello -> session; every binary step is broadcast to the
session's group (`teleop_<id>`), recorded as an episode step, and offered to inference through a
newest-frame-wins slot (one in flight, one waiting, replaced frames counted as dropped). Results go
back to the agent and to every viewer. Viewers (`/ws/teleop/sessions/<id>/`, session login) only listen.
Protocol: robot_agent/PROTOCOL.md.

Bounds: one `hello` per socket (another is refused with a warning); every task a socket starts (status
ticker, token watcher, flushes, inference) is cancelled when it closes; images are checked and decoded in
a worker thread, never on the event loop; a frame whose image is bad is skipped and counted
(`bad_frames`) while its neighbours are kept; the agent's token is re-checked every TELEOP_TOKEN_CHECK_S
seconds and a revoked token's socket is closed (code 4401).

Robust: every value of a message is checked before it is used (step headers by `step_header.step_read`,
text messages within TELEOP_TEXT_MAX_BYTES and JSON_MAX_DEPTH); a bad one is a warning to the agent. A
handler that raises anyway is logged and answered with a warning (webapp.common.ws_guard); an exception anywhere
else ends the socket through `disconnect()`, which stops the tasks and closes the session whatever fails
on the way. Sessions a dead process left live are closed by `services.sessions_close_stale`.
Scoring frames needs the token's `rewards` scope (without it the session records without scores).

Steps are recorded in groups (FLUSH_EVERY) between frames: while a frame is being scored, its recording
waits for the result (`record_now`), so the database write does not hold the frame's result back.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from functools import lru_cache

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.conf import settings

from labeling import access
from labeling.images import CheckedImage, ImageError, check_image
from labeling.models import Agent
from robot_agent.protocol import ProtocolError, decode_image
from webapp.common import metrics
from webapp.common.db_bridge import DatabaseThreads
from webapp.common.json_limits import loads_bounded
from webapp.common.ws_guard import Guarded

from . import services
from .latest import LatestFrameSlot
from .step_header import MAX_STEP_INDEX, Step, step_read
from .stream_stats import StreamStats

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _database() -> DatabaseThreads:
    """The threads that run the sessions' frequent database calls (recording, stats, token checks), each
    keeping its connection: a connection opened per call would be a new PostgreSQL server process several
    times a second per session, and its CPU would slow the inference worker's forward pass beside it."""
    return DatabaseThreads("teleop-db", 2)


FLUSH_EVERY = 10  # steps recorded together; while a frame is being scored, up to FLUSH_LIMIT wait
FLUSH_LIMIT = 3 * FLUSH_EVERY
TICK_S = 1.0
MIME = {"jpeg": "image/jpeg", "png": "image/png"}
TEXT_MAX_CHARS = 64 * 1024  # hello, episode_start/end, label and bye are a few hundred bytes


def group_name(session_id: int) -> str:
    return f"teleop_{session_id}"


def frames_check(images: dict[str, bytes]) -> dict[str, CheckedImage]:
    """Every camera's image validated (size limits, format); ImageError names the bad one. Run in a thread."""
    checked = {}
    for camera, raw in images.items():
        try:
            checked[camera] = check_image(raw, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS)
        except ImageError as exc:
            raise ImageError(f"camera {camera!r}: {exc}") from None
    return checked


def record_now(buffered: int, *, scoring: bool) -> bool:
    """Whether to record the buffered steps now. Recording (a database write in a thread) competes with
    the event loop for the GIL, so while a frame is being scored it waits for that frame's result, up to
    FLUSH_LIMIT steps (a stream that is always scoring, being faster than the model, still records)."""
    return buffered >= (FLUSH_LIMIT if scoring else FLUSH_EVERY)


def agent_active(agent_id: int) -> bool:
    return Agent.objects.filter(pk=agent_id, is_active=True).exists()


class TeleopAgentConsumer(Guarded, AsyncWebsocketConsumer):
    async def connect(self):
        self.agent = self.scope.get("agent")
        if self.agent is None:
            await self.close(code=4401)
            return
        if access.TELEOP.scope not in (self.agent.scopes or []):
            await self.close(code=4403)  # the token lacks the teleop scope
            return
        self.session_id: int | None = None
        self.deployment_name = ""  # the session's, set by hello
        self.main_camera = "main"
        self.buffer: list[services.RecordedStep] = []
        self.flush_lock = asyncio.Lock()
        self.stats = StreamStats()
        self.slot = LatestFrameSlot(self.infer)
        self.tasks: set[asyncio.Task] = set()
        self.ticker: asyncio.Task | None = None
        self.hello_seen = False
        self.ended = False
        await self.accept()
        self.watcher = self.start_task(self.watch_token())
        metrics.teleop_streams.inc()
        self.counted_stream = True

    def start_task(self, coroutine) -> asyncio.Task:
        """A task owned by this socket: cancelled when it closes."""
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def disconnect(self, code):
        if getattr(self, "counted_stream", False):
            metrics.teleop_streams.dec()
            self.counted_stream = False
        watcher = getattr(self, "watcher", None)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
        try:
            await self.end_session()  # waits for flushes in flight (flush lock), then stores the rest
        finally:
            await self.cancel_tasks()

    async def cancel_tasks(self):
        current = asyncio.current_task()
        pending = [task for task in list(getattr(self, "tasks", ())) if task is not current and not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def watch_token(self):
        """Close the socket within TELEOP_TOKEN_CHECK_S seconds of the agent's token being revoked."""
        while True:
            await asyncio.sleep(settings.TELEOP_TOKEN_CHECK_S)
            try:
                active = await _database().call(agent_active, self.agent.pk, retry=True)
            except asyncio.CancelledError:
                raise
            except Exception:  # a database hiccup is not a revocation
                log.exception("teleop: token check failed")
                continue
            if not active:
                await self.reply_error("this agent's token was revoked; closing")
                await self.end_session()
                await self.close(code=4401)
                return

    async def end_session(self):
        """Stop inference, store what is buffered, mark the session not live (once). Each part runs whatever
        the one before it raised; the session is closed in any case."""
        if getattr(self, "session_id", None) is None or self.ended:
            return
        self.ended = True
        if self.ticker is not None and self.ticker is not asyncio.current_task():
            self.ticker.cancel()
        try:
            for part in (self.slot.close, self.flush, self.save_stats):
                try:
                    await part()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("teleop session %s: %s at its end failed", self.session_id, part.__name__)
        finally:
            await database_sync_to_async(services.session_close)(session_id=self.session_id)
        await self.broadcast({"type": "status", "live": False, **self.status()})

    # -- messages from the agent ----------------------------------------------------------------
    async def receive_failed(self, message: dict) -> None:
        """A message whose handling raised (logged by webapp.common.ws_guard): the agent is told, the stream goes on."""
        await self.reply_error("the server could not handle that message (see its log); the stream goes on")

    async def receive(self, text_data=None, bytes_data=None):
        if bytes_data is not None:
            if self.session_id is None:
                await self.reply_error("say hello before sending steps")
                return
            await self.on_step(bytes_data)
            return
        if text_data is None or len(text_data) > TEXT_MAX_CHARS:
            await self.reply_error(f"text messages are at most {TEXT_MAX_CHARS} characters")
            return
        try:
            message = loads_bounded(text_data, max_depth=settings.JSON_MAX_DEPTH, what="message")
        except ValueError as exc:  # not JSON, or too deep
            await self.reply_error(f"text messages must be JSON objects with a 'type': {exc}")
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if not isinstance(kind, str):
            await self.reply_error("text messages must be JSON objects with a 'type'")
            return
        if kind == "hello":
            await self.on_hello(message)
        elif self.session_id is None:
            await self.reply_error("say hello first")
        elif kind == "episode_start":
            await self.on_episode_start(message)
        elif kind == "episode_end":
            await self.on_episode_end(message)
        elif kind == "label":
            await self.on_label(message)
        elif kind == "bye":
            await self.end_session()
            await self.close(code=1000)
        else:
            await self.reply_error(f"unknown message type {kind!r}")

    async def on_hello(self, message: dict):
        if self.hello_seen:
            await self.reply_error(
                f"this socket already said hello (session {self.session_id}); one hello per socket: "
                "open a new socket for another session"
            )
            return
        self.hello_seen = True
        try:
            session = await database_sync_to_async(services.session_open)(agent=self.agent, hello=message)
        except services.TeleopError as exc:
            await self.send(json.dumps({"type": "error", "message": str(exc)}))
            await self.close(code=4400)
            return
        self.session_id = session.pk
        self.deployment_name = session.deployment_name
        cameras = session.cameras or ["main"]
        self.main_camera = "main" if "main" in cameras else cameras[0]
        await self.send(json.dumps({"type": "session", "session": session.pk, "dashboard": f"/teleop/{session.pk}/"}))
        if self.deployment_name and access.REWARDS.scope not in (self.agent.scopes or []):
            self.deployment_name = ""  # scoring is a reward request: the token needs the rewards scope
            await self.reply_error(
                f"frames are recorded but not scored: scoring with deployment {session.deployment_name!r} "
                f"needs the '{access.REWARDS.scope}' scope on this token"
            )
        await self.broadcast({"type": "status", "live": True, **self.status()})
        self.ticker = self.start_task(self.tick())

    async def on_episode_start(self, message: dict):
        try:
            episode = await _database().call(
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

    async def on_episode_end(self, message: dict):
        await self.flush()
        success = message.get("success")
        episode = await _database().call(
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

    async def on_label(self, message: dict):
        await self.flush()
        try:
            index = int(message["index"])
            if not 0 <= index <= MAX_STEP_INDEX:
                raise ValueError(f"index must be from 0 to {MAX_STEP_INDEX}")
            await database_sync_to_async(services.teleop_label)(
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

    async def on_step(self, raw: bytes):
        try:
            step = step_read(raw, max_depth=settings.JSON_MAX_DEPTH, max_info_bytes=settings.JSON_FIELD_MAX_BYTES)
        except ProtocolError as exc:
            self.stats.bad_frame()
            await self.warn(f"step skipped: {exc}")
            return
        images = step.images
        try:
            checked = await asyncio.to_thread(frames_check, images)
        except ImageError as exc:
            self.stats.bad_frame()
            await self.warn(f"step {step.index} skipped: {exc}")
            return
        self.stats.step_received()
        metrics.teleop_steps.inc()
        # Inference first: the frame's trip to the model does not wait for the broadcast or the recording.
        has_model = self.deployment_name and self.main_camera in images
        if has_model and self.slot.submit((step, images[self.main_camera])):
            self.stats.frame_dropped()
            metrics.teleop_dropped_frames.inc()
        await self.broadcast(
            {
                "type": "frame",
                "episode": step.episode,
                "index": step.index,
                "reward": step.reward,
                "success": step.success,
                "sent_at": step.sent_at,
                "images": {
                    camera: f"data:{MIME.get(step.formats.get(camera, 'jpeg'), 'image/jpeg')};base64,{base64.b64encode(data).decode()}"
                    for camera, data in images.items()
                },
            }
        )
        self.buffer.append(
            services.RecordedStep(
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
        )
        if record_now(len(self.buffer), scoring=self.slot.busy):
            self.start_task(self.flush())

    # -- inference, recording, stats ------------------------------------------------------------
    async def infer(self, item):
        from .scoring import DeploymentNotFound, DeploymentUnavailable, score_frame

        step: Step
        step, data = item
        image = await asyncio.to_thread(decode_image, data)
        try:
            score = await score_frame(
                self.deployment_name, image, env_reward=step.reward, stream=f"teleop-{self.session_id}"
            )
        except (DeploymentNotFound, DeploymentUnavailable) as exc:
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
            "dropped": self.slot.dropped,
        }
        await asyncio.gather(self.broadcast(result), self.send(json.dumps(result)))
        if self.slot.pending is None and record_now(len(self.buffer), scoring=False):
            self.start_task(self.flush())  # between frames: the recording holds no frame's result back

    async def flush(self):
        async with self.flush_lock:
            steps, self.buffer = self.buffer, []
            if not steps:
                return
            try:
                await _database().call(
                    services.teleop_steps_record, session_id=self.session_id, steps=steps, retry=True
                )
            except services.TeleopError as exc:
                await self.warn(f"recording failed: {exc}")
            except Exception:  # a database hiccup must not end the live stream
                log.exception("teleop session %s: recording %d steps failed", self.session_id, len(steps))
                await self.warn(f"recording of {len(steps)} steps failed on the server (see its log)")

    def status(self) -> dict:
        return {"session": self.session_id, **self.stats.status()}

    async def tick(self):
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

    async def save_stats(self):
        delta = self.stats.take_delta()
        await _database().call(
            services.session_update_stats,
            session_id=self.session_id,
            steps=delta.steps,
            inferred=delta.inferred,
            dropped=delta.dropped,
            stats=self.status(),
        )

    async def broadcast(self, data: dict):
        if self.session_id is None:
            return
        await self.channel_layer.group_send(group_name(self.session_id), {"type": "teleop.event", "data": data})

    async def reply_error(self, message: str):
        await self.send(json.dumps({"type": "warning", "message": message}))

    async def warn(self, message: str):
        if not self.stats.may_warn(message):
            return
        await self.reply_error(message)
        await self.broadcast({"type": "warning", "message": message})


class TeleopDashboardConsumer(Guarded, AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.session_id: int | None = int(self.scope["url_route"]["kwargs"]["session_id"])
        outcome = await database_sync_to_async(services.session_viewer_access)(user=user, session_id=self.session_id)
        if outcome != 200:
            self.session_id = None
            await self.close(code=access.WS_CLOSE.get(outcome, 4404))
            return
        snapshot = await database_sync_to_async(services.session_snapshot)(session_id=self.session_id)
        if snapshot is None:
            await self.close(code=4404)
            return
        await self.channel_layer.group_add(group_name(self.session_id), self.channel_name)
        await self.accept()
        await self.send_json({"type": "snapshot", **snapshot})

    async def disconnect(self, code):
        session_id = getattr(self, "session_id", None)
        if session_id is not None:
            await self.channel_layer.group_discard(group_name(session_id), self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        pass  # viewers only listen: what they send is not even parsed

    async def teleop_event(self, event):
        await self.send_json(event["data"])
