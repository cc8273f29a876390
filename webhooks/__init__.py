"""Webhooks: signed HTTP callbacks to other systems when something happens in a project."""
