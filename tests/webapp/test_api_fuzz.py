"""The OpenAPI schema (/api/schema/) run against a live server by schemathesis: no input gives a 5xx the
schema does not document, every answer conforms to the schema, input that breaks the schema is refused, and
JSON nested 5,000 deep is a 400 on every operation that takes JSON.

A few generated examples per operation (schemathesis builds them from the schema with hypothesis: valid
inputs and inputs that break it on purpose), sent over real HTTP with a token holding every scope on every
project, and again as the project's manager (a session: deploying and deployment settings are for people). Path parameters are pinned to real rows
(the access matrix's world, plus an episode a person made, whose agent is null), so requests get past the
lookups to the parsers, serializers and services; any server error or schema violation fails the test with
the request that caused it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import negative_data_rejection, response_schema_conformance
from schemathesis.core.failures import Failure, FailureGroup

from .test_access_matrix import build_world

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXAMPLES_PER_OPERATION = 6
DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture
def fuzz_world(django_user_model):
    """The access matrix's rows, a person's episode and a token with every scope on every project."""
    from labeling.ingest.services import episode_create
    from projects.access import ALL_SCOPES
    from projects.services import agent_create

    world = build_world(django_user_model)
    person_episode, _ = episode_create(project=world["project"], uuid=uuid.uuid4())
    world["ids"]["person_episode"] = person_episode.uuid
    world["fuzz_token"] = agent_create(name="fuzz", kind="sim", scopes=ALL_SCOPES, all_projects=True)[1]
    return world


def pinned_path_values(path: str, name: str, ids: dict) -> list:
    """The real rows a path parameter may name."""
    if name == "uuid":
        return [str(ids["episode"]), str(ids["person_episode"])]
    if name == "name":
        return [ids["vlm_deployment"] if "/vlm/" in path else ids["deployment"]]
    if name == "job_id":
        return [ids["proposal_job"] if path.startswith("/api/proposal-jobs/") else ids["job"]]
    return [{"id": ids["project"], "model_id": ids["model"], "snapshot_id": ids["snapshot"]}[name]]


def pin_path_parameters(raw: dict, ids: dict) -> dict:
    for path, operations in raw["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if parameter["in"] == "path":
                    parameter["schema"] = {
                        **parameter["schema"],
                        "enum": pinned_path_values(path, parameter["name"], ids),
                    }
    return raw


@pytest.fixture
def raw_schema(live_server_url, fuzz_world) -> dict:
    headers = {"Authorization": f"Bearer {fuzz_world['fuzz_token']}"}
    answer = requests.get(f"{live_server_url}/api/schema/?format=json", headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text[:300]
    return answer.json()


def checks_for(path: str) -> list:
    """The answer matches the schema, and input that breaks it is refused (4xx) - except by drf-spectacular's own
    schema view, which serves its default for an unknown `?format=`."""
    return [response_schema_conformance] + ([negative_data_rejection] if path != "/api/schema/" else [])


def logged_in(base_url: str, username: str, password: str) -> requests.Session:
    """A browser-like session of a person (cookie and CSRF header), for what tokens may not do."""
    session = requests.Session()
    session.get(f"{base_url}/accounts/login/", timeout=60)
    form = {"username": username, "password": password, "csrfmiddlewaretoken": session.cookies["csrftoken"]}
    assert session.post(f"{base_url}/accounts/login/", data=form, timeout=60, allow_redirects=False).status_code == 302
    session.headers["X-CSRFToken"] = session.cookies["csrftoken"]
    return session


@pytest.mark.parametrize("caller", ["token", "manager"])
def test_no_operation_answers_with_a_server_error_or_off_its_schema(live_server_url, fuzz_world, raw_schema, caller):
    # the token of every scope; the project's manager (a session) does what tokens may not (deploy, settings)
    if caller == "token":
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {fuzz_world['fuzz_token']}"
    else:
        session = logged_in(live_server_url, "m-manager", "pw-matrix-123")
    schema = schemathesis.openapi.from_dict(pin_path_parameters(raw_schema, fuzz_world["ids"]))
    schema.config.update(base_url=live_server_url)
    schema.config.generation.update(with_security_parameters=False)  # the caller's own credentials only
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    slowest: list[tuple[float, str]] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 40

    for operation in operations:
        # valid inputs, and inputs that break the schema on purpose (wrong types, missing or extra fields) sent
        # to the same rows (the path kept valid, or they would stop at the lookup)
        path = {
            p["name"]: pinned_path_values(operation.path, p["name"], fuzz_world["ids"])[0]
            for p in operation.definition.raw.get("parameters", [])
            if p["in"] == "path"
        }
        negative = operation.as_strategy(generation_mode=GenerationMode.NEGATIVE, path_parameters=path)
        cases = st.one_of(operation.as_strategy(), negative)

        @given(case=cases)
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
            phases=[Phase.explicit, Phase.generate],
        )
        def run(case):
            started = time.monotonic()
            response = case.call(session=session, timeout=60)
            slowest.append((time.monotonic() - started, f"{case.method} {case.formatted_path}"))
            statuses[response.status_code] += 1
            where = f"{case.method} {case.formatted_path} {case.body!r:.200}: {response.status_code}"
            # A 5xx the schema documents is an answer, not a crash: GET /health says 503 while no inference
            # worker runs (RLinf's probe counts only 200 as ready).
            documented = {int(c) for c in case.operation.definition.raw.get("responses", {}) if c.isdigit()}
            if response.status_code >= 500 and response.status_code not in documented:
                failures.append(f"{where} {response.text[:300]}")
            try:
                case.validate_response(response, checks=checks_for(case.operation.path))
            except (Failure, FailureGroup) as exc:
                failures.append(f"{where} off the schema: {str(exc)[:600]}")

        run()
    assert not failures, "\n".join(failures)
    assert sum(statuses.values()) >= 2 * len(operations), statuses  # the examples really were sent
    assert sum(n for code, n in statuses.items() if code < 300) >= len(operations) // 2, statuses  # many accepted
    slowest.sort(reverse=True)
    print(f"{caller}: {len(operations)} operations, answers: {dict(sorted(statuses.items()))}; slowest {slowest[:3]}")


def test_json_nested_5000_deep_is_a_400_on_every_operation_that_takes_json(live_server_url, fuzz_world, raw_schema):
    # Each operation is asked by the first of these callers it does not refuse before reading the body: the
    # fuzz token, the agent that owns the episode (steps), the project's manager (deploying is for people).
    callers = []
    for token in (fuzz_world["fuzz_token"], fuzz_world["tokens"]["ingest"]):
        caller = requests.Session()
        caller.headers["Authorization"] = f"Bearer {token}"
        callers.append(caller)
    callers.append(logged_in(live_server_url, "m-manager", "pw-matrix-123"))
    answers: dict[str, int] = {}
    wrong: list[str] = []
    for path, operations in raw_schema["paths"].items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "application/json" not in operation.get("requestBody", {}).get(
                "content", {}
            ):
                continue
            url = path
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path":
                    value = pinned_path_values(path, parameter["name"], fuzz_world["ids"])[0]
                    url = url.replace("{" + parameter["name"] + "}", str(value))
            for caller in callers:
                answer = caller.request(
                    method, live_server_url + url, data=DEEP, headers={"Content-Type": "application/json"}, timeout=60
                )
                if answer.status_code not in (401, 403):
                    break
            answers[f"{method.upper()} {path}"] = answer.status_code
            if answer.status_code != 400 or "JSON_MAX_DEPTH" not in answer.text:
                wrong.append(f"{method.upper()} {url}: {answer.status_code} {answer.text[:300]}")
    # the six that used the plain JSON parser are among them, and so is chat
    for label in ("frame-labels", "window-labels", "generate", "accept", "reject", "reopen", "chat/completions"):
        assert any(label in key for key in answers), (label, sorted(answers))
    assert len(answers) >= 15, answers
    assert not wrong, "\n".join(wrong)
    print(json.dumps(answers, indent=1))
