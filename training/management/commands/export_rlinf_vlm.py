"""Write RLinf's `full_weights.pt` for a trained VLM model (or a checkpoint folder) from its saved adapter."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from training.models import TrainedModel
from training.rlinf_vlm.services import NotAVLM, model_rlinf_export
from training.vlm.rlinf_export import RlinfExportRefused, rlinf_export_or_refuse


class Command(BaseCommand):
    help = (
        "Write RLinf's checkpoints/best_model/actor/model_state_dict/full_weights.pt for a VLM model from its adapter; "
        "refused, naming each setting, when RLinf 0.3.0 would load the LoRA differently."
    )

    def add_arguments(self, parser):
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--model", type=int, help="A trained model's id.")
        which.add_argument("--folder", help="A VLM checkpoint folder (adapter/ and vlm.json).")

    def handle(self, *args, **o):
        try:
            if o["model"] is not None:
                model = TrainedModel.objects.filter(pk=o["model"]).first()
                if model is None:
                    raise CommandError(f"no trained model with id {o['model']}")
                record = model_rlinf_export(model=model)
                path = record["path"]
            else:
                record = rlinf_export_or_refuse(o["folder"])
                path = str(Path(o["folder"]).resolve() / record["lora_path"])
        except (NotAVLM, RlinfExportRefused, FileNotFoundError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"wrote {Path(path) / 'actor' / 'model_state_dict' / 'full_weights.pt'}")
        if record["scale"] != 1:
            self.stdout.write(f"lora_B scaled by {record['scale']:g}: RLinf loads lora_alpha = rank")
        self.stdout.write(f"RLinf: reward.model.model_type history_vlm, reward.model.lora_path {path}")
