"""WebSocket routes of the inference app. Features (teleop, VLM) add their own routing modules."""

import importlib
import importlib.util

websocket_urlpatterns: list = []

for _module in ("inference.teleop_routing", "inference.vlm_routing"):
    if importlib.util.find_spec(_module) is not None:
        websocket_urlpatterns.extend(importlib.import_module(_module).websocket_urlpatterns)
