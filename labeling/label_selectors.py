"""Reads for the labeling pages: progress toward a project's targets, filtered episode lists, and
everything the labeling page needs about one episode in one payload."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.files.storage import default_storage
from django.db.models import Case, Count, Exists, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce

from .models import Episode, Frame, FrameLabel, LabelChange, LabelSource, Project, ProposalStatus, Step, WindowLabel
from .page_data import EpisodeLabelingData, LabelingWindow

FRAME_CLASSES = ("success", "fail")
WINDOW_CLASSES = ("positive", "negative", "unclear")


@dataclass(frozen=True)
class Progress:
    label: str
    kind: str  # css class: success, fail, or a window class
    done: int
    target: int

    @property
    def percent(self) -> int:
        return 100 if self.target == 0 else min(100, round(100 * self.done / self.target))


def project_progress(*, project: Project) -> list[Progress]:
    """Human labels so far against the project's targets: frames per class, windows per class."""
    frames = dict(
        FrameLabel.objects.filter(project=project, source=LabelSource.HUMAN)
        .values_list("value")
        .annotate(n=Count("*"))
        .order_by()
    )
    windows = dict(
        WindowLabel.objects.filter(project=project, source=LabelSource.HUMAN)
        .values_list("value")
        .annotate(n=Count("*"))
        .order_by()
    )
    return [
        Progress("Success frames", "success", frames.get("success", 0), project.target_success_frames),
        Progress("Fail frames", "fail", frames.get("fail", 0), project.target_fail_frames),
        *(
            Progress(f"{value.capitalize()} windows", value, windows.get(value, 0), project.target_windows_per_class)
            for value in WINDOW_CLASSES
        ),
    ]


def _per_project_count(model, **filters) -> Coalesce:
    rows = model.objects.filter(project=OuterRef("pk"), **filters).order_by().values("project")
    return Coalesce(Subquery(rows.annotate(n=Count("*")).values("n")[:1], output_field=IntegerField()), 0)


def project_list_with_counts() -> QuerySet[Project]:
    """Projects with their episodes, steps (summed from the episode rows, not counted over every frame row:
    the home page stays fast with millions of frames) and human labels."""
    steps = Episode.objects.filter(project=OuterRef("pk")).order_by().values("project")
    return Project.objects.annotate(
        episode_count=_per_project_count(Episode),
        step_count=Coalesce(Subquery(steps.annotate(n=Sum("num_steps")).values("n")[:1]), 0),
        frame_label_count=_per_project_count(FrameLabel, source=LabelSource.HUMAN),
        window_label_count=_per_project_count(WindowLabel, source=LabelSource.HUMAN),
    ).order_by("name")


def project_open_proposals(*, project: Project) -> dict[str, int]:
    open_ = {"source": LabelSource.PROPOSAL, "status": ProposalStatus.OPEN, "project": project}
    return {
        "frames": FrameLabel.objects.filter(**open_).count(),
        "windows": WindowLabel.objects.filter(**open_).count(),
    }


OPEN_PROPOSAL = {"source": LabelSource.PROPOSAL, "status": ProposalStatus.OPEN}


def _per_episode(model, **filters) -> QuerySet:
    return model.objects.filter(episode=OuterRef("pk"), **filters).order_by()


# Counts are COUNT(*), never COUNT(id): PostgreSQL then answers them from the index alone (episode or project,
# source, ...) without visiting each label row.
def _per_episode_count(model, **filters):
    rows = _per_episode(model, **filters).values("episode")
    return Coalesce(Subquery(rows.annotate(n=Count("*")).values("n")[:1], output_field=IntegerField()), 0)


LABEL_STATES = ("labeled", "partly", "unlabeled")


def episode_list(
    *,
    project: Project,
    source: str = "",
    agent: str = "",
    state: str = "",
    proposals: str = "",
    success: str = "",
) -> QuerySet[Episode]:
    """The project's episodes with label counts, filtered.

    state: labeled (every step has a human frame label), partly (some human labels), unlabeled (none).
    proposals: yes / no (open proposals exist). success: yes / no / unknown (episode-level success).
    """
    episodes = (
        Episode.objects.filter(project=project)
        .select_related("agent")
        .annotate(
            human_frames=_per_episode_count(FrameLabel, source=LabelSource.HUMAN),
            human_windows=_per_episode_count(WindowLabel, source=LabelSource.HUMAN),
            open_frame_proposals=_per_episode_count(FrameLabel, **OPEN_PROPOSAL),
            open_window_proposals=_per_episode_count(WindowLabel, **OPEN_PROPOSAL),
        )
        .annotate(
            label_state=Case(
                When(Q(human_frames=0) & Q(human_windows=0), then=Value("unlabeled")),
                When(Q(human_frames__gt=0) & Q(human_frames__gte=F("num_steps")), then=Value("labeled")),
                default=Value("partly"),
            )
        )
        .order_by("-created_at")
    )
    if source:
        episodes = episodes.filter(source=source)
    if agent:
        episodes = episodes.filter(agent__name=agent)
    # Filters test existence where they can (a query stops at the first matching label) and count only
    # for "labeled" / "partly"; the partial indexes on open proposals keep both cheap in large projects.
    if state in LABEL_STATES:
        any_human = Exists(_per_episode(FrameLabel, source=LabelSource.HUMAN)) | Exists(
            _per_episode(WindowLabel, source=LabelSource.HUMAN)
        )
        complete = Q(human_frames__gt=0) & Q(human_frames__gte=F("num_steps"))
        if state == "unlabeled":
            episodes = episodes.filter(~any_human)
        elif state == "labeled":
            episodes = episodes.filter(complete)
        else:
            episodes = episodes.filter(any_human).exclude(complete)
    open_proposals = Exists(_per_episode(FrameLabel, **OPEN_PROPOSAL)) | Exists(
        _per_episode(WindowLabel, **OPEN_PROPOSAL)
    )
    if proposals == "yes":
        episodes = episodes.filter(open_proposals)
    elif proposals == "no":
        episodes = episodes.filter(~open_proposals)
    if success == "yes":
        episodes = episodes.filter(success=True)
    elif success == "no":
        episodes = episodes.filter(success=False)
    elif success == "unknown":
        episodes = episodes.filter(success__isnull=True)
    return episodes


def episodes_by_ids(episodes: QuerySet[Episode], ids: list[int]) -> list[Episode]:
    """The rows of `episodes` (with their counts) whose ids are listed, in that order. Paginate over the ids
    of a filtered list, then fetch one page with this: the counts are computed for that page's rows only,
    not for every row a deep page skips."""
    rows = {episode.pk: episode for episode in episodes.filter(pk__in=ids)}
    return [rows[pk] for pk in ids if pk in rows]


def episode_labeling_data(*, episode: Episode) -> EpisodeLabelingData:
    """Everything the labeling page shows, as compact per-step arrays (one request per episode)."""
    project = episode.project
    cameras = list(project.camera_views)
    steps = list(
        Step.objects.filter(episode=episode)
        .order_by("index")
        .values_list("pk", "index", "reward", "score", "env_success", "action")
    )
    position = {step_id: i for i, (step_id, *_rest) in enumerate(steps)}
    urls: dict[str, list[str | None]] = {camera: [None] * len(steps) for camera in cameras}
    for step_id, camera, name in Frame.objects.filter(step__episode=episode).values_list("step_id", "camera", "image"):
        if camera in urls:
            urls[camera][position[step_id]] = default_storage.url(name)
    human: list[str | None] = [None] * len(steps)
    proposal: list[str | None] = [None] * len(steps)
    proposal_status: list[str | None] = [None] * len(steps)
    for step_id, source, value, status in FrameLabel.objects.filter(
        episode=episode, source__in=[LabelSource.HUMAN, LabelSource.PROPOSAL]
    ).values_list("step_id", "source", "value", "status"):
        i = position[step_id]
        if source == LabelSource.HUMAN:
            human[i] = value
        else:
            proposal[i], proposal_status[i] = value, status
    windows = [
        LabelingWindow(start=s, end=e, value=v, source=src, status=st, score=sc)
        for s, e, v, src, st, sc in WindowLabel.objects.filter(
            episode=episode, source__in=[LabelSource.HUMAN, LabelSource.PROPOSAL]
        )
        .order_by("start", "end", "source")
        .values_list("start", "end", "value", "source", "status", "score")
    ]
    return {
        "episode": {
            "uuid": str(episode.uuid),
            "source": episode.source,
            "env_id": episode.env_id,
            "success": episode.success,
            "status": episode.status,
            "num_steps": len(steps),
        },
        "project": {
            "id": project.pk,
            "name": project.name,
            "cameras": cameras,
            "window_size": project.window_size,
            "stride": project.trend_stride,
        },
        "steps": {
            "index": [s[1] for s in steps],
            "reward": [s[2] for s in steps],
            "score": [s[3] for s in steps],
            "success": [s[4] for s in steps],
            "action": [s[5] for s in steps],
        },
        "frames": urls,
        "frame_labels": {"human": human, "proposal": proposal, "proposal_status": proposal_status},
        "windows": windows,
    }


def episode_history(*, episode: Episode, limit: int = 200) -> QuerySet[LabelChange]:
    return LabelChange.objects.filter(episode=episode).select_related("author", "agent").order_by("-at", "-pk")[:limit]


def episode_neighbours(*, episode: Episode) -> tuple[Episode | None, Episode | None]:
    """The episodes before and after this one in the project list (newest first)."""
    siblings = Episode.objects.filter(project_id=episode.project_id)
    newer = siblings.filter(created_at__gt=episode.created_at).order_by("created_at").first()
    older = siblings.filter(created_at__lt=episode.created_at).order_by("-created_at").first()
    return newer, older
