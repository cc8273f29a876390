"""Webhook targets are checked again at every delivery, and the POST goes to the address that was checked:
a name that resolves to loopback at send time (DNS rebinding) is refused with the reason and nothing is sent;
a name is resolved once per attempt, never again by the connection."""

from __future__ import annotations

import socket
from unittest import mock

import pytest

from webhooks import events
from webhooks.models import Webhook, WebhookDelivery
from webhooks.services import delivery_attempt, webhook_emit

NAME = "hooks.example.test"  # .test never resolves in real DNS: only the test's resolver knows it


class Resolver:
    """getaddrinfo for NAME: each call answers the next of `answers` (the last one repeats); calls counted."""

    def __init__(self, *answers: tuple[str, ...]):
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, host, port, type=0):
        assert host == NAME, host
        addresses = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]


def _delivery(project, url: str) -> int:
    Webhook.objects.create(project=project, url=url, events=[events.SNAPSHOT_READY])
    (delivery_id,) = webhook_emit(project_id=project.pk, event=events.SNAPSHOT_READY, data={"snapshot": {"id": 1}})
    return delivery_id


@pytest.mark.django_db
@pytest.mark.parametrize("at_send_time", [("127.0.0.1",), ("93.184.216.34", "10.0.0.7"), ("169.254.169.254",)])
def test_a_name_that_rebinds_to_a_private_address_is_refused_at_send_time(project, receiver, settings, at_send_time):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
    port = receiver.server.server_address[1]
    delivery_id = _delivery(project, f"http://{NAME}:{port}/hook")  # public when the admin saved it
    resolver = Resolver(at_send_time)

    retry_in = delivery_attempt(delivery_id=delivery_id, resolve=resolver)

    delivery = WebhookDelivery.objects.get(pk=delivery_id)
    assert receiver.received == []  # nothing reached the loopback receiver
    assert retry_in == events.backoff_s(1) and delivery.status == "pending" and delivery.attempts == 1
    assert "TargetRefused" in delivery.error and "WEBHOOK_ALLOW_PRIVATE_TARGETS" in delivery.error
    assert delivery.response_status is None and resolver.calls == 1


@pytest.mark.django_db
def test_the_post_goes_to_the_checked_address_and_the_name_is_resolved_once(project, receiver, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the receiver is on loopback
    port = receiver.server.server_address[1]
    delivery_id = _delivery(project, f"http://{NAME}:{port}/hook?x=1")
    resolver = Resolver(("127.0.0.1",), ("10.255.255.1",))  # a second lookup would go elsewhere
    real_getaddrinfo, asked = socket.getaddrinfo, []

    def recording(host, *args, **kwargs):
        asked.append(host)
        return real_getaddrinfo(host, *args, **kwargs)

    with mock.patch("socket.getaddrinfo", recording):
        assert delivery_attempt(delivery_id=delivery_id, resolve=resolver) is None

    delivery = WebhookDelivery.objects.get(pk=delivery_id)
    assert (delivery.status, delivery.response_status, delivery.response_body) == ("delivered", 200, "thanks")
    assert resolver.calls == 1 and NAME not in asked  # the connection never looked the name up again
    (got,) = receiver.received
    assert got["headers"]["Host"] == f"{NAME}:{port}"  # the name, as the URL gave it
    assert events.verify(Webhook.objects.get().secret, got["body"], got["headers"][events.SIGNATURE_HEADER])


@pytest.mark.django_db
def test_an_answer_is_read_only_up_to_the_kept_bytes(project, settings):
    """A receiver answering a huge body does not make the worker read it all."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from webhooks.services import RESPONSE_KEEP

    sent = []

    class Huge(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(500)
            self.send_header("Content-Length", str(64 << 20))
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b"x" * (1 << 20))
                    sent.append(1)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Huge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
        delivery_id = _delivery(project, f"http://127.0.0.1:{server.server_address[1]}/hook")
        assert delivery_attempt(delivery_id=delivery_id) is not None
        delivery = WebhookDelivery.objects.get(pk=delivery_id)
        assert delivery.error == "HTTP 500" and delivery.response_body == "x" * RESPONSE_KEEP
    finally:
        server.shutdown()
        server.server_close()
    assert len(sent) < 64  # the connection closed long before the 64 MiB were read
