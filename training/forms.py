"""Forms of the training pages: snapshot options and a ResNet job's config (defaults from the dataclasses),
including how many processes and machines train it."""

from __future__ import annotations

from django import forms
from django.conf import settings

from common.json_limits import JSONTooDeep, loads_bounded

from .datasets.options import SPLIT_MODES, SnapshotOptions
from .kit.parallel_config import DEFAULT_MASTER_PORT, MAX_NODES, MAX_PROCESSES
from .models import DatasetSnapshot, ModelKind
from .resnet.config import ARCH_FEATURES, SCHEDULES, SELECTIONS, ResNetConfig

_SNAP = SnapshotOptions()
_RES = ResNetConfig()


class SnapshotForm(forms.Form):
    sources = forms.MultipleChoiceField(
        choices=[("human", "Human labels"), ("proposal", "Proposals (open or accepted)"), ("model", "Model labels")],
        initial=_SNAP.sources,
        widget=forms.CheckboxSelectMultiple,
        help_text="A human label always wins over a proposal for the same step.",
    )
    camera = forms.ChoiceField(choices=[], help_text="The view the binary dataset uses.")
    num_samples_per_episode = forms.IntegerField(initial=0, min_value=0, help_text="0 = every labeled frame.")
    keep_last_frame = forms.BooleanField(initial=True, required=False)
    val_split = forms.FloatField(initial=_SNAP.val_split, min_value=0.01, max_value=0.99)
    fail_success_ratio = forms.FloatField(initial=_SNAP.fail_success_ratio, min_value=0.0)
    seed = forms.IntegerField(initial=_SNAP.seed, min_value=0)
    trend = forms.BooleanField(initial=True, required=False, label="Also export the VLM trend dataset")
    trend_val_split = forms.FloatField(initial=_SNAP.trend_val_split, min_value=0.0, max_value=0.99)
    split = forms.ChoiceField(
        choices=[(m, m) for m in SPLIT_MODES],
        initial=_SNAP.split,
        required=False,
        help_text="episode: RLinf's simulation split; frame: its real-world split (ratio on train only); "
        "auto: by episode when both classes reach train and val, else by frame.",
    )
    trend_balance = forms.BooleanField(initial=_SNAP.trend_balance, required=False)
    trend_reverse_augmentation = forms.BooleanField(initial=_SNAP.trend_reverse_augmentation, required=False)
    png_folders = forms.BooleanField(initial=True, required=False, label="success/ and failure/ PNG folders")

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        cameras = list(project.camera_views or ["main"])
        camera = self.fields["camera"]
        assert isinstance(camera, forms.ChoiceField)
        camera.choices = [(c, c) for c in cameras]
        camera.initial = cameras[0]

    def options(self) -> dict:
        data = dict(self.cleaned_data)
        data["split"] = data.get("split") or _SNAP.split
        return data


class JobForm(forms.Form):
    """A ResNet job's settings; other kinds send their config as JSON."""

    snapshot = forms.ModelChoiceField(queryset=DatasetSnapshot.objects.none(), empty_label=None)
    kind = forms.ChoiceField(choices=ModelKind.choices, initial=ModelKind.RESNET)
    name = forms.CharField(required=False, max_length=200)
    arch = forms.ChoiceField(choices=[(a, a) for a in ARCH_FEATURES], initial=_RES.arch)
    hidden_dim = forms.IntegerField(
        initial=_RES.hidden_dim, min_value=0, required=False, help_text="0 or empty: one linear layer."
    )
    dropout = forms.FloatField(initial=_RES.dropout, min_value=0.0, max_value=0.99)
    image_height = forms.IntegerField(initial=_RES.image_size[1], min_value=16, max_value=1024)
    image_width = forms.IntegerField(initial=_RES.image_size[2], min_value=16, max_value=1024)
    pretrained_path = forms.CharField(
        required=False,
        help_text="Local file with torchvision ResNet weights (nothing is downloaded). Empty: from scratch.",
    )
    crop = forms.CharField(
        required=False,
        max_length=100,
        help_text="Part of each frame the model sees, as top, left, height, width fractions (e.g. 0.2, 0.25, 0.5, "
        "0.5), in training and serving alike; empty = the whole frame. A cropped model is served by Reward Studio "
        "only: RLinf's own ResNetRewardModel has no crop and would score it on the whole frame.",
    )
    lr = forms.FloatField(initial=_RES.lr, min_value=1e-9)
    weight_decay = forms.FloatField(initial=_RES.weight_decay, min_value=0.0)
    grad_clip = forms.FloatField(initial=_RES.grad_clip, min_value=0.0)
    warmup_steps = forms.IntegerField(initial=_RES.warmup_steps, min_value=0)
    schedule = forms.ChoiceField(
        choices=[(s, s) for s in SCHEDULES],
        initial=_RES.schedule,
        required=False,
        help_text="Learning rate after the warm-up: constant (RLinf's) or cosine decay to 0 at the last step.",
    )
    batch_size = forms.IntegerField(initial=_RES.batch_size, min_value=1, max_value=4096)
    epochs = forms.IntegerField(initial=_RES.epochs, min_value=1)
    augment = forms.BooleanField(initial=_RES.augment, required=False, label="Random crop with padding")
    crop_padding = forms.IntegerField(initial=_RES.crop_padding, min_value=0, max_value=64)
    synthetic_negatives = forms.FloatField(
        initial=_RES.synthetic_negatives,
        min_value=0.0,
        max_value=1.0,
        required=False,
        help_text="Synthetic fail frames (black, white, one colour, noise) added to the training split, as a "
        "fraction of it (0 = none): the reward learns that a blank or broken camera is not success.",
    )
    patience = forms.IntegerField(initial=_RES.patience, min_value=0, help_text="Early stopping on val_loss; 0 = off.")
    min_delta = forms.FloatField(initial=_RES.min_delta, min_value=0.0)
    select = forms.ChoiceField(
        choices=[(s, s) for s in SELECTIONS],
        initial=_RES.select,
        required=False,
        label="Model kept",
        help_text="val_loss: the epoch with the lowest validation loss; last: the last epoch's weights.",
    )
    bn_recalibrate = forms.BooleanField(
        initial=_RES.bn_recalibrate,
        required=False,
        label="Recalibrate BatchNorm statistics on the training images before saving",
    )
    seed = forms.IntegerField(initial=_RES.seed, min_value=0)
    device = forms.CharField(initial=_RES.device, help_text="auto (CUDA when present), cpu, cuda or cuda:N")
    num_threads = forms.IntegerField(
        initial=0,
        min_value=0,
        help_text="CPU threads; 0 = the worker's default; at most the training host's cores (TRAINING_HOST_CPUS).",
    )
    save_rlinf_layout = forms.BooleanField(
        initial=False, required=False, label="Also write RLinf's actor/model_state_dict/full_weights.pt"
    )
    processes = forms.IntegerField(
        initial=1,
        min_value=1,
        max_value=MAX_PROCESSES,
        required=False,
        label="Processes per node",
        help_text="Data-parallel training under torchrun: one process per GPU (gloo processes on a CPU). "
        "1 = in the worker's own process.",
    )
    nodes = forms.IntegerField(
        initial=1,
        min_value=1,
        max_value=MAX_NODES,
        required=False,
        help_text="Machines; the worker that takes the job is node 0, the others join with manage.py training_node.",
    )
    master_addr = forms.CharField(
        initial="127.0.0.1", max_length=253, required=False, help_text="Node 0's address, with more than one node."
    )
    master_port = forms.IntegerField(
        initial=DEFAULT_MASTER_PORT, min_value=1024, max_value=65535, required=False, help_text="Node 0's port."
    )
    config_json = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 6}), label="Config (JSON, for non-ResNet kinds)"
    )

    RESNET_FIELDS = (
        "arch",
        "hidden_dim",
        "dropout",
        "lr",
        "weight_decay",
        "grad_clip",
        "warmup_steps",
        "schedule",
        "batch_size",
        "epochs",
        "augment",
        "crop_padding",
        "synthetic_negatives",
        "patience",
        "min_delta",
        "select",
        "bn_recalibrate",
        "seed",
        "device",
        "num_threads",
        "save_rlinf_layout",
    )

    # What most jobs change; the rest of the fields are folded on the page.
    COMMON_FIELDS = ("snapshot", "kind", "name", "image_height", "image_width", "crop", "lr", "epochs", "schedule")
    PARALLEL_FIELDS = ("processes", "nodes", "master_addr", "master_port")

    def common_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.COMMON_FIELDS]

    def parallel_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.PARALLEL_FIELDS]

    def advanced_fields(self) -> list[forms.BoundField]:
        shown = {*self.COMMON_FIELDS, *self.PARALLEL_FIELDS, "config_json"}
        return [field for field in self if field.name not in shown]

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        snapshot = self.fields["snapshot"]
        assert isinstance(snapshot, forms.ModelChoiceField)
        snapshot.queryset = DatasetSnapshot.objects.filter(project=project, status="ready").order_by("-number")

    def clean_processes(self) -> int | None:
        from .jobs.limits import host_processes_error

        value = self.cleaned_data.get("processes")
        error = host_processes_error(value)
        if error:
            raise forms.ValidationError(error)
        return value

    def clean_crop(self) -> list[float]:
        text = (self.cleaned_data.get("crop") or "").strip()
        if not text:
            return []
        try:  # "0.2, 0.25, 0.5, 0.5" or the docs' and the API's "[0.2, 0.25, 0.5, 0.5]"
            box = [float(part) for part in text.strip("[]() ").replace(",", " ").split()]
        except ValueError:
            raise forms.ValidationError("crop: four numbers, top, left, height, width (fractions)") from None
        try:
            ResNetConfig(crop=box)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return box

    def config(self) -> dict:
        data = self.cleaned_data
        if data["kind"] != ModelKind.RESNET:
            text = (data.get("config_json") or "").strip() or "{}"
            try:
                value = loads_bounded(text, max_depth=settings.JSON_MAX_DEPTH, what="config")
            except JSONTooDeep as exc:
                raise forms.ValidationError(str(exc)) from None
            except ValueError as exc:
                raise forms.ValidationError(f"config is not valid JSON: {exc}") from None
            if not isinstance(value, dict):
                raise forms.ValidationError("config must be a JSON object")
            return value
        config = {name: data[name] for name in self.RESNET_FIELDS}
        config["hidden_dim"] = config["hidden_dim"] or None
        config["image_size"] = [3, data["image_height"], data["image_width"]]
        config["crop"] = data.get("crop") or []
        config["schedule"] = data.get("schedule") or _RES.schedule  # absent from older clients' posts
        config["select"] = data.get("select") or _RES.select
        config["synthetic_negatives"] = data.get("synthetic_negatives") or 0.0  # absent from older clients' posts
        path = (data.get("pretrained_path") or "").strip()
        config["pretrained"] = bool(path)
        config["pretrained_path"] = path
        config["processes"] = data.get("processes") or 1
        config["nodes"] = data.get("nodes") or 1
        config["master_addr"] = (data.get("master_addr") or "").strip() or "127.0.0.1"
        config["master_port"] = data.get("master_port") or DEFAULT_MASTER_PORT
        return config
