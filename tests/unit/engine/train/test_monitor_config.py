"""monitor_config / tensorboard keys: seed defaults, file + flags + MA_SUMMARY_LOG_DIR, validation."""

from types import SimpleNamespace

import pytest

from ascendfactory.engine.train.monitor import Monitor, load_monitor_config
from ascendfactory.errors import ConfigError
from ascendfactory.monitors import MonitorConfig

MONITOR_DEFAULTS = MonitorConfig().model_dump()


def _args(path=None, **kw):
    base = dict(
        af_monitor_config=path,
        tensorboard_dir=None,
        tensorboard_queue_size=10,
        log_loss_scale_to_tensorboard=False,
        log_timers_to_tensorboard=False,
    )
    return SimpleNamespace(**{**base, **kw})


def test_defaults_match_seed(monkeypatch):
    monkeypatch.delenv("MA_SUMMARY_LOG_DIR", raising=False)
    mon, tb = load_monitor_config(_args())
    assert tb is None and mon["monitor_on"] is False and mon["dump_path"] == "./dump"
    assert mon["target"] == [".*"] and mon["step_interval"] == 1 and mon["throughput_baseline"] is None
    assert set(MONITOR_DEFAULTS) == {
        "monitor_on",
        "dump_path",
        "target",
        "invert",
        "step_interval",
        "local_loss_format",
        "local_norm_format",
        "device_local_norm_format",
        "optimizer_state_format",
        "weight_state_format",
        "throughput_baseline",
        "print_struct",
    }


def test_yaml_file_env_dir_and_fallback_to_log(tmp_path, monkeypatch):
    f = tmp_path / "exp.yaml"
    f.write_text(
        "seed: 0\nmonitor_config:\n  monitor_on: true\n  local_norm_format: tensorboard\n"
        "  target: ['layers.0']\ntensorboard:\n  log_timers_to_tensorboard: true\n"
    )
    monkeypatch.delenv("MA_SUMMARY_LOG_DIR", raising=False)
    mon, tb = load_monitor_config(_args(str(f)))
    assert tb is None and mon["local_norm_format"] == ["log"]  # no tensorboard dir: 'tensorboard' -> 'log'
    monkeypatch.setenv("MA_SUMMARY_LOG_DIR", str(tmp_path / "tb"))
    mon, tb = load_monitor_config(_args(str(f)))
    assert tb["tensorboard_dir"] == str(tmp_path / "tb") and tb["log_timers_to_tensorboard"] is True
    assert mon["local_norm_format"] == ["tensorboard"]
    mon, tb = load_monitor_config(_args(str(f), tensorboard_dir="x"))
    assert tb["tensorboard_dir"] == "x"


def test_bad_keys_and_values(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(
        '{"monitor_config": {"monitor_onn": true, "local_loss_format": "csv", "throughput_baseline": -1}}'
    )
    with pytest.raises(ConfigError) as e:
        load_monitor_config(_args(str(f)))
    assert {p.key for p in e.value.problems} == {
        "monitor_config.monitor_onn",
        "monitor_config.local_loss_format.0",  # the first (only) format given
        "monitor_config.throughput_baseline",
    }


def test_target_and_invert(tmp_path):
    cfg = {**MONITOR_DEFAULTS, "target": [r"layers\.0\."]}
    m = Monitor(cfg, None, rank=0, print_fn=print)
    assert m.wanted("model.layers.0.mlp.up_proj.weight") and not m.wanted("model.layers.1.mlp.up_proj.weight")
    m = Monitor({**cfg, "invert": True}, None, rank=0, print_fn=print)
    assert not m.wanted("model.layers.0.mlp.up_proj.weight")
