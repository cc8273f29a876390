"""What an import reads, as plain Python: finding importable files, hashing them, unpacking zips,
RLinf `train.pt`/`val.pt` payloads, `success/`+`failure/` image folders, and the import summary.

Importable things (auto-detected):
- `*.pkl` / `*.pickle`: one RLinf episode each (see rlinf_episode.py), read by the restricted unpickler.
- `*.pt` / `*.pth`: an RLinf RewardDatasetPayload (`images`, `labels`, `metadata`), read with
  `torch.load(weights_only=True)`.
- a folder holding `success/` and/or `failure/` (RLinf's older collector): every image in it is one
  labeled frame.
- a LeRobot dataset folder (`meta/info.json`; see labeling/imports/lerobot/format.py): its episodes.
- `*.mp4` (and .mkv, .webm, .mov): video episodes; `NAME.<camera>.mp4` files of one folder (or one upload) with
  the same NAME are one episode (see labeling/imports/lerobot/importer.py).
- `*.zip`: unpacked (paths checked, size capped) and searched for all of the above.
- any other folder: searched recursively for all of the above.
No Django imports.
"""

from __future__ import annotations

import hashlib
import pickle
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from .pickle_errors import weights_only_error
from .video_frames import VIDEO_SUFFIXES, video_episode_name

PICKLE_SUFFIXES = {".pkl", ".pickle"}
PAYLOAD_SUFFIXES = {".pt", ".pth"}
ZIP_SUFFIXES = {".zip"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}
LABEL_FOLDERS = {"success": "success", "failure": "fail"}  # folder name -> FrameLabel value
MAX_ZIP_BYTES = 4 * 1024**3
MAX_ZIP_MEMBERS = 200_000


class SourceError(ValueError):
    """A path or file that cannot be imported; the message says why."""


@dataclass(frozen=True)
class Source:
    kind: str  # "pickle" | "payload" | "folder" | "lerobot" | "video"
    path: Path
    name: str  # shown in summaries
    parts: tuple[Path, ...] = ()  # "video": the episode's files, one per camera


@dataclass
class ImportSummary:
    episodes: int = 0
    steps: int = 0
    frames: int = 0
    labels: int = 0
    already_imported: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)

    @property
    def skipped(self) -> list[tuple[str, str]]:
        return self.already_imported + self.failed + self.ignored

    def lines(self) -> list[str]:
        out = [
            f"Imported {self.episodes} episode(s), {self.steps} step(s), {self.frames} frame(s), "
            f"{self.labels} label(s).",
        ]
        if self.skipped:
            out.append(f"Skipped {len(self.skipped)} file(s):")
            out.extend(f"  {name}: {reason}" for name, reason in self.skipped)
        return out


@dataclass
class Payload:
    images: list[np.ndarray]
    labels: list[int]
    metadata: dict


def discover(paths: Iterable[Path]) -> tuple[list[Source], list[tuple[str, str]]]:
    """Importable sources under the given paths, and (name, reason) for files passed over.

    A path that does not exist, or a file given explicitly with an unknown type, is a SourceError.
    """
    sources: list[Source] = []
    ignored: list[tuple[str, str]] = []
    videos: dict[tuple[str, str], list[Path]] = {}  # (folder or "" for given files, episode name) -> files
    for path in paths:
        if not path.exists():
            raise SourceError(f"{path}: no such file or folder")
        if path.is_file():
            kind = file_kind(path)
            if kind is None:
                raise SourceError(
                    f"{path}: unsupported file type {path.suffix or '(none)'}; "
                    "expected .pkl, .pt, .zip, .mp4, a LeRobot dataset folder or a folder with success/ and failure/"
                )
            if kind == "zip":
                raise SourceError(f"{path}: unpack zips with extract_zip() before discover()")
            if kind == "video":
                videos.setdefault(("", video_episode_name(path)), []).append(path)
            else:
                sources.append(Source(kind, path, path.name))
        else:
            _walk(path, path, sources, ignored, videos)
    for (folder, name), parts in videos.items():
        sources.append(Source("video", parts[0], f"{folder}/{name}" if folder else name, tuple(parts)))
    return sources, ignored


def file_kind(path: Path) -> str | None:
    suffix = path.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        return "pickle"
    if suffix in PAYLOAD_SUFFIXES:
        return "payload"
    if suffix in ZIP_SUFFIXES:
        return "zip"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    return None


def _walk(
    folder: Path,
    root: Path,
    sources: list[Source],
    ignored: list[tuple[str, str]],
    videos: dict[tuple[str, str], list[Path]],
) -> None:
    display = folder.name if folder == root else str(folder.relative_to(root.parent))
    if is_lerobot_folder(folder):
        sources.append(Source("lerobot", folder, display))
        return
    if is_label_folder(folder):
        sources.append(Source("folder", folder, display))
        return
    for child in sorted(folder.iterdir(), key=lambda p: natural_key(p.name)):
        if child.is_symlink():
            ignored.append((str(child.relative_to(root.parent)), "symbolic link"))
        elif child.is_dir():
            _walk(child, root, sources, ignored, videos)
        else:
            kind = file_kind(child)
            if kind == "video":
                videos.setdefault((display, video_episode_name(child)), []).append(child)
            elif kind in ("pickle", "payload"):
                sources.append(Source(kind, child, str(child.relative_to(root.parent))))
            elif not child.name.startswith("."):
                ignored.append((str(child.relative_to(root.parent)), "not an importable file"))


def is_lerobot_folder(folder: Path) -> bool:
    """A LeRobot dataset's root: it has meta/info.json (read by labeling/imports/lerobot/format.py)."""
    return (folder / "meta" / "info.json").is_file()


def is_label_folder(folder: Path) -> bool:
    return any((folder / name).is_dir() for name in LABEL_FOLDERS)


def natural_key(name: str) -> list:
    """frame_2.png before frame_10.png."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_images(folder: Path) -> tuple[list[tuple[str, Path]], list[tuple[str, str]]]:
    """(label value, image path) in natural name order per label folder, and files passed over."""
    images: list[tuple[str, Path]] = []
    ignored: list[tuple[str, str]] = []
    for folder_name, value in LABEL_FOLDERS.items():
        sub = folder / folder_name
        if not sub.is_dir():
            continue
        for child in sorted(sub.iterdir(), key=lambda p: natural_key(p.name)):
            shown = f"{folder.name}/{folder_name}/{child.name}"
            if child.name.startswith("."):
                continue
            if child.is_symlink() or not child.is_file():
                ignored.append((shown, "not a plain file"))
            elif child.suffix.lower() not in IMAGE_SUFFIXES:
                ignored.append((shown, f"not an image ({child.suffix or 'no extension'})"))
            else:
                images.append((value, child))
    return images, ignored


def folder_sha256(images: list[tuple[str, Path]]) -> str:
    """Content hash of a label folder: each image's label, name and bytes."""
    digest = hashlib.sha256()
    for value, path in images:
        digest.update(f"{value}/{path.name}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def load_payload(path: Path) -> Payload:
    """An RLinf RewardDatasetPayload read with torch.load(weights_only=True)."""
    import torch  # loaded by the import job that reads the file, not by the web process's pages

    try:
        data = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        forbidden, detail = weights_only_error(exc)
        if forbidden:
            raise SourceError(f"refused: the file holds more than tensors and plain values ({detail})") from None
        raise SourceError(f"unreadable .pt file: {detail}") from None
    except Exception as exc:
        raise SourceError(f"unreadable .pt file: {exc.__class__.__name__}: {exc}") from None
    if not isinstance(data, Mapping) or "images" not in data or "labels" not in data:
        raise SourceError("not an RLinf reward dataset: expected a dict with images, labels and metadata")
    images = list(data["images"]) if isinstance(data["images"], list | tuple | torch.Tensor) else None
    labels = data["labels"]
    labels = labels.tolist() if isinstance(labels, torch.Tensor) else labels
    if images is None or not isinstance(labels, list | tuple):
        raise SourceError("images and labels must be lists")
    if len(images) != len(labels):
        raise SourceError(f"{len(images)} images but {len(labels)} labels")
    arrays = []
    for index, image in enumerate(images):
        if not isinstance(image, torch.Tensor) or image.dtype != torch.uint8 or image.ndim != 3 or image.shape[-1] != 3:
            shape = list(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
            raise SourceError(f"images[{index}] must be a uint8 tensor [H,W,3]; got {shape}")
        arrays.append(np.ascontiguousarray(image.numpy()))
    clean_labels = []
    for index, label in enumerate(labels):
        if label not in (0, 1) or isinstance(label, float) and not label.is_integer():
            raise SourceError(f"labels[{index}] must be 0 (fail) or 1 (success); got {label!r}")
        clean_labels.append(int(label))
    metadata = data.get("metadata") or {}
    return Payload(arrays, clean_labels, dict(metadata) if isinstance(metadata, Mapping) else {})


def extract_zip(path: Path, dest: Path, *, max_bytes: int = MAX_ZIP_BYTES, max_members: int = MAX_ZIP_MEMBERS) -> None:
    """Unpack a zip into dest, refusing absolute or `..` paths, links, and more than max_bytes."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"not a readable zip file: {exc}") from None
    with archive:
        members = archive.infolist()
        if len(members) > max_members:
            raise SourceError(f"zip holds {len(members)} entries; the limit is {max_members}")
        declared = sum(member.file_size for member in members)  # zipfile never inflates past these sizes
        if declared > max_bytes:
            raise SourceError(f"zip unpacks to {declared} bytes, more than {max_bytes} bytes; nothing was unpacked")
        total = 0
        for member in members:
            name = PurePosixPath(member.filename.replace("\\", "/"))
            if name.is_absolute() or ".." in name.parts or (name.parts and name.parts[0].endswith(":")):
                raise SourceError(f"zip entry {member.filename!r} points outside the archive")
            if (member.external_attr >> 16) & 0o170000 == 0o120000:
                raise SourceError(f"zip entry {member.filename!r} is a symbolic link")
            if member.is_dir():
                (dest / name).mkdir(parents=True, exist_ok=True)
                continue
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with archive.open(member) as src, open(target, "wb") as out:
                    while block := src.read(1 << 20):
                        total += len(block)
                        if total > max_bytes:
                            raise SourceError(f"zip unpacks to more than {max_bytes} bytes")
                        out.write(block)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise SourceError(f"zip entry {member.filename!r} is unreadable: {exc}") from None


def safe_file_name(name: str) -> str:
    """An uploaded file's base name, safe to create in a temporary folder."""
    base = PurePosixPath(name.replace("\\", "/")).name
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", base).lstrip(".")
    return cleaned[:200] or "upload"
