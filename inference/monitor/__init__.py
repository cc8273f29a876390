"""The reward-hacking monitor, one room: `rules` (the plain logic: counters, rates, the alarm rule; no
Django, no Redis), `services` (counters in Redis, disagreeing frames, the alarm), `selectors` (what the page,
its API and the health endpoint read), `views` and `urls`, `alarm_queue` (an alarm's frames to the labeling
queue) and `webhooks` (the alarm as a webhook event)."""
