"""The default storage's STORAGES entry from the settings (no Django import: settings.py calls it)."""

from __future__ import annotations

from typing import Any

BACKENDS = {
    "local": "django.core.files.storage.FileSystemStorage",
    "s3": "common.filestore.s3.AppServedS3Storage",
}
SIGNED_URL_SECONDS = 300
TRANSFER_THREADS = 8  # concurrent requests of one transfer (a folder's files, an ingest chunk's frames)
CONNECTIONS = 32  # kept-alive connections per boto3 client (botocore's default, 10, drops some under load)


def storage_config(
    backend: str,
    *,
    bucket: str,
    endpoint_url: str,
    access_key: str,
    secret_key: str,
    region: str,
    addressing_style: str,
) -> dict[str, Any]:
    """`local`, `s3` or a dotted storage class. An S3 bucket is private: no ACL is set on any object, file URLs
    are the app's own (its media view reads the object after its access checks), and a signed URL
    (`signed_url`) lasts a few minutes."""
    if backend != "s3":
        return {"BACKEND": BACKENDS.get(backend, backend)}
    from botocore.config import Config

    options: dict[str, Any] = {
        "client_config": Config(
            s3={"addressing_style": addressing_style},
            signature_version="s3v4",
            max_pool_connections=CONNECTIONS,
            tcp_keepalive=True,
        ),
        "bucket_name": bucket,
        "region_name": region,
        "addressing_style": addressing_style,
        "default_acl": None,
        "querystring_auth": True,
        "querystring_expire": SIGNED_URL_SECONDS,
        "file_overwrite": True,
        "signature_version": "s3v4",
        "max_memory_size": 8 * 1024 * 1024,  # a large file read through `open` spools to disk past this
    }
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    if access_key or secret_key:
        options.update(access_key=access_key, secret_key=secret_key)
    return {"BACKEND": BACKENDS["s3"], "OPTIONS": options}
