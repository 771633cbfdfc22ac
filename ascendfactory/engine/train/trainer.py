"""The embedded trainer: build mesh, stage model, optimizer, data, checkpointer, monitors; then `train()`.

Beyond plain SFT / pre-training, as MindSpeed-LLM / Megatron do them:
- LoRA (`--lora-target-modules`, `--lora-r`, `--lora-alpha`, `--lora-load`): `lora.apply_lora` freezes the
  model and adds the adapters; only they are trained and saved in PEFT's Megatron layout.
- `--bf16` / `--fp16` (`mixed_precision.py`, Megatron's Float16Module + main grads + fp32 masters): the model
  is held and computed in that dtype, gradients accumulate in an fp32 buffer, the optimizer steps on fp32
  master weights; shards are saved in that dtype, the fp32 masters in the optimizer state.
- tied embeddings with PP > 1: the last stage's own output copy starts equal to the first stage's embedding
  (a broadcast in the embedding group), their gradients are summed there every step and the copy is left
  out of the gradient norm (Megatron's `shared` parameter).
- `--eval-interval` / `--eval-iters` / `--split`: Megatron's evaluation on the validation part every
  `eval-interval` iterations and, after training, on the validation and test parts, printing
  ` validation loss at iteration N | lm loss value: ... | lm loss PPL: ... |` between two dashed lines.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ascendfactory.engine.convert import megatron_io
from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.engine.train import (
    dataset,
    flags,
    kernels,
    logline,
    memory,
    monitor,
    nan_check,
    packed,
    recompute,
    step,
    trackers,
)
from ascendfactory.engine.train.arch import check_architecture, padded_vocab_size
from ascendfactory.engine.train.checkpoint import Checkpointer, Position, Topology
from ascendfactory.engine.train.mixed_precision import (
    SIXTEEN_BIT,
    MixedPrecisionOptimizer,
    cast_params,
    params_dtype,
)
from ascendfactory.engine.train.model import (
    build_stage,
    init_random,
    local_tensor,
    parallelize_hf_decoder,
)
from ascendfactory.engine.train.parallel import (
    ExpertGroups,
    ParallelDims,
    build_mesh,
    embedding_group,
    expert_groups,
    init_distributed,
    tune_cpu_allocator,
)
from ascendfactory.engine.train.schedule import LRSchedule
from ascendfactory.errors import ConfigError, Problem


@dataclass
class Interval:
    """What the log line averages over the iterations since the last one printed."""

    start: float = field(default_factory=time.perf_counter)
    iterations: int = 0
    loss_sum: float = 0.0
    loss_count: int = 0
    skipped: int = 0
    nan: int = 0  # iterations whose loss was NaN / inf (with the NaN check off)
    # MoE: the auxiliary losses summed over the interval's iterations (Megatron's total_loss_dict entries
    # added by track_moe_metrics), averaged over the advanced (not skipped) iterations
    aux_sums: dict[str, float] = field(default_factory=dict)

    def aux_means(self) -> dict[str, float]:
        advanced = max(1, self.iterations - self.skipped)
        return {k: v / advanced for k, v in self.aux_sums.items()}

    def mean_loss(self) -> float | None:
        """The mean of the interval's finite losses (`nan iterations` counts the others); NaN when none was
        finite (printed `lm loss: nan`, never dropped); None when no loss was computed here."""
        if self.loss_count:
            return self.loss_sum / self.loss_count
        return float("nan") if self.nan else None


class Trainer:
    def __init__(self, args: Any, ignored_flags: list[str]):
        """Megatron's set-up order: the process group, the parallel layout, the model (LoRA, dtype), the
        optimizer and schedules, the data, the checkpointer, the monitor."""
        self.args = args
        self.env = init_distributed(args.distributed_timeout_minutes)
        if self.env.device.type == "cpu":
            tune_cpu_allocator()
        # CPU: every tensor storage from here on is counted for Megatron's memory line (`memory.py`)
        self.tracker = memory.start_tracker(self.env.device)
        self.is_last_rank = self.env.rank == self.env.world_size - 1
        if ignored_flags:
            self.log0(
                "INFO: performance flags accepted and ignored by the embedded torch backend: "
                + " ".join(ignored_flags)
            )
        for flag in ignored_flags:
            if flag in flags.IGNORED_WHY:
                self.log0(f"INFO: {flag}: {flags.IGNORED_WHY[flag]}")
        model_dims, vocab = self._set_up_layout(args)
        layers = self._set_up_model(args, model_dims, vocab)
        self._set_up_optimizer(args)
        self._set_up_data(args)
        self._set_up_checkpointer(args, model_dims, vocab, layers)
        self._set_up_monitor(args, model_dims, vocab)
        self.position = Position()
        self.interval = Interval()
        self.saved_iteration = -1
        self.memory_reported = False

    def _set_up_layout(self, args: Any) -> tuple[ModelDims, int]:
        """The HF config (checked against what the trainer supports), the parallel degrees, the device mesh
        and this rank's place in it; returns the model's dimensions and the padded vocabulary."""
        from transformers import AutoConfig

        self.hf_config = AutoConfig.from_pretrained(args.tokenizer_name_or_path)
        check_architecture(args, self.hf_config)
        model_dims = ModelDims.from_hf_config(self.hf_config)
        vocab = padded_vocab_size(args, self.hf_config)
        self.dims = ParallelDims.from_args(
            args,
            self.env.world_size,
            num_heads=model_dims.num_heads,
            num_kv_heads=model_dims.num_kv_heads,
            vocab=vocab,
        )
        self.log0(self.dims.describe())
        if args.sequence_parallel and self.dims.tp == 1:  # Megatron's validate_args turns it off
            self.log0(
                "WARNING: --sequence-parallel has no effect with tensor-model-parallel size 1: turned off"
            )
            args.sequence_parallel = False
        self.mesh = build_mesh(self.dims, self.env.device)
        self.pp_rank, self.dp_rank, self.tp_rank = (self.mesh[d].get_local_rank() for d in ("pp", "dp", "tp"))
        self._set_up_moe(args)
        return model_dims, vocab

    def _set_up_moe(self, args: Any) -> None:
        """The MoE settings (None for a dense model), the expert-parallel groups, and warnings where the
        flags route differently from the HF model or set something their routing type ignores."""
        from ascendfactory.engine.train.moe import flags as moe_flags
        from ascendfactory.engine.train.moe.spec import HFMoE, MoESpec

        self.experts: ExpertGroups = expert_groups(self.dims)
        hf = HFMoE.from_config(self.hf_config)
        self.moe = None if hf is None else MoESpec.from_args(args, hf, tp=self.dims.tp)
        if self.moe is None:
            return
        self.log0(self.moe.describe())
        for why in self.moe.hf_routing_differences(hf):
            self.log0(f"WARNING: the MoE routing differs from the HF model's: {why}")
        unused = moe_flags.unused(args)
        if unused:
            self.log0(
                f"WARNING: {' '.join(unused)} has no effect with --moe-router-load-balancing-type "
                f"{args.moe_router_load_balancing_type} (MindSpeed-LLM reads it only in another routing "
                "branch)"
            )

    def _set_up_model(self, args: Any, model_dims: ModelDims, vocab: int) -> list[int]:
        """This stage's layers, built, TP-sharded, initialised (LoRA applied) and rounded to the params
        dtype; the tied-embedding group under PP. Returns the layers per stage."""
        pp_rank, tp_rank = self.pp_rank, self.tp_rank
        layers = megatron_io.layers_per_stage(model_dims.num_layers, self.dims.pp, args.num_layer_list)
        self.chunk_spans = self.virtual_spans(args, model_dims.num_layers, pp_rank)
        self._seed(args.seed + 100 * pp_rank)

        self.hf_config.vocab_size = vocab
        self.hf_config.attention_dropout = args.attention_dropout  # HF attention reads it in training
        self.model = build_stage(
            self.hf_config,
            layers=layers,
            pp_rank=pp_rank,
            device=self.env.device,
            spans=self.chunk_spans,
            moe=self.moe,
            ep_rank=self.experts.ep_rank,
        )
        self.model.chunked_loss = True  # the output layer + cross-entropy in chunks (`cross_entropy.py`)
        if args.use_fused_rmsnorm:
            count = kernels.use_fused_rmsnorm(self.model)
            self.log0(f"fused RMSNorm: {count} norms of this stage as torch.nn.functional.rms_norm")
        self.model.bind_experts(self.experts.ep_group)
        self.set_recompute(args)
        parallelize_hf_decoder(
            self.model, tp_mesh=self.mesh["tp"], tp=self.dims.tp, sequence_parallel=args.sequence_parallel
        )
        init_random(
            self.model,
            std=args.init_method_std,
            num_layers=model_dims.num_layers,
            seed=args.seed,
            rank_seed=tp_rank + 100 * pp_rank,
        )
        self.lora_targets = list(args.lora_target_modules or [])
        if self.lora_targets:
            from ascendfactory.engine.train.lora import apply_lora

            apply_lora(
                self.model,
                self.hf_config,
                targets=self.lora_targets,
                r=args.lora_r,
                alpha=args.lora_alpha,
                seed=args.seed,
                tp_mesh=self.mesh["tp"],
                tp=self.dims.tp,
                tp_rank=tp_rank,
                device=self.env.device,
            )
            self.log0(self.trainable_line())
        self.params_dtype = params_dtype(args)
        cast_params(self.model, self.params_dtype)  # Megatron's Float16Module: the model in bf16 / fp16
        if args.af_torch_compile:
            kernels.compile_layers(list(self.model.model.layers.values()))
            self.log0("torch.compile: each decoder layer (the first iterations compile)")
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.sharded: list[bool] | None = None  # which gradients are TP shards: known after a backward
        # routed experts differ between expert-parallel ranks: averaged over the data-modulo-expert group
        routed = {id(p) for m in self.model.moe_layers for p in m.experts.parameters()}
        self.expert_mask = [id(p) in routed for p in self.params] if self.dims.ep > 1 else None
        # tied embeddings with PP > 1: the first stage's embedding and the last stage's output copy
        self.tied_group = embedding_group(self.dims, self.mesh) if self.model.tied else None
        self.tied_param = None
        if self.tied_group is not None:
            self.tied_param = (
                self.model.model.embed_tokens.weight if pp_rank == 0 else self.model.lm_head.weight
            )
        self.counted = None  # Megatron leaves the last-stage copy out of the gradient norm
        if self.tied_group is not None and pp_rank == self.dims.pp - 1:
            self.counted = [p is not self.tied_param for p in self.params]
        return layers

    def _set_up_optimizer(self, args: Any) -> None:
        """The optimizer, the learning-rate and loss-scale schedules, the NaN check and the step runner."""
        self.optimizer = self.build_optimizer()
        self.scheduler = LRSchedule.from_args(args, self.dims.global_batch_size)
        self.scaler = step.LossScaler.from_args(args)
        self.check_nan = nan_check.enabled(args)
        self.runner = step.StepRunner(
            self.model,
            mesh=self.mesh,
            num_microbatches=self.dims.num_microbatches,
            device=self.env.device,
            pp=self.dims.pp,
            pp_rank=self.pp_rank,
            chunk_spans=self.chunk_spans,
        )

    def _set_up_data(self, args: Any) -> None:
        """The training samples and this rank's batches; Megatron's valid/test sample counts:
        (train_iters // eval_interval + 1) * eval_iters batches of validation, eval_iters batches of test;
        an empty part turns its evaluation off."""
        self.packing = self.packing_spec(args)
        self.samples = dataset.build_samples(
            args,
            num_samples=args.train_iters * self.dims.global_batch_size,
            pad_id=dataset.pad_id_from(args.tokenizer_name_or_path),
            packing=self.packing,
        )
        self.batches = dataset.BatchPlan(
            self.dims.micro_batch_size, self.dims.global_batch_size, self.dims.dp, self.dp_rank
        )
        self.valid = self.test = None
        if args.eval_iters > 0:
            gbs, pad = self.dims.global_batch_size, dataset.pad_id_from(args.tokenizer_name_or_path)
            evals = args.train_iters // args.eval_interval + 1 if args.eval_interval else 1
            common = dict(pad_id=pad, packing=self.packing)
            self.valid = dataset.build_samples(
                args, num_samples=evals * args.eval_iters * gbs, part=1, **common
            )
            self.test = dataset.build_samples(args, num_samples=args.eval_iters * gbs, part=2, **common)

    def packing_spec(self, args: Any) -> packed.PackingSpec | None:
        """--reset-position-ids / --reset-attention-mask (`packed.py`): the documents' layout, the layers'
        attention over them; the end-of-document id is the tokenizer's EOS."""
        eod = None
        if (args.reset_position_ids or args.reset_attention_mask) and not args.neat_pack:
            eod = dataset.eod_id_from(args.tokenizer_name_or_path)
            if eod is None:
                flag = "--reset-position-ids" if args.reset_position_ids else "--reset-attention-mask"
                raise ConfigError(
                    Problem(
                        key=flag,
                        message=f"the tokenizer in {args.tokenizer_name_or_path} has no EOS token id (nor "
                        "has its config.json): the documents' ends are not known",
                        fix="give --tokenizer-name-or-path a tokenizer with an eos_token, or set "
                        "eos_token_id in its config.json",
                        source="command line",
                    )
                )
        spec = packed.PackingSpec.from_args(args, eod)
        if spec is not None:
            packed.use_packed_attention(self.hf_config)
            self.log0(
                "packed sequences: "
                + ("positions restart and " if spec.reset_position_ids else "")
                + "attention stays within each document"
                + (f" (end-of-document token {eod})" if eod is not None else " (--neat-pack sample numbers)")
            )
        return spec

    def batch(self, samples: Any, consumed: int) -> tuple[torch.Tensor, torch.Tensor, list[Any] | None]:
        """This rank's (tokens, labels) of the iteration at `consumed` samples, on the device, and with
        packed sequences each micro-batch's layout."""
        arrays = self.sequence_parallel_width(dataset.get_batch(samples, self.batches, consumed))
        tokens, labels = (torch.from_numpy(a).to(self.env.device) for a in arrays[:2])
        if self.packing is None:
            return tokens, labels, None
        varlen = packed.varlen_available(self.env.device, self.params_dtype, self.args.attention_dropout)
        packings = packed.make_packings(
            arrays[2], arrays[3], self.dims.num_microbatches, self.env.device, varlen=varlen
        )
        return tokens, labels, packings

    def sequence_parallel_width(self, arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """With --sequence-parallel the rows must split evenly over TP: an instruction row of seq_length - 1
        tokens (the shifted sample) that does not gets padding tokens at its end, labelled -100 (Megatron's
        SFT rows are seq_length long and shifted in the loss instead). A causal model's earlier positions
        never see them, so the loss is unchanged."""
        tp, width = self.dims.tp, arrays[0].shape[1]
        extra = (-width) % tp if self.args.sequence_parallel else 0
        if not extra:
            return arrays
        pad = dataset.pad_id_from(self.args.tokenizer_name_or_path)
        fills = [pad, dataset.IGNORE_INDEX]
        out = [
            np.concatenate([a, np.full((a.shape[0], extra), v, dtype=a.dtype)], axis=1)
            for a, v in zip(arrays, fills)
        ]
        for a in arrays[2:]:  # packed layout: positions go on, the padding joins the row's last document
            step = np.arange(1, extra + 1) if len(out) == 2 else np.zeros(extra, dtype=a.dtype)
            out.append(np.concatenate([a, a[:, -1:] + step], axis=1))
        return tuple(out)

    def _set_up_checkpointer(self, args: Any, model_dims: ModelDims, vocab: int, layers: list[int]) -> None:
        """The Megatron checkpoint writer and reader for this rank's shard."""
        mg_args = model_dims.megatron_args(
            tp=self.dims.tp,
            pp=self.dims.pp,
            num_layer_list=megatron_io.parse_layer_list(args.num_layer_list),
            padded_vocab_size=vocab,
            params_dtype=self.params_dtype,
            make_vocab_size_divisible_by=args.make_vocab_size_divisible_by,
            virtual_stage_layers=self.chunk_spans[0][1] if self.chunk_spans else None,
            ep=self.dims.ep,
            grouped_gemm=bool(args.moe_grouped_gemm),
        )
        topo = Topology(
            tp=self.dims.tp,
            pp=self.dims.pp,
            tp_rank=self.tp_rank,
            pp_rank=self.pp_rank,
            dp_rank=self.dp_rank,
            layer_offset=sum(layers[: self.pp_rank]),
            chunks=tuple(self.chunk_spans or ()),
            dp_group=self.mesh["dp"].get_group(),
            ep=self.dims.ep,
            ep_rank=self.experts.ep_rank,
            num_local_experts=self.moe.num_local_experts if self.moe is not None else 0,
        )
        self.checkpointer = Checkpointer(
            args=args, megatron_args=mg_args, topo=topo, device=self.env.device, log=self.log0
        )

    def _set_up_monitor(self, args: Any, model_dims: ModelDims, vocab: int) -> None:
        """The FLOPs per iteration (the log line's TFLOPS) and the monitor with its tracker sinks."""
        self.flops_dims = logline.FlopsDims(
            num_layers=model_dims.num_layers,
            hidden_size=model_dims.hidden_size,
            ffn_hidden_size=model_dims.ffn_hidden_size,
            num_attention_heads=model_dims.num_heads,
            num_query_groups=model_dims.num_kv_heads,
            kv_channels=model_dims.head_dim,
            padded_vocab_size=vocab,
            **self.moe_flops(),
        )
        self.flops_per_iteration = logline.num_floating_point_operations(
            self.flops_dims, seq_length=args.seq_length, batch_size=self.dims.global_batch_size
        )
        mon_cfg, tb_cfg = monitor.load_monitor_config(args)
        resolved = {k: v for k, v in vars(args).items() if v is not None}  # the run's parameters
        sinks = trackers.open_sinks(args, params=resolved, warn=logline.emit) if self.is_last_rank else None
        config = {**resolved, **monitor.read_config_file(args.af_monitor_config)}
        self.monitor = monitor.Monitor(
            mon_cfg, tb_cfg, rank=self.env.rank, print_fn=logline.emit, sinks=sinks
        )
        self.monitor.write_config(config)

    # ------------------------------------------------------------------ the loop
    def train(self) -> None:
        """Megatron's order per iteration: step, log line, evaluation, checkpoint, exit check; then the final
        save and, unless it stopped at --exit-interval, the evaluation on the validation and test parts."""
        self.load_checkpoint()
        exited = False
        while self.position.iteration < self.args.train_iters:
            loss, grad_norm, skipped = self.train_step()
            self.log_iteration(loss, grad_norm, skipped)
            if self.valid is not None and self.due(self.args.eval_interval):
                self.evaluate(f"iteration {self.position.iteration}", self.valid, continuing=True)
            if self.args.save and self.due(self.args.save_interval):
                self.save_checkpoint()
            if self.due(self.args.exit_interval):
                exited = True
                break
        if self.args.save and 0 < self.position.iteration != self.saved_iteration:
            self.save_checkpoint()
        if exited:
            return
        it = self.position.iteration
        if self.valid is not None:
            self.evaluate(f"iteration {it} on validation set", self.valid, continuing=True)
        if self.test is not None:
            self.evaluate(f"iteration {it} on test set", self.test, continuing=False)

    def due(self, interval: int | None) -> bool:
        return bool(interval) and self.position.iteration % interval == 0

    def train_step(self) -> tuple[float | None, float | None, bool]:
        consumed = self.position.consumed_train_samples
        logged = (self.position.iteration + 1) % self.args.log_interval == 0  # its metrics are printed
        with monitor.phase("train_step", self.env.device, memory=logged) as rec:
            tokens, labels, packings = self.batch(self.samples, consumed)
            with rec.execute():
                self.optimizer.zero_grad(set_to_none=True)
                self.runner.scale = self.scaler.scale
                local_loss = self.runner.forward_backward(tokens, labels, packings)
                state, (grad_norm, found_inf) = self.reduce_and_clip_grads()
                if not found_inf:
                    self.optimizer.step()
                    self.scheduler.step(self.optimizer, self.dims.global_batch_size)
                self.scaler.update(found_inf)
        loss = self.reduce_loss(local_loss)
        self.collect_moe_losses()
        self.position.iteration += 1
        if self.check_nan:
            self.raise_on_nan(local_loss, loss, labels, grad_norm)
        self.position.consumed_train_samples += self.dims.global_batch_size
        self.position.floating_point_operations += self.iteration_flops()
        self.last_phase = rec.metrics
        if state is not None:
            self.monitor.state(
                iteration=self.position.iteration,
                local_loss=None if local_loss is None else float(local_loss),
                **state,
                throughput=self.dims.global_batch_size / rec.metrics["time/train_step/total"],
            )
            if self.monitor.cfg["print_struct"]:
                logline.emit("\n".join(n for n, p in self.model.named_parameters() if p.requires_grad))
                self.args.exit_interval = self.position.iteration
        return loss, None if found_inf else grad_norm, found_inf

    def raise_on_nan(
        self, local_loss: torch.Tensor | None, loss: float | None, labels: torch.Tensor, grad_norm: float
    ) -> None:
        """Megatron's check_for_nan_in_loss_and_grad: this rank's loss, the data-parallel loss (another
        rank's NaN reaches every rank through the reductions), then the gradient norm."""
        it = self.position.iteration
        local = None if local_loss is None else float(local_loss)
        if not (nan_check.finite(local) and nan_check.finite(loss)):
            here = not nan_check.finite(local)
            empty = nan_check.empty_microbatches(labels.cpu().numpy(), self.dims.num_microbatches)
            raise nan_check.loss_error(
                iteration=it,
                rank=self.env.rank,
                loss=local if here else loss,
                empty=empty if here else [],
                num_microbatches=self.dims.num_microbatches,
                elsewhere=not here,
            )
        if not nan_check.finite(grad_norm):
            raise nan_check.grad_error(iteration=it, rank=self.env.rank, norm=grad_norm)

    def build_optimizer(self) -> Any:
        """AdamW over the trained parameters: on the fp32 weights (fp32), on fp32 masters of the 16-bit
        weights with fp32 main gradients (bf16 / fp16, `mixed_precision.py`); with
        --use-distributed-optimizer its state (and masters) sharded over DP."""
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        common = dict(args=self.args, dp_group=self.mesh["dp"].get_group(), dp=self.dims.dp)
        if self.args.use_distributed_optimizer:
            from ascendfactory.engine.train.distopt import DistributedOptimizer

            optimizer: Any = DistributedOptimizer(
                named, dp_rank=self.dp_rank, device=self.env.device, **common
            )
        elif self.params_dtype in SIXTEEN_BIT:
            optimizer = MixedPrecisionOptimizer(named, device=self.env.device, **common)
            if self.expert_mask is not None:  # routed experts: reduced over the data-modulo-expert group
                optimizer.experts(self.expert_mask, self.experts.expert_dp_group, self.experts.expert_dp)
        else:
            return step.build_optimizer(self.model, self.args, self.env.device)
        optimizer.divisor = self.dims.num_microbatches if self.dims.pp > 1 else 1
        return optimizer

    def reduce_and_clip_grads(self) -> tuple[dict[str, Any] | None, tuple[float, bool]]:
        """DP gradient reduction (all-reduce, or the distributed optimizer's reduce-scatter), the tied
        embedding's sum, then the global norm and clipping. Returns (monitor state or None, (norm, inf))."""
        tied = self.tied_param is not None and self.tied_param.requires_grad
        opt = self.optimizer
        if hasattr(opt, "reduce_grads"):  # fp32 main gradients: the mixed-precision or distributed optimizer
            if tied:  # before the DP reduction: a sum, so the order does not change the result
                index = next(i for i, p in enumerate(opt.params) if p is self.tied_param)
                dist.all_reduce(opt.param_grad(index), group=self.tied_group)
            opt.reduce_grads()
            state = self.state_metrics() if self.monitor.cfg["monitor_on"] else None
            sharded, counted = opt.owned_masks(self.tied_param if self.counted is not None else None)
            return state, step.norm_and_clip(
                opt.owned_grads(),
                mesh=self.mesh,
                clip=self.args.clip_grad,
                unscale=self.scaler.scale,
                sharded=sharded,
                counted=counted,
                dp_group=self.mesh["dp"].get_group() if opt.partitioned else None,
                expert=self.expert_mask,
                ep_group=self.experts.ep_group,
            )
        if self.moe is not None:
            step.settle_partial_grads(self.params)
        if self.expert_mask is None:
            step.all_reduce_grads(self.params, self.mesh["dp"].get_group(), self.dims.dp)
        else:
            dense = [p for p, e in zip(self.params, self.expert_mask) if not e]
            routed = [p for p, e in zip(self.params, self.expert_mask) if e]
            step.all_reduce_grads(dense, self.mesh["dp"].get_group(), self.dims.dp)
            step.all_reduce_grads(
                routed, self.experts.expert_dp_group, self.experts.expert_dp, divisor=self.dims.dp
            )
        if tied:
            step.all_reduce_tied_grads(self.tied_param, self.tied_group)
        state = self.state_metrics() if self.monitor.cfg["monitor_on"] else None
        if self.sharded is None:
            self.sharded = step.shard_mask([p.grad for p in self.params])
        return state, step.grad_norm_and_clip(
            self.params,
            mesh=self.mesh,
            clip=self.args.clip_grad,
            unscale=self.scaler.scale,
            sharded=self.sharded,
            counted=self.counted,
            expert=self.expert_mask,
            ep_group=self.experts.ep_group,
        )

    def evaluate(self, prefix: str, samples: Any, *, continuing: bool) -> None:
        """Megatron's `evaluate_and_print_results`: `--eval-iters` batches of `--global-batch-size` samples,
        forward only; the loss is the mean of the data-parallel-averaged micro-batch losses.

        `continuing`: the validation part goes on where the last evaluation stopped (Megatron's
        `consumed_valid_samples`, saved in checkpoints); the test part starts at its beginning."""
        t0 = time.perf_counter()
        gbs = self.dims.global_batch_size
        consumed = self.position.consumed_valid_samples if continuing else 0
        total, count = 0.0, 0
        self.model.eval()
        try:
            with torch.no_grad():
                for _ in range(self.args.eval_iters):
                    tokens, labels, packings = self.batch(samples, consumed)
                    loss = self.runner.forward_only(tokens, labels, packings)
                    consumed += gbs
                    if loss is not None:
                        total, count = total + float(loss), count + 1
        finally:
            self.model.train()
        if continuing:
            self.position.consumed_valid_samples = consumed
        # a device tensor: NCCL / HCCL reduce only device memory
        value = self.reduce_loss(torch.tensor(total / count, device=self.env.device)) if count else None
        if value is not None and self.is_last_rank:
            logline.emit("\n".join(logline.format_validation(prefix, {"lm loss": value})))
        if value is not None:
            self.monitor.validation_scalars(
                "lm loss",
                value,
                iteration=self.position.iteration,
                samples=self.position.consumed_train_samples,
            )
        self.interval.start += time.perf_counter() - t0  # the log line's time per iteration excludes it

    def trainable_line(self) -> str:
        """PEFT's `print_trainable_parameters` for this rank's shard of the model."""
        trainable = sum(local_tensor(p).numel() for p in self.model.parameters() if p.requires_grad)
        total = sum(local_tensor(p).numel() for p in self.model.parameters())
        return (
            f"trainable params: {trainable:,d} || all params: {total:,d} || "
            f"trainable%: {100 * trainable / total:.4f}"
        )

    # ------------------------------------------------------------------ pieces
    def reduce_loss(self, local_loss: torch.Tensor | None) -> float | None:
        """The DP-averaged loss, known on the last pipeline stage (None elsewhere)."""
        if local_loss is None:
            return None
        if self.dims.dp == 1:
            return float(local_loss)
        loss = local_loss.detach().clone().float()
        dist.all_reduce(loss, group=self.mesh["dp"].get_group())
        loss /= self.dims.dp
        return float(loss)

    def moe_flops(self) -> dict[str, int]:
        """The MoE terms of the FLOPs formula (none for a dense model)."""
        if self.moe is None:
            return {}
        from ascendfactory.engine.train.moe.spec import HFMoE

        hf = HFMoE.from_config(self.hf_config)
        assert hf is not None
        only = tuple(getattr(self.hf_config, "mlp_only_layers", None) or ())
        return {
            "moe_layers": sum(hf.is_moe_layer(i, only) for i in range(self.hf_config.num_hidden_layers)),
            "moe_ffn_hidden_size": self.moe.ffn_hidden_size,
            "experts_routed_to": self.moe.topk,
            "shared_ffn_hidden_size": self.moe.shared_ffn_hidden_size,
        }

    def collect_moe_losses(self) -> None:
        """Megatron's track_moe_metrics for one iteration: each MoE layer's losses (loss / coefficient,
        summed over the micro-batches) summed over the pipeline stages, the mean over all the model's layers
        (dense ones count as 0) times 1 / micro-batches, added to the interval (the last rank prints them);
        per layer to TensorBoard with --moe-per-layer-logging."""
        if self.moe is None:
            return
        sums = self.model.moe_context.take(self.dims.num_microbatches if self.dims.pp > 1 else None)
        names = ("load_balancing_loss", "z_loss")
        zeros = torch.zeros(self.hf_config.num_hidden_layers, device=self.env.device)
        values = torch.stack([sums.get(n, zeros).to(self.env.device) for n in names])
        if self.dims.pp > 1:
            dist.all_reduce(values, group=self.mesh["pp"].get_group())
        values = values.double().cpu()
        values /= self.dims.num_microbatches
        iteration = self.position.iteration + 1
        for name, per_layer in zip(names, values):
            if name not in sums and not (self.dims.pp > 1 and per_layer.any()):
                continue
            mean = float(per_layer.mean())  # Megatron adds skipped iterations too, then divides by the others
            self.interval.aux_sums[name] = self.interval.aux_sums.get(name, 0.0) + mean
            self.monitor.moe_scalars(
                name, mean, per_layer.tolist() if self.moe.per_layer_logging else None, iteration
            )

    def iteration_flops(self) -> float:
        return self.flops_per_iteration

    def log_iteration(self, loss: float | None, grad_norm: float | None, skipped: bool) -> None:
        it, iv = self.position.iteration, self.interval
        iv.iterations += 1
        iv.skipped += int(skipped)
        if loss is not None:
            if not nan_check.finite(loss):
                iv.nan += 1
            elif not skipped:
                iv.loss_sum, iv.loss_count = iv.loss_sum + loss, iv.loss_count + 1
        if it % self.args.log_interval:
            return
        elapsed = (time.perf_counter() - iv.start) / iv.iterations
        tflops = self.iteration_flops() / (elapsed * 1e12 * self.env.world_size)
        lr = self.optimizer.param_groups[0]["lr"]
        mean_loss = iv.mean_loss()
        stats = logline.IterationStats(
            iteration=it,
            train_iters=self.args.train_iters,
            consumed_samples=self.position.consumed_train_samples,
            elapsed_ms=elapsed * 1000.0,
            learning_rate=lr,
            global_batch_size=self.dims.global_batch_size,
            losses={**({} if mean_loss is None else {"lm loss": mean_loss}), **iv.aux_means()},
            loss_scale=self.scaler.scale,
            grad_norm=grad_norm,
            skipped_iterations=iv.skipped,
            nan_iterations=iv.nan,
            tflops_per_gpu=tflops if self.args.log_throughput else None,
        )
        self.log_last(logline.format_training_log(stats))
        samples_per_s = self.dims.global_batch_size / elapsed
        self.monitor.training_scalars(
            iteration=it,
            samples=self.position.consumed_train_samples,
            lr=lr,
            gbs=self.dims.global_batch_size,
            loss=mean_loss,
            loss_scale=self.scaler.scale,
            grad_norm=grad_norm,
            iter_time_s=elapsed,
            samples_per_s=samples_per_s,
            tflops=tflops,
        )
        metrics = {
            **self.last_phase,
            "system/tps": samples_per_s * self.args.seq_length,
            "system/samples": float(self.position.consumed_train_samples),
        }
        self.monitor.phase_metrics(metrics, it, log=self.is_last_rank)
        if not self.memory_reported:
            self.memory_reported = True
            # Megatron's report_memory: once, at the first logged iteration, on data-parallel rank 0
            if self.dp_rank == 0:
                report = memory.memory_report(self.env.device, self.tracker)
                logline.emit(logline.format_memory_line(self.env.rank, it, report))
            memory.stop_tracker(self.tracker)  # reported once: the counting (and its cost) ends here
            self.tracker = None
        self.interval = Interval()

    def state_metrics(self) -> dict[str, Any]:
        """Per-parameter local gradient / Adam moment / weight norms of this rank (monitor_config)."""
        if hasattr(self.optimizer, "owned_grads"):
            return self.distributed_state_metrics()
        norms = {
            n: float(local_tensor(p.grad).float().norm())
            for n, p in self.model.named_parameters()
            if p.grad is not None
        }
        adam, weights = {}, {}
        if self.monitor.cfg["optimizer_state_format"]:
            for n, p in self.model.named_parameters():
                s = self.optimizer.state.get(p) or {}
                if "exp_avg" in s:
                    adam[n] = (
                        float(local_tensor(s["exp_avg"]).norm()),
                        float(local_tensor(s["exp_avg_sq"]).norm()),
                    )
        if self.monitor.cfg["weight_state_format"]:
            weights = {
                n: float(local_tensor(p).detach().float().norm()) for n, p in self.model.named_parameters()
            }
        return {
            "local_norms": norms,
            "device_norm": float(sum(v * v for v in norms.values()) ** 0.5),
            "adam": adam,
            "weights": weights,
        }

    def distributed_state_metrics(self) -> dict[str, Any]:
        """`state_metrics` from the fp32 main gradients and the masters' moments (mixed precision, or
        --use-distributed-optimizer, where the gradients and moments exist only as each DP rank's owned
        pieces, so each parameter's norm is summed from them over DP: the same numbers as the replicated
        optimizer's averaged gradients); the weights are whole on every rank."""
        opt = self.optimizer
        names = [n for n, _ in opt.named]
        norms = dict(zip(names, opt.param_norms(list(opt.owned_grads()))))
        adam: dict[str, tuple[float, float]] = {}
        if self.monitor.cfg["optimizer_state_format"]:
            states = [opt.state.get(v) or {} for v in opt.views]
            m = opt.param_norms([s.get("exp_avg") for s in states])
            v = opt.param_norms([s.get("exp_avg_sq") for s in states])
            if any(x > 0 for x in v):  # Adam has stepped (the same answer on every DP rank: summed)
                adam = dict(zip(names, zip(m, v)))
        weights = {}
        if self.monitor.cfg["weight_state_format"]:
            weights = {n: float(local_tensor(p).detach().float().norm()) for n, p in opt.named}
        return {
            "local_norms": norms,
            "device_norm": float(sum(x * x for x in norms.values()) ** 0.5),
            "adam": adam,
            "weights": weights,
        }

    def load_checkpoint(self) -> None:
        if self.args.load:
            pos = self.checkpointer.load(self.model, self.optimizer, self.scheduler, self.scaler)
            self.position = pos or Position()
            same = os.path.realpath
            in_place = bool(self.args.save) and same(self.args.load) == same(self.args.save)
            if pos is not None and in_place:
                self.saved_iteration = pos.iteration  # already in --save: a finished run does not rewrite it
        if self.tied_group is not None:
            self.sync_tied_output()
        self.scheduler.apply(self.optimizer)
        self.interval = Interval()

    def sync_tied_output(self) -> None:
        """The last stage's output copy of a tied embedding := the first stage's embedding (Megatron zeroes
        the copy and all-reduces it over the embedding group at start-up). A loaded copy that differs (a
        checkpoint that is not Megatron's) is replaced, with a warning."""
        first = self.pp_rank == 0
        per_stage = self.dims.dp * self.dims.tp
        src = self.env.rank if first else self.env.rank - (self.dims.pp - 1) * per_stage
        with torch.no_grad():
            weight = local_tensor(self.tied_param)
            before = None if first else weight.clone()
            dist.broadcast(weight, src=src, group=self.tied_group)
            changed = before is not None and not torch.equal(before, weight)
            if changed and hasattr(self.optimizer, "sync_from_model"):
                self.optimizer.sync_from_model([self.tied_param])  # its fp32 master follows the new weight
            if changed and self.checkpointer.tied_output_loaded:
                logline.emit(
                    f"WARNING: rank {self.env.rank}: the checkpoint's output_layer.weight differs from the "
                    "first stage's tied embedding; using the embedding"
                )
            elif not first and self.checkpointer.loaded and not self.checkpointer.tied_output_loaded:
                self.log_last(
                    "WARNING: the checkpoint has no output_layer.weight on the last stage (tied embeddings, "
                    "PP > 1): copied from the first stage's embedding"
                )

    def save_checkpoint(self) -> None:
        t0 = time.perf_counter()
        with monitor.phase("checkpoint", self.env.device) as rec:
            with rec.execute():
                self.checkpointer.save(self.model, self.optimizer, self.scheduler, self.scaler, self.position)
        self.saved_iteration = self.position.iteration
        self.monitor.phase_metrics(rec.metrics, self.position.iteration, log=self.is_last_rank)
        self.interval.start += time.perf_counter() - t0  # the log line's time per iteration excludes saving

    # ------------------------------------------------------------------ helpers
    def virtual_spans(self, args: Any, num_layers: int, pp_rank: int) -> list[tuple[int, int]] | None:
        """(first layer, count) of this rank's model chunks with a virtual pipeline (Megatron's
        interleaved assignment, `megatron_io.virtual_stages`); None without one or with one chunk."""
        per_chunk = flags.virtual_chunk_layers(args, num_layers)
        if per_chunk is None:
            return None
        spans = megatron_io.virtual_stages(num_layers, self.dims.pp, per_chunk)[pp_rank]
        if len(spans) == 1:
            return None
        self.log0(f"virtual pipeline: {len(spans)} model chunks of {per_chunk} layer(s) per stage")
        return spans

    def set_recompute(self, args: Any) -> None:
        """Megatron's activation recompute on this stage (`recompute.py`): full (the layers in chunks) or
        selective (the core attention of every layer)."""
        plan = recompute.RecomputePlan.from_args(args)
        self.model.recompute = plan
        if plan.selective:
            recompute.use_selective(self.hf_config)
        if plan.granularity:
            self.log0(plan.describe())
        unused = recompute.unused(args)
        if unused:
            self.log0(
                f"WARNING: {' '.join(unused)} has no effect without --recompute-granularity "
                "(Megatron ignores it too)"
            )

    def _seed(self, seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def log0(self, msg: str) -> None:
        if self.env.rank == 0:
            logline.emit(msg)

    def log_last(self, msg: str) -> None:
        if self.is_last_rank:
            logline.emit(msg)

    def close(self, *, finished: bool = False, destroy_group: bool = True) -> None:
        """Tear down. `finished`: every rank completed train(), so wait for all of them first; a gloo rank
        whose peers tear down while it still talks to them aborts ("terminate called without an active
        exception", exit 1) after a successful run. `destroy_group=False` leaves the process group to the
        process's end (the program exits without tearing gloo down: see `__main__`)."""
        self.monitor.close(ok=finished)
        memory.stop_tracker(self.tracker)
        if dist.is_initialized():
            if finished:
                dist.barrier()
            if destroy_group:
                dist.destroy_process_group()
