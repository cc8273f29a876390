"""The job form reads its config JSON within JSON_MAX_DEPTH: deeper text is a form error naming the limit,
not a RecursionError."""

from __future__ import annotations

import pytest
from django import forms

from training.forms import JobForm

pytestmark = pytest.mark.django_db


def _config(project, config_json: str) -> dict:
    form = JobForm(project=project)
    form.cleaned_data = {"kind": "vlm", "config_json": config_json}
    return form.config()


def test_deeply_nested_config_is_refused_with_the_limit(project, settings):
    with pytest.raises(forms.ValidationError, match=f"the limit is {settings.JSON_MAX_DEPTH}"):
        _config(project, '{"a": ' * 5000 + "1" + "}" * 5000)


def test_a_shallow_config_parses_and_bad_json_says_so(project):
    assert _config(project, '{"epochs": 2, "lora": {"rank": 8}}') == {"epochs": 2, "lora": {"rank": 8}}
    with pytest.raises(forms.ValidationError, match="not valid JSON"):
        _config(project, '{"epochs": ')
