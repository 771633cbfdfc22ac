"""The verl composer's one compose program per verl python (`composer._Server`): a request line in, an answer
line out, lines that are not answers skipped; a program that is gone or silent past the timeout answers
None (the composer then falls back to the shipped key lists) and a later request starts a new one."""

from __future__ import annotations

import os
import sys

import pytest

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
    print(json.dumps({"echo": request["overrides"], "warm": sys.argv[2:]}), flush=True)
"""


@pytest.fixture
def program(tmp_path, monkeypatch):
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    monkeypatch.setattr(composer, "COMPOSE_PROGRAM", str(path))
    monkeypatch.setattr(composer, "_SERVERS", {})
    yield path
    composer.close_servers()


def test_one_program_answers_every_request_in_order(program):
    environ = dict(os.environ)
    server = composer._server(sys.executable, environ)
    assert server.ask({"overrides": ["a=1"]}) == {"echo": ["a=1"], "warm": []}  # a single run's: unwarmed
    assert server.ask({"overrides": ["b=2"]})["echo"] == ["b=2"]
    assert composer._server(sys.executable, environ) is server  # kept for the next run
    composer.warm(sys.executable, environ)  # already started: the same one
    assert composer._server(sys.executable, environ) is server
    assert composer._server(sys.executable, {**environ, "PYTHONPATH": "/elsewhere"}) is not server


def test_a_bulk_run_starts_it_warmed(program):
    composer.warm(sys.executable, dict(os.environ))
    server = composer._server(sys.executable, dict(os.environ))
    assert server.ask({"overrides": []})["warm"] == ["--warm=ppo_trainer"]


def test_a_program_that_dies_answers_none_and_the_next_request_starts_another(program):
    environ = dict(os.environ)
    server = composer._server(sys.executable, environ)
    assert server.ask({"overrides": [], "die": True}) is None
    assert server.proc is None
    again = composer._server(sys.executable, environ)
    assert again is not server and again.ask({"overrides": ["c=3"]})["echo"] == ["c=3"]


def test_a_program_killed_between_requests_is_replaced(program):
    """Ended from outside (a process tree stopped by the runner): the next request starts another, not the
    key lists' fallback for the rest of the process."""
    environ = dict(os.environ)
    server = composer._server(sys.executable, environ)
    assert server.ask({"overrides": ["a=1"]})["echo"] == ["a=1"]
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    again = composer._server(sys.executable, environ)
    assert again is not server and again.ask({"overrides": ["d=4"]})["echo"] == ["d=4"]


def test_a_silent_program_is_stopped_at_the_timeout(program, monkeypatch):
    monkeypatch.setattr(composer, "TIMEOUT_S", 0.5)
    server = composer._server(sys.executable, dict(os.environ))
    proc = server.proc
    assert server.ask({"overrides": [], "hang": True}) is None
    assert server.proc is None and proc is not None and proc.poll() is not None
