"""Read a Megatron checkpoint (converted or trained) one pipeline stage at a time, as full HF tensors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ascendfactory.engine.convert import lora as lora_ops
from ascendfactory.engine.convert import megatron_io as mio
from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.engine.convert.shard_map import hf_locals_to_full, megatron_to_hf_local, merge_ep
from ascendfactory.errors import ConfigError, ConversionKeyError, Problem

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_CHUNK = re.compile(r"^model(\d+)$")


def _stage_layers(model_sd: dict[str, Any]) -> int:
    nums = {int(m.group(1)) for k in model_sd if (m := _LAYER.match(k))}
    if nums and nums != set(range(len(nums))):
        raise ConversionKeyError(f"layer numbers of a pipeline stage are not 0..N-1: {sorted(nums)}")
    return len(nums)


@dataclass(frozen=True)
class LoraMerge:
    """Fold LoRA adapters into the weights while reading (`--lora-r`, `--lora-alpha`, `--lora-load`)."""

    r: int
    alpha: float
    load: str | None = None  # the LoRA training output; None: the adapters are in the checkpoint itself
    targets: tuple[str, ...] = ()  # --lora-target-modules, when given: the adapters found must be these


def _chunk_count(shard: dict[str, Any]) -> int:
    """Model chunks in a shard: 1 (`model`), or N for Megatron's virtual-pipeline keys model0..model{N-1}."""
    chunks = sorted(int(m.group(1)) for k in shard if isinstance(k, str) and (m := _CHUNK.match(k)))
    if chunks and chunks != list(range(len(chunks))):
        raise ConversionKeyError(f"model chunk keys are not model0..model{{N-1}}: {chunks}")
    return len(chunks) or 1


class MegatronSource:
    """A Megatron checkpoint folder: its iteration, TP/PP layout, args and model dims.

    Only `model` is read from each `model_optim_rng.pt` (optimizer, RNG and scheduler entries of training
    checkpoints are ignored); files are memory-mapped, so one stage's shards are in memory at a time.
    With tied embeddings the last stage's `output_layer.weight` (PP > 1) is not read: the embedding of the
    first stage is the weight, as MindSpeed-LLM's mg->hf does. With `lora`, each shard's adapters are merged
    into its weights first (`lora_ops.merge`, MindSpeed-LLM's rule); without it a shard holding adapters is
    refused, naming the flags that merge them.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        model_type_hf: str | None = None,
        vocab_size: int | None = None,
        lora: LoraMerge | None = None,
    ):
        self.root = Path(root)
        self.lora = lora
        self.iteration = mio.read_tracker(self.root)
        self.tp, self.pp, self.ep = mio.discover_parallel(self.root, self.iteration)
        first = self._load(0, 0)
        self.vpp = _chunk_count(first)
        self.args = first.get("args")
        if self.args is None:
            raise ConfigError(
                Problem(
                    key="--load-dir",
                    message=f"{self.root}: the shards carry no 'args'",
                    fix="convert a checkpoint written by Megatron / MindSpeed-LLM / this tool",
                    source="command line",
                )
            )
        dims = ModelDims.from_megatron_args(self.args, model_type_hf)
        if vocab_size is not None and vocab_size != dims.vocab_size:
            dims = ModelDims(**{**dims.__dict__, "vocab_size": vocab_size})
        self.dims = dims
        saved_tp = getattr(self.args, "tensor_model_parallel_size", self.tp)
        saved_pp = getattr(self.args, "pipeline_model_parallel_size", self.pp)
        saved_ep = getattr(self.args, "expert_model_parallel_size", None) or self.ep
        if (saved_tp, saved_pp, saved_ep) != (self.tp, self.pp, self.ep):
            raise ConfigError(
                Problem(
                    key="--load-dir",
                    message=f"the folders say TP {self.tp} PP {self.pp} EP {self.ep} but "
                    f"the saved args say TP {saved_tp} PP {saved_pp} EP {saved_ep}",
                    fix="check that every mp_rank_* folder is from the same checkpoint",
                    source="command line",
                )
            )
        self.padded_vocab_size = int(getattr(self.args, "padded_vocab_size", None) or dims.vocab_size)
        self._offset = 0
        self._next_stage = 0
        self._lora_root: Path | None = None
        self._lora_iteration = 0
        if lora is not None and lora.load:
            self._lora_root = Path(lora.load)
            self._lora_iteration = mio.read_tracker(self._lora_root)
            layout = mio.discover_parallel(self._lora_root, self._lora_iteration)
            if layout != (self.tp, self.pp, self.ep):
                raise ConfigError(
                    Problem(
                        key="--lora-load",
                        message=f"{lora.load} has TP {layout[0]} PP {layout[1]} but --load-dir has TP "
                        f"{self.tp} PP {self.pp}",
                        fix="give the base checkpoint the LoRA run loaded (same TP/PP layout)",
                        source="command line",
                    )
                )

    def _load(self, tp_rank: int, pp_rank: int, ep_rank: int = 0) -> dict[str, Any]:
        return mio.load_shard(self.root, self.iteration, tp_rank, pp_rank, self.pp, ep_rank, self.ep)

    def _model(self, tp_rank: int, pp_rank: int, chunk: int = 0, ep_rank: int = 0) -> dict[str, torch.Tensor]:
        shard = self._load(tp_rank, pp_rank, ep_rank)
        key = mio.model_key(chunk, self.vpp)
        if key not in shard:
            keys = ", ".join(sorted(shard)[:8])
            raise ConversionKeyError(
                f"shard tp {tp_rank} pp {pp_rank} has no '{key}' entry (keys: {keys}); "
                f"shard tp 0 pp 0 has {self.vpp} model chunk(s)"
            )
        model = shard[key]
        if self.lora is None:
            if any(lora_ops.is_lora_key(k) for k in model):
                found = sorted(lora_ops.adapter_targets(model)) or ["?"]
                raise ConfigError(
                    Problem(
                        key="--load-dir",
                        message=f"{self.root} holds LoRA adapters ({', '.join(found)}): a LoRA training "
                        "output",
                        fix="merge them: --lora-r R --lora-alpha A (the training run's values), and "
                        "--load-dir <the base checkpoint it loaded> --lora-load <this folder> when it "
                        "was saved with --lora-ckpt-filter",
                        source="command line",
                    )
                )
            return model
        override = None
        if self._lora_root is not None:
            lshard = mio.load_shard(
                self._lora_root, self._lora_iteration, tp_rank, pp_rank, self.pp, ep_rank, self.ep
            )
            override = {k: v for k, v in lshard.get(key, {}).items() if v is not None}
            if not lora_ops.adapter_targets(override):
                raise ConfigError(
                    Problem(
                        key="--lora-load",
                        message=f"{self._lora_root} (tp {tp_rank} pp {pp_rank}) holds no LoRA adapters",
                        fix="point --lora-load at the LoRA training output (its --save folder)",
                        source="command line",
                    )
                )
        found = lora_ops.adapter_targets({**model, **(override or {})})
        if self.lora.targets and not found <= set(self.lora.targets):
            raise ConfigError(
                Problem(
                    key="--lora-target-modules",
                    message=f"{' '.join(self.lora.targets)}, but the checkpoint has adapters on "
                    f"{' '.join(sorted(found))}",
                    fix="give the training run's --lora-target-modules",
                    source="command line",
                )
            )
        return lora_ops.merge(model, r=self.lora.r, alpha=self.lora.alpha, override=override)

    def stage(
        self, pp_rank: int, dtype: torch.dtype | None = None, *, meta: bool = False
    ) -> tuple[int, int, dict[str, torch.Tensor]]:
        """(first global layer, layer count, full HF tensors) of stage `pp_rank`; stages are read in order.

        With a virtual pipeline the stages are the virtual ones: stage v is model chunk v // PP of PP rank
        v % PP (Megatron's interleaved layer assignment), so reading them in order walks the layers in order.

        `meta=True` maps tensors on the meta device: names, shapes and dtypes without reading any weight data
        (replicated tensors are then not compared across ranks).
        """
        if pp_rank != self._next_stage:
            raise ValueError(f"stages are read in order: expected {self._next_stage}, got {pp_rank}")
        chunk, pp_rank = divmod(pp_rank, self.pp)
        per_ep, n_layers = [], None
        for e in range(self.ep):
            locals_ = []
            for r in range(self.tp):
                model = self._model(r, pp_rank, chunk, e)
                if meta:
                    model = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in model.items()}
                n = _stage_layers(model)
                if n_layers is not None and n != n_layers:
                    raise ConversionKeyError(
                        f"pp stage {pp_rank}: TP rank {r} EP rank {e} has {n} layers, rank 0 {n_layers}"
                    )
                n_layers = n
                local = megatron_to_hf_local(
                    model,
                    cfg=self.dims,
                    tp=self.tp,
                    tp_rank=r,
                    layer_offset=self._offset,
                    ep=self.ep,
                    ep_rank=e,
                )
                if self.dims.tie_word_embeddings:
                    local.pop("lm_head.weight", None)  # a tied model's last-stage copy (PP > 1)
                locals_.append(local)
            per_ep.append(hf_locals_to_full(locals_, cfg=self.dims, vocab_size=self.dims.vocab_size))
        full = per_ep[0] if self.ep == 1 else merge_ep(per_ep)
        if dtype is not None:
            full = {k: v if v.dtype == dtype else v.to(dtype) for k, v in full.items()}
        offset = self._offset
        self._offset += n_layers or 0
        self._next_stage += 1
        return offset, n_layers or 0, full

    def stages(
        self, dtype: torch.dtype | None = None, *, meta: bool = False
    ) -> Iterator[tuple[int, int, dict[str, torch.Tensor]]]:
        """Every stage in order (see `stage`); checks the layer total against the saved args at the end."""
        self._offset, self._next_stage = 0, 0
        for s in range(self.pp * self.vpp):
            yield self.stage(s, dtype, meta=meta)
        if self._offset != self.dims.num_layers:
            raise ConversionKeyError(
                f"the shards hold {self._offset} layers, the saved args say "
                f"num_layers = {self.dims.num_layers}"
            )

    def full_state(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The whole model as one HF state dict (for --verify-logits only)."""
        out: dict[str, torch.Tensor] = {}
        for _, _, sd in self.stages(dtype):
            out.update(sd)
        return out
