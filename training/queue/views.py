"""Labeling-queue pages (thin): "Label next" jumps to the most valuable unlabeled frame; the queue page
lists the ranking with each item's reasons and recomputes it on demand (in the background)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labeling import permissions as labeling_perms
from projects import access
from projects.models import Project

from ..models import RetrainPolicy
from ..selectors import label_queue_empty_reason
from ..signals import redeploy_target_check
from .services import label_queue_items, label_queue_next, label_url


class RetrainPolicyForm(forms.ModelForm):
    class Meta:
        model = RetrainPolicy
        fields = ["retrain_after_labels", "redeploy"]
        labels = {
            "retrain_after_labels": "Retrain after N new labels (0 = off)",
            "redeploy": "Redeploy this deployment when the new model is better",
        }

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_redeploy(self):
        """Only a deployment of this project that the person may change: the loop switches its model.
        The app serving deployments answers (`training.signals.redeploy_target_check`)."""
        name = self.cleaned_data["redeploy"].strip()
        if not name:
            return name
        answers = [
            answer
            for _, answer in redeploy_target_check.send(
                sender=RetrainPolicy, project_id=self.instance.project_id, name=name, user=self.user
            )
            if answer is not None
        ]
        refusal = next((answer for answer in answers if answer), "")
        if refusal:
            raise forms.ValidationError(refusal)
        if not answers:
            raise forms.ValidationError(f"this project has no deployment named {name!r}")
        return name


@login_required
def label_next(request, pk: int):
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.LABEL, project)
    item = label_queue_next(project=project)
    if item is None:
        messages.info(request, f"The labeling queue is empty: {label_queue_empty_reason(project=project)}")
        return redirect("label-queue", pk=pk)
    return redirect(label_url(item))


@login_required
def label_queue(request, pk: int):
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.VIEW, project)
    items = [(item, label_url(item)) for item in label_queue_items(project=project, limit=100)]
    policy = RetrainPolicy.objects.filter(project=project).first() or RetrainPolicy(project=project)
    form = RetrainPolicyForm(instance=policy, user=request.user)
    if request.method == "POST":
        access.require_page(request, labeling_perms.MANAGE, project)  # it queues training and may redeploy
        form = RetrainPolicyForm(request.POST, instance=policy, user=request.user)
        if form.is_valid():
            form.save()
            messages.success(request, "Train-to-target settings saved.")
            return redirect("label-queue", pk=pk)
    context = {"project": project, "items": items, "policy": policy, "form": form}
    if not items:
        context["empty_reason"] = label_queue_empty_reason(project=project)
    return render(request, "training/label_queue.html", context)


@login_required
@require_POST
def label_queue_refresh(request, pk: int):
    from ..tasks import recompute_label_queue

    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.LABEL, project)
    recompute_label_queue.delay(project.pk)
    messages.success(request, "Recomputing the labeling queue in the background; reload in a moment.")
    return redirect("label-queue", pk=pk)
