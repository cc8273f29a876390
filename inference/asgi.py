"""ASGI entry with the rewards fast path in front of Reward Studio's application (see fastpath.py).

uvicorn inference.asgi:application --host 0.0.0.0 --port 8000
"""

from __future__ import annotations

from webapp.asgi import application as _studio

from .fastpath import RewardsFastPath

application = RewardsFastPath(_studio)
