"""A scheduler function imports its own path with its module, and nothing of the
others: the result function no routing, registry or input safety client; the submit
function and the ticks no saga; the ticks no dispatch path (a tick dispatches only
when it finds a job to hand on, and then loads it); the replayer none of the output
policy's machinery while the policy is off. Wiring the path and reading every adapter
it calls then imports no further module of the scheduler, the registry or the safety
clients (the cost is not moved from the cold start to the first invocation).

Each check runs in a fresh interpreter (no Redis, NATS or AWS is reached: the
clients connect on first use)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

OUTPUT_POLICY = ["cordum.scheduler.output_phase", "cordum.scheduler.output_check",
                 "cordum.scheduler.output_prefetch", "cordum.safety.output_client",
                 "cordum.store.audit_trail"]
REQUEST_PATH = ["cordum.scheduler.dispatch", "cordum.scheduler.strategy",
                "cordum.scheduler.backoff", "cordum.registry.reader", "cordum.safety.client"]
SAGA = ["cordum.scheduler.saga", "cordum.store.saga"]

# Per function module: what importing it must not load, and code wiring its path as
# its first invocation does (``_results`` / ``_dispatch``: the path an entry point of
# the engine builds on its first call; ``engine``: the engine the function drives).
WIRING = {
    "result": (REQUEST_PATH, "from cordum.scheduler.service import default_engine\n"
                             "engine = default_engine()\n"
                             "engine._results\n"
                             "engine.ports.saga.record_compensation\n"),
    "submit": (SAGA + OUTPUT_POLICY + ["cordum.scheduler.results"],
               "from cordum.scheduler.service import default_engine\n"
               "engine = default_engine(results=False)\n"
               "engine._dispatch\n"),
    # A tick dispatches only when it finds a job to hand on: most never route.
    "reconciler_tick": (SAGA + OUTPUT_POLICY + REQUEST_PATH + ["cordum.scheduler.results"],
                        "from cordum.scheduler import reconciler_tick as t\n"
                        "t._reconciler()\n"),
    "replayer_tick": (SAGA + OUTPUT_POLICY + REQUEST_PATH + ["cordum.scheduler.results"],
                      "from cordum.scheduler import replayer_tick as t\n"
                      "assert t._replayer()[1] is None\n"),
}
TICKS = ("reconciler_tick", "replayer_tick")

# The request path's adapters, read as the dispatcher reads them.
TOUCH_REQUEST_ADAPTERS = ("p = engine.ports\n"
                          "p.registry.is_alive, p.strategy.pick, p.safety.check, "
                          "p.backoff.delay\n")

WATCHED = ("cordum.scheduler.", "cordum.registry.", "cordum.safety.")

POLICY_READER = {"cordum.safety.policy_file", "cordum.safety.policy_document",
                 "cordum.safety.policy", "cordum.safety.fields", "cordum.safety.matching",
                 "cordum.safety.risk", "cordum.safety.velocity"}
"""Imported by the input safety client itself when it is built: it reads the shipped
policy once, to know whether checks need the job's payload (safety/client.py)."""


def run(code: str, **env: str) -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, env={"PYTHONPATH": f"{REPO / 'shared'}:{REPO}",
                                        "PATH": "/usr/bin:/bin", **env}, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, list[str]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def script(function: str, wiring: str) -> str:
    return (f"import json, sys, importlib\n"
            f"importlib.import_module('functions.{function}')\n"
            f"imported = sorted(sys.modules)\n"
            f"{wiring}"
            f"first_call = sorted(m for m in set(sys.modules) - set(imported)"
            f" if m.startswith({WATCHED!r}))\n"
            f"print(json.dumps({{'imported': imported, 'first_call': first_call}}))\n")


@pytest.mark.parametrize("function", sorted(WIRING))
def test_a_function_imports_its_path_and_nothing_else(function: str) -> None:
    off_path, wiring = WIRING[function]
    if function == "submit":
        wiring += TOUCH_REQUEST_ADAPTERS
    seen = run(script(function, wiring))
    assert [m for m in off_path if m in seen["imported"]] == []
    assert set(seen["first_call"]) - POLICY_READER == set()


@pytest.mark.parametrize("function", TICKS)
def test_a_tick_loads_the_dispatch_path_when_it_dispatches(function: str) -> None:
    wiring = (WIRING[function][1] + "from cordum.scheduler.service import default_engine\n"
              "engine = default_engine()\nengine._dispatch\n" + TOUCH_REQUEST_ADAPTERS)
    seen = run(script(function, wiring))
    assert set(REQUEST_PATH) <= set(seen["first_call"])


def test_the_replayer_loads_the_output_policy_when_it_is_on() -> None:
    code = ("import json, sys\n"
            "import functions.replayer_tick\n"
            "off = [m for m in sys.modules if m.startswith('cordum.scheduler.output_')]\n"
            "from cordum.scheduler import replayer_tick as t\n"
            "held = t._replayer()[1]\n"
            "on = sorted(m for m in sys.modules if m.startswith('cordum.scheduler.output_'))\n"
            "print(json.dumps({'off': off, 'on': on, 'held': [type(held).__name__]}))\n")
    seen = run(code, OUTPUT_POLICY_ENABLED="true")
    assert seen["off"] == []
    assert seen["held"] == ["HeldOutputRechecker"]
    assert {"cordum.scheduler.output_phase", "cordum.scheduler.output_check"} <= set(seen["on"])
