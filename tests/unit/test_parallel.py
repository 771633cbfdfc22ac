"""Every layout rule, table-driven, with the message and the fix asserted."""

import pytest

from ascendfactory.parallel import LayoutInput, ParallelDims, validate_layout

BASE = dict(
    world_size=8,
    tp=2,
    pp=2,
    cp=1,
    mbs=1,
    gbs=16,
    num_layers=28,
    heads=28,
    kv_heads=4,
    seq_length=4096,
    max_position_embeddings=32768,
)


def run(**changes):
    return validate_layout(LayoutInput(**{**BASE, **changes}))


def test_valid_layout_has_no_problems_and_derives_dp():
    report = run()
    assert report.problems == [] and report.warnings == []
    assert (
        report.dims.dp == 2 and report.dims.tp_enabled and report.dims.pp_enabled and report.dims.dp_enabled
    )


@pytest.mark.parametrize(
    "changes,key,message,fix",
    [
        (
            dict(tp=3, pp=1),
            "tensor-model-parallel-size",
            "tp(3) * pp(1) * cp(1) = 3 does not divide world_size(8)",
            "e.g. TP=1 PP=1",
        ),
        (
            dict(tp=8, pp=1, heads=28, kv_heads=4),
            "tensor-model-parallel-size",
            "tp(8) * cp(1) = 8 does not divide num_attention_heads(28)",
            "TP values that work here: 1, 2, 4",
        ),
        (
            dict(tp=4, pp=1, heads=32, kv_heads=2),
            "tensor-model-parallel-size",
            "KV heads(2) is not divisible by tp(4)",
            "TP values that work here: 1, 2",
        ),
        (
            dict(gbs=9),
            "global-batch-size",
            "global_batch_size(9) is not divisible by micro_batch_size(1) * data_parallel_size(2) = 2",
            "nearest valid global-batch-size: 8 or 10",
        ),
        (
            dict(gbs=13, mbs=2),
            "global-batch-size",
            "global_batch_size(13) is not divisible by micro_batch_size(2) * data_parallel_size(2) = 4",
            "nearest valid global-batch-size: 12 or 16",
        ),
        (
            dict(pp=8, tp=1, num_layers=28),
            "pipeline-model-parallel-size",
            "num_layers(28) is not divisible by pp(8)",
            "num-layer-list 4,4,4,4,3,3,3,3",
        ),
        (
            dict(pp=2, num_layer_list=[10, 10, 8]),
            "num-layer-list",
            "has 3 entries (10,10,8) but pipeline-model-parallel-size is 2",
            "give exactly 2",
        ),
        (
            dict(pp=2, num_layer_list=[10, 10]),
            "num-layer-list",
            "sums to 20 but the model has 28 layers",
            "e.g. 14,14",
        ),
        (
            dict(seq_length=65536, max_position_embeddings=32768),
            "seq-length",
            "seq_length(65536) > max_position_embeddings(32768)",
            "lower seq-length to 32768",
        ),
        (dict(cp=2, tp=2, pp=1, seq_length=4097), "seq-length", "not divisible by cp(2)", "multiple of 2"),
        (dict(tp=0), "tensor-model-parallel-size", "must be >= 1", "set tensor-model-parallel-size to 1"),
    ],
)
def test_each_rule_names_key_numbers_and_fix(changes, key, message, fix):
    report = run(**changes)
    assert report.problems, "the rule did not fire"
    hit = [p for p in report.problems if p.key == key and message in p.message]
    assert hit, [p.render() for p in report.problems]
    assert fix in hit[0].fix


def test_uneven_layer_list_is_accepted():
    assert run(pp=2, num_layer_list=[13, 15]).problems == []


def test_several_problems_are_reported_together():
    report = run(tp=3, gbs=7, seq_length=40000)
    keys = {p.key for p in report.problems}
    assert {"tensor-model-parallel-size", "seq-length"} <= keys


@pytest.mark.parametrize(
    "changes,fragment",
    [
        (dict(seq_length=40960, max_position_embeddings=131072), "context parallel (CP >= 2) is recommended"),
        (
            dict(tp=1, pp=1, gbs=8, sequence_parallel=True),
            "sequence-parallel is set with tensor-model-parallel-size=1",
        ),
    ],
)
def test_warnings_do_not_stop_the_run(changes, fragment):
    report = run(**changes)
    assert report.problems == []
    assert any(fragment in w for w in report.warnings)


def test_keys_can_be_renamed_to_the_users_spelling():
    report = validate_layout(
        LayoutInput(**{**BASE, "gbs": 3, "keys": {"gbs": "backend_config.training.GBS"}})
    )
    assert report.problems[0].key == "backend_config.training.GBS"


def test_parallel_dims_rest_is_dp():
    assert ParallelDims(16, tp=2, pp=2, cp=2).dp == 2
    assert ParallelDims(6, tp=4).dp == 0


@pytest.mark.parametrize(
    ("split", "refused", "words"),
    [
        (None, True, "tp(2) * cp(4) = 8 does not divide num_attention_heads(28)"),  # ulysses: all of CP
        (4, True, "tp(2) * cp(4) = 8"),
        (2, False, ""),  # hybrid, ulysses-degree-in-cp 2: 28 % (2 x 2) == 0
        (1, False, ""),  # a ring algorithm: the heads are split by TP alone
    ],
)
def test_only_the_part_of_cp_that_splits_the_heads_must_divide_them(split, refused, words):
    report = run(world_size=8, tp=2, pp=1, cp=4, cp_head_split=split)
    heads = [p for p in report.problems if "num_attention_heads" in p.message]
    assert bool(heads) is refused
    if refused:
        assert words in heads[0].message and heads[0].key == "tensor-model-parallel-size"


def test_a_ring_still_needs_tp_to_divide_the_heads():
    report = run(world_size=12, tp=3, pp=1, cp=4, heads=28, kv_heads=4, cp_head_split=1)
    assert any(p.message.startswith("tp(3) does not divide num_attention_heads(28)") for p in report.problems)


def test_the_expert_parallel_refusal_says_where_the_world_size_came_from():
    """A world too small for EP is often a device count the user set (env.NPUS_PER_NODE): the message names
    the world's keys as the degree rules do."""
    world = "env.NNODES(1) x devices per node(1, from env.NPUS_PER_NODE)"
    report = run(world_size=1, tp=1, pp=1, ep=2, experts=8, gbs=8, keys={"world": world})
    (problem,) = [p for p in report.problems if p.key == "expert-model-parallel-size"]
    assert "does not divide the data-parallel size 1" in problem.message and world in problem.message


def test_decrease_batch_size_if_needed_rounds_the_global_batch_down_and_refuses_only_zero_micro_batches():
    """core_v0.12.1's calculator with decrease-batch-size-if-needed: 17 over mbs x DP = 2 runs as 16; a batch
    below one micro-batch per data-parallel rank rounds to 0 micro-batches and is refused."""
    assert run(gbs=17, decrease_batch_size=True).problems == []
    assert [p.key for p in run(gbs=17).problems] == ["global-batch-size"]
    (problem,) = run(gbs=1, decrease_batch_size=True).problems
    assert (
        problem.key == "global-batch-size"
        and "0 micro-batches" in problem.message
        and "2 or more" in problem.fix
    )
