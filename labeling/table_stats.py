"""Fresh planner statistics and visibility maps after a bulk write.

Right after a job writes hundreds of thousands of label rows, PostgreSQL's statistics still describe the
tables as they were (the planner may pick a sequential scan to count a project's open proposals) and the
new pages are not yet marked all-visible (every index-only count visits the table as well). Autovacuum puts
both right, but only a minute or more later; until then the project page of a million-frame project takes
most of a second. The bulk paths (proposal generation over a project, imports, the scale bench's seed)
call `refresh_after_bulk_write` at their end, so the first page after them is as fast as any later one.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from .models import Episode, Frame, FrameLabel, LabelChange, Step, WindowLabel

# Fewer rows than this in one job leave the tables to autovacuum (a few pages change; plans stay right).
BULK_ROWS = 10_000

EPISODE_TABLES = (Episode, Step, Frame, FrameLabel, WindowLabel, LabelChange)
LABEL_TABLES = (FrameLabel, WindowLabel, LabelChange)


def refresh_after_bulk_write(models: Iterable, *, rows: int) -> str | None:
    """VACUUM (ANALYZE) the models' tables when `rows` reach BULK_ROWS, on PostgreSQL; only ANALYZE inside a
    transaction (VACUUM cannot run there). Returns the statement run, or None. VACUUM skips the pages that
    are already all-visible, so its cost follows the rows just written, not the table's size."""
    if rows < BULK_ROWS or connection.vendor != "postgresql":
        return None
    tables = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in models)
    statement = f"ANALYZE {tables}" if connection.in_atomic_block else f"VACUUM (ANALYZE) {tables}"
    with connection.cursor() as cursor:
        cursor.execute(statement)
    return statement
