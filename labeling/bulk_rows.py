"""Many-row INSERT ... RETURNING id in one statement, without building a model instance per row.

`bulk_create` prepares every value of every row through its field (a few microseconds each, tens of
thousands per ingest chunk); ingest rows are plain numbers, strings and JSON, so they are sent as they are.
PostgreSQL and SQLite (3.35+) both return the new ids in the order of the VALUES list.
"""

from __future__ import annotations

import json

from django.db import connection, models


def insert_returning_ids(model: type[models.Model], rows: list[dict]) -> list[int]:
    """Insert `rows` (field name -> value; JSONField values as Python objects) into `model`'s table."""
    if not rows:
        return []
    names = list(rows[0])
    fields = [_concrete(model, name) for name in names]
    json_fields = {f.name for f in fields if isinstance(f, models.JSONField)}
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    quote = connection.ops.quote_name
    one = "(" + ", ".join(f"%s{cast}" if n in json_fields else "%s" for n in names) + ")"
    columns = ", ".join(quote(_column(f)) for f in fields)
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES {', '.join([one] * len(rows))} "
        f"RETURNING {quote(_column(model._meta.pk))}"
    )
    params = [
        json.dumps(row[name], allow_nan=False) if name in json_fields else row[name] for row in rows for name in names
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def _concrete(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.concrete:
        raise ValueError(f"{model.__name__}.{name} is not a column")
    return field


def _column(field: models.Field | None) -> str:
    if field is None or field.column is None:
        raise ValueError("the field has no column")
    return field.column
