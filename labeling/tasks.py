"""Background work of the labeling app (queue `ingest`)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from .models import Episode
from .proposals import proposals_generate


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, max_retries=5)
def generate_episode_proposals(episode_id: int) -> int:
    """Proposals for a finished episode, so they wait ready when someone opens it. Idempotent."""
    episode = Episode.objects.select_related("project").filter(pk=episode_id).first()
    if episode is None:
        return 0
    return proposals_generate(project=episode.project, episodes=Episode.objects.filter(pk=episode_id)).episodes
