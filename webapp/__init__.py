"""The site: settings, ASGI, URLs, Celery, routing, the demo, monitoring and security, composing the apps.

Importing the package starts nothing: the Celery app (`webapp.celery`) is loaded by `WebappConfig.ready()` in
every Django process and by `celery -A webapp` in the workers, so modules under it that need no Django (the page
data types, the proxy header reader) import without settings.
"""
