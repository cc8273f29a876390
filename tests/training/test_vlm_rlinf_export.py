"""RLinf's `full_weights.pt` for a VLM model (training/vlm/rlinf_export.py): written from the saved adapter after
training (command, API, the evaluation page's button) with the adapter's scale in `lora_B`, and refused, naming the
setting, where RLinf 0.3.0's loader would rebuild the LoRA otherwise. That RLinf then scores as we serve:
tests/interop/test_rlinf_vlm_lora.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from django.core.management import CommandError, call_command

from training.vlm.rlinf_export import (
    FULL_WEIGHTS,
    base_module_kinds,
    module_refusals,
    rlinf_status,
    setting_refusals,
)

RANK, ALPHA = 8, 24


@pytest.fixture(scope="module")
def checkpoint(vlm_fixture_dir, tmp_path_factory):
    """A tiny LoRA (alpha = 3 x rank) trained with save_full_weights off, as jobs before the default changed."""
    from training.kit.reporting import MemoryReporter
    from training.vlm.config import VLMTrainConfig
    from training.vlm.data import TrendWindow
    from training.vlm.train import train_vlm

    frames = [np.full((32, 32, 3), 40 * i, dtype=np.uint8) for i in range(5)]
    windows = [TrendWindow(frames, frames, label) for label in ("positive", "negative")]
    quick = {"lr": 1e-2, "warmup_steps": 0, "max_steps": 2, "batch_size": 2, "grad_accum": 1, "device": "cpu"}
    config = VLMTrainConfig.from_dict(
        {"base_model_path": str(vlm_fixture_dir), "lora_rank": RANK, "lora_alpha": ALPHA, "save_full_weights": False}
        | quick
    )
    folder = tmp_path_factory.mktemp("vlm") / "ckpt"
    train_vlm(config, windows, [], folder, reporter=MemoryReporter())
    return folder


def copy_of(checkpoint, target):
    shutil.copytree(checkpoint, target)
    return target


def adapter_tensors(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "adapter" / "adapter_model.safetensors")


@pytest.mark.parametrize(
    "key, value",
    [
        ("use_dora", True),
        ("rank_pattern", {"q_proj": 4}),
        ("alpha_pattern", {"q_proj": 64}),
        ("modules_to_save", ["lm_head"]),
        ("bias", "lora_only"),
        ("lora_bias", True),
        ("target_parameters", ["experts.gate_up_proj"]),
    ],
)
def test_each_setting_rlinfs_loader_would_rebuild_otherwise_is_named(key, value):
    reasons = setting_refusals({"peft_type": "LORA", "r": 16, "lora_alpha": 16, key: value})
    assert len(reasons) == 1 and reasons[0].startswith(f"{key}={value!r}: RLinf")


def test_peft_defaults_and_another_alpha_are_not_refused():
    from peft import LoraConfig

    config = LoraConfig(r=16, lora_alpha=48, target_modules=["q_proj", "v_proj"]).to_dict()
    assert setting_refusals(config) == []
    assert setting_refusals({"peft_type": "LOHA", "r": 16}) == ["peft_type='LOHA': RLinf loads LoRA adapters only"]


def test_a_target_name_that_also_names_a_conv3d_is_refused(vlm_fixture_dir):
    """Qwen3-VL's vision `attn.proj` is a Linear, its `patch_embed.proj` a Conv3d: RLinf's loader derives `proj`
    from the keys and its peft 0.11.1 raises on the Conv3d."""
    kinds = base_module_kinds(vlm_fixture_dir)
    reasons = module_refusals(["proj", "q_proj", "lm_head"], kinds)
    assert len(reasons) == 1 and reasons[0].startswith("target module 'proj' also names a Conv3d layer")


def test_the_command_writes_full_weights_after_training_with_the_scale_in_lora_b(checkpoint, tmp_path, capsys):
    folder = copy_of(checkpoint, tmp_path / "ckpt")
    assert not (folder / FULL_WEIGHTS).exists()
    before = rlinf_status(folder)
    assert (before["checked"], before["loadable"], before["present"]) == (False, None, False)

    call_command("export_rlinf_vlm", folder=str(folder))
    out = capsys.readouterr().out
    assert f"lora_path {folder.resolve() / 'checkpoints' / 'best_model'}" in out and "scaled by 3" in out
    written = torch.load(folder / FULL_WEIGHTS, weights_only=True)
    adapter = adapter_tensors(folder)
    assert set(written) == set(adapter) and all("lora_" in key and ".default." not in key for key in written)
    for key, value in adapter.items():
        expected = value * (ALPHA / RANK) if "lora_B" in key else value
        assert torch.allclose(written[key], expected), key
    assert any("lora_B" in key and value.abs().sum() > 0 for key, value in written.items()), "B was trained"
    after = rlinf_status(folder)
    assert after["checked"] and after["present"] and after["loadable"] and after["scale"] == ALPHA / RANK
    assert json.loads((folder / "vlm.json").read_text())["rlinf"]["full_weights"] == str(FULL_WEIGHTS)


def test_a_refused_adapter_names_each_setting_and_keeps_no_full_weights(checkpoint, tmp_path):
    folder = copy_of(checkpoint, tmp_path / "ckpt")
    call_command("export_rlinf_vlm", folder=str(folder))
    config_path = folder / "adapter" / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "use_dora": True, "alpha_pattern": {"v_proj": 64}}))
    with pytest.raises(CommandError, match="RLinf 0.3.0 would load this LoRA differently") as refused:
        call_command("export_rlinf_vlm", folder=str(folder))
    assert "use_dora=True" in str(refused.value) and "alpha_pattern={'v_proj': 64}" in str(refused.value)
    assert not (folder / FULL_WEIGHTS).exists(), "the file written before would be loaded silently"
    status = rlinf_status(folder)
    assert status["checked"] and status["loadable"] is False and not status["present"]
    assert [reason.split("=")[0] for reason in status["reasons"]] == ["use_dora", "alpha_pattern"]


@pytest.mark.django_db
def test_the_evaluation_page_offers_the_export_and_the_api_reports_it(
    checkpoint, project, user_client, member_client, settings
):
    from training.models import TrainedModel
    from training.storage import local_path
    from training.vlm.evaluation import trend_evaluate

    name = "checkpoints/vlm_rlinf_export"
    folder = local_path(name)
    shutil.rmtree(folder, ignore_errors=True)
    copy_of(checkpoint, folder)
    evaluation = trend_evaluate(np.array([[0.6, 0.3, 0.1]]), ["positive"])
    (folder / "evaluation.json").write_text(json.dumps({**evaluation, "windows": [{}]}))
    model = TrainedModel.objects.create(project=project, kind="vlm", name="trend", checkpoint_path=name)

    page = user_client.get(f"/models/{model.pk}/vlm-evaluation").content.decode()
    assert 'id="rlinf-export"' in page and "Write RLinf's full_weights.pt</button>" in page
    status = user_client.get(f"/api/models/{model.pk}/rlinf-export").json()
    assert (status["checked"], status["present"]) == (False, False)
    annotator = member_client(project, "annotator")
    assert annotator.post(f"/api/models/{model.pk}/rlinf-export").status_code == 403
    assert not (folder / FULL_WEIGHTS).exists()

    answer = user_client.post(f"/models/{model.pk}/rlinf-export")
    assert answer.status_code == 302 and answer["Location"] == f"/models/{model.pk}/vlm-evaluation"
    assert (folder / FULL_WEIGHTS).is_file()
    page = user_client.get(f"/models/{model.pk}/vlm-evaluation").content.decode()
    assert f"<code>{folder / 'checkpoints' / 'best_model'}</code>" in page
    assert "Write RLinf's full_weights.pt</button>" not in page
    status = user_client.get(f"/api/models/{model.pk}/rlinf-export").json()
    assert status["present"] and status["loadable"] and status["scale"] == ALPHA / RANK
    assert status["path"] == str(folder / "checkpoints" / "best_model")

    config_path = folder / "adapter" / "adapter_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "use_dora": True}))
    refused = user_client.post(f"/api/models/{model.pk}/rlinf-export")
    assert refused.status_code == 409 and "use_dora=True" in refused.json()["detail"]
    assert refused.json()["loadable"] is False and not (folder / FULL_WEIGHTS).exists()
    page = user_client.get(f"/models/{model.pk}/vlm-evaluation").content.decode()
    assert "RLinf would load this LoRA differently" in page and "use_dora=True" in page

    with pytest.raises(CommandError, match="use_dora=True"):
        call_command("export_rlinf_vlm", model=model.pk)

    resnet = TrainedModel.objects.create(project=project, kind="resnet", name="r", checkpoint_path="checkpoints/r")
    not_vlm = user_client.post(f"/api/models/{resnet.pk}/rlinf-export")
    assert not_vlm.status_code == 400 and "for VLM models" in not_vlm.json()["detail"]
    with pytest.raises(CommandError, match="is a resnet model: the RLinf LoRA export is for VLM models"):
        call_command("export_rlinf_vlm", model=resnet.pk)
    with pytest.raises(CommandError, match="no trained model with id 0"):
        call_command("export_rlinf_vlm", model=0)
