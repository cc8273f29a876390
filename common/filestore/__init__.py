"""Files on a store that may not be this machine's disk (docs/operations.md, "Scaling out").

- `config`: the STORAGES entry for `STORAGE_BACKEND` (`local`, `s3` or a storage class).
- `store`: the few calls the rest needs from a Django storage (download to a path, upload from one).
- `cache`: a size-bounded local cache of stored files and folders, shared safely by the processes of a machine.
- `publish`: a local folder onto the store, visible (its manifest written) only once every file is there.
- `services`: the Django-bound entry points (`stored_local`, `work_folder`, `folder_publish`); with local
  storage they return MEDIA_ROOT's own paths and copy nothing.
"""
