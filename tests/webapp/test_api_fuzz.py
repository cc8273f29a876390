"""The OpenAPI schema (/api/schema/) run against a live server by schemathesis: no input gives a 5xx.

A few generated examples per operation (schemathesis builds them from the schema with hypothesis),
sent with an agent token over real HTTP; any server error fails the test with the request that caused it.
"""

from __future__ import annotations

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def agent_token(db):
    from labeling.services import agent_create

    return agent_create(name="fuzzer", kind="robot")[1]


@pytest.fixture
def api_schema(live_server_url, agent_token, project):
    headers = {"Authorization": f"Bearer {agent_token}"}
    raw = requests.get(f"{live_server_url}/api/schema/?format=json", headers=headers, timeout=120)
    assert raw.status_code == 200, raw.text[:300]
    schema = schemathesis.openapi.from_dict(raw.json())
    schema.config.update(base_url=live_server_url, headers=headers)
    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
def test_no_operation_answers_with_a_server_error(case):
    response = case.call(timeout=60)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
    )
