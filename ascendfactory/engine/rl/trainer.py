"""The embedded GRPO trainer: actor and frozen reference built from the HF classes (DTensor TP, data
parallel), MindSpeed-RL's iteration, Megatron checkpoints, MindSpeed-RL's log line and the RL phase metrics
(docs/sources.md).

One iteration (`GRPOTrainer.iteration`), in MindSpeed-RL's order:
rollout (sample n responses per prompt) -> rule reward -> group-normalised advantages -> reference
log-probs -> old log-probs (skipped when one update covers the whole rollout) -> actor update -> metrics.

Prompts are dealt to data-parallel ranks mini-batch by mini-batch (rank r takes the r-th part of each
mini-batch), and every sample draws its tokens from uniforms fixed by (seed, iteration, sample number):
the same samples make the same mini-batches and micro-batches whatever the number of ranks.
"""

from __future__ import annotations

import os
import random
import time
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.engine.rl import logline as rl_log
from ascendfactory.engine.rl import reference as ref
from ascendfactory.engine.rl import setup, trackers, verifiers
from ascendfactory.engine.rl.algorithms import group_norm_advantages
from ascendfactory.engine.rl.config import GRPOConfig
from ascendfactory.engine.rl.data import PromptDataset
from ascendfactory.engine.rl.metrics import IterationMetrics, Spans
from ascendfactory.engine.rl.rollout import StaticKVCache, generate
from ascendfactory.engine.rl.update import Updater, build_experience, log_probs
from ascendfactory.engine.train import kernels, logline, monitor, recompute, step
from ascendfactory.engine.train.arch import check_architecture, padded_vocab_size
from ascendfactory.engine.train.checkpoint import Checkpointer, Position, Topology
from ascendfactory.engine.train.mixed_precision import SIXTEEN_BIT, MixedPrecisionOptimizer, cast_params
from ascendfactory.engine.train.model import build_stage, init_random, parallelize_hf_decoder
from ascendfactory.engine.train.parallel import ParallelDims, build_mesh, init_distributed, tune_cpu_allocator
from ascendfactory.engine.train.schedule import LRSchedule
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.trackers import Sinks

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": None}


class GRPOTrainer:
    def __init__(
        self, cfg: GRPOConfig, *, metrics_dir: str | None = None, tensorboard_dir: str | None = None
    ):
        self.cfg, args = cfg, cfg.args
        self.args, self.rl = args, cfg.rl
        self.env = init_distributed(args.distributed_timeout_minutes)
        if self.env.device.type == "cpu":
            tune_cpu_allocator()
        self.is_first = self.env.rank == 0
        self._info_lines()
        from transformers import AutoConfig, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name_or_path)
        self.hf_config = AutoConfig.from_pretrained(args.tokenizer_name_or_path)
        check_architecture(args, self.hf_config)
        model_dims = ModelDims.from_hf_config(self.hf_config)
        vocab = padded_vocab_size(args, self.hf_config)
        self.gbs, self.n = args.global_batch_size or 1, cfg.n
        self.mini = int(self.rl["mini_batch_size"])
        step_args = type(args)(**{**vars(args), "global_batch_size": self.mini * self.n})
        self.dims = ParallelDims.from_args(
            step_args,
            self.env.world_size,
            num_heads=model_dims.num_heads,
            num_kv_heads=model_dims.num_kv_heads,
            vocab=vocab,
        )
        setup.check_batches(
            gbs=self.gbs,
            mini=self.mini,
            n=self.n,
            dims=self.dims,
            rl=self.rl,
            world_size=self.env.world_size,
            source=cfg.source,
        )
        self.log0(self.dims.describe())
        self.mesh = build_mesh(self.dims, self.env.device)
        self.dp_rank, self.tp_rank = (self.mesh[d].get_local_rank() for d in ("dp", "tp"))
        self.hf_config.vocab_size = vocab
        self.params_dtype = torch.bfloat16 if args.bf16 else torch.float32
        self._seed(args.seed)
        self.model = self._build(model_dims)
        self.reference = ref.freeze(self._build(model_dims))
        self.optimizer = self._optimizer()
        self.scheduler = LRSchedule.from_args(args, self.gbs * self.n)
        self.scaler = step.LossScaler.from_args(args)
        self.mg_args, self.topo = self._checkpoint_layout(model_dims, vocab)
        self.checkpointer = self._checkpointer(args)
        self.dataset = PromptDataset(
            args.data_path[0],
            split=args.split,
            seed=args.seed,
            shuffle=not args.no_shuffle,
            num_prompts=args.train_iters * self.gbs,
            key="megatron_training.data_path",
        )
        setup.check_prompts(
            self.dataset.longest_prompt(), rl=self.rl, seq_length=args.seq_length, source=cfg.source
        )
        # an fp32 actor samples under autocast in generate_config.dtype (vLLM holds its own copy in that
        # dtype); a bf16 actor samples with its bf16 weights
        rollout_dtype = DTYPES[cfg.rollout_dtype] if self.params_dtype == torch.float32 else None
        self.rollout_autocast = lambda: (
            torch.autocast(self.env.device.type, dtype=rollout_dtype) if rollout_dtype else nullcontext()
        )
        self.updater = Updater(
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            mesh=self.mesh,
            dp=self.dims.dp,
            args=args,
            rl=self.rl,
        )
        self.stop_ids = setup.stop_ids(self.tokenizer, args.tokenizer_name_or_path)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id
        self.cache = StaticKVCache()
        self.position = Position()
        self.saved_iteration = -1
        on = self.is_first
        self.monitor = setup.tensorboard(tensorboard_dir) if on and self.rl["use_tensorboard"] else None
        self.metrics_file = setup.metrics_file(metrics_dir) if on and metrics_dir else None
        self.sinks = (
            trackers.open_sinks(self.rl, save=args.save, params=self._params(), warn=logline.emit)
            if on
            else Sinks()
        )

    # ------------------------------------------------------------------ setup pieces
    def _params(self) -> dict[str, Any]:
        """The trackers' run parameters: the yaml read, rl_config with MindSpeed-RL's defaults filled in."""
        return {**self.cfg.raw, "rl_config": dict(self.rl)}

    def _checkpoint_layout(self, model_dims: ModelDims, vocab: int) -> tuple[Any, Topology]:
        """The Megatron args the checkpoints record, and this rank's place (TP x DP, one stage)."""
        mg_args = model_dims.megatron_args(
            tp=self.dims.tp,
            pp=1,
            num_layer_list=None,
            padded_vocab_size=vocab,
            params_dtype=self.params_dtype,
            make_vocab_size_divisible_by=self.args.make_vocab_size_divisible_by,
        )
        topo = Topology(
            tp=self.dims.tp,
            pp=1,
            tp_rank=self.tp_rank,
            pp_rank=0,
            dp_rank=self.dp_rank,
            layer_offset=0,
            dp_group=self.mesh["dp"].get_group(),
        )
        return mg_args, topo

    def _build(self, model_dims: ModelDims):
        model = build_stage(self.hf_config, layers=[model_dims.num_layers], pp_rank=0, device=self.env.device)
        model.chunked_loss = True  # log-probs from hidden states, lm_head in chunks (update.response_stats)
        if self.args.use_fused_rmsnorm:
            kernels.use_fused_rmsnorm(model)
        # Megatron's activation recompute (the actor's training forward; the reference never trains)
        model.recompute = recompute.RecomputePlan.from_args(self.args)
        if model.recompute.selective:
            recompute.use_selective(self.hf_config)
        parallelize_hf_decoder(model, tp_mesh=self.mesh["tp"], tp=self.dims.tp)
        self._init_random(model)
        return model

    def _init_random(self, model) -> None:
        """Megatron's random init, the model then held in the run's dtype as the SFT trainer holds it (bf16:
        fp32 masters that start from the bf16 weights; loading a checkpoint rounds the same way)."""
        init_random(
            model,
            std=self.args.init_method_std,
            num_layers=self.hf_config.num_hidden_layers,
            seed=self.args.seed,
            rank_seed=self.tp_rank,
        )
        cast_params(model, self.params_dtype)

    def _optimizer(self):
        """AdamW over the actor: on its fp32 weights, or (bf16) on fp32 masters with fp32 main gradients."""
        if self.params_dtype not in SIXTEEN_BIT:
            return step.build_optimizer(self.model, self.args, self.env.device)
        return MixedPrecisionOptimizer(
            [(n, p) for n, p in self.model.named_parameters() if p.requires_grad],
            args=self.args,
            dp_group=self.mesh["dp"].get_group(),
            dp=self.dims.dp,
            device=self.env.device,
        )

    def _checkpointer(self, args) -> Checkpointer:
        return Checkpointer(
            args=args, megatron_args=self.mg_args, topo=self.topo, device=self.env.device, log=self.log0
        )

    # ------------------------------------------------------------------ the loop
    def train(self) -> None:
        self.load()
        self.log0(
            f"sync start grpo training at iteration: {self.position.iteration}/{self.args.train_iters} ..."
        )
        while self.position.iteration < self.args.train_iters:
            self.iteration()
            it = self.position.iteration
            if self.args.save and self.args.save_interval and it % self.args.save_interval == 0:
                self.save()
            if self.args.exit_interval and it % self.args.exit_interval == 0:
                break
        if self.args.save and 0 < self.position.iteration != self.saved_iteration:
            self.save()
        self.log0("after grpo training is done")

    def iteration(self) -> None:
        spans, phases = Spans(), {}
        device = self.env.device
        t_all = time.perf_counter()
        prompt_ids = self.local_prompt_numbers()
        pairs = [self.dataset.prompt(k) for k in prompt_ids]
        prompts = [p for p, _ in pairs for _ in range(self.n)]
        answers = [self.tokenizer.decode(a, skip_special_tokens=True) for _, a in pairs]
        sample_ids = [k * self.n + s for k in self._global_prompt_slots() for s in range(self.n)]
        with spans("rollout"), monitor.phase("actor_infer/generate", device) as rec:
            with rec.execute(), self.rollout_autocast():
                rollout = generate(
                    self.model,
                    prompts,
                    sampling=self.cfg.sampling,
                    uniforms=self.uniforms()[sample_ids],
                    stop_ids=self.stop_ids,
                    pad_id=self.pad_id,
                    vocab_limit=len(self.tokenizer),
                    device=device,
                    cache=self.cache,
                )
        phases.update(rec.metrics)
        with spans("rule_reward"), monitor.phase("reward/compute_rewards", device) as rec:
            texts = self.tokenizer.batch_decode(rollout.responses, skip_special_tokens=True)
            scores, per_verifier = verifiers.score(
                texts,
                [a for a in answers for _ in range(self.n)],
                self.rl["verifier_function"],
                self.rl["verifier_weight"],
            )
        phases.update(rec.metrics)
        with spans("adv"):
            exp = build_experience(prompts, rollout.responses, pad_id=self.pad_id, device=device)
            exp.advantages = group_norm_advantages(torch.tensor(scores), self.n).to(device)
        micro = self.args.micro_batch_size
        with spans("reference_model"), monitor.phase("reference/compute_log_probs", device) as rec:
            with rec.execute():
                exp.ref_log_prob = log_probs(
                    self.reference, exp, self.rl["ref_forward_micro_batch_size"] or micro
                )
        phases.update(rec.metrics)
        if not self.skip_old_log_prob:
            with spans("old_log_p"), monitor.phase("actor_train/compute_log_probs", device) as rec:
                with rec.execute():
                    exp.old_log_prob = log_probs(
                        self.model, exp, self.rl["actor_forward_micro_batch_size"] or micro
                    )
            phases.update(rec.metrics)
        with spans("update"), monitor.phase("actor_train/train_step", device) as rec:
            with rec.execute():
                actor = self.updater.update(
                    exp, mini_local=self.mini // self.dims.dp * self.n, order=self.mini_batch_order(exp.size)
                )
        phases.update(rec.metrics)
        self.position.iteration += 1
        self.position.consumed_train_samples += self.gbs
        metrics = IterationMetrics(self, prompts, rollout.responses, scores, per_verifier, actor)
        metrics.finish(spans, phases, time.perf_counter() - t_all)
        self.log_iteration(metrics)

    @property
    def skip_old_log_prob(self) -> bool:
        """MindSpeed-RL's `set_actor_log_prob_skip_flag`: one update per rollout needs no old log-probs."""
        return self.mini == self.gbs and int(self.rl["epochs"]) == 1

    def _global_prompt_slots(self) -> list[int]:
        """Positions in the global batch of this rank's prompts: the r-th part of every mini-batch."""
        per = self.mini // self.dims.dp
        return [
            m * self.mini + self.dp_rank * per + j for m in range(self.gbs // self.mini) for j in range(per)
        ]

    def local_prompt_numbers(self) -> list[int]:
        consumed = self.position.consumed_train_samples
        return [consumed + k for k in self._global_prompt_slots()]

    def uniforms(self) -> torch.Tensor:
        """[GBS x n, max_tokens] uniforms of this iteration, the same on every rank."""
        gen = torch.Generator().manual_seed(self.cfg.sampling_seed * 1_000_003 + self.position.iteration)
        return torch.rand((self.gbs * self.n, self.cfg.sampling.max_tokens), generator=gen)

    def mini_batch_order(self, size: int) -> torch.Tensor | None:
        if not self.rl["shuffle_mini_batch"]:
            return None
        gen = torch.Generator().manual_seed(
            (self.args.seed * 1_000_003 + self.position.iteration) * 131 + self.dp_rank
        )
        return torch.randperm(size, generator=gen).to(self.env.device)

    # ------------------------------------------------------------------ logging
    def log_iteration(self, m: IterationMetrics) -> None:
        if not self.is_first:
            return
        it, total = self.position.iteration, self.args.train_iters
        line = rl_log.format_line(m.line, it, total)
        logline.emit(line)
        if self.metrics_file:
            with open(self.metrics_file, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        system = {**m.phases, "system/tps": m.system_tps, "system/samples": float(it * self.gbs * self.n)}
        self.sinks.log_metrics({**m.line, **system}, it)
        if self.monitor is not None:
            self.monitor.scalars({f"train/{k}": v for k, v in m.line.items()}, it, it * self.gbs)
            self.monitor.phase_metrics(system, it, log=True)
        else:
            logline.emit(
                f" [metrics] iteration {it:8d} | "
                + " | ".join(f"{k}: {v:.6g}" for k, v in system.items())
                + " |"
            )

    def log0(self, msg: str) -> None:
        if self.is_first:
            logline.emit(msg)

    def _info_lines(self) -> None:
        if self.cfg.ignored_flags:
            self.log0(
                "INFO: performance flags accepted and ignored by the embedded torch backend: "
                + " ".join(self.cfg.ignored_flags)
            )
        if self.cfg.ignored_keys:
            self.log0(
                "INFO: Ray/vLLM scheduling keys accepted and ignored by the embedded torch backend: "
                + " ".join(self.cfg.ignored_keys)
            )

    # ------------------------------------------------------------------ checkpoints
    def load(self) -> None:
        """Actor (and optimizer, data position, RNG on resume) from `load`; the reference as `reference.py`
        describes."""
        args = self.args
        pos = (
            self.checkpointer.load(self.model, self.optimizer, self.scheduler, self.scaler)
            if args.load
            else None
        )
        self.position = pos or Position()
        if pos is not None and args.save and os.path.realpath(args.load) == os.path.realpath(args.save):
            self.saved_iteration = pos.iteration
        resumed = pos is not None and pos.iteration > 0
        given = self.cfg.ref_model_load_path
        record = ref.saved_record(args.load, pos.iteration, self.tp_rank) if resumed else None
        if resumed:
            source = given or (record or {}).get("source")
            if source is None:
                raise ConfigError(
                    Problem(
                        key=ref.KEY,
                        message=f"{args.load} at iteration {pos.iteration} records no reference model",
                        fix=f"set {ref.KEY} to the weights the run started from",
                    )
                )
            self._load_reference(source)
        elif given:
            source = given
            self._load_reference(given)
        else:
            source = args.load if pos is not None else ref.RANDOM
            ref.copy_weights(self.reference, self.model)
        now = ref.fingerprint(self.reference)
        if record is not None:
            ref.check_same(record, now, source)
        args.af_reference = {"source": source, "fingerprint": now}
        self.scheduler.apply(self.optimizer)

    def _load_reference(self, source: str) -> None:
        ref.load_into(
            self.reference,
            source,
            checkpointer_for=lambda path: self._checkpointer(ref.reference_args(self.args, path)),
            init_random=self._init_random,
        )

    def save(self) -> None:
        with monitor.phase("actor_train/do_checkpoint", self.env.device) as rec:
            with rec.execute():
                self.checkpointer.save(self.model, self.optimizer, self.scheduler, self.scaler, self.position)
        self.saved_iteration = self.position.iteration
        self.sinks.log_metrics(rec.metrics, self.position.iteration)
        if self.monitor is not None:
            self.monitor.phase_metrics(rec.metrics, self.position.iteration, log=False)

    # ------------------------------------------------------------------ helpers
    def _seed(self, seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def all_reduce(self, t: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        if self.dims.dp > 1:
            dist.all_reduce(t, op=op, group=self.mesh["dp"].get_group())
        return t

    def close(self, *, finished: bool = False) -> None:
        """Tear down. `finished`: every rank completed train(), so wait for all of them first; a gloo rank
        whose peers tear down while it still talks to them aborts ("terminate called without an active
        exception", exit 1) after a successful run."""
        if getattr(self, "monitor", None) is not None:
            self.monitor.close()
        if getattr(self, "sinks", None) is not None:
            self.sinks.close(state="finished" if finished else "failed")
        if dist.is_initialized():
            if finished:
                dist.barrier()
            dist.destroy_process_group()
