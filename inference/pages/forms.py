"""The in-app "Deploy" form: a trained model under a name, with only the settings that apply to its kind.

The common settings come first; the advanced ones (reward shaping, batching, sampling) are folded on the
page. The threshold comes from the evaluation page's slider when the deploy link carries one.
"""

from __future__ import annotations

from typing import Any

from django import forms

from training.evaluation import precision
from training.families import takes_windows
from training.models import ModelKind, TrainedModel

from ..models import Deployment
from ..services import HISTORY_SETTINGS, deployment_field_default

COMMON = ["name", "threshold", "reward_type", "success_reward", "fail_reward", "reward_mode", "ood_action"]
HISTORY = list(HISTORY_SETTINGS)
ADVANCED = [
    "env_reward_weight",
    "reward_weight",
    "gt_success_bonus",
    "max_batch_size",
    "max_wait_ms",
    "sample_every",
    "inference_precision",
]
# The reward modes that apply to a family that scores single frames (ResNet); one that judges windows (the VLM,
# `Family.takes_windows`) takes every mode.
FRAME_MODES = [Deployment.RewardMode.PER_STEP, Deployment.RewardMode.TERMINAL]


class DeployForm(forms.ModelForm):
    class Meta:
        model = Deployment
        fields = [*COMMON, *HISTORY, *ADVANCED]
        help_texts = {
            "name": "RL workers ask for rewards by this name (letters, digits, - and _).",
            "reward_type": "What an RL step receives from the probability.",
        }

    def __init__(self, *args: Any, trained_model: TrainedModel, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.trained_model = trained_model
        windows = takes_windows(trained_model.kind)
        modes = list(Deployment.RewardMode) if windows else FRAME_MODES
        mode_field = self.fields["reward_mode"]
        assert isinstance(mode_field, forms.ChoiceField)
        mode_field.choices = [(m.value, m.label) for m in modes]
        if not windows:
            for name in HISTORY:
                del self.fields[name]
        if trained_model.kind != ModelKind.RESNET:  # only the ResNet family carries OOD statistics
            del self.fields["ood_action"]
        else:  # a form posted without it (a script, an older page) only flags
            self.fields["ood_action"].required = False
        if trained_model.kind not in precision.HONOURED_BY:  # the VLM serves in its checkpoint's dtype
            del self.fields["inference_precision"]
        else:  # a form posted without it (a script, an older page) deploys in fp32
            self.fields["inference_precision"].required = False
        for name, field in self.fields.items():
            if name != "name" and not self.is_bound and name not in self.initial:
                self.initial[name] = deployment_field_default(name)
            field.widget.attrs.setdefault("id", f"id_{name}")

    def clean_ood_action(self) -> str:
        return self.cleaned_data.get("ood_action") or Deployment.OodAction.FLAG

    def clean_inference_precision(self) -> str:
        return self.cleaned_data.get("inference_precision") or precision.FP32

    def common_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in COMMON if name in self.fields]

    def history_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in HISTORY if name in self.fields]

    def advanced_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in ADVANCED if name in self.fields]

    def settings(self) -> dict[str, Any]:
        """The cleaned values as `deployment_create` takes them (the name apart)."""
        return {name: value for name, value in self.cleaned_data.items() if name != "name"}


class DeploymentSettingsForm(DeployForm):
    """The deploy form without the name: a deployment's reward settings, edited on its page."""

    def __init__(self, *args: Any, deployment: Deployment, **kwargs: Any):
        super().__init__(*args, instance=deployment, trained_model=deployment.trained_model, **kwargs)
        del self.fields["name"]

    def _post_clean(self) -> None:  # the service checks and saves; the unique name is not in the form
        pass


def suggested_name(trained_model: TrainedModel) -> str:
    """A free deployment name from the model's name (`PickCube demo resnet #1` gives `pickcube-demo-resnet-1`)."""
    from django.utils.text import slugify

    base = slugify(trained_model.name)[:80] or f"model-{trained_model.pk}"
    name, n = base, 2
    while Deployment.objects.filter(name=name).exists():
        name, n = f"{base}-{n}", n + 1
    return name
