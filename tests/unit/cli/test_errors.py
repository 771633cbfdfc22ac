from ascendfactory.cli._errors import CLI_ERROR_MAPPINGS, format_error
from ascendfactory.errors import (
    AscendFactoryError,
    BackendNotFoundError,
    ConfigError,
    ConversionKeyError,
    InterruptedRunError,
    Problem,
    StageFailedError,
)


def test_config_error_lists_every_problem_with_source_and_fix():
    e = ConfigError([Problem("a.b", "bad", fix="do x", source="f.yaml"), Problem("c", "worse")])
    text = format_error(e)
    assert text.startswith("2 configuration problems:")
    assert "f.yaml: a.b: bad\n    fix: do x" in text and "  - c: worse" in text
    assert "nothing was run" in text and e.exit_code == 2


def test_stage_failed_shows_step_code_rank_log_and_tail():
    e = StageFailedError("train", 1, "/o/logs/r1.txt", "line a\nline b", rank=1)
    text = format_error(e)
    assert "step 'train' failed with exit code 1 (first failing rank: 1)" in text
    assert "/o/logs/r1.txt" in text and "    line b" in text and e.exit_code == 1


def test_interrupted_exit_codes():
    import signal

    assert InterruptedRunError(signal.SIGINT).exit_code == 130
    assert InterruptedRunError(signal.SIGTERM).exit_code == 143
    assert "SIGTERM" in format_error(InterruptedRunError(signal.SIGTERM))


def test_every_error_type_has_a_formatter():
    kinds = {k for k, _ in CLI_ERROR_MAPPINGS}
    for cls in (
        ConfigError,
        BackendNotFoundError,
        ConversionKeyError,
        StageFailedError,
        InterruptedRunError,
        AscendFactoryError,
    ):
        assert cls in kinds
    assert format_error(BackendNotFoundError("nope")) == "nope"
