"""Peak dense BF16 throughput per device, for MFU. Data only; every entry names its source.

Values are TFLOP/s per device (one NPU / GPU package), dense (no 2:4 sparsity). Where no vendor
datasheet gives a BF16 figure, the entry says what it is based on; pass `peak_tflops=` (CLI:
`--peak-tflops`) to use your own figure instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeak:
    name: str
    bf16_tflops: float
    source: str


PEAKS: tuple[DevicePeak, ...] = (
    # Huawei announcement of Ascend 910 (Aug 2019): 256 TFLOPS FP16; 910A has no BF16 mode.
    DevicePeak("ascend910a", 256.0, "Huawei Ascend 910 launch, 2019: 256 TFLOPS FP16 (no BF16)"),
    # 910B variants: Huawei publishes no per-SKU datasheet; these FP16(=BF16 rate) figures are the
    # ones widely reported for the SKUs (e.g. Atlas 800T A2 at 8 x 910B3 ~ 2.5 PFLOPS FP16).
    DevicePeak(
        "ascend910b1", 414.0, "third-party reported FP16/BF16 dense for 910B1 (not a Huawei datasheet)"
    ),
    DevicePeak(
        "ascend910b2", 376.0, "third-party reported FP16/BF16 dense for 910B2 (not a Huawei datasheet)"
    ),
    DevicePeak("ascend910b3", 313.0, "Atlas 800T A2 (8 x 910B3) ~2.5 PFLOPS FP16 / 8; BF16 same rate"),
    DevicePeak(
        "ascend910b4", 280.0, "third-party reported FP16/BF16 dense for 910B4 (not a Huawei datasheet)"
    ),
    # CloudMatrix 384: 300 PFLOPS dense BF16 over 384 Ascend 910C (Huawei, 2025) -> ~781 per 910C.
    DevicePeak("ascend910c", 781.0, "Huawei CloudMatrix384: 300 PFLOPS BF16 / 384 chips"),
    DevicePeak("a100", 312.0, "NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOPS dense (624 sparse)"),
    DevicePeak(
        "h100", 989.0, "NVIDIA H100 SXM datasheet: BF16 Tensor Core 1979 TFLOPS with sparsity, 989 dense"
    ),
    DevicePeak("h100-pcie", 756.0, "NVIDIA H100 PCIe datasheet: BF16 1513 TFLOPS with sparsity, 756 dense"),
    DevicePeak("h200", 989.0, "NVIDIA H200 SXM datasheet: BF16 1979 TFLOPS with sparsity, 989 dense"),
)


def _norm(name: str) -> str:
    key = name.strip().lower().replace("_", "").replace(" ", "")
    key = key.replace("ascend-", "ascend").replace("ascend", "")
    return key.removeprefix("nvidia").removeprefix("-")


def device_names() -> list[str]:
    return [p.name for p in PEAKS]


def peak_for(device: str) -> DevicePeak | None:
    """Look a device up: `910B3`, `Ascend910B3`, `ascend-910b3`, `A100`, `H100`, `h100-pcie`, ..."""
    key = _norm(device)
    for peak in PEAKS:
        if _norm(peak.name) == key:
            return peak
    if key == "910b":  # the generic name: the most common training SKU
        return peak_for("ascend910b3")
    return None


def flops_per_token(
    num_params: float,
    *,
    num_layers: int | None = None,
    hidden_size: int | None = None,
    seq_length: int | None = None,
) -> float:
    """Training FLOPs per token of a dense decoder: 6N, plus 12*L*h*s for attention scores when the
    shape is known (the usual Megatron/PaLM estimate; forward + backward, no recompute)."""
    flops = 6.0 * num_params
    if num_layers and hidden_size and seq_length:
        flops += 12.0 * num_layers * hidden_size * seq_length
    return flops
