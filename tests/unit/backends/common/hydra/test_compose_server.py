"""The Hydra toolkit's one compose program per python (`compose._Server`): a request line in, an answer line
out, lines that are not answers skipped; a program that is gone or silent past the timeout answers None (the
backend then falls back to its key lists) and a later request starts a new one. The package, config
directory and config name reach the program as the request names them."""

from __future__ import annotations

import os
import sys

import pytest

from ascendfactory.backends.common.hydra import compose
from ascendfactory.backends.verl import composer

ECHO = """
import json, sys
print("a warning a library printed", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request.get("die"):
        sys.exit(3)
    if request.get("hang"):
        import time; time.sleep(30)
    print(json.dumps({"echo": request["overrides"], "name": request.get("config_name"),
                      "argv": sys.argv[2:]}), flush=True)
"""


@pytest.fixture
def program(tmp_path, monkeypatch):
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    monkeypatch.setattr(compose, "COMPOSE_PROGRAM", str(path))
    monkeypatch.setattr(compose, "_SERVERS", {})
    yield path
    compose.close_servers()


def server(environ):
    return compose._server(sys.executable, "verl", "trainer/config", environ)


def test_one_program_answers_every_request_in_order(program):
    environ = dict(os.environ)
    one = server(environ)
    assert one.ask({"overrides": ["a=1"]}) == {
        "echo": ["a=1"],
        "name": None,
        "argv": ["--package=verl", "--config-dir=trainer/config"],  # a single run's: unwarmed
    }
    assert one.ask({"overrides": ["b=2"]})["echo"] == ["b=2"]
    assert server(environ) is one  # kept for the next run
    composer.warm(sys.executable, environ)  # already started: the same one
    assert server(environ) is one
    assert server({**environ, "PYTHONPATH": "/elsewhere"}) is not one
    assert compose._server(sys.executable, "roll", "configs", environ) is not one


def test_ask_sends_the_request_as_named(program):
    request = compose.Request("verl", "trainer/config", "ppo_trainer", ["x=1"], dict(os.environ))
    answer = compose.ask(sys.executable, request)
    assert answer is not None and answer["echo"] == ["x=1"] and answer["name"] == "ppo_trainer"


def test_a_bulk_run_starts_it_warmed(program):
    composer.warm(sys.executable, dict(os.environ))
    assert server(dict(os.environ)).ask({"overrides": []})["argv"][-1] == "--warm=ppo_trainer"


def test_a_program_that_dies_answers_none_and_the_next_request_starts_another(program):
    environ = dict(os.environ)
    one = server(environ)
    assert one.ask({"overrides": [], "die": True}) is None
    assert one.proc is None
    again = server(environ)
    assert again is not one and again.ask({"overrides": ["c=3"]})["echo"] == ["c=3"]


def test_a_program_killed_between_requests_is_replaced(program):
    """Ended from outside (a process tree stopped by the runner): the next request starts another, not the
    key lists' fallback for the rest of the process."""
    environ = dict(os.environ)
    one = server(environ)
    assert one.ask({"overrides": ["a=1"]})["echo"] == ["a=1"]
    assert one.proc is not None
    one.proc.kill()
    one.proc.wait()
    again = server(environ)
    assert again is not one and again.ask({"overrides": ["d=4"]})["echo"] == ["d=4"]


def test_a_silent_program_is_stopped_at_the_timeout(program, monkeypatch):
    monkeypatch.setattr(compose, "TIMEOUT_S", 0.5)
    one = server(dict(os.environ))
    proc = one.proc
    assert one.ask({"overrides": [], "hang": True}) is None
    assert one.proc is None and proc is not None and proc.poll() is not None
