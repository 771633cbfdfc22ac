"""Shared by the trainer's unit tests."""

# The flags the trainer requires; each test appends what it is about.
REQUIRED_ARGV = [
    *("--tokenizer-name-or-path", "m", "--data-path", "d", "--seq-length", "16"),
    *("--train-iters", "2", "--lr", "1e-4"),
]
