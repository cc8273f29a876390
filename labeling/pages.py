"""Server-rendered page shells for labeling; the interactive parts are in frontend/src/pages."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_POST

from labeling import permissions as labeling_perms
from projects import access, services
from projects.models import Agent, Membership, Project

from .episode_browse import SORTS, attach_thumbnails
from .labels import selectors as label_selectors
from .models import Episode
from .page_data import EpisodeLinks, ProjectPageData

FILTERS = ("source", "agent", "state", "proposals", "success", "q", "sort")

# Extension points for other apps (append from AppConfig.ready()):
# PROJECT_LINKS: (label, URL name taking the project pk) shown as buttons at the top of the project page;
# PROJECT_SECTIONS: template names rendered as panels on the project page, with `project` in their context.
PROJECT_LINKS: list[tuple[str, str]] = [
    ("Import files", "project-import"),
    ("Export LeRobot dataset", "project-export-lerobot"),
    ("Training", "training-project"),
]
PROJECT_SECTIONS: list[str] = []


class LabelingSettingsForm(forms.ModelForm):
    """Label targets and the trend-rule parameters of window proposals."""

    class Meta:
        model = Project
        fields = [
            "target_success_frames",
            "target_fail_frames",
            "target_windows_per_class",
            "window_size",
            "trend_stride",
            "trend_delta_threshold",
            "trend_tail_unclear_ratio",
        ]
        labels = {
            "target_success_frames": "Target success frames",
            "target_fail_frames": "Target fail frames",
            "target_windows_per_class": "Target windows per class",
            "window_size": "Window size (steps)",
            "trend_stride": "Window stride",
            "trend_delta_threshold": "Trend delta threshold",
            "trend_tail_unclear_ratio": "Tail unclear ratio",
        }

    def clean_window_size(self):
        value = self.cleaned_data["window_size"]
        if value < 1:
            raise forms.ValidationError("a window holds at least one step")
        return value

    def clean_trend_stride(self):
        value = self.cleaned_data["trend_stride"]
        if value < 1:
            raise forms.ValidationError("the stride is at least one step")
        return value

    def clean_trend_delta_threshold(self):
        value = self.cleaned_data["trend_delta_threshold"]
        if value < 0:
            raise forms.ValidationError("the threshold must not be negative")
        return value

    def clean_trend_tail_unclear_ratio(self):
        value = self.cleaned_data["trend_tail_unclear_ratio"]
        if not 0 <= value <= 1:
            raise forms.ValidationError("the ratio is between 0 and 1")
        return value


def _project_links(project: Project) -> list[tuple[str, str]]:
    links = []
    for label, name in PROJECT_LINKS:
        try:
            links.append((label, reverse(name, args=[project.pk])))
        except NoReverseMatch:  # the app that provides it is not installed
            continue
    return links


def _project(request, pk: int, perm=labeling_perms.VIEW) -> Project:
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, perm, project)
    return project


@login_required
def project_detail(request, pk: int):
    """The project page: progress toward targets and the filtered episode list."""
    return _project_page(request, _project(request, pk))


def _project_page(request, project: Project, settings_form: LabelingSettingsForm | None = None):
    filters = {name: request.GET.get(name, "") for name in FILTERS}
    ids = label_selectors.episode_list_ids(project=project, **filters)
    page = Paginator(ids, 100).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "labeling/project_detail.html",
        {
            "project": project,
            "page": page,
            "episodes": attach_thumbnails(
                project=project, episodes=label_selectors.episodes_by_ids(project=project, ids=list(page.object_list))
            ),
            "sorts": {name: label for name, (label, _order) in SORTS.items()},
            "filters": filters,
            "filter_query": query.urlencode(),
            "progress": label_selectors.project_progress(project=project),
            "open_proposals": label_selectors.project_open_proposals(project=project),
            "total_episodes": project.episodes.count() if any(filters.values()) else len(ids),
            "sources": Episode.Source.choices,
            "agents": Agent.objects.filter(episodes__project=project).distinct().values_list("name", flat=True),
            "page_data": ProjectPageData(project=project.pk, api=f"/api/projects/{project.pk}"),
            "project_links": _project_links(project),
            "settings_form": settings_form or LabelingSettingsForm(instance=project),
            "project_sections": PROJECT_SECTIONS,
            "can_manage": access.can(request.user, labeling_perms.MANAGE, project),
            "members": project.memberships.select_related("user").order_by("user__username"),
            "member_form": MemberForm(),
        },
    )


@login_required
@require_POST
def project_settings(request, pk: int):
    """Saves the label targets and trend parameters; proposals follow on the next Generate."""
    project = _project(request, pk, labeling_perms.MANAGE)
    form = LabelingSettingsForm(request.POST, instance=project)
    if not form.is_valid():
        response = _project_page(request, Project.objects.get(pk=pk), settings_form=form)
        response.status_code = 400
        return response
    form.save()
    messages.success(request, "Settings saved. Generate proposals to apply new trend parameters.")
    return redirect("project-detail", pk=pk)


@login_required
def episode_label(request, uuid):
    """The labeling page. The episode's data is embedded so the first frame can be drawn at once."""
    episode = get_object_or_404(Episode.objects.select_related("project"), uuid=uuid)
    access.require_page(request, labeling_perms.VIEW, episode.project)
    newer, older = label_selectors.episode_neighbours(episode=episode)
    data = label_selectors.episode_labeling_data(episode=episode)
    data["links"] = EpisodeLinks(
        project=reverse("project-detail", args=[episode.project_id]),
        newer=reverse("episode-label", args=[newer.uuid]) if newer else None,
        older=reverse("episode-label", args=[older.uuid]) if older else None,
    )
    # The frames of the starting step are preloaded by the browser while the script loads.
    start = request.GET.get("step", "")
    indices = data["steps"]["index"]
    position = indices.index(int(start)) if start.isdigit() and int(start) in indices else 0
    preload = [urls[position] for urls in data["frames"].values() if urls and urls[position]]
    context = {"episode": episode, "project": episode.project, "data": data, "preload": preload}
    return render(request, "labeling/episode_label.html", context)


class MemberForm(forms.Form):
    """Add a person to the project, change their role, or remove them (role "remove")."""

    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=[*Membership.Role.choices, ("remove", "Remove from the project")])

    def clean_username(self):
        from django.contrib.auth import get_user_model

        name = self.cleaned_data["username"]
        user = get_user_model().objects.filter(username=name, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"no active user named {name!r}")
        return user


@login_required
@require_POST
def project_members(request, pk: int):
    """Managers add, change and remove the project's members."""
    project = _project(request, pk, labeling_perms.MANAGE)
    form = MemberForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(str(e) for errors in form.errors.values() for e in errors))
        return redirect("project-detail", pk=pk)
    user, role = form.cleaned_data["username"], form.cleaned_data["role"]
    if user == request.user and role != Membership.Role.MANAGER and not access.is_site_admin(user):
        messages.error(request, "You cannot lower or remove your own manager role; ask another manager.")
        return redirect("project-detail", pk=pk)
    services.membership_set(project=project, user=user, role=None if role == "remove" else role)
    messages.success(request, f"{user.get_username()}: {'removed' if role == 'remove' else role}.")
    return redirect("project-detail", pk=pk)


class ProjectCreateForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="Shown on every page; unique.")
    task_description = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Task",
        help_text='What success means, e.g. "Pick up the red cube and lift it." (used in VLM prompts).',
    )
    cameras = forms.CharField(
        initial="main",
        help_text="Camera names, separated by commas (e.g. main, extra): the names agents send frames under. "
        "The first is the default view.",
    )

    def clean_cameras(self) -> list[str]:
        try:
            return services.camera_views_parse(self.cleaned_data["cameras"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


@login_required
def project_new(request):
    """Any signed-in person may start a project; they become its manager."""
    form = ProjectCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            project = services.project_create(
                name=form.cleaned_data["name"].strip(),
                task_description=form.cleaned_data["task_description"].strip(),
                camera_views=form.cleaned_data["cameras"],
                creator=request.user,
            )
        except ValueError as exc:
            form.add_error("name", str(exc))
        else:
            messages.success(request, f"Project {project.name} created: send episodes from an agent or import files.")
            return redirect("project-detail", pk=project.pk)
    return render(request, "labeling/project_new.html", {"form": form}, status=400 if form.errors else 200)
