"""What keeps the site safe at its edge: request body limits, client addresses behind proxies, WebSocket origins, login throttling and lock-out, and secrets kept out of logs and debug pages."""
