"""Shared fixtures of the Python SDK tests, and the report test/e2e/sdk-python.test.ts reads.

The tests run against one aenv node that the vitest file starts; its address and API key come in the
environment the SDK itself reads (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), so the SDK is used exactly as a
user points it at a self-hosted server. AENV_PYTEST_REPORT names a JSON file that gets every case's outcome.
"""

import json
import os
import time
import urllib.request

import pytest
from e2b import Sandbox

_REPORT = os.environ.get("AENV_PYTEST_REPORT")
_results: dict = {}


def pytest_runtest_logreport(report):
    # One entry per case: failed if any phase failed, else skipped if the call was skipped, else passed.
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "text": "", "seconds": 0.0})
    entry["seconds"] += report.duration
    if report.failed:
        entry["outcome"] = "failed"
        entry["text"] += f"--- {report.when} ---\n{report.longreprtext}\n"
        for name, content in report.sections:
            entry["text"] += f"--- {name} ---\n{content}\n"
    elif report.skipped and entry["outcome"] != "failed":
        entry["outcome"] = "skipped"
        entry["text"] = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else report.longreprtext


def pytest_sessionfinish(session, exitstatus):
    if _REPORT:
        with open(_REPORT, "w", encoding="utf-8") as f:
            json.dump(_results, f)


def wait_for(check, what, tries=200, every=0.1):
    """Polls check() (bounded: tries x every seconds) until it returns something truthy, and returns that."""
    for _ in range(tries):
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def api(method, path, body=None):
    """A control-plane call with the node's API key, outside the SDK: for what the SDK does not expose."""
    req = urllib.request.Request(
        os.environ["E2B_API_URL"] + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"x-api-key": os.environ["E2B_API_KEY"], "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, json.loads(text) if text else None


@pytest.fixture
def sandboxes():
    """Sandboxes a test creates are put here and killed after it, whatever happened."""
    made = []
    yield made
    for s in made:
        try:
            Sandbox.kill(s if isinstance(s, str) else s.sandbox_id)
        except Exception:
            pass


@pytest.fixture(scope="module")
def sbx():
    """One sandbox shared by the tests of a module that only run commands and touch files in it."""
    s = Sandbox.create(timeout=600)
    yield s
    s.kill()
