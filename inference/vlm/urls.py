"""VLM URLs, included by webapp/urls.py at the site root (so the OpenAI route is exactly /v1/...)."""

from django.urls import path

from inference import health_api

from . import api as vlm_api
from . import chat_api

urlpatterns = [
    path("api/deployments/<slug:name>/vlm/rewards", vlm_api.VLMRewardsView.as_view(), name="deployment-vlm-rewards"),
    path("v1/chat/completions", chat_api.ChatCompletionsView.as_view(), name="openai-chat-completions"),
    path("health", health_api.HealthView.as_view(), name="health"),
]
