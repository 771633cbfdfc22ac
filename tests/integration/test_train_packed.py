"""Packed sequences in the embedded trainer (`--reset-position-ids`, `--neat-pack`, `--reset-attention-mask`,
engine/train/packed.py), on rows packed by the preprocess program (`--pack`, `--neat-pack`) and on
pre-training windows with EOD tokens.

The first iteration's `lm loss` (before any update) is checked against a reference built here without
the trainer: each document of each row run alone through the HF model from the same weights, its token
losses summed, divided by the row micro-batch's label count, averaged over micro-batches (Megatron's
masked mean per micro-batch). Tolerance 1e-5 relative (fp32). A pipeline (PP 2: each stage takes each
micro-batch's layout in order) trains to the same losses as one process (1e-5 relative)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support import training as T

pytestmark = pytest.mark.integration

SEQ, MBS, GBS = 128, 2, 4


def _preprocess(demo: Path, out: Path, *extra: str) -> str:
    src = Path(__file__).resolve().parents[2] / "cfgs" / "data" / "demo_sft.jsonl"
    prefix = out / "sft"
    proc = subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.data.preprocess", "--input", str(src),
         "--tokenizer-name-or-path", str(demo), "--output-prefix", str(prefix), "--handler-name",
         "AlpacaStyleInstructionHandler", "--prompt-type", "qwen", "--seq-length", str(SEQ), *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return str(prefix)


def _flags(model: Path, load: Path, data: str, *extra: str, iters: int = 3, seq: int = SEQ) -> list[str]:
    return [
        *("--tokenizer-name-or-path", str(model), "--load", str(load), "--finetune", "--data-path", data),
        *("--seq-length", str(seq), "--micro-batch-size", str(MBS), "--global-batch-size", str(GBS)),
        *("--train-iters", str(iters), "--lr", "1e-3", "--lr-decay-style", "constant", "--log-interval", "1"),
        *("--split", "100,0,0", "--eval-iters", "0", "--no-shuffle", "--seed", "3", *extra),
    ]


def _run(nproc: int, argv: list[str]) -> str:
    proc = T.torchrun(nproc, argv, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _documents(ids: np.ndarray, *, eod: int | None, mask: np.ndarray | None) -> list[tuple[int, int]]:
    """(start, end) of each document of a row: after each EOD (MindSpeed's reset), or each run of one
    sample number with --neat-pack (each padding token alone)."""
    if mask is not None:
        bounds = [0] + [i for i in range(1, len(ids)) if mask[i] != mask[i - 1] or mask[i] == 0]
    else:
        bounds = [0] + [i + 1 for i in range(len(ids) - 1) if ids[i] == eod]
    return list(zip(bounds, bounds[1:] + [len(ids)]))


def _reference_loss(
    model_dir: Path, rows: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]], eod
) -> float:
    """Iteration 1's loss: rows [(input ids [SEQ+1 or SEQ], labels, neat mask)] in micro-batches of MBS."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    losses = []
    for m in range(0, len(rows), MBS):
        total, count = 0.0, 0
        for ids, labels, mask in rows[m : m + MBS]:
            tokens, targets = ids[:-1], labels[1:]
            for a, b in _documents(ids[:-1] if mask is None else ids, eod=eod, mask=mask):
                b = min(b, len(tokens))
                if a >= b:
                    continue
                with torch.no_grad():
                    logits = model(torch.tensor(tokens[a:b]).unsqueeze(0)).logits[0].float()
                y = torch.tensor(targets[a:b])
                keep = y != -100
                if keep.any():
                    total += float(torch.nn.functional.cross_entropy(logits[keep], y[keep], reduction="sum"))
                    count += int(keep.sum())
        losses.append(total / count)
    return sum(losses) / len(losses)


def _sft_rows(prefix: str, n: int, *, neat: bool) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    from ascendfactory.engine.data.indexed import IndexedDataset

    ids = IndexedDataset(prefix + "_packed_input_ids_document")
    labels = IndexedDataset(prefix + "_packed_labels_document")
    masks = IndexedDataset(prefix + "_packed_attention_mask_document")
    out = []
    for i in range(n):
        row = np.asarray(ids[i], dtype=np.int64)[:SEQ]
        assert len(row) == SEQ  # --pack rows are exactly seq_length
        out.append(
            (row, np.asarray(labels[i], dtype=np.int64)[:SEQ], np.asarray(masks[i])[:SEQ] if neat else None)
        )
    return out


@pytest.fixture(scope="module")
def demo(demo_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    T.hf_to_megatron(demo_model, root / "mg")
    T.hf_to_megatron(demo_model, root / "mg_pp2", pp=2)
    return demo_model, root


@pytest.mark.parametrize("neat", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_packed_sft_rows_train_on_each_document_alone(demo, neat):
    model, root = demo
    data = _preprocess(model, root / ("neat" if neat else "pack"), "--neat-pack" if neat else "--pack")
    extra = ["--is-instruction-dataset", "--reset-position-ids"] + (["--neat-pack"] if neat else [])
    out = _run(1, _flags(model, root / "mg", data, *extra))
    assert "packed sequences: positions restart and attention stays within each document" in out
    losses = T.losses_from_log(out)
    from transformers import AutoTokenizer

    eod = AutoTokenizer.from_pretrained(model).eos_token_id
    rows = _sft_rows(data, GBS, neat=neat)
    if neat:
        assert all(mask.max() >= 2 for _, _, mask in rows)  # several samples per row
    want = _reference_loss(model, rows, eod)
    assert losses[1] == pytest.approx(want, rel=1e-5)
    # the plain (padded, causal over the whole row) loss differs: the layout matters
    plain = T.losses_from_log(_run(1, _flags(model, root / "mg", data, "--is-instruction-dataset", iters=1)))
    assert abs(plain[1] - want) > 1e-4 * want
    if not neat:  # a pipeline hands each micro-batch's layout to both stages
        pipelined = _flags(model, root / "mg_pp2", data, *extra, "--pipeline-model-parallel-size", "2")
        two = T.losses_from_log(_run(2, pipelined))
        assert two == pytest.approx(losses, rel=1e-5)


def test_pretraining_windows_reset_at_eod(tmp_path):
    """--reset-position-ids and --reset-attention-mask on pre-training windows: documents end with the
    tokenizer's EOS (config.json's eos_token_id here); both give each document its own attention, and
    RoPE's relative positions make the two losses equal."""
    from ascendfactory.engine.data.indexed import IndexedDatasetBuilder

    eod = 1
    T.make_tiny_model(tmp_path / "hf", family="qwen2", eos_token_id=eod)
    T.hf_to_megatron(tmp_path / "hf", tmp_path / "mg")
    rng = np.random.default_rng(0)
    prefix = str(tmp_path / "pt_text_document")
    builder = IndexedDatasetBuilder(prefix, dtype=np.uint16)
    docs = []
    for _ in range(40):
        doc = np.concatenate([rng.integers(2, 256, size=int(rng.integers(5, 30))), [eod]])
        docs.append(doc)
        builder.add_document(doc)
    builder.finalize()
    runs = {
        flag: T.losses_from_log(
            _run(1, _flags(tmp_path / "hf", tmp_path / "mg", prefix, flag, iters=1, seq=32))
        )
        for flag in ("--reset-position-ids", "--reset-attention-mask")
    }
    stream = np.concatenate(docs)  # --no-shuffle: the windows are the stream's, in order
    rows = [(stream[i * 32 : (i + 1) * 32 + 1], stream[i * 32 : (i + 1) * 32 + 1], None) for i in range(GBS)]
    want = _reference_loss(tmp_path / "hf", rows, eod)
    assert runs["--reset-position-ids"][1] == pytest.approx(want, rel=1e-5)
    assert runs["--reset-attention-mask"][1] == pytest.approx(want, rel=1e-4)


def test_neat_pack_needs_reset_position_ids(demo):
    model, root = demo
    argv = _flags(model, root / "mg", str(root / "x"), "--neat-pack")
    proc = subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.train", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Require set `--reset-position-ids` when `--neat-pack` is set." in proc.stdout + proc.stderr
