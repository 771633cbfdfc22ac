"""`install.sh llamafactory`: pip's resolver ERROR about the packages left out on purpose is followed by a
line saying it is expected (audit D5). The program's pip calls are recorded, not run."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO

PROGRAM = REPO / "ascendfactory" / "backends" / "llamafactory" / "programs" / "lf_install.py"


def load():
    spec = importlib.util.spec_from_file_location("lf_install", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_resolver_error_is_called_expected_right_after_it(monkeypatch, capsys):
    lf = load()
    calls = []

    def pip(*args):
        calls.append(args)
        if args[:2] == ("install", "--quiet") and "torch==2.13.0" in args:  # what pip prints after this one
            print("ERROR: pip's dependency resolver does not currently take into account all the ...")
            print("llamafactory 0.9.5 requires torchvision, which is not installed.")

    monkeypatch.setattr(lf, "pip", pip)
    monkeypatch.setattr(lf, "requirements", lambda version: ["transformers>=4.45"])
    monkeypatch.setattr(lf, "torchaudio_loads", lambda: True)
    assert lf.main(["0.9.5", "torch==2.13.0", "/shim"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("llamafactory 0.9.5 requires"))
    assert lines[at + 1].startswith('[lf-install] note: an "ERROR: pip\'s dependency resolver ..." above')
    assert "torchvision or torchaudio is expected" in lines[at + 1] and "nothing failed" in lines[at + 1]
