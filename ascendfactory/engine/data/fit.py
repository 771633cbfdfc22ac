"""Does the instruction data fit `--seq-length`? Counted before training, from the label tokens.

    python -m ascendfactory.engine.data.fit --data-path out/alpaca --seq-length 64 [--on-unfit warn]

The embedded trainer (as MindSpeed-LLM's SFT dataset) cuts every sample to `--seq-length` tokens and trains
on the label tokens (not -100) left inside: a sample whose answer starts at or past `--seq-length` trains
on nothing, and a micro-batch made only of such samples has a 0/0 masked-mean loss (NaN). Per sample (a
packed row counts as one), from the `_packed_labels_document` indexed dataset, read once with numpy:

- beyond: every label token lies at or past `--seq-length` (the sample trains on nothing);
- cut short: some label tokens inside, some past (the answer is truncated);
- the `--seq-length` that keeps 95% of the answers whole (the 95th percentile of last label position + 1).

A warning names the counts; most samples beyond `--seq-length` is a refusal (exit 2), unless
`--on-unfit warn` (the experiment key `check_data_fit: false`).

The length it suggests is never past the model's positions (`--max-positions`, its max_position_embeddings):
when 95% of the answers end further out, the data cannot fit the model at any `--seq-length`, and the
message says so, with what the model's own length keeps and what to change instead (the prompts, the
samples). With `--micro-batch-size` and `--micro-batches` (of the whole run), a warning also gives the odds
that some micro-batch holds only samples that train on nothing, which Megatron's NaN check stops the run on
(`--stops-on-nan`).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100
LABELS_SUFFIX = "_packed_labels_document"
KEEP_FRACTION = 0.95
CHUNK_TOKENS = 1 << 24  # tokens read per numpy pass (64 MiB of int32 labels)
NONE = -1  # a sample without label tokens


@dataclass(frozen=True)
class FitReport:
    """How the samples' answers sit against one `seq_length` (positions are 0-based token indices)."""

    samples: int
    seq_length: int
    beyond: int  # all label tokens at or past seq_length: trains on nothing
    cut_short: int  # label tokens on both sides of seq_length
    without_labels: int  # no label token at all, whatever the length
    keep_95: int | None  # seq_length that keeps 95% of the answers whole (None: no answers)
    max_positions: int | None = None  # the model's max_position_embeddings (None: unknown)
    whole_at_max: int = 0  # answers kept whole at max_positions
    beyond_at_max: int = 0  # samples that train on nothing even at max_positions

    @property
    def past_the_model(self) -> bool:
        """95% of the answers end past the model's positions: no seq-length the model takes fits them."""
        return (
            self.keep_95 is not None and self.max_positions is not None and self.keep_95 > self.max_positions
        )

    @property
    def refuse(self) -> bool:
        """Most samples would train on nothing."""
        return self.samples > 0 and 2 * (self.beyond + self.without_labels) > self.samples

    @property
    def fits(self) -> bool:
        return self.beyond == 0 and self.cut_short == 0

    def describe(self, *, what: str = "--seq-length") -> str:
        """One sentence with the counts, e.g. for a warning or an error."""
        pct = (lambda n: f"{100 * n / self.samples:.0f}%") if self.samples else (lambda n: "0%")
        text = (
            f"{self.beyond} of {self.samples} samples ({pct(self.beyond)}) have every answer token at or "
            f"past {what} {self.seq_length} and train on nothing; {self.cut_short} ({pct(self.cut_short)}) "
            "have their answer cut short"
        )
        if self.past_the_model:
            text += (
                f"; 95% of the answers end by token {self.keep_95}, past the model's {self.max_positions} "
                f"positions (max_position_embeddings): at {what} {self.max_positions} "
                f"{pct(self.whole_at_max)} of the answers stay whole and {self.beyond_at_max} samples still "
                "train on nothing"
            )
        elif self.keep_95 is not None:
            text += f"; {what} {self.keep_95} would keep 95% of the answers whole"
        if self.without_labels:
            text += f" ({self.without_labels} samples have no answer tokens at all)"
        return text

    def fix(self, key: str) -> str:
        """What to change: the length that keeps 95% of the answers whole, within the model's positions;
        else that the data cannot fit the model, and what to do instead."""
        anyway = "`check_data_fit: false` trains anyway (micro-batches without answer tokens have a NaN loss)"
        if not self.past_the_model:
            return f"{key}: {self.keep_95} (or shorter prompts); {anyway}"
        longest = (
            f" and {key}: {self.max_positions}, the most the model takes,"
            if self.seq_length < (self.max_positions or 0)
            else ""
        )
        return (
            f"the data cannot fit this model: shorten the prompts, or drop the samples whose answers start "
            f"past token {self.max_positions}{longest} (or use a model with a longer context); {anyway}"
        )

    def stop_odds(self, micro_batch_size: int, micro_batches: int) -> float:
        """The chance that at least one of `micro_batches` micro-batches of `micro_batch_size` samples,
        drawn without replacement from the dataset, holds only samples that train on nothing."""
        empty = self.beyond + self.without_labels
        if micro_batch_size < 1 or micro_batches < 1 or empty < micro_batch_size or not self.samples:
            return 0.0
        one = math.comb(empty, micro_batch_size) / math.comb(self.samples, micro_batch_size)
        return 1.0 - (1.0 - one) ** micro_batches


def report_from_spans(
    first: np.ndarray, last: np.ndarray, seq_length: int, max_positions: int | None = None
) -> FitReport:
    """The report from each sample's first and last label position (NONE where it has none)."""
    first, last = np.asarray(first, dtype=np.int64), np.asarray(last, dtype=np.int64)
    labelled = first != NONE
    beyond = int(np.count_nonzero(labelled & (first >= seq_length)))
    cut = int(np.count_nonzero(labelled & (first < seq_length) & (last >= seq_length)))
    ends = np.sort(last[labelled] + 1)
    keep = int(ends[max(0, math.ceil(KEEP_FRACTION * len(ends)) - 1)]) if len(ends) else None
    top = max_positions or 0
    return FitReport(
        samples=int(len(first)),
        seq_length=seq_length,
        beyond=beyond,
        cut_short=cut,
        without_labels=int(np.count_nonzero(~labelled)),
        keep_95=keep,
        max_positions=max_positions,
        whole_at_max=int(np.count_nonzero(labelled & (last < top))),
        beyond_at_max=int(np.count_nonzero(labelled & (first >= top))),
    )


def label_spans(prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) label position of every sequence of `<prefix>_packed_labels_document` (NONE: none).

    One pass over the `.bin` in chunks of whole sequences: a position per token, masked where the token is
    IGNORE_INDEX, then a min / max per sequence (`np.minimum.reduceat`)."""
    from ascendfactory.engine.data.indexed import IndexedDataset

    data = IndexedDataset(prefix + LABELS_SUFFIX)
    sizes = data.sizes.astype(np.int64)
    n = len(sizes)
    first = np.full(n, NONE, dtype=np.int64)
    last = np.full(n, NONE, dtype=np.int64)
    ends = np.cumsum(sizes)
    lo = 0
    while lo < n:
        base = int(ends[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, base + CHUNK_TOKENS, side="right")))
        hi = min(hi, n)
        _spans_of_chunk(data, sizes[lo:hi], lo, first[lo:hi], last[lo:hi])
        lo = hi
    return first, last


def _spans_of_chunk(data, sizes: np.ndarray, lo: int, first: np.ndarray, last: np.ndarray) -> None:
    tokens = data.span(lo, lo + len(sizes))
    total = len(tokens)
    if total == 0:
        return
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = np.arange(total, dtype=np.int64) - np.repeat(starts, sizes)
    is_label = tokens != IGNORE_INDEX
    nonempty = sizes > 0
    at = starts[nonempty]
    lo_pos = np.minimum.reduceat(np.where(is_label, pos, np.iinfo(np.int64).max), at)
    hi_pos = np.maximum.reduceat(np.where(is_label, pos, NONE), at)
    has = hi_pos != NONE
    idx = np.flatnonzero(nonempty)[has]
    first[idx], last[idx] = lo_pos[has], hi_pos[has]


def check(prefix: str, seq_length: int, max_positions: int | None = None) -> FitReport:
    """The report for the sft dataset `prefix` (the preprocess `--output-prefix`) at `seq_length`."""
    first, last = label_spans(prefix)
    return report_from_spans(first, last, seq_length, max_positions)


def odds_sentence(report: FitReport, *, micro_batch_size: int, micro_batches: int) -> str:
    """With the NaN check on: how likely a micro-batch made only of samples that train on nothing stops
    the run ('' when none can be)."""
    odds = report.stop_odds(micro_batch_size, micro_batches)
    if odds <= 0:
        return ""
    shown = "over 99.9%" if odds > 0.999 else "below 0.1%" if odds < 0.001 else f"about {odds:.0%}"
    return (
        f"; with the NaN check on (the default), a micro-batch made only of such samples stops the run: "
        f"{shown} over this run's {micro_batches} micro-batches of {micro_batch_size}"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ascendfactory.engine.data.fit",
        description="Count the sft samples whose answer lies beyond --seq-length (before training).",
    )
    p.add_argument("--data-path", required=True, help="sft dataset prefix (before _packed_*)")
    p.add_argument("--seq-length", required=True, type=int, help="the training --seq-length")
    p.add_argument(
        "--on-unfit",
        choices=("fail", "warn"),
        default="fail",
        help="most samples beyond --seq-length: stop with exit 2 (default) or only warn",
    )
    p.add_argument("--key", default="--seq-length", help="how the length is named in the messages")
    p.add_argument("--max-positions", type=int, help="the model's max_position_embeddings")
    p.add_argument("--micro-batch-size", type=int, default=0, help="samples per micro-batch (the odds)")
    p.add_argument("--micro-batches", type=int, default=0, help="micro-batches of the whole run (the odds)")
    p.add_argument(
        "--stops-on-nan", action="store_true", help="the trainer stops at a NaN loss (its NaN check is on)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import time

    t0 = time.perf_counter()
    report = check(args.data_path, args.seq_length, args.max_positions)
    took = time.perf_counter() - t0
    what = args.key.rsplit(".", 1)[-1]
    if report.refuse and args.on_unfit == "fail":
        print(f"error: {args.key}: the data does not fit: {report.describe(what=what)}", file=sys.stderr)
        print(f"  fix: {report.fix(args.key)}", file=sys.stderr)
        return 2
    if report.fits:
        print(f"data fits {what} {args.seq_length}: {report.samples} samples checked in {took:.2f}s")
    else:
        odds = ""
        if args.stops_on_nan:
            odds = odds_sentence(
                report, micro_batch_size=args.micro_batch_size, micro_batches=args.micro_batches
            )
        print(f"WARNING: {report.describe(what=what)}{odds} (checked in {took:.2f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
