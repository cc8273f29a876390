"""A trained model as a download that says where it works: its checkpoint folder zipped as it is sent, with,
for a ResNet, RLinf's `reward.model` block that loads it (`rlinf_reward_model.yaml`) and `RLINF.md`, which says
whether RLinf's own `ResNetRewardModel` scores these weights exactly as the service does and, if not, why and
what works instead (training.resnet.rlinf_match)."""

from __future__ import annotations

from collections.abc import Iterator

import yaml
from django.utils.text import slugify

from common.zip_stream import zip_folder_blocks

from .models import TrainedModel
from .resnet.rlinf_match import rlinf_reward_model_config
from .storage import local_path

RLINF_CONFIG_FILE = "rlinf_reward_model.yaml"
RLINF_NOTE_FILE = "RLINF.md"


class ModelExportError(Exception):
    """The model's files cannot be exported (the message says why)."""


def rlinf_files(model: TrainedModel, root: str) -> dict[str, bytes]:
    """The generated members of a ResNet model's archive (none for other kinds)."""
    from .resnet.config import ResNetConfig

    match = model.rlinf_match
    if match is None:
        return {}
    weights = f"/path/to/{root}/model.safetensors"
    note = [f"# {model.name}: in RLinf 0.3.0", ""]
    if match.equal:
        block = rlinf_reward_model_config(ResNetConfig.from_dict(model.config), weights)
        note += [
            "RLinf's own `ResNetRewardModel` loads `model.safetensors` strictly and scores every frame exactly as",
            "Reward Studio serves this model (fp32). Put `rlinf_reward_model.yaml` under `reward.model` in your RLinf",
            "config and set `model_path` to where you unpacked this archive.",
        ]
        config_text = yaml.safe_dump({"reward": {"use_reward_model": True, "model": block}}, sort_keys=False)
    else:
        note += [
            "NOT REPRODUCIBLE BY RLINF'S OWN CLASS: " + match.reason,
            "",
            "The remote route works: `export RLINF_EXT_MODULE=reward_client.rlinf_plugin` and deploy this model;",
            "RLinf's reward worker then asks the deployment (see docs/rl-integration.md).",
        ]
        config_text = f"# not written: {match.reason}\n"
    return {RLINF_CONFIG_FILE: config_text.encode(), RLINF_NOTE_FILE: ("\n".join(note) + "\n").encode()}


def model_archive_stream(*, model: TrainedModel) -> tuple[str, Iterator[bytes]]:
    """The archive's file name and its bytes as they are zipped (the checkpoint folder plus `rlinf_files`)."""
    folder = local_path(model.checkpoint_path)
    if not folder.is_dir():
        raise ModelExportError(f"model {model.name!r} has no checkpoint folder any more ({model.checkpoint_path})")
    root = f"{slugify(model.project.name) or 'project'}-model-{model.pk}"
    return f"{root}.zip", zip_folder_blocks(folder, root, rlinf_files(model, root))
