"""The default prompt lives with the project model (projects) and is the one training renders. (That no
labeling module imports training or inference is pinned for every app in tests/webapp/test_import_layers.py.)"""

from __future__ import annotations


def test_the_project_default_prompt_is_the_one_training_renders():
    from projects.models import Project
    from projects.prompts import DEFAULT_PROMPT_TEMPLATE
    from training.vlm.prompt import prompt_render

    assert Project._meta.get_field("prompt_template").default == DEFAULT_PROMPT_TEMPLATE
    assert prompt_render(None, task="pick the cube", window_size=5) == DEFAULT_PROMPT_TEMPLATE.format(
        task="pick the cube", window_size=5
    )


def test_the_default_prompt_names_the_projects_window_size():
    """As RLinf's dataset preprocessing writes it: `{window_size}-frame`; at RLinf's window of 5, the text its
    reward worker sends word for word."""
    from projects.prompts import DEFAULT_PROMPT_TEMPLATE
    from training.vlm.prompt import prompt_render, prompt_task

    eight = prompt_render(DEFAULT_PROMPT_TEMPLATE, task="pick the cube", window_size=8)
    assert "two synchronized 8-frame videos" in eight and "5-frame" not in eight
    assert prompt_task(DEFAULT_PROMPT_TEMPLATE, eight, window_size=8) == "pick the cube"
    assert prompt_task(DEFAULT_PROMPT_TEMPLATE, eight, window_size=5) is None  # another window: not this prompt
    assert "two synchronized 5-frame videos" in prompt_render(None, task="t", window_size=5)


def test_projects_that_kept_the_old_default_are_moved_to_the_window_sized_one(db):
    import importlib

    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    from projects.models import Project
    from projects.prompts import DEFAULT_PROMPT_TEMPLATE

    migration = importlib.import_module("labeling.migrations.0009_prompt_window_size")
    kept = Project.objects.create(name="kept", prompt_template=migration.OLD)
    own = Project.objects.create(name="own", prompt_template="Task: {task}. Judge it.")
    # The models as the migration knew them (Project was labeling's then; its table is the same).
    then = MigrationLoader(connection).project_state(("labeling", "0009_prompt_window_size")).apps
    migration.forwards(then, None)
    assert Project.objects.get(pk=kept.pk).prompt_template == DEFAULT_PROMPT_TEMPLATE == migration.NEW
    assert Project.objects.get(pk=own.pk).prompt_template == "Task: {task}. Judge it."
