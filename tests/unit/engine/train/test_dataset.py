"""Sample building: pretrain windows, instruction padding/shift, split, seeded order, DP slicing."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascendfactory.engine.data.indexed import IndexedDatasetBuilder
from ascendfactory.engine.train import dataset
from ascendfactory.errors import ConfigError


@pytest.fixture()
def corpus(tmp_path):
    docs = [np.arange(1, 11) + 100 * i for i in range(6)]  # 6 docs of 10 tokens
    b = IndexedDatasetBuilder(str(tmp_path / "c_text_document"), dtype=np.uint16)
    for d in docs:
        b.add_document(d)
    b.finalize()
    return str(tmp_path / "c_text_document"), docs


def _args(path, **kw):
    base = dict(
        data_path=[path],
        seq_length=4,
        split="100,0,0",
        seed=1,
        no_shuffle=False,
        is_instruction_dataset=False,
        stage="pt",
    )
    return SimpleNamespace(**{**base, **kw})


def test_pretrain_windows_cover_the_stream_with_shared_boundary(corpus):
    path, docs = corpus
    s = dataset.build_samples(_args(path, no_shuffle=True), num_samples=14)
    stream = np.concatenate(docs)
    assert len(s) == (len(stream) - 1) // 4 == 14
    for k in range(len(s)):
        tokens, labels = s[k]
        assert tokens.tolist() == stream[4 * k : 4 * k + 4].tolist()
        assert labels.tolist() == stream[4 * k + 1 : 4 * k + 5].tolist()


def test_pretrain_epochs_and_seeded_order(corpus):
    path, _ = corpus
    a = dataset.build_samples(_args(path), num_samples=40)
    b = dataset.build_samples(_args(path), num_samples=40)
    c = dataset.build_samples(_args(path, seed=2), num_samples=40)
    assert len(a) >= 40
    assert all(np.array_equal(a[k][0], b[k][0]) for k in range(40))
    assert any(not np.array_equal(a[k][0], c[k][0]) for k in range(40))
    assert dataset.build_samples(_args(path[: -len("_text_document")]), num_samples=2)  # prefix accepted


def test_split_uses_train_part_only(corpus):
    path, docs = corpus
    s = dataset.build_samples(_args(path, split="50,50,0", no_shuffle=True), num_samples=3)
    seen = np.concatenate([s[k][0] for k in range(len(s))])
    assert seen.max() < 300  # docs 0..2 only
    with pytest.raises(ConfigError):
        dataset.build_samples(_args(path, split="0,100,0"), num_samples=3)


def test_instruction_samples_pad_and_shift(tmp_path):
    prefix = str(tmp_path / "sft")
    bs = {
        k: IndexedDatasetBuilder(f"{prefix}_packed_{k}_document", dtype=np.int32)
        for k in ("input_ids", "attention_mask", "labels")
    }
    bs["input_ids"].add_document([5, 6, 7, 8])
    bs["attention_mask"].add_document([1, 1, 1, 1])
    bs["labels"].add_document([-100, -100, 7, 8])
    bs["input_ids"].add_document(list(range(1, 12)))
    bs["attention_mask"].add_document([1] * 11)
    bs["labels"].add_document(list(range(1, 12)))
    for b in bs.values():
        b.finalize()
    s = dataset.build_samples(
        _args(prefix, seq_length=6, is_instruction_dataset=True, no_shuffle=True), num_samples=4, pad_id=0
    )
    tokens, labels = s[0]
    assert tokens.tolist() == [5, 6, 7, 8, 0] and labels.tolist() == [-100, 7, 8, -100, -100]
    tokens, labels = s[1]  # truncated to seq_length
    assert tokens.tolist() == [1, 2, 3, 4, 5] and labels.tolist() == [2, 3, 4, 5, 6]
    assert len(s) == 4  # two epochs


def test_batch_plan_matches_megatron_sampler():
    plans = [
        dataset.BatchPlan(micro_batch_size=2, global_batch_size=8, dp_size=2, dp_rank=r) for r in range(2)
    ]
    assert plans[0].num_microbatches == 2
    assert plans[0].indices(16) == [16, 17, 20, 21] and plans[1].indices(16) == [18, 19, 22, 23]
    single = dataset.BatchPlan(2, 8, 1, 0).indices(16)
    assert sorted(plans[0].indices(16) + plans[1].indices(16)) == single


def _megatron_split(text: str, size: int) -> list[int]:
    """Megatron's get_train_valid_test_split_ (legacy/data/dataset_utils.py), restated for the test."""
    parts = [float(x) for x in text.split(",")]
    parts = (parts + [0.0, 0.0, 0.0])[:3]
    total = sum(parts)
    index = [0]
    for p in parts:
        index.append(index[-1] + int(round(p / total * float(size))))
    diff = index[-1] - size
    return [index[0]] + [i - diff for i in index[1:]]


@given(
    weights=st.lists(st.integers(0, 1000), min_size=1, max_size=3).filter(lambda w: sum(w) > 0),
    n=st.integers(0, 5000),
)
def test_split_ranges_are_megatrons(weights, n):
    text = ",".join(map(str, weights))
    ranges = dataset.split_ranges(text, n)
    bounds = [ranges[0][0]] + [hi for _, hi in ranges]
    assert bounds == _megatron_split(text, n) and bounds[-1] == n
    assert all(lo == prev_hi for (lo, _), (_, prev_hi) in zip(ranges[1:], ranges[:-1]))
    assert dataset.split_range(text, n) == ranges[0]


def test_split_rule_moves_the_rounding_excess():
    # 480 documents, 969,30,1: 465 + 14 + 0 = 479, so every boundary moves up by one (Megatron)
    assert dataset.split_ranges("969,30,1", 480) == [(0, 466), (466, 480), (480, 480)]


def test_validation_and_test_parts_sample_only_their_documents(corpus):
    path, _ = corpus
    args = _args(path, split="4,1,1", no_shuffle=True)
    valid = dataset.build_samples(args, num_samples=6, part=1)
    test = dataset.build_samples(args, num_samples=2, part=2)
    seen = {int(t) // 100 for k in range(6) for t in valid[k][0]}
    assert seen == {4} and {int(t) // 100 for k in range(2) for t in test[k][0]} == {5}
    train = dataset.build_samples(args, num_samples=5)
    assert max(int(t) // 100 for k in range(len(train)) for t in train[k][0]) == 3
    assert dataset.build_samples(_args(path, split="100,0,0"), num_samples=4, part=1) is None
    shuffled = dataset.build_samples(_args(path, split="4,1,1"), num_samples=6, part=1)
    assert {int(t) // 100 for k in range(6) for t in shuffled[k][0]} == {4}
