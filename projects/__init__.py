"""The house's core: projects, the people in them (memberships and roles), machine clients (agents and their
tokens and scopes), the access rules every app's views ask (`access.require`, `access.check`) and the agent gate
the reward fast path admits tokens through. Each app declares its own permissions beside its models
(`labeling/permissions.py`, `training/permissions.py`, `inference/permissions.py`); this package imports no app."""
