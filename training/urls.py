"""Training pages and API."""

from django.urls import URLPattern, URLResolver, include, path

from training.evaluation import runs_page

from . import api, views

urlpatterns: list[URLPattern | URLResolver] = [
    path("projects/<int:pk>/training/", views.project_training, name="training-project"),
    path("projects/<int:pk>/training/snapshots/new", views.snapshot_new, name="training-snapshot-new"),
    path("projects/<int:pk>/training/jobs/new", views.job_new, name="training-job-new"),
    path("projects/<int:pk>/compare", views.compare, name="training-compare"),
    path("projects/<int:pk>/runs/", runs_page.runs, name="training-runs"),
    path("snapshots/<int:snapshot_id>/", views.snapshot_detail, name="training-snapshot"),
    path("snapshots/<int:snapshot_id>/download", views.snapshot_download, name="training-snapshot-download"),
    path("snapshots/<int:snapshot_id>/delete", views.snapshot_remove, name="training-snapshot-delete"),
    path("jobs/<int:job_id>/", views.job_detail, name="training-job"),
    path("jobs/<int:job_id>/<str:action>", views.job_action, name="training-job-action"),
    path("models/<int:model_id>/evaluation", views.model_evaluation, name="training-evaluation"),
    path("models/<int:model_id>/download", views.model_download, name="model-download"),
    path("models/<int:model_id>/vlm-evaluation", views.vlm_evaluation, name="vlm-evaluation"),
    path("api/projects/<int:pk>/snapshots", api.SnapshotListView.as_view(), name="api-snapshots"),
    path("api/snapshots/<int:snapshot_id>", api.SnapshotDetailView.as_view(), name="api-snapshot"),
    path("api/projects/<int:pk>/jobs", api.JobListView.as_view(), name="api-jobs"),
    path("api/jobs/<int:job_id>", api.JobDetailView.as_view(), name="api-job"),
    path("api/jobs/<int:job_id>/cancel", api.JobCancelView.as_view(), name="api-job-cancel"),
    path("api/jobs/<int:job_id>/retry", api.JobRetryView.as_view(), name="api-job-retry"),
    path("api/jobs/<int:job_id>/metrics", api.JobMetricsView.as_view(), name="api-job-metrics"),
    path("api/models/<int:model_id>/evaluation", api.ModelEvaluationView.as_view(), name="api-model-evaluation"),
]
urlpatterns.append(path("", include("training.queue.urls")))
urlpatterns.append(path("", include("training.rlinf_vlm.urls")))
