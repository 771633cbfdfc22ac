"""Time to train before anything queues: a step-time model of a training layout, calibrated on measured runs.

flops.py      FLOPs per iteration by Megatron's own formula (`num_floating_point_operations`)
devices.py    what a device does per second: its measured matmul rate, memory and link bandwidths, and the
              constants calibrated on recorded runs (with the calibration error they reach)
work.py       what one step does: its GEMMs by shape, the memory-bound bytes, the operators it calls
model.py      `Workload` (one layout) -> `predict(workload, device)`: step time by part (GEMMs,
              memory-bound work, launches, bubble, tensor / pipeline / data-parallel communication,
              optimizer), tokens/s per device and the wall time of the whole run
calibrate.py  fits a device's constants on its recorded runs (`recorded/*.yaml`) and states the error
probe.py      measures this machine's matmul rate and copy bandwidth (torch; the CPU benchmark's probe)

Nothing here imports torch at module level (only `probe` does, inside its functions), nor any other
ascendfactory package but `errors`: the memory advisor and `performance` both read it.
"""

from ascendfactory.speed.devices import DeviceSpeed, device_speed
from ascendfactory.speed.model import StepPrediction, Workload, predict

__all__ = ["DeviceSpeed", "StepPrediction", "Workload", "device_speed", "predict"]
