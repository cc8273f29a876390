"""Label reads: the effective labels, where a step (or a window span) has several labels, a human label counts
over a proposal, a proposal over a model label, and a rejected proposal never counts (snapshots, the labeling
queue, the retrain loop and the LeRobot export read labels through these); and the labeling pages' reads:
progress toward a project's targets, filtered episode lists, and everything the labeling page needs about one
episode in one payload."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from django.core.files.storage import default_storage
from django.db.models import Count, Exists, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce, Greatest

from projects.models import Project

from ..episode_browse import episode_order, episode_search
from ..models import Episode, Frame, FrameLabel, LabelChange, LabelSource, ProposalStatus, Step, WindowLabel
from ..page_data import EpisodeLabelingData, LabelingWindow

#: Which label counts when several are on one step or window span, first wins.
SOURCE_PRIORITY: tuple[str, ...] = (LabelSource.HUMAN, LabelSource.PROPOSAL, LabelSource.MODEL)

FRAME_LABEL_FIELDS = ("step_id", "value", "source", "episode_id", "author__username", "agent__name", "updated_at")
WINDOW_LABEL_FIELDS = ("pk", "episode_id", "start", "end", "value", "source")


def best_by_source(rows: Iterable[dict[str, Any]], key: str | tuple[str, ...]) -> dict[Hashable, dict[str, Any]]:
    """One row per `key` (a field, or fields making a tuple): the one whose source comes first in
    SOURCE_PRIORITY. Rows of a source not listed there are left out."""
    rank = {source: n for n, source in enumerate(SOURCE_PRIORITY)}
    best: dict[Hashable, dict[str, Any]] = {}
    for row in rows:
        if row["source"] not in rank:
            continue
        k = tuple(row[f] for f in key) if isinstance(key, tuple) else row[key]
        current = best.get(k)
        if current is None or rank[row["source"]] < rank[current["source"]]:
            best[k] = row
    return best


def _counting_frame_labels(*, project: Project, sources: Iterable[str]) -> QuerySet[FrameLabel]:
    """The project's frame labels from `sources` that may count (rejected never does)."""
    return FrameLabel.objects.filter(project=project, source__in=list(sources)).exclude(status=ProposalStatus.REJECTED)


def effective_frame_labels(*, project: Project, sources: Iterable[str]) -> dict[int, dict[str, Any]]:
    """Step id -> the frame label that counts among `sources` (fields FRAME_LABEL_FIELDS); rejected never counts."""
    rows = _counting_frame_labels(project=project, sources=sources).values(*FRAME_LABEL_FIELDS)
    return best_by_source(rows, "step_id")  # type: ignore[return-value]


def effective_frame_label_steps(*, project: Project, sources: Iterable[str]) -> QuerySet[FrameLabel, Any]:
    """The steps with a label that counts among `sources`, as a `step_id` values query (a subquery for
    `__in`: a million-frame project would otherwise send 100,000s of ids)."""
    return _counting_frame_labels(project=project, sources=sources).values("step_id")


def effective_window_labels(*, project: Project, sources: Iterable[str]) -> dict[tuple[int, int, int], dict[str, Any]]:
    """(episode id, start, end) -> the window label that counts among `sources` (fields WINDOW_LABEL_FIELDS);
    rejected and empty-valued labels never count."""
    rows = (
        WindowLabel.objects.filter(project=project, source__in=list(sources))
        .exclude(status=ProposalStatus.REJECTED)
        .exclude(value="")
        .values(*WINDOW_LABEL_FIELDS)
    )
    return best_by_source(rows, ("episode_id", "start", "end"))  # type: ignore[return-value]


def human_labeled_steps(*, project: Project) -> QuerySet[FrameLabel, Any]:
    """The ids (as a `step_id` values query, for `__in`) of the project's steps a person labeled."""
    return FrameLabel.objects.filter(project=project, source=LabelSource.HUMAN).values("step_id")


def human_frame_label_count(*, project: Project) -> int:
    return FrameLabel.objects.filter(project=project, source=LabelSource.HUMAN).count()


FRAME_CLASSES = ("success", "fail")
WINDOW_CLASSES = ("positive", "negative", "unclear")


@dataclass(frozen=True)
class Progress:
    label: str
    kind: str  # css class: success, fail, or a window class
    done: int
    target: int
    note: str = ""  # why the data may never meet the target (shown beside it)

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
    proposed = set(
        WindowLabel.objects.filter(project=project, source=LabelSource.PROPOSAL).values_list("value", flat=True)
    )
    rows = [
        Progress("Success frames", "success", frames.get("success", 0), project.target_success_frames),
        Progress("Fail frames", "fail", frames.get("fail", 0), project.target_fail_frames),
        *(
            Progress(
                f"{value.capitalize()} windows",
                value,
                windows.get(value, 0),
                project.target_windows_per_class,
                note=WINDOW_NOTES[value] if not windows.get(value) and value not in proposed else "",
            )
            for value in WINDOW_CLASSES
        ),
    ]
    return [row for row in rows if row.target > 0]  # a target of 0: nothing asked, nothing shown


# Why a window class may stay at 0 (no human label of it and the trend rule proposed none in the data so far).
WINDOW_NOTES = {
    "positive": "none in the data yet: the trend rule proposes one where success rises within a window",
    "negative": "none in the data yet: the trend rule proposes one only where success falls within a window "
    "(a dropped cube, an undone task); episodes that never lose success cannot fill it. Label such windows by "
    "hand, or set the target to 0 to hide it",
    "unclear": "none in the data yet: the trend rule proposes one where success neither rises nor falls clearly",
}


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
    """Open proposals that still need a decision (no human label on their step or window), and how many more
    a human label already settles (`settled_frames`, `settled_windows`: the human label wins)."""
    open_ = {"source": LabelSource.PROPOSAL, "status": ProposalStatus.OPEN, "project": project}
    human_frame = FrameLabel.objects.filter(step=OuterRef("step"), source=LabelSource.HUMAN)
    human_window = WindowLabel.objects.filter(
        episode=OuterRef("episode"), start=OuterRef("start"), end=OuterRef("end"), source=LabelSource.HUMAN
    )
    frames = FrameLabel.objects.filter(**open_).annotate(settled=Exists(human_frame))
    windows = WindowLabel.objects.filter(**open_).annotate(settled=Exists(human_window))
    settled_frames = frames.filter(settled=True).count()
    settled_windows = windows.filter(settled=True).count()
    return {
        "frames": frames.count() - settled_frames,
        "windows": windows.count() - settled_windows,
        "settled_frames": settled_frames,
        "settled_windows": settled_windows,
    }


OPEN_PROPOSAL = {"source": LabelSource.PROPOSAL, "status": ProposalStatus.OPEN}


def _per_episode(model, **filters) -> QuerySet:
    return model.objects.filter(episode=OuterRef("pk"), **filters).order_by()


def _open_undecided(model) -> QuerySet:
    """An episode's open proposals that still need a decision: none on a step or window a human labeled (the
    human label wins), the rule of `project_open_proposals`, so the list and the panel count alike."""
    human: QuerySet
    if model is FrameLabel:
        human = FrameLabel.objects.filter(step=OuterRef("step"), source=LabelSource.HUMAN)
    else:
        human = WindowLabel.objects.filter(
            episode=OuterRef("episode"), start=OuterRef("start"), end=OuterRef("end"), source=LabelSource.HUMAN
        )
    return _per_episode(model, **OPEN_PROPOSAL).exclude(Exists(human))


def _open_undecided_count(model):
    rows = _open_undecided(model).values("episode")
    return Coalesce(Subquery(rows.annotate(n=Count("*")).values("n")[:1], output_field=IntegerField()), 0)


# Counts are COUNT(*), never COUNT(id): PostgreSQL then answers them from the index alone (episode or project,
# source, ...) without visiting each label row.
def _per_episode_count(model, **filters):
    rows = _per_episode(model, **filters).values("episode")
    return Coalesce(Subquery(rows.annotate(n=Count("*")).values("n")[:1], output_field=IntegerField()), 0)


LABEL_STATES = ("labeled", "partly", "unlabeled")


def label_state(*, human_frames: int, human_windows: int, num_steps: int) -> str:
    """labeled (every step has a human frame label), partly (some human labels), unlabeled (none)."""
    if human_frames == 0 and human_windows == 0:
        return "unlabeled"
    return "labeled" if human_frames > 0 and human_frames >= num_steps else "partly"


def _with_counts(episodes: QuerySet[Episode]) -> QuerySet[Episode]:
    return episodes.annotate(
        human_frames=_per_episode_count(FrameLabel, source=LabelSource.HUMAN),
        human_windows=_per_episode_count(WindowLabel, source=LabelSource.HUMAN),
        human_success_frames=_per_episode_count(FrameLabel, source=LabelSource.HUMAN, value="success"),
        open_frame_proposals=_open_undecided_count(FrameLabel),
        open_window_proposals=_open_undecided_count(WindowLabel),
    )


def episode_list(
    *,
    project: Project,
    source: str = "",
    agent: str = "",
    state: str = "",
    proposals: str = "",
    success: str = "",
    q: str = "",
    sort: str = "",
) -> QuerySet[Episode]:
    """The project's episodes with label counts, filtered, newest first (or by `sort`). Pages list
    `.values_list("pk")` of it (only the filters are computed) and fetch one page's rows with `episodes_by_ids`.

    state: see `label_state`. proposals: yes / no (open proposals exist). success: yes / no / unknown
    (episode-level success). q, sort: see `episode_browse`.
    """
    episodes = _with_counts(Episode.objects.filter(project=project).select_related("agent"))
    episodes = episode_order(episode_search(episodes, q), sort)
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
        # human_frames > 0 and >= num_steps, as one comparison: the count subquery then runs once per row.
        complete = Q(human_frames__gte=Greatest(F("num_steps"), 1))
        if state == "unlabeled":
            episodes = episodes.filter(~any_human)
        elif state == "labeled":
            episodes = episodes.filter(complete)
        else:
            episodes = episodes.filter(any_human).exclude(complete)
    open_proposals = Exists(_open_undecided(FrameLabel)) | Exists(_open_undecided(WindowLabel))
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


def episode_list_ids(*, project: Project, **filters: str) -> list[int]:
    """Every id of the filtered list, newest first, in one query: a page is a slice of it and its length is
    the count, so the filters run once (not once to count and again under an OFFSET that walks every row a
    deep page skips). Ids only: about 8 bytes per episode, 40 kB for a project of a million frames."""
    return list(episode_list(project=project, **filters).values_list("pk", flat=True))


def episodes_by_ids(*, project: Project, ids: list[int]) -> list[Episode]:
    """The episodes with these ids (one page of `episode_list_ids`), with their label counts and
    `label_state`, in that order. The counts are computed for these rows only, and the filters that chose
    them are not run again."""
    rows = {e.pk: e for e in _with_counts(Episode.objects.filter(project=project, pk__in=ids).select_related("agent"))}
    out = [rows[pk] for pk in ids if pk in rows]
    for e in out:
        e.label_state = label_state(  # type: ignore[attr-defined]
            human_frames=e.human_frames,  # type: ignore[attr-defined]
            human_windows=e.human_windows,  # type: ignore[attr-defined]
            num_steps=e.num_steps,
        )
        e.labels_verdict = labels_verdict(  # type: ignore[attr-defined]
            human_frames=e.human_frames,  # type: ignore[attr-defined]
            human_success_frames=e.human_success_frames,  # type: ignore[attr-defined]
        )
    return out


def labels_verdict(*, human_frames: int, human_success_frames: int) -> str:
    """What the people's frame labels say of an episode, apart from the env's own success flag: success when a
    frame is labeled success (the task was done at some step), fail when frames are labeled and none is, "" when
    no frame is labeled."""
    if not human_frames:
        return ""
    return "success" if human_success_frames else "fail"


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


def episode_history(*, episode: Episode, limit: int = 200, before: int | None = None) -> QuerySet[LabelChange]:
    """Newest first, `limit` of them; `before`: only changes older than that change (the next page)."""
    changes = LabelChange.objects.filter(episode=episode)
    if before is not None:
        changes = changes.filter(pk__lt=before)
    return changes.select_related("author", "agent").order_by("-pk")[:limit]


def episode_neighbours(*, episode: Episode) -> tuple[Episode | None, Episode | None]:
    """The episodes before and after this one in the project list (newest first)."""
    siblings = Episode.objects.filter(project_id=episode.project_id)
    newer = siblings.filter(created_at__gt=episode.created_at).order_by("created_at").first()
    older = siblings.filter(created_at__lt=episode.created_at).order_by("-created_at").first()
    return newer, older
