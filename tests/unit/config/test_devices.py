from ascendfactory.config import devices
from ascendfactory.config.devices import resolve_devices_per_node


def test_visible_devices_win_over_config():
    got = resolve_devices_per_node(8, {"ASCEND_RT_VISIBLE_DEVICES": "0,1"})
    assert got.count == 2 and "ASCEND_RT_VISIBLE_DEVICES" in got.source
    assert resolve_devices_per_node(8, {"CUDA_VISIBLE_DEVICES": "3"}).count == 1


def test_config_then_machine(monkeypatch):
    assert resolve_devices_per_node(4, {}).count == 4
    monkeypatch.setattr(devices, "detect_accelerator", lambda: "npu")
    assert resolve_devices_per_node(None, {}).count == 8
    monkeypatch.setattr(devices, "detect_accelerator", lambda: "cpu")
    assert resolve_devices_per_node(None, {}).count == 1


def test_empty_visible_devices_is_ignored():
    assert resolve_devices_per_node(3, {"CUDA_VISIBLE_DEVICES": ""}).count == 3
