"""The OpenAPI schema (/api/schema/) run against a live server by schemathesis: no input gives a 5xx the
schema does not document.

A few generated examples per operation (schemathesis builds them from the schema with hypothesis),
sent with an agent token over real HTTP; any server error fails the test with the request that caused it.
"""

from __future__ import annotations

from collections import Counter

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def agent_token(db):
    from labeling.ingest.services import agent_create

    return agent_create(name="fuzzer", kind="robot")[1]


@pytest.fixture
def api_schema(live_server_url, agent_token, project):
    headers = {"Authorization": f"Bearer {agent_token}"}
    raw = requests.get(f"{live_server_url}/api/schema/?format=json", headers=headers, timeout=120)
    assert raw.status_code == 200, raw.text[:300]
    schema = schemathesis.openapi.from_dict(raw.json())
    schema.config.update(base_url=live_server_url, headers=headers)
    return schema


def test_no_operation_answers_with_a_server_error(api_schema):
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) > 10

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=4,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
            phases=[Phase.explicit, Phase.generate],
        )
        def run(case):
            response = case.call(timeout=60)
            statuses[response.status_code] += 1
            # A 5xx the schema documents is an answer, not a crash: GET /health says 503 while no inference
            # worker runs (RLinf's probe counts only 200 as ready).
            documented = {int(c) for c in case.operation.definition.raw.get("responses", {}) if c.isdigit()}
            if response.status_code >= 500 and response.status_code not in documented:
                failures.append(
                    f"{case.method} {case.formatted_path} {case.body!r:.200}: {response.status_code} "
                    f"{response.text[:300]}"
                )

        run()
    assert not failures, "\n".join(failures)
    assert sum(statuses.values()) >= 2 * len(operations), statuses  # the examples really were sent
    assert sum(n for code, n in statuses.items() if code < 300) > 0, statuses  # and some were accepted
    print(f"{len(operations)} operations, answers: {dict(sorted(statuses.items()))}")
