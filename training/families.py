"""Model families, one registry: a kind (`TrainingJob.kind`, `TrainedModel.kind`) -> its config class,
trainer, scorer and evaluation page.

Each family keeps its parts in its own Django-free folder (`training/resnet/`, `training/vlm/`); the parts'
types are in `training.kit.family_parts`. Jobs (`training.services`, `training.jobs.rank_main`), the inference
workers (`manage.py inference_worker`) and the training pages all look a kind up here. A new family is a
new folder and one more entry in `FAMILIES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .kit.family_parts import FamilyConfig, ModelSpec, RunResult, Scorer, ScorerLoader, Trainer
from .resnet.config import ResNetConfig
from .vlm.config import VLMTrainConfig

# Trainers and scorers import torch (and transformers): each is imported when first called, so pages that only
# need a family's config or evaluation page (the web process) never load them.


def resnet_run_job(job, reporter) -> RunResult:
    from .resnet.runner import run_job

    return run_job(job, reporter)


def resnet_scorer(spec: ModelSpec) -> Scorer:
    from .resnet.scorer import ResNetScorer

    return ResNetScorer(spec)


def vlm_run_job(job, reporter) -> RunResult:
    from .vlm.runner import run_job

    return run_job(job, reporter)


def vlm_scorer(spec: ModelSpec) -> Scorer:
    from .vlm.scorer import VLMScorer

    return VLMScorer(spec)


@dataclass(frozen=True)
class Family:
    kind: str
    config_class: type[FamilyConfig]
    trainer: Trainer
    scorer: ScorerLoader
    evaluation_page: str  # URL name of the page that evaluates one trained model (takes `model_id`)
    # Scores windows of frames (a trend over a clip, judged with a chat prompt) rather than each frame alone:
    # served on /api/deployments/<name>/vlm/rewards, not /rewards, and deployed with history settings.
    takes_windows: bool = False


RESNET = Family(
    kind="resnet",
    config_class=ResNetConfig,
    trainer=resnet_run_job,
    scorer=resnet_scorer,
    evaluation_page="training-evaluation",
)
VLM = Family(
    kind="vlm",
    config_class=VLMTrainConfig,
    trainer=vlm_run_job,
    scorer=vlm_scorer,
    evaluation_page="vlm-evaluation",
    takes_windows=True,
)

FAMILIES: dict[str, Family] = {family.kind: family for family in (RESNET, VLM)}


class UnknownKind(ValueError):
    pass


def family(kind: str) -> Family:
    try:
        return FAMILIES[kind]
    except KeyError:
        raise UnknownKind(f"unknown model kind {kind!r}; known: {', '.join(sorted(FAMILIES))}") from None


def takes_windows(kind: str) -> bool:
    """Whether models of `kind` score windows of frames (`Family.takes_windows`); False for a kind no family
    has (the bench-only instant model scores frames), so inference may ask it of any deployment."""
    found = FAMILIES.get(kind)
    return found is not None and found.takes_windows


class BenchOnlyKind(UnknownKind):
    pass


def bench_scorer(spec: ModelSpec) -> Scorer:
    """The bench-only instant scorer (`training.instant`), in a process started with BENCH_MODELS=1 only:
    it is no family (nothing trains it, no page shows it) and no choice offered to users."""
    from django.conf import settings

    if not settings.BENCH_MODELS:
        raise BenchOnlyKind(
            f"model kind {spec.kind!r} serves benches only (bench/serving_overhead.py): this process was not "
            "started with BENCH_MODELS=1, and no user deployment may serve it"
        )
    from .instant.scorer import InstantScorer

    return InstantScorer(spec)


def scorer_load(spec: ModelSpec) -> Scorer:
    """The scorer of a trained model of `spec.kind` (UnknownKind when no family has that kind; BenchOnlyKind
    for the bench-only instant model outside a bench)."""
    from .instant.scorer import KIND as INSTANT

    if spec.kind == INSTANT:
        return bench_scorer(spec)
    return family(spec.kind).scorer(spec)


def validate_config(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """The normalised config (defaults filled in); ValueError with the reason when it is unusable."""
    return family(kind).config_class.from_dict(data).to_dict()


def default_config(kind: str) -> dict[str, Any]:
    return family(kind).config_class().to_dict()
