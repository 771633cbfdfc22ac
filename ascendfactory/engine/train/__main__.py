"""`torchrun <dist args> -m ascendfactory.engine.train <MindSpeed-LLM flags>`: parse, build, train, close."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

from ascendfactory.engine.train.flags import build_parser, parse_args
from ascendfactory.errors import AscendFactoryError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; AscendFactoryError -> one message and its exit code (traceback with AF_DEBUG=1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        build_parser().print_help()
        return 0
    trainer = None
    try:
        args, ignored = parse_args(argv)
        from ascendfactory.engine.train.trainer import Trainer

        trainer = Trainer(args, ignored)
        trainer.train()
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
            trainer.close()


if __name__ == "__main__":
    sys.exit(main())
