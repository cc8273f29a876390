"""Bulk writes leave the tables' planner statistics and visibility maps fresh (labeling/table_stats.py):
a job that wrote many rows runs VACUUM (ANALYZE) at its end, so the next page does not wait for autovacuum."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labeling import table_stats
from labeling.imports.services import import_paths
from labeling.models import FrameLabel
from labeling.proposals.services import proposals_generate
from tests.labeling.import_builders import label_folders

from .factories import episode_with_frames


def statements(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if q["sql"].startswith(("VACUUM", "ANALYZE"))]


@pytest.mark.django_db
def test_a_small_write_leaves_the_tables_to_autovacuum():
    with CaptureQueriesContext(connection) as captured:
        assert table_stats.refresh_after_bulk_write([FrameLabel], rows=table_stats.BULK_ROWS - 1) is None
    assert captured.captured_queries == []


@pytest.mark.django_db
def test_inside_a_transaction_only_analyze_runs():
    statement = table_stats.refresh_after_bulk_write([FrameLabel], rows=table_stats.BULK_ROWS)
    assert statement == 'ANALYZE "labeling_framelabel"'


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_vacuum_analyze_runs_and_postgresql_records_it():
    def last_runs():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT last_vacuum, last_analyze FROM pg_stat_user_tables WHERE relname = 'labeling_framelabel'"
            )
            return cursor.fetchone()

    before = last_runs()
    statement = table_stats.refresh_after_bulk_write([FrameLabel], rows=table_stats.BULK_ROWS)
    after = last_runs()
    assert statement == 'VACUUM (ANALYZE) "labeling_framelabel"'
    assert after[0] is not None and after[1] is not None
    assert before[0] is None or after[0] > before[0]


@pytest.mark.django_db
def test_proposal_generation_refreshes_the_label_tables_only_after_a_bulk_run_over_the_project(project, monkeypatch):
    episode_with_frames(project=project, num_steps=6, size=16)
    with CaptureQueriesContext(connection) as small:
        result = proposals_generate(project=project)
    assert statements(small) == [] and result.rows_written > 0
    monkeypatch.setattr(table_stats, "BULK_ROWS", 1)
    one = episode_with_frames(project=project, num_steps=6, size=16)
    with CaptureQueriesContext(connection) as single:  # one episode's proposals, answered in a request
        proposals_generate(project=project, episodes=project.episodes.filter(pk=one.pk))
    assert statements(single) == []
    episode_with_frames(project=project, num_steps=6, size=16)
    with CaptureQueriesContext(connection) as bulk:
        proposals_generate(project=project)
    assert statements(bulk) == ['ANALYZE "labeling_framelabel", "labeling_windowlabel", "labeling_labelchange"']


@pytest.mark.django_db
def test_an_import_refreshes_every_table_it_wrote(project, settings, tmp_path, monkeypatch):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    monkeypatch.setattr(table_stats, "BULK_ROWS", 1)
    with CaptureQueriesContext(connection) as captured:
        import_paths(project=project, paths=[label_folders(tmp_path / "collected", success=1, failure=1)])
    [statement] = statements(captured)
    for table in ("episode", "step", "frame", "framelabel", "windowlabel", "labelchange"):
        assert f'"labeling_{table}"' in statement
