"""Many-row inserts without building a model instance per row.

`bulk_create` prepares every value of every row through its field (a few microseconds each, tens of
thousands per ingest chunk); ingest rows are plain numbers, strings and JSON, so they are sent as they are.

On PostgreSQL (psycopg 3) rows go in with COPY: psycopg formats them in C, where a many-row
INSERT ... VALUES has its hundreds of placeholders parsed in Python on every call (psycopg caches
the parse of statements with up to 50 parameters only); new ids are drawn from the table's sequence first.
Elsewhere (SQLite 3.35+) one INSERT ... VALUES ... RETURNING id, whose ids come in the order of the list.
"""

from __future__ import annotations

import json

from django.db import connection, models


def insert_returning_ids(model: type[models.Model], rows: list[dict]) -> list[int]:
    """Insert `rows` (field name -> value; JSONField values as Python objects) into `model`'s table; their new
    ids in the order of `rows`."""
    if not rows:
        return []
    pk = _column(model._meta.pk)
    if _copies():
        values = _values(model, rows)  # raises ValueError (NaN in JSON) before anything is sent
        ids = _next_ids(model, len(rows))
        _copy(model, [pk, *(_column(_concrete(model, name)) for name in rows[0])], values, ids)
        return ids
    sql, params = _insert(model, rows)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {connection.ops.quote_name(pk)}", params)
        return [row[0] for row in cursor.fetchall()]


def insert_rows(model: type[models.Model], rows: list[dict]) -> None:
    """The same without reading the new ids back."""
    if not rows:
        return
    if _copies():
        _copy(model, [_column(_concrete(model, name)) for name in rows[0]], _values(model, rows))
        return
    with connection.cursor() as cursor:
        cursor.execute(*_insert(model, rows))


def _copies() -> bool:
    if connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3  # psycopg 2's copy API differs: it takes the VALUES path


_sequences: dict[str, str] = {}


def _next_ids(model: type[models.Model], count: int) -> list[int]:
    table = model._meta.db_table
    with connection.cursor() as cursor:
        if table not in _sequences:
            cursor.execute("SELECT pg_get_serial_sequence(%s, %s)", [table, _column(model._meta.pk)])
            _sequences[table] = cursor.fetchone()[0]
        cursor.execute("SELECT nextval(%s) FROM generate_series(1, %s)", [_sequences[table], count])
        return [row[0] for row in cursor.fetchall()]


def _copy(model: type[models.Model], columns: list[str], values: list[list], ids: list[int] | None = None) -> None:
    quote = connection.ops.quote_name
    statement = f"COPY {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)}) FROM STDIN"
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(statement) as copy:
        for position, row in enumerate(values):
            copy.write_row(row if ids is None else [ids[position], *row])


def _values(model: type[models.Model], rows: list[dict]) -> list[list]:
    """Each row's values in the order of the first row's names; JSON fields as JSON text."""
    names = list(rows[0])
    json_fields = {name for name in names if isinstance(_concrete(model, name), models.JSONField)}
    return [
        [json.dumps(row[name], allow_nan=False) if name in json_fields else row[name] for name in names] for row in rows
    ]


def _insert(model: type[models.Model], rows: list[dict]) -> tuple[str, list]:
    names = list(rows[0])
    fields = [_concrete(model, name) for name in names]
    json_fields = {f.name for f in fields if isinstance(f, models.JSONField)}
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    quote = connection.ops.quote_name
    one = "(" + ", ".join(f"%s{cast}" if n in json_fields else "%s" for n in names) + ")"
    columns = ", ".join(quote(_column(f)) for f in fields)
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES {', '.join([one] * len(rows))}"
    return sql, [value for row in _values(model, rows) for value in row]


def _concrete(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.concrete:
        raise ValueError(f"{model.__name__}.{name} is not a column")
    return field


def _column(field: models.Field | None) -> str:
    if field is None or field.column is None:
        raise ValueError("the field has no column")
    return field.column
