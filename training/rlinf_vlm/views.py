"""The VLM evaluation page's "Write RLinf's full_weights.pt" button (POST), back to the page with the outcome."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from projects import access
from training import permissions as training_perms

from ..models import ModelKind, TrainedModel
from ..vlm.rlinf_export import RlinfExportRefused
from .services import model_rlinf_export


@login_required
@require_POST
def rlinf_export(request, model_id: int):
    model = get_object_or_404(TrainedModel.objects.select_related("project"), pk=model_id, kind=ModelKind.VLM)
    access.require_page(request, training_perms.TRAIN, model.project)
    try:
        record = model_rlinf_export(model=model)
    except (RlinfExportRefused, FileNotFoundError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Wrote RLinf's full_weights.pt: set reward.model.lora_path to {record['path']}")
    return redirect("vlm-evaluation", model_id=model.pk)
