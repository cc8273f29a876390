"""Folders on a store: published from a local folder, visible only complete, fetched by their manifest.

A folder `name` is complete when `name/.manifest.json` exists: it lists every file below it (relative path,
size, MD5). Publishing uploads every file first and writes the manifests last (each sub-folder's, then the
folder's own), so a publisher killed half-way leaves files no manifest names and nothing reads them; a
retry uploads again, skipping files the last complete manifest lists unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from django.core.files.storage import Storage

from . import store

MANIFEST = ".manifest.json"


def manifest_name(name: str) -> str:
    return f"{name.rstrip('/')}/{MANIFEST}"


def folder_manifest(storage: Storage, name: str) -> dict[str, Any] | None:
    """A complete folder's manifest; None when `name` is no complete folder (a file, half-published, gone)."""
    data = store.read_bytes(storage, manifest_name(name))
    return None if data is None else dict(json.loads(data))


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(store.CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_publish(storage: Storage, folder: Path, name: str) -> dict[str, Any]:
    """Store every file below local `folder` under `name/`, then the manifests; the folder's manifest."""
    name = name.rstrip("/")
    before = (folder_manifest(storage, name) or {}).get("files", {})
    files: dict[str, dict[str, Any]] = {}
    changed: list[tuple[Path, str]] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        rel = path.relative_to(folder).as_posix()
        entry = {"bytes": path.stat().st_size, "md5": _md5(path)}
        if before.get(rel) != entry:
            changed.append((path, f"{name}/{rel}"))
        files[rel] = entry
    store.uploads(storage, changed)
    subfolders = {rel.rsplit("/", 1)[0] for rel in files if "/" in rel}
    subfolders |= {prefix for sub in list(subfolders) for prefix in _parents(sub)}
    for sub in sorted(subfolders, key=lambda s: -s.count("/")):  # deepest first; the folder's own last
        inside = {rel[len(sub) + 1 :]: entry for rel, entry in files.items() if rel.startswith(sub + "/")}
        store.write_bytes(storage, manifest_name(f"{name}/{sub}"), _manifest_bytes(inside))
    store.write_bytes(storage, manifest_name(name), _manifest_bytes(files))
    return {"files": files}


def _parents(sub: str) -> list[str]:
    parts = sub.split("/")
    return ["/".join(parts[:n]) for n in range(1, len(parts))]


def _manifest_bytes(files: dict[str, dict[str, Any]]) -> bytes:
    return json.dumps({"files": files, "bytes": sum(e["bytes"] for e in files.values())}).encode()


def folder_fetch(storage: Storage, name: str, target: Path, manifest: dict[str, Any]) -> None:
    """Download the files a complete folder's manifest lists into `target` (together: `store.downloads`)."""
    store.downloads(storage, [(f"{name.rstrip('/')}/{rel}", target / rel) for rel in manifest["files"]])
    target.mkdir(parents=True, exist_ok=True)


def stored_fetch(storage: Storage, name: str, target: Path) -> None:
    """A cache loader: stored `name` (a complete folder or a file) to `target`."""
    manifest = folder_manifest(storage, name)
    if manifest is not None:
        folder_fetch(storage, name, target, manifest)
    elif storage.exists(name):
        store.download(storage, name, target)
    else:
        raise FileNotFoundError(f"{name} is not in storage (or not completely published)")
