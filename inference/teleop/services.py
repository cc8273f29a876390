"""Writes and reads for live teleop sessions: open/resume/close, record steps as episodes, operator labels.

Sync ORM functions (consumers call them through database_sync_to_async). Steps are stored with the
labeling app's own ingest services, so a recorded session is an ordinary episode, ready to label.
"""

from __future__ import annotations

import json
import math
import uuid as uuid_lib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from common.images.checks import CheckedImage, ImageError, check_image
from labeling import permissions as labeling_perms
from labeling.ingest.services import IngestError, StepInput, episode_create, episode_finish, steps_append
from labeling.labels.services import Actor, LabelError, frame_labels_set
from labeling.models import Episode, FrameLabel
from projects import access
from projects.models import Agent, Project

from .models import TeleopSession


class TeleopError(ValueError):
    """A request from an agent that cannot be honoured; the message is sent back to it."""


@dataclass(frozen=True)
class RecordedStep:
    """A step as received, before it is written (images still encoded)."""

    episode: str
    index: int
    action: list
    reward: float
    success: bool
    terminated: bool
    truncated: bool
    info: dict
    images: Mapping[str, bytes | CheckedImage]  # checked already when received over a socket


def _agent_sees_deployment(agent: Agent, name: str) -> bool:
    """False for a deployment the agent may not use (a missing one is reported later, per frame)."""
    from inference.models import Deployment

    row = Deployment.objects.filter(name=name).values("pk", "project_id").first()
    return row is None or access.agent_sees_deployment(agent, row["pk"], row["project_id"])


def session_viewer_access(*, user, session_id: int) -> int:
    """200, 404 or 403 for a person opening a session's dashboard (members of its project)."""
    project_id = TeleopSession.objects.filter(pk=session_id).values_list("project_id", flat=True).first()
    return 404 if project_id is None else access.check(user, labeling_perms.VIEW, project_id)


def sessions_close_stale(*, now=None) -> int:
    """Close the sessions still marked live whose socket has not been heard of for TELEOP_STALE_AFTER_S (a
    live socket writes `last_seen_at` every second): their process died or restarted. How many were closed."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.TELEOP_STALE_AFTER_S)
    return TeleopSession.objects.filter(is_live=True, last_seen_at__lt=cutoff).update(is_live=False, ended_at=now)


def session_open(*, agent: Agent, hello: dict) -> TeleopSession:
    """A new session for this agent, or the one it names when resuming after a reconnect. Bad values raise
    TeleopError saying which."""
    sessions_close_stale()
    resume = hello.get("session")
    if resume is not None:
        if isinstance(resume, bool) or not isinstance(resume, int) or not 0 < resume < 2**63:
            raise TeleopError("session must be the id of a session of this agent")
        session = TeleopSession.objects.filter(pk=resume, agent=agent).first()
        if session is not None and access.agent_sees_project(agent, session.project_id):
            TeleopSession.objects.filter(pk=session.pk).update(is_live=True, ended_at=None, last_seen_at=timezone.now())
            session.refresh_from_db()
            return session
    name = str(hello.get("project") or "")
    project = Project.objects.filter(name=name).first()
    if project is None or not access.agent_sees_project(agent, project.pk):
        raise TeleopError(f"no project named {name!r}")
    deployment = str(hello.get("deployment") or "")
    if deployment and not _agent_sees_deployment(agent, deployment):
        raise TeleopError(f"no deployment named {deployment!r}")
    cameras = hello.get("cameras") or []
    if not isinstance(cameras, list) or not all(isinstance(c, str) for c in cameras) or len(cameras) > 16:
        raise TeleopError("cameras must be a list of the project's camera names")
    unknown = sorted(set(cameras) - set(project.camera_views))
    if unknown:
        raise TeleopError(f"camera {unknown[0]!r} is not one of the project's cameras {project.camera_views}")
    try:
        hz = float(hello.get("hz") or 10.0)
    except (TypeError, ValueError, OverflowError):
        raise TeleopError("hz must be a number") from None
    if not (math.isfinite(hz) and 0 < hz <= 10_000):
        raise TeleopError("hz must be a number above 0 and at most 10000")
    return TeleopSession.objects.create(
        agent=agent,
        project=project,
        deployment_name=str(hello.get("deployment") or "")[:100],
        robot=str(hello.get("robot") or "")[:100],
        env_id=str(hello.get("env_id") or "")[:100],
        policy=str(hello.get("policy") or "")[:50],
        hz=hz,
        cameras=cameras,
        last_seen_at=timezone.now(),
    )


def session_close(*, session_id: int) -> None:
    TeleopSession.objects.filter(pk=session_id).update(is_live=False, ended_at=timezone.now())


def session_update_stats(*, session_id: int, steps: int, inferred: int, dropped: int, stats: dict) -> None:
    TeleopSession.objects.filter(pk=session_id).update(
        step_count=F("step_count") + steps,
        inferred_count=F("inferred_count") + inferred,
        dropped_frames=F("dropped_frames") + dropped,
        stats=stats,
        last_seen_at=timezone.now(),
    )


def teleop_episode_start(*, session_id: int, episode_uuid: str, metadata: dict) -> Episode:
    session = TeleopSession.objects.select_related("project", "agent").get(pk=session_id)
    try:
        parsed = uuid_lib.UUID(str(episode_uuid))
    except ValueError:
        raise TeleopError(f"episode {episode_uuid!r} is not a UUID") from None
    source = Episode.Source.ROBOT if metadata.get("source") == "robot" else Episode.Source.SIM
    kept = {k: metadata[k] for k in ("seed", "policy") if k in metadata}
    try:
        json.dumps(kept, allow_nan=False)
    except ValueError:
        raise TeleopError("episode_start: seed and policy must be JSON values without NaN or Infinity") from None
    episode, _ = episode_create(
        project=session.project,
        uuid=parsed,
        source=source,
        agent=session.agent,
        env_id=str(metadata.get("env_id") or session.env_id)[:100],
        metadata={"teleop_session": session.pk, **kept},
    )
    if episode.agent_id != session.agent_id:
        raise TeleopError(f"episode {parsed} belongs to another agent")
    session.episodes.add(episode)
    return episode


def teleop_steps_record(*, session_id: int, steps: list[RecordedStep]) -> int:
    """Store received steps (grouped by episode); returns how many were new. Bad frames raise TeleopError."""
    session = TeleopSession.objects.only("id", "project_id").get(pk=session_id)
    created = 0
    by_episode: dict[str, list[RecordedStep]] = {}
    for step in steps:
        by_episode.setdefault(step.episode, []).append(step)
    for episode_uuid, items in by_episode.items():
        episode = Episode.objects.filter(uuid=episode_uuid, teleop_sessions=session).first()
        if episode is None:
            raise TeleopError(f"episode {episode_uuid} was not started (send episode_start first)")
        inputs = []
        for item in items:
            try:
                images = {
                    camera: raw
                    if isinstance(raw, CheckedImage)
                    else check_image(raw, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS)
                    for camera, raw in item.images.items()
                }
            except ImageError as exc:
                raise TeleopError(f"step {item.index}: {exc}") from None
            inputs.append(
                StepInput(
                    index=item.index,
                    action=[float(a) for a in item.action],
                    reward=float(item.reward),
                    terminated=bool(item.terminated),
                    truncated=bool(item.truncated),
                    success=bool(item.success),
                    info=item.info if isinstance(item.info, dict) else {},
                    images=images,
                )
            )
        try:
            created += steps_append(episode=episode, steps=inputs).created
        except IngestError as exc:
            raise TeleopError(str(exc)) from None
    return created


def teleop_episode_end(*, episode_uuid: str, success: bool | None, session_id: int) -> Episode | None:
    """Finish an episode of this session (one of another session or agent is left alone: None)."""
    try:
        uuid_lib.UUID(str(episode_uuid))
    except ValueError:
        return None
    episode = Episode.objects.filter(uuid=episode_uuid, teleop_sessions=session_id).first()
    if episode is None:
        return None
    return episode_finish(episode=episode, success=success)


def teleop_label(*, session_id: int, episode_uuid: str, index: int, value: str) -> None:
    """The operator's c/a key: a human frame label with the agent as its author (labeling's own write)."""
    if value not in FrameLabel.Value.values:
        raise TeleopError(f"label value must be success or fail, got {value!r}")
    try:
        uuid_lib.UUID(str(episode_uuid))
    except ValueError:
        raise TeleopError(f"episode {episode_uuid!r} is not a UUID") from None
    session = TeleopSession.objects.select_related("agent").get(pk=session_id)
    episode = Episode.objects.filter(uuid=episode_uuid, teleop_sessions=session).first()
    if episode is None:
        raise TeleopError(f"step {index} of episode {episode_uuid} was not recorded")
    with transaction.atomic():
        try:
            frame_labels_set(episode=episode, items=[(index, value)], actor=Actor(agent=session.agent))
        except LabelError:
            raise TeleopError(f"step {index} of episode {episode_uuid} was not recorded") from None
        TeleopSession.objects.filter(pk=session.pk).update(label_count=F("label_count") + 1)


def session_snapshot(*, session_id: int) -> dict | None:
    """What a viewer needs on (re)connect: the session's state and its episodes so far."""
    session = TeleopSession.objects.select_related("project", "agent").filter(pk=session_id).first()
    if session is None:
        return None
    episodes = list(session.episodes.order_by("created_at").values("uuid", "num_steps", "success", "status"))
    return {
        "session": session.pk,
        "project": session.project.name,
        "agent": session.agent.name,
        "deployment": session.deployment_name,
        "cameras": session.cameras or session.project.camera_views,
        "live": session.is_live,
        "steps": session.step_count,
        "dropped": session.dropped_frames,
        "stats": session.stats,
        "episodes": [{**e, "uuid": str(e["uuid"])} for e in episodes],
    }
