"""Shared fixtures: the demo tokenizer (trained locally, once per session) and a runner of the program."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ascendfactory.engine.data.preprocess import main


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ascendfactory.engine.demo import save_demo_tokenizer

    out = tmp_path_factory.mktemp("demo_tokenizer")
    save_demo_tokenizer(out)
    return out


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture
def preprocess(tokenizer_dir: Path, tmp_path: Path) -> Callable[..., int]:
    """Run the program in-process with the demo tokenizer and `--output-prefix tmp_path/out`."""

    def run(input_path: Path | str, *extra: str) -> int:
        return main(
            [
                "--input",
                str(input_path),
                "--tokenizer-name-or-path",
                str(tokenizer_dir),
                "--output-prefix",
                str(tmp_path / "out" / "ds"),
                *extra,
            ]
        )

    return run
