"""Deployments of trained reward models (owned by the inference server work)."""
