"""Parallel layout arithmetic and validation, in one place, before any process starts.

`ParallelDims(world_size, tp, pp, cp)` derives the data-parallel degree (DP is "the rest"), and
`validate_layout(LayoutInput(...))` checks the rules of Megatron / MindSpeed-LLM (Megatron's `validate_args`
in `megatron/training/arguments.py`, core_r0.8.0; docs/sources.md#flat-hyperparameters-and-parameter-rules),
returning every problem at once, each with the numbers and a concrete fix, plus warnings that do not stop the
run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ascendfactory.errors import Problem

CP_RECOMMENDED_ABOVE = 32768


@dataclass(frozen=True)
class ParallelDims:
    world_size: int
    tp: int = 1
    pp: int = 1
    cp: int = 1

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        """Data-parallel degree: the ranks left after TP x PP x CP (0 when they do not divide the world)."""
        mp = self.model_parallel
        return self.world_size // mp if mp and self.world_size % mp == 0 else 0

    @property
    def tp_enabled(self) -> bool:
        return self.tp > 1

    @property
    def pp_enabled(self) -> bool:
        return self.pp > 1

    @property
    def dp_enabled(self) -> bool:
        return self.dp > 1


@dataclass(frozen=True)
class LayoutInput:
    """Everything the rules look at; `keys` maps each quantity to the key name the user wrote."""

    world_size: int
    tp: int
    pp: int
    cp: int
    mbs: int
    gbs: int | None
    num_layers: int
    heads: int
    kv_heads: int
    seq_length: int
    max_position_embeddings: int
    num_layer_list: list[int] | None = None
    sequence_parallel: bool = False
    ep: int = 1  # expert-model-parallel-size (MoE models)
    experts: int = 0  # the model's routed experts (0: dense)
    # The part of CP that splits the attention heads (None: all of it). MindSpeed's ulysses algorithm splits
    # them by CP, the hybrid ones by ulysses-degree-in-cp, Megatron's ring (megatron_cp_algo) not at all
    # (MindSpeed-LLM 2.1.0 mindspeed_llm/training/arguments.py _validate_cp_args).
    cp_head_split: int | None = None
    # decrease-batch-size-if-needed (Megatron-LM core_v0.12.1): the micro-batch calculator rounds the global
    # batch down to a multiple of mbs x DP instead of refusing it, and refuses only a batch below one such
    # multiple (megatron/core/num_microbatches_calculator.py ConstantNumMicroBatchesCalculator.__init__)
    decrease_batch_size: bool = False
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def head_split(self) -> int:
        """TP x the CP degree that splits the heads: what num_attention_heads must be a multiple of."""
        cp = self.cp if self.cp_head_split is None else self.cp_head_split
        return self.tp * max(cp, 1)


@dataclass
class LayoutReport:
    dims: ParallelDims
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _fmt(values: list[int]) -> str:
    return ", ".join(str(v) for v in values) if values else "none"


def valid_tp_values(inp: LayoutInput) -> list[int]:
    """TP sizes that satisfy every TP rule for this model and world size (with the given PP and CP)."""
    rest = max(inp.pp * inp.cp, 1)
    per_tp = inp.world_size // rest if inp.world_size % rest == 0 else inp.world_size
    split = inp.head_split // max(inp.tp, 1)
    return [t for t in _divisors(per_tp) if inp.heads % (t * split) == 0 and inp.kv_heads % t == 0]


def nearest_multiples(value: int, unit: int) -> list[int]:
    lower = (value // unit) * unit
    return sorted({v for v in (lower, lower + unit) if v > 0})


def validate_layout(inp: LayoutInput) -> LayoutReport:
    """Check a layout; every violated rule becomes one Problem naming the key, the numbers and a fix (the
    rules of `LAYOUT_RULES`, in order, after the degrees are checked to be positive)."""
    k = {
        "tp": "tensor-model-parallel-size",
        "pp": "pipeline-model-parallel-size",
        "cp": "context-parallel-size",
        "mbs": "micro-batch-size",
        "gbs": "global-batch-size",
        "seq": "seq-length",
        "max_pos": "max-position-embeddings",
        "nll": "num-layer-list",
        "world": "env.NNODES x devices per node",
        "sp": "sequence-parallel",
        "ep": "expert-model-parallel-size",
        **inp.keys,
    }
    dims = ParallelDims(inp.world_size, inp.tp, inp.pp, inp.cp)
    report = LayoutReport(dims=dims)
    add = report.problems.append

    for name, value in (("tp", inp.tp), ("pp", inp.pp), ("cp", inp.cp), ("mbs", inp.mbs), ("ep", inp.ep)):
        if value < 1:
            add(Problem(k[name], f"must be >= 1 (got {value})", fix=f"set {k[name]} to 1 or more"))
    if report.problems:
        return report

    for rule in LAYOUT_RULES:
        report.problems += rule(inp, k, dims)
    report.warnings += _layout_warnings(inp, k)
    return report


def _degree_problems(inp: LayoutInput, k: dict[str, str], dims: ParallelDims) -> list[Problem]:
    """TP x PP x CP divides the world size; TP x the CP that splits heads divides the heads; TP divides the
    KV heads."""
    problems: list[Problem] = []
    split = inp.head_split // inp.tp  # the CP degree that splits the heads
    add = problems.append
    mp = dims.model_parallel
    if inp.world_size % mp:
        fits = [
            f"TP={t} PP={p}"
            for p in _divisors(inp.world_size)
            for t in _divisors(inp.world_size // p)
            if (inp.world_size // p) % (t * inp.cp) == 0
            and inp.heads % (t * split) == 0
            and inp.kv_heads % t == 0
            and (inp.num_layer_list or inp.num_layers % p == 0)
        ][:6]
        # filed under the degree that makes the product (the largest; TP on a tie)
        culprit = max((inp.tp, 0, "tp"), (inp.pp, -1, "pp"), (inp.cp, -2, "cp"))[2]
        add(
            Problem(
                k[culprit],
                f"tp({inp.tp}) * pp({inp.pp}) * cp({inp.cp}) = {mp} does not divide "
                f"world_size({inp.world_size}) [{k['world']}]",
                fix=f"choose degrees whose product divides {inp.world_size}, "
                f"e.g. {', '.join(fits) or 'TP=1 PP=1'}"
                f"; or run on a multiple of {mp} devices",
            )
        )
    if inp.heads % inp.head_split:
        if split == inp.cp:
            product = f"tp({inp.tp}) * cp({inp.cp}) = {inp.head_split}"
        elif split == 1:
            product = f"tp({inp.tp})"
        else:
            product = f"tp({inp.tp}) * ulysses-degree-in-cp({split}) = {inp.head_split}"
        add(
            Problem(
                k["tp"],
                f"{product} does not divide num_attention_heads({inp.heads})"
                # name the CP key too where CP splits the heads: raising it alone brings this refusal
                + (f" ({k['cp']} splits the heads)" if split == inp.cp and inp.cp > 1 else ""),
                fix=f"TP values that work here: {_fmt(valid_tp_values(inp))}",
            )
        )
    if inp.kv_heads % inp.tp:
        add(
            Problem(
                k["tp"],
                f"num_query_groups / KV heads({inp.kv_heads}) is not divisible by tp({inp.tp})",
                fix=f"TP values that work here: {_fmt(valid_tp_values(inp))}",
            )
        )
    return problems


def _layer_problems(inp: LayoutInput, k: dict[str, str], dims: ParallelDims) -> list[Problem]:
    """The layers split over the pipeline stages (evenly, or by num-layer-list)."""
    problems: list[Problem] = []
    add = problems.append
    if inp.num_layer_list:
        nll = inp.num_layer_list
        if len(nll) != inp.pp:
            add(
                Problem(
                    k["nll"],
                    f"has {len(nll)} entries ({','.join(map(str, nll))}) but "
                    f"pipeline-model-parallel-size is {inp.pp}",
                    fix=f"give exactly {inp.pp} comma-separated layer counts summing to {inp.num_layers}",
                )
            )
        elif sum(nll) != inp.num_layers:
            add(
                Problem(
                    k["nll"],
                    f"sums to {sum(nll)} but the model has {inp.num_layers} layers",
                    fix=f"make the {inp.pp} entries sum to {inp.num_layers}, e.g. "
                    f"{','.join(map(str, even_split(inp.num_layers, inp.pp)))}",
                )
            )
        elif inp.pp == 1:
            add(
                Problem(
                    k["nll"],
                    "is only meaningful with pipeline parallelism (PP > 1)",
                    fix=f"remove {k['nll']}, or set {k['pp']} to {len(nll)}",
                )
            )
        elif min(nll) < 1:
            add(
                Problem(
                    k["nll"],
                    "every pipeline stage needs at least one layer",
                    fix=f"e.g. {','.join(map(str, even_split(inp.num_layers, inp.pp)))}",
                )
            )
    elif inp.num_layers % inp.pp:
        pps = [p for p in _divisors(inp.num_layers) if p <= inp.world_size][:6]
        split = (
            f", or give {k['nll']} {','.join(map(str, even_split(inp.num_layers, inp.pp)))}"
            if inp.num_layers >= inp.pp
            else ""
        )
        add(
            Problem(
                k["pp"],
                f"num_layers({inp.num_layers}) is not divisible by pp({inp.pp})",
                fix=f"use PP in {{{_fmt(pps)}}}{split}",
            )
        )
    return problems


def _batch_problems(inp: LayoutInput, k: dict[str, str], dims: ParallelDims) -> list[Problem]:
    """The global batch is a whole number of micro batches on every data-parallel rank."""
    problems: list[Problem] = []
    add = problems.append
    dp = dims.dp
    if dp and inp.gbs is not None:
        unit = inp.mbs * dp
        if inp.decrease_batch_size:
            if inp.gbs < unit:
                add(
                    Problem(
                        k["gbs"],
                        f"global_batch_size({inp.gbs}) is below micro_batch_size({inp.mbs}) "
                        f"* data_parallel_size({dp}) = {unit}: decrease-batch-size-if-needed rounds it down "
                        f"to 0 micro-batches [data parallel = world_size({inp.world_size}) / (tp * pp * cp); "
                        f"world_size = {k['world']}]",
                        fix=f"raise {k['gbs']} to {unit} or more",
                    )
                )
        elif inp.gbs % unit:
            add(
                Problem(
                    k["gbs"],
                    f"global_batch_size({inp.gbs}) is not divisible by micro_batch_size({inp.mbs}) "
                    f"* data_parallel_size({dp}) = {unit} [data parallel = world_size({inp.world_size}) / "
                    f"(tp * pp * cp); world_size = {k['world']}]",
                    fix=f"nearest valid {k['gbs']}: "
                    f"{' or '.join(map(str, nearest_multiples(inp.gbs, unit)))}",
                )
            )
    return problems


def _sequence_problems(inp: LayoutInput, k: dict[str, str], dims: ParallelDims) -> list[Problem]:
    """The sequence fits the model's positions and splits over CP."""
    problems: list[Problem] = []
    add = problems.append
    if inp.seq_length > inp.max_position_embeddings:
        add(
            Problem(
                k["seq"],
                f"seq_length({inp.seq_length}) > max_position_embeddings({inp.max_position_embeddings})",
                fix=f"lower {k['seq']} to {inp.max_position_embeddings} or less, or raise {k['max_pos']} "
                f"(only if the model supports it)",
            )
        )
    if inp.cp > 1 and inp.seq_length % inp.cp:
        add(
            Problem(
                k["seq"],
                f"seq_length({inp.seq_length}) is not divisible by cp({inp.cp})",
                fix=f"use a multiple of {inp.cp}",
            )
        )
    return problems


def _layout_warnings(inp: LayoutInput, k: dict[str, str]) -> list[str]:
    """What does not stop the run: no CP for a long sequence, sequence parallel without TP."""
    warnings: list[str] = []
    if inp.seq_length > CP_RECOMMENDED_ABOVE and inp.cp < 2:
        warnings.append(
            f"{k['seq']}={inp.seq_length} > {CP_RECOMMENDED_ABOVE} with {k['cp']}={inp.cp}: "
            f"context parallel (CP >= 2) is recommended for sequences this long"
        )
    if inp.sequence_parallel and inp.tp == 1:
        warnings.append(f"{k['sp']} is set with {k['tp']}=1: it has no effect (Megatron turns it off)")
    return warnings


def _expert_problems(inp: LayoutInput, k: dict[str, str], dims: ParallelDims) -> list[Problem]:
    """Expert parallelism (MoE models): the routed experts divide by EP (Megatron-LM core_r0.8.0
    megatron/training/arguments.py validate_args: "Number of experts should be a multiple of expert model
    parallel_size") and EP divides the data-parallel size (core_r0.8.0 megatron/core/parallel_state.py
    initialize_model_parallel: "data_parallel_size ... is not divisible by expert_model_parallel_size")."""
    if inp.ep <= 1 or not inp.experts:
        return []
    problems: list[Problem] = []
    key = k["ep"]
    if inp.experts % inp.ep:
        valid = [e for e in _divisors(inp.experts) if dims.dp % e == 0]
        problems.append(
            Problem(
                key,
                f"{inp.ep} does not divide the model's {inp.experts} routed experts",
                fix=f"use an expert-model-parallel-size in {valid}",
            )
        )
    if dims.dp % inp.ep:
        valid = [e for e in _divisors(dims.dp) if inp.experts % e == 0]
        problems.append(
            Problem(
                key,
                f"{inp.ep} does not divide the data-parallel size {dims.dp} (world_size({inp.world_size}) "
                f"[{k['world']}] / (tp {inp.tp} x pp {inp.pp} x cp {inp.cp})): Megatron forms the expert "
                "groups inside the data-parallel ranks",
                fix=f"use an expert-model-parallel-size in {valid}, or a layout with more data-parallel "
                "ranks",
            )
        )
    return problems


LAYOUT_RULES = (_degree_problems, _layer_problems, _batch_problems, _sequence_problems, _expert_problems)


def even_split(n: int, parts: int) -> list[int]:
    """`n` layers over `parts` stages as evenly as possible, larger stages first: (7, 2) -> [4, 3]."""
    parts = max(parts, 1)
    base, rest = divmod(n, parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


def parse_layer_list(value: object) -> list[int] | None:
    """`num-layer-list` as written (`"3,5"`, `[3, 5]`, `8`) -> [3, 5]; empty -> None; ValueError otherwise."""
    if value is None or value == "" or value is False:
        return None
    if isinstance(value, int):
        return [value]
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [int(str(v).strip()) for v in items if str(v).strip()]


def suggest_ep(arch: Any, dp: int) -> int:
    """A starting expert parallel size for a MoE model (`arch.experts` routed experts) on `dp` data-parallel
    ranks: the largest size that divides both (Megatron: EP divides DP, the experts divide by EP); 1 for a
    dense model."""
    experts = getattr(arch, "experts", 0) or 0
    return max((e for e in range(1, dp + 1) if dp % e == 0 and experts % e == 0), default=1) if experts else 1


def suggest_layout(arch: Any, devices: int = 8) -> tuple[int, int]:
    """A starting TP/PP for `devices` per node, by model size (`arch`: layers, hidden, heads, kv_heads);
    TP divides the heads and KV heads. A MoE model is sized by its non-expert weights (attention, the
    embedding): its experts are sharded by expert parallelism (`suggest_ep`)."""
    params_b = 12 * arch.layers * arch.hidden**2 / 1e9
    if getattr(arch, "experts", 0):
        params_b = 4 * arch.layers * arch.hidden**2 / 1e9
    tp = 1 if params_b < 3 else 2 if params_b < 10 else 4 if params_b < 40 else 8
    pp = 1 if params_b < 10 else 2 if params_b < 40 else 4
    while tp > 1 and (arch.heads % tp or arch.kv_heads % tp or devices % tp):
        tp //= 2
    while pp > 1 and (arch.layers % pp or devices % (tp * pp)):
        pp //= 2
    return tp, pp
