"""What a Megatron-style training program will parse: the flags the plan hands it, with its own defaults.

`TrainArgs` is the one reading of a training launch (torch, mindspeed-llm, mindspeed-mm; MindSpeed-RL's
actor through `from_config`). A backend builds it once, from every source of a flag (the architecture flags
it fills, the example arguments it merges, the user's `backend_config.training`, the flags the plan itself
sets); then the argv is rendered from `flags` (`run.to_flags`), and the checks, the facts, the throughput's
sequence length and the memory job read the same object. `defaults` are the program's own argparse defaults
(generated from the framework's source, or the embedded trainer's flag tables): a flag the argv leaves out
(absent, null or false: `to_flags` omits them) takes its default, as the program's parser does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _number(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class TrainArgs:
    """The training flags as the program's parser will hold them (names in Megatron's dash spelling)."""

    flags: dict[str, Any]  # flag -> value, as `run.to_flags` renders them (argv order)
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the program's argparse defaults

    @classmethod
    def from_config(cls, view: Mapping[str, Any]) -> TrainArgs:
        """A framework config already holding every default (MindSpeed-RL's MegatronConfig view,
        snake_case keys), read the same way."""
        return cls({str(k).replace("_", "-"): v for k, v in view.items()})

    def given(self, name: str) -> bool:
        """Whether the argv carries `--name` (to_flags leaves out None and False)."""
        value = self.flags.get(name)
        return value is not None and value is not False

    def value(self, name: str) -> Any:
        """What the parser holds for `--name`: the value the argv carries, else the program's default."""
        return self.flags[name] if self.given(name) else self.defaults.get(name)

    def on(self, name: str) -> bool:
        return bool(self.value(name))

    def number(self, name: str, fallback: int | None = None) -> int | None:
        n = _number(self.value(name))
        return fallback if n is None else n

    def size(self, name: str) -> int:
        """A parallel size or a count: 1 unless a positive number is held."""
        n = self.number(name)
        return n if n is not None and n > 0 else 1

    def text(self, name: str) -> str | None:
        value = self.value(name)
        return None if value is None else str(value)

    # -- the values several readers share --------------------------------------------------------------
    @property
    def precision(self) -> str:
        return "bf16" if self.on("bf16") else "fp16" if self.on("fp16") else "fp32"

    @property
    def seq_length(self) -> int | None:
        return self.number("seq-length")

    @property
    def micro_batch_size(self) -> int:
        return self.size("micro-batch-size")

    def global_batch_size(self, dp: int) -> int:
        """`--global-batch-size`, else Megatron's default: micro-batch x data parallel."""
        return self.number("global-batch-size") or self.micro_batch_size * dp

    @property
    def lora_targets(self) -> tuple[str, ...]:
        """LoRA's modules: LoRA is on when there are any (MindSpeed-LLM's `is_enable_lora`,
        mindspeed_llm/tasks/posttrain/lora/utils.py at 2.1.0)."""
        targets = self.value("lora-target-modules")
        if isinstance(targets, (list, tuple)):
            return tuple(str(t) for t in targets)
        if isinstance(targets, str):
            return tuple(targets.split())
        return () if targets is None or isinstance(targets, bool) else (str(targets),)  # one value on argv

    @property
    def lora_rank(self) -> int:
        """The LoRA rank the program trains with (0: no LoRA)."""
        return (self.number("lora-r") or 0) if self.lora_targets else 0

    def virtual_chunks(self, layers: int, pp: int) -> int:
        """Model chunks per pipeline rank: `--num-layers-per-virtual-pipeline-stage` (layers / (PP x it)),
        else `--virtual-pipeline-model-parallel-size`, else 1."""
        per_stage = self.number("num-layers-per-virtual-pipeline-stage")
        if per_stage and pp > 1:
            return max(1, layers // (pp * per_stage))
        return self.size("virtual-pipeline-model-parallel-size")

    @property
    def recompute(self) -> str:
        """none | selective | full (`--recompute-activations` is Megatron's selective)."""
        if self.on("recompute-activations"):
            return "selective"
        granularity = self.text("recompute-granularity")
        return granularity if granularity in ("full", "selective") else "none"
