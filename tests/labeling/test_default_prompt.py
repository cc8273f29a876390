"""The default prompt lives with the project model (labeling) and is the one training renders. (That no
labeling module imports training or inference is pinned for every app in tests/webapp/test_import_layers.py.)"""

from __future__ import annotations


def test_the_project_default_prompt_is_the_one_training_renders():
    from labeling.models import Project
    from labeling.prompts import DEFAULT_PROMPT_TEMPLATE
    from training.vlm.prompt import prompt_render

    assert Project._meta.get_field("prompt_template").default == DEFAULT_PROMPT_TEMPLATE
    assert prompt_render(None, task="pick the cube", window_size=5) == DEFAULT_PROMPT_TEMPLATE.format(
        task="pick the cube", window_size=5
    )
