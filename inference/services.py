"""Writes for inference: deployments (create, settings, model switch, pause, delete, health) and served frames.

Each change a person, a token or a retrain policy makes to a deployment is kept as a DeploymentEvent with who
made it (`actor`: a User, an Agent, a string such as "retrain policy 3", or None for "system")."""

from __future__ import annotations

import os
import uuid as uuid_lib

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import F, Field, Value
from django.db.models.functions import Greatest

from common.images.checks import ImageError, check_image, encode_array
from labeling.ingest.services import StepInput, episode_create, episode_finish, steps_append
from labeling.labels.services import Actor, frame_labels_set
from labeling.models import Episode
from projects import access
from projects.models import Project
from training.evaluation.precision import FP16, FP32, PrecisionError, precision_check
from training.models import TrainedModel
from webhooks import events
from webhooks.services import webhook_emit_safely

from .models import Deployment, DeploymentEvent, ServedFrame, new_version
from .rewards import RewardSettings, RewardSettingsError
from .serving import forget_deployment

# The settings of a VLM's window history (the deploy form shows them for a VLM only).
HISTORY_SETTINGS = (
    "history_size",
    "min_history_size",
    "input_interval",
    "interval_reward",
    "input_on_done",
    "history_reward_assign",
)
SETTING_FIELDS = (
    "reward_mode",
    "threshold",
    "reward_type",
    "success_reward",
    "fail_reward",
    "env_reward_weight",
    "reward_weight",
    *HISTORY_SETTINGS,
    "gt_success_bonus",
    "ood_action",
)
OTHER_FIELDS = (
    "max_batch_size",
    "max_wait_ms",
    "sample_every",
    "project",
    "aliases",
    "chat_prompt",
    "inference_precision",
)
RELOAD_FIELDS = ("inference_precision",)  # a change makes the workers load the model again
MAX_ALIASES = 20


class DeploymentError(ValueError):
    """A deployment change that cannot be made; the message says why."""


# Sanity bounds on what RL workers receive as rewards (a reward of 3e63 is a typo, never a setting): checked when
# a deployment is saved, so rows stored before these bounds keep serving.
MAX_ABS_REWARD = 1e6
MAX_ABS_WEIGHT = 1e3
BOUNDED_SETTINGS = {
    "success_reward": MAX_ABS_REWARD,
    "fail_reward": MAX_ABS_REWARD,
    "interval_reward": MAX_ABS_REWARD,
    "gt_success_bonus": MAX_ABS_REWARD,
    "env_reward_weight": MAX_ABS_WEIGHT,
    "reward_weight": MAX_ABS_WEIGHT,
}


def check_settings(values: dict) -> None:
    for name, bound in BOUNDED_SETTINGS.items():
        if name in values and values[name] is not None:
            value = float(values[name])
            if not -bound <= value <= bound:  # NaN fails this too
                raise DeploymentError(f"{name} must be between {-bound:g} and {bound:g}, got {value:g}")
    try:
        RewardSettings(**{k: values[k] for k in SETTING_FIELDS if k in values})
    except RewardSettingsError as exc:
        raise DeploymentError(str(exc)) from None
    if "max_batch_size" in values and not 1 <= int(values["max_batch_size"]) <= 1024:
        raise DeploymentError("max_batch_size must be between 1 and 1024")
    if "max_wait_ms" in values and not 0 <= float(values["max_wait_ms"]) <= 1000:
        raise DeploymentError("max_wait_ms must be between 0 and 1000")


def name_taken_message(name: str) -> str:
    """Names and aliases are unique site-wide; the refusal names no deployment, which may be another project's."""
    return f"the name {name!r} is taken (deployment names and aliases are unique across all projects)"


def check_aliases(aliases: object, *, name: str, exclude_pk: int | None = None) -> list[str]:
    """Aliases as stored: distinct strings, unique (case-insensitively) among all names and aliases."""
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise DeploymentError("aliases must be a list of strings")
    cleaned = [a.strip() for a in aliases if a.strip()]
    if len(cleaned) > MAX_ALIASES or any(len(a) > 200 for a in cleaned):
        raise DeploymentError(f"at most {MAX_ALIASES} aliases of at most 200 characters")
    if len({a.lower() for a in cleaned}) != len(cleaned):
        raise DeploymentError("aliases must differ from each other (case-insensitively)")
    taken: set[str] = set()
    others = Deployment.objects.all() if exclude_pk is None else Deployment.objects.exclude(pk=exclude_pk)
    for row_name, row_aliases in others.values_list("name", "aliases"):
        taken.update(n.lower() for n in [row_name, *(row_aliases or [])])
    for alias in [name, *cleaned]:
        if alias.lower() in taken:
            raise DeploymentError(name_taken_message(alias))
    return cleaned


def check_precision(kind: str, value: str) -> None:
    try:
        precision_check(kind, value)
    except PrecisionError as exc:
        raise DeploymentError(str(exc)) from None


def check_precision_host(value: str) -> None:
    """fp16 is refused on save unless an inference worker runs on a GPU (a live worker's heartbeat says cuda, or
    none says where and INFERENCE_DEVICE names cuda): on the CPU it has no fast kernels, and every client would
    get 503 once the worker refused to load it."""
    if value != FP16:
        return
    from .selectors import worker_devices  # Redis: only asked when fp16 is chosen

    devices = worker_devices()
    if any(d.startswith("cuda") for d in devices):
        return
    if not devices - {""} and os.environ.get("INFERENCE_DEVICE", "cpu").startswith("cuda"):
        return
    where = (
        ", ".join(sorted(d for d in devices if d)) or f"INFERENCE_DEVICE={os.environ.get('INFERENCE_DEVICE', 'cpu')}"
    )
    raise DeploymentError(
        f"inference_precision fp16 needs an inference worker on a GPU, and the workers here run on the CPU ({where}): "
        "fp16 on the CPU has no fast kernels in PyTorch (about 18 times slower than fp32), so choose bf16 or fp32, "
        "or start a worker with --device cuda (INFERENCE_DEVICE=cuda)"
    )


def deployment_field_default(name: str) -> object:
    """A deployment field's default, as a new row would get it (a callable default called)."""
    field = Deployment._meta.get_field(name)
    if not isinstance(field, Field):
        raise LookupError(f"Deployment.{name} is a relation, not a field")
    return field.get_default()


def actor_label(actor: object) -> str:
    """Who made a change, as the history shows it."""
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor[:150]
    if access.is_agent(actor):
        return f"token {getattr(actor, 'name', actor)}"[:150]
    username = getattr(actor, "get_username", None)
    return (username() if callable(username) else str(actor))[:150] or "anonymous"


def deployment_event(*, deployment: Deployment, action: str, actor: object, detail: dict | None = None) -> None:
    user = actor if isinstance(actor, get_user_model()) else None
    DeploymentEvent.objects.create(
        deployment=deployment if deployment.pk else None,
        deployment_name=deployment.name,
        action=action,
        actor=actor_label(actor),
        user=user,
        revision=deployment.revision,
        detail=detail or {},
    )


def _model_ref(model: TrainedModel) -> dict:
    return {"id": model.pk, "name": model.name}


def _shown(value: object) -> object:
    return value if isinstance(value, str | int | float | bool | list | type(None)) else str(value)


def deployment_create(*, name: str, trained_model: TrainedModel, actor: object = None, **values) -> Deployment:
    unknown = set(values) - set(SETTING_FIELDS) - set(OTHER_FIELDS)
    if unknown:
        raise DeploymentError(f"unknown deployment field(s): {', '.join(sorted(unknown))}")
    if Deployment.objects.filter(name=name).exists():
        raise DeploymentError(name_taken_message(name))
    defaults = {f: deployment_field_default(f) for f in SETTING_FIELDS}
    check_settings({**defaults, **values})
    check_precision(trained_model.kind, values.get("inference_precision", FP32))
    check_precision_host(values.get("inference_precision", FP32))
    if values.get("project") is None:
        values["project"] = trained_model.project
    values["aliases"] = check_aliases(values.get("aliases") or [], name=name)
    with transaction.atomic():
        deployment = Deployment.objects.create(name=name, trained_model=trained_model, **values)
        deployment_event(
            deployment=deployment, action=DeploymentEvent.Action.CREATED, actor=actor, detail=_model_ref(trained_model)
        )
    forget_deployment(name)
    return deployment


def deployment_update(
    *, deployment: Deployment, trained_model: TrainedModel | None = None, actor: object = None, **values
) -> Deployment:
    """Change settings and/or switch the served model. A switch bumps the version: workers load the new
    checkpoint while queued requests wait in Redis, so no request in flight is dropped."""
    unknown = set(values) - set(SETTING_FIELDS) - set(OTHER_FIELDS)
    if unknown:
        raise DeploymentError(f"unknown deployment field(s): {', '.join(sorted(unknown))}")
    current = {f: getattr(deployment, f) for f in SETTING_FIELDS}
    check_settings({**current, **values})
    check_precision(
        (trained_model or deployment.trained_model).kind,
        values.get("inference_precision", deployment.inference_precision),
    )
    if values.get("inference_precision", deployment.inference_precision) != deployment.inference_precision:
        check_precision_host(values["inference_precision"])  # a deployment already in fp16 keeps serving
    if "aliases" in values:
        values["aliases"] = check_aliases(values["aliases"] or [], name=deployment.name, exclude_pk=deployment.pk)
    updates = dict(values)
    changed = {
        f: [_shown(getattr(deployment, f)), _shown(v)]
        for f, v in values.items()
        if f != "project" and v != getattr(deployment, f)
    }
    previous = deployment.trained_model
    if trained_model is not None and trained_model.pk != deployment.trained_model_id:
        updates.update(
            trained_model=trained_model,
            version=_next_version(),
            revision=F("revision") + 1,
            status=Deployment.Status.LOADING,
            error="",
        )
    elif any(f in values and values[f] != getattr(deployment, f) for f in RELOAD_FIELDS):
        updates.update(version=_next_version(), status=Deployment.Status.LOADING, error="")
    switched_from = deployment.trained_model_id if "trained_model" in updates else None
    if updates:
        with transaction.atomic():
            Deployment.objects.filter(pk=deployment.pk).update(**updates)
            deployment.refresh_from_db()
            if switched_from is not None:
                detail = {"from": _model_ref(previous), "to": _model_ref(deployment.trained_model)}
                deployment_event(
                    deployment=deployment, action=DeploymentEvent.Action.SWITCHED, actor=actor, detail=detail
                )
            if changed:
                deployment_event(
                    deployment=deployment, action=DeploymentEvent.Action.SETTINGS, actor=actor, detail=changed
                )
    forget_deployment(deployment.name)
    if switched_from is not None:
        data = {
            "deployment": {"name": deployment.name, "version": deployment.version},
            "model": {"id": deployment.trained_model_id, "name": deployment.trained_model.name},
            "previous_model": {"id": switched_from},
        }
        webhook_emit_safely(project_id=deployment.project_id, event=events.DEPLOYMENT_SWITCHED, data=data)
    return deployment


def deployment_reload(*, deployment: Deployment, actor: object = None) -> Deployment:
    """Ask the workers to load the model again (after an unhealthy state was fixed)."""
    with transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(
            version=_next_version(), status=Deployment.Status.LOADING, error=""
        )
        deployment.refresh_from_db()
        deployment_event(deployment=deployment, action=DeploymentEvent.Action.RELOADED, actor=actor)
    forget_deployment(deployment.name)
    return deployment


def deployment_pause(*, deployment: Deployment, paused: bool, actor: object = None) -> Deployment:
    """Pause (clients get 503 saying so) or resume a deployment; asking for the state it is in changes nothing."""
    with transaction.atomic():
        changed = Deployment.objects.filter(pk=deployment.pk, paused=not paused).update(paused=paused)
        deployment.refresh_from_db()
        if changed:
            action = DeploymentEvent.Action.PAUSED if paused else DeploymentEvent.Action.RESUMED
            deployment_event(deployment=deployment, action=action, actor=actor)
    forget_deployment(deployment.name)
    return deployment


def deployment_delete(*, deployment: Deployment, actor: object = None) -> None:
    """Delete a deployment with its served frames (rows and files) and monitor; its history stays, by name.
    Workers drop its model at their next refresh; clients asking for it get 404."""
    files = list(deployment.served_frames.values_list("image", flat=True))
    detail = {"model": _model_ref(deployment.trained_model), "served_frames": len(files)}
    with transaction.atomic():
        deployment_event(deployment=deployment, action=DeploymentEvent.Action.DELETED, actor=actor, detail=detail)
        deployment.delete()
        transaction.on_commit(lambda: _files_delete(files))  # not if the delete is rolled back
    forget_deployment(deployment.name)


def deployment_set_health(*, name: str, version: int | None, error: str = "") -> None:
    """Recorded by workers: healthy for the version they loaded, or unhealthy with the error."""
    if error:
        rows = Deployment.objects.filter(name=name)
        became = list(rows.exclude(status=Deployment.Status.UNHEALTHY).values_list("project_id", "version"))
        rows.update(status=Deployment.Status.UNHEALTHY, error=error[:5000])
        for project_id, current in became:  # only the change to unhealthy is an event, not each report
            data = {"deployment": {"name": name, "version": current}, "error": error[:2000]}
            webhook_emit_safely(project_id=project_id, event=events.DEPLOYMENT_UNHEALTHY, data=data)
    elif version is not None:  # healthy is only ever reported for a loaded version
        Deployment.objects.filter(name=name, version=version).exclude(status=Deployment.Status.HEALTHY).update(
            status=Deployment.Status.HEALTHY, error=""
        )


def served_frame_create(
    *, deployment_id: int, image, probability: float, success: bool, model_version: int
) -> ServedFrame:
    """Keep one served frame (uint8 HxWx3, or a PNG/JPEG file's bytes as a client sent it) for the gallery."""
    side, pixels = 4096, 4096 * 4096
    if isinstance(image, bytes):
        checked = check_image(image, max_side=side, max_pixels=pixels)
    else:
        checked = encode_array(image, max_side=side, max_pixels=pixels)
    frame = ServedFrame(
        deployment_id=deployment_id, probability=probability, success=success, model_version=model_version
    )
    frame.image.save(f"{uuid_lib.uuid4().hex}{checked.extension}", ContentFile(checked.data), save=False)
    frame.save()
    return frame


def served_frames_prune(*, deployment_id: int, keep: int = 2000) -> int:
    """Delete all but the newest `keep` unlabeled served frames of a deployment (rows and files)."""
    stale = ServedFrame.objects.filter(deployment_id=deployment_id, labeled_episode__isnull=True).order_by(
        "-created_at", "-pk"
    )[keep:]
    rows = list(stale.values_list("pk", "image"))
    for _, name in rows:
        default_storage.delete(name)
    ServedFrame.objects.filter(pk__in=[pk for pk, _ in rows]).delete()
    return len(rows)


def served_frame_label(*, frame: ServedFrame, value: str, user: AbstractBaseUser | None = None) -> Episode:
    """Add a served frame to its project as a one-step import episode carrying a human frame label."""
    deployment = frame.deployment
    project: Project | None = deployment.project or deployment.trained_model.project
    if project is None:
        raise DeploymentError("the deployment has no project to add frames to")
    if value not in ("success", "fail"):
        raise DeploymentError("label must be success or fail")
    camera = project.camera_views[0] if project.camera_views else "main"
    try:
        with frame.image.open("rb") as handle:
            data = handle.read()
        image = check_image(data, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS)
    except ImageError as exc:
        raise DeploymentError(f"served frame {frame.pk} cannot be labeled: {exc}") from None
    except OSError as exc:
        raise DeploymentError(f"served frame {frame.pk} cannot be labeled: its file cannot be read ({exc})") from None
    with transaction.atomic():
        episode, _ = episode_create(
            project=project,
            uuid=uuid_lib.uuid5(uuid_lib.NAMESPACE_URL, f"reward-studio/served-frame/{frame.pk}"),
            source=Episode.Source.IMPORT,
            metadata={"served_frame": frame.pk, "deployment": deployment.name, "probability": frame.probability},
        )
        steps_append(episode=episode, steps=[StepInput(index=0, images={camera: image})])
        episode_finish(episode=episode, success=value == "success")
        frame_labels_set(episode=episode, items=[(0, value)], actor=Actor.of(user))
        ServedFrame.objects.filter(pk=frame.pk).update(labeled_episode=episode, label_value=value)
    frame.refresh_from_db()
    return episode


def _files_delete(names: list[str]) -> None:
    for name in names:
        default_storage.delete(name)


def _next_version():
    return Greatest(F("version") + 1, Value(new_version()))
