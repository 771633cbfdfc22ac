"""LLaMA-Factory's own checks of a train yaml, before anything trains: run in LLaMA-Factory's environment.

    <env>/bin/python lf_check.py llamafactory_train.yaml

1. its argument parser (`llamafactory.hparams.get_train_args`): unknown keys, value types it parses,
   bf16/fp16 support, finetuning method, missing dependencies (deepspeed), an output directory with
   weights but no checkpoint;
2. what the parser leaves to later: the tokenizer loads, the chat template exists, every dataset is
   registered in dataset_info.json, and (`--clients=mlflow,...`) the tracker clients `report_to` needs are
   in this environment (transformers' MLflow callback raises at trainer construction without its client).

3. with `--data-fit fail|warn` and stage sft: the data against `cutoff_len`, by LLaMA-Factory's own
   code. Its supervised processor (`_encode_data_example`) cuts each turn with `infer_seqlen`: the prompt
   and the answer are shortened (a short answer is kept whole and the prompt cut; the answer keeps tokens
   unless earlier turns used the budget up), so a sample rarely trains on nothing, but its question or its
   answer is cut short; with `packing` a sample still longer than cutoff_len is dropped. Each sample is
   encoded twice, at `cutoff_len` and uncut: the samples cut, those that lost answer tokens, those left
   with none, and the cutoff_len keeping 95% of the samples whole (never past the model's
   max_position_embeddings: past it the line says the data cannot fit the model) are counted; a `WARNING:`
   line names them, and most samples without an answer token is an error with `fail` (the experiment's
   `check_data_fit`).

Writes nothing. Exit 0 with one summary line, or 2 with one `error:` line (the exception's own message).
Imports nothing from ascendfactory (that environment does not have it).
"""

from __future__ import annotations

import importlib.util
import sys
import time


def say(text: str) -> None:
    print(f"[lf-check] {text}", flush=True)


KEEP_FRACTION = 0.95
UNCUT = 1 << 30  # a cutoff_len no sample reaches


def data_fit(template, tokenizer, model_args, data_args, training_args) -> tuple[str, bool] | None:
    """(the counts, most samples train on nothing) of the sft data at `cutoff_len`; None: no samples."""
    import copy
    import math

    from llamafactory.data.loader import _get_merged_dataset
    from llamafactory.data.processor import SupervisedDatasetProcessor

    merged = _get_merged_dataset(data_args.dataset, model_args, data_args, training_args, stage="sft")
    uncut_args = copy.copy(data_args)
    uncut_args.cutoff_len = UNCUT
    cut = SupervisedDatasetProcessor(
        template=template, tokenizer=tokenizer, processor=None, data_args=data_args
    )
    uncut = SupervisedDatasetProcessor(
        template=template, tokenizer=tokenizer, processor=None, data_args=uncut_args
    )
    nothing = shortened = truncated = 0
    lengths: list[int] = []
    for ex in merged:
        if len(ex["_prompt"]) % 2 != 1 or len(ex["_response"]) != 1:
            continue  # LLaMA-Factory drops it as invalid
        kwargs = dict(
            prompt=ex["_prompt"],
            response=ex["_response"],
            system=ex["_system"],
            tools=ex["_tools"],
            images=ex.get("_images") or [],
            videos=ex.get("_videos") or [],
            audios=ex.get("_audios") or [],
        )
        cut_ids, labels = cut._encode_data_example(**kwargs)
        ids, full = uncut._encode_data_example(**kwargs)
        kept, total = sum(x != -100 for x in labels), sum(x != -100 for x in full)
        nothing += kept == 0 and total > 0
        shortened += 0 < kept < total
        truncated += len(cut_ids) < len(ids)
        lengths.append(len(ids))
    if not lengths:
        return None
    n, cutoff = len(lengths), data_args.cutoff_len
    keep = sorted(lengths)[max(0, math.ceil(KEEP_FRACTION * n) - 1)]
    prompt_only = truncated - shortened - nothing
    text = (
        f"{truncated} of {n} samples ({100 * truncated / n:.0f}%) are longer than cutoff_len {cutoff} and "
        f"are cut by LLaMA-Factory's infer_seqlen: {prompt_only} lose only prompt tokens (the question is "
        f"cut, the answer kept), {shortened} lose answer tokens, {nothing} keep no answer token and train on "
        f"nothing; "
    )
    top = max_positions(model_args)
    if top is not None and keep > top:  # a cutoff_len past the model's positions is no fix
        whole = sum(length <= top for length in lengths)
        text += (
            f"95% of the samples are {keep} tokens or shorter, past the model's {top} positions "
            f"(max_position_embeddings): at cutoff_len {top} {100 * whole / n:.0f}% stay whole; the data "
            "cannot fit this model whole: shorten the prompts or drop the long samples (or use a model with "
            "a longer context)"
        )
    else:
        text += f"cutoff_len {keep} would keep 95% of the samples whole"
    return (text if truncated else ""), 2 * nothing > n


def clients_missing(argv: list[str]) -> str | None:
    """`--clients=a,b` and `--clients-fix=TEXT`, taken out of `argv`: the error for the tracker clients
    (the modules a framework's tracker integration imports) this environment lacks, or None."""
    wanted = {
        a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith(("--clients=", "--clients-fix="))
    }
    argv[:] = [a for a in argv if not a.startswith(("--clients=", "--clients-fix="))]
    absent = [m for m in wanted.get("--clients", "").split(",") if m and importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (
        f"error: report_to: {', '.join(absent)} is not installed in this environment ({sys.prefix})\n"
        f"  fix: {wanted.get('--clients-fix', 'install it into this environment')}"
    )


def max_positions(model_args) -> int | None:
    """The model's max_position_embeddings, from its config (None: not stated)."""
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(
            model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code
        )
    except Exception:  # noqa: BLE001 - no limit known: the suggestion stays unclamped
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def main(argv: list[str]) -> int:
    fit_mode = None
    clients = clients_missing(argv)
    if argv and argv[-1].startswith("--data-fit="):
        fit_mode = argv.pop().split("=", 1)[1]
    if len(argv) != 1 or fit_mode not in (None, "fail", "warn"):
        say("usage: lf_check.py TRAIN_YAML [--data-fit=fail|warn] [--clients=a,b --clients-fix=TEXT]")
        return 2
    if clients:
        say(clients)
        return 2
    t0 = time.perf_counter()
    import yaml

    with open(argv[0], encoding="utf-8") as f:
        args = yaml.safe_load(f)
    try:
        from llamafactory.hparams import get_train_args

        imported = time.perf_counter()
        model_args, data_args, training_args, finetuning_args, _ = get_train_args(args)
        from llamafactory.data import get_template_and_fix_tokenizer
        from llamafactory.data.parser import get_dataset_list
        from llamafactory.model import load_tokenizer

        tokenizer = load_tokenizer(model_args)["tokenizer"]
        template = get_template_and_fix_tokenizer(tokenizer, data_args)
        found = get_dataset_list(data_args.dataset, data_args.dataset_dir)
        fit = None
        if fit_mode and finetuning_args.stage == "sft" and not data_args.streaming:
            fit = data_fit(template, tokenizer, model_args, data_args, training_args)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the framework's own message is the report
        message = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        say(f"error: {type(e).__name__}: {message}")
        return 2
    done = time.perf_counter()
    if fit is not None and fit[1] and fit_mode == "fail":
        say(f"error: cutoff_len: the data does not fit: {fit[0]}")
        say(
            "  fix: backend_config.training.cutoff_len: a larger value within the model's positions, shorter "
            "prompts, or check_data_fit: false to train anyway"
        )
        return 2
    if fit is not None and fit[0]:
        say(f"WARNING: {fit[0]}")
    say(
        f"ok: stage {finetuning_args.stage}, {finetuning_args.finetuning_type}, "
        f"{len(found)} dataset(s), template {data_args.template}, output {training_args.output_dir} "
        f"(import {imported - t0:.1f} s, checks {done - imported:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
