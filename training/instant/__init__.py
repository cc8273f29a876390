"""The bench-only instant model family (`kind="instant"`): see `training.instant.scorer`."""
