"""`torchrun <dist args> -m ascendfactory.engine.train <MindSpeed-LLM flags>`: parse, build, train, close.

Example (SFT from converted weights, TP=2 x PP=2 on 4 processes, untied embeddings; MindSpeed-LLM flags):

    torchrun --nproc_per_node 4 --nnodes 1 --node_rank 0 --master_addr localhost --master_port 6000 \
        -m ascendfactory.engine.train \
        --tokenizer-name-or-path ./qwen2.5-7b --load ./qwen_mcore_tp2pp2 --save ./ckpt \
        --finetune --no-load-optim --no-load-rng --stage sft --is-instruction-dataset --prompt-type qwen \
        --data-path ./finetune_dataset/alpaca --split 100,0,0 \
        --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
        --micro-batch-size 1 --global-batch-size 8 --seq-length 1024 --train-iters 100 \
        --lr 1.25e-6 --min-lr 1.25e-7 --lr-decay-style cosine --lr-warmup-fraction 0.01 \
        --weight-decay 0.0 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95 --seed 1234 --bf16 \
        --log-interval 1 --log-throughput --save-interval 50 --tensorboard-dir ./tb \
        --use-flash-attn --use-distributed-optimizer --distributed-backend nccl
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

from ascendfactory.engine.train.flags import build_parser, parse_args
from ascendfactory.errors import AscendFactoryError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None, *, leave_group_to_exit: bool = False) -> int:
    """Run the trainer; AscendFactoryError -> one message and its exit code (traceback with AF_DEBUG=1).
    `leave_group_to_exit`: a finished run keeps its process group for the caller's `os._exit`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        build_parser().print_help()
        return 0
    trainer, finished = None, False
    try:
        args, ignored = parse_args(argv)
        from ascendfactory.engine.train.trainer import Trainer

        trainer = Trainer(args, ignored)
        trainer.train()
        finished = True
    except AscendFactoryError as e:
        if os.environ.get("AF_DEBUG") == "1":
            traceback.print_exc()
        rank = os.environ.get("RANK", "0")
        print(f"error (rank {rank}): {e}", file=sys.stderr, flush=True)
        return e.exit_code
    else:
        return 0
    finally:
        if trainer is not None:
            trainer.close(finished=finished, destroy_group=not (finished and leave_group_to_exit))


if __name__ == "__main__":
    # A finished run ends here, after every rank passed the closing barrier and its files are written, without
    # tearing down gloo: its threads, destroyed while a peer on another node closes its side, abort the
    # process ("terminate called without an active exception", SIGABRT) after a successful run (seen on the
    # two-node Slurm run), and the runner would retry a run that had finished.
    code = main(leave_group_to_exit=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
