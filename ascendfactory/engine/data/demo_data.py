"""The demo datasets, generated from a seed: small, simple and learnable by a tiny model in minutes.

`sft_records()` gives Alpaca-style instruction records (`instruction`, `input`, `output`) from six task
families with regular answers (sums, word reversal, capitals, upper case, successor, number names);
`pretrain_records()` gives `{"text": ...}` paragraphs built from the same facts. The shipped files
`cfgs/data/demo_sft.jsonl` and `cfgs/data/demo_pretrain.jsonl` are their output
(`python scripts/make_demo_assets.py --data-only`); a test checks they are up to date.

The GRPO quickstart's task (`cfgs/data/demo_grpo.jsonl`, `grpo_records()`): short questions with a
number as the verifiable answer (a number written as a word -> its digits; the number after N), in
DeepScaleR's fields (`problem`, `answer`). Its warm-up SFT data (`cfgs/data/demo_grpo_warmup.jsonl`,
`grpo_warmup_records()`) teaches the questions with correct answers, but only one response in
`GRPO_FORMAT_SHARE` uses the R1 format `<think>...</think><answer>\\boxed{N}</answer>` that MindSpeed-RL's
`base_acc` verifier requires; the others answer `\\boxed{N}` alone. GRPO then has to make the warmed-up
policy choose the rewarded format (and stay right): the mean reward starts near that share and rises.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from pathlib import Path

CAPITALS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Japan": "Tokyo",
    "China": "Beijing",
    "Egypt": "Cairo",
    "Canada": "Ottawa",
    "Peru": "Lima",
    "Kenya": "Nairobi",
    "Norway": "Oslo",
    "Greece": "Athens",
    "Russia": "Moscow",
    "India": "New Delhi",
    "Chile": "Santiago",
    "Cuba": "Havana",
    "Ireland": "Dublin",
    "Poland": "Warsaw",
    "Austria": "Vienna",
    "Portugal": "Lisbon",
}
WORDS = (
    "cat dog sun moon tree bird fish star rain snow wind fire stone river apple bread milk house green "
    "light water cloud paper table chair music dream happy ocean plant horse tiger lemon sugar train "
    "garden window yellow purple silver winter summer"
).split()
NUMBER_NAMES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
).split()

Record = dict[str, str]


def _add(rng: random.Random) -> Record:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return {"instruction": f"What is {a} plus {b}?", "input": "", "output": f"{a} plus {b} is {a + b}."}


def _reverse(rng: random.Random) -> Record:
    w = rng.choice(WORDS)
    return {"instruction": "Reverse the letters of the word.", "input": w, "output": w[::-1]}


def _capital(rng: random.Random) -> Record:
    country = rng.choice(sorted(CAPITALS))
    return {
        "instruction": f"What is the capital of {country}?",
        "input": "",
        "output": f"The capital of {country} is {CAPITALS[country]}.",
    }


def _upper(rng: random.Random) -> Record:
    w = rng.choice(WORDS)
    return {"instruction": f"Write the word {w} in capital letters.", "input": "", "output": w.upper()}


def _successor(rng: random.Random) -> Record:
    n = rng.randint(0, 98)
    return {
        "instruction": f"Which number comes after {n}?",
        "input": "",
        "output": f"{n + 1} comes after {n}.",
    }


def _name(rng: random.Random) -> Record:
    n = rng.randint(0, len(NUMBER_NAMES) - 1)
    return {"instruction": "Write the number as a word.", "input": str(n), "output": NUMBER_NAMES[n]}


TASKS: tuple[Callable[[random.Random], Record], ...] = (_add, _reverse, _capital, _upper, _successor, _name)


def sft_records(n: int = 480, seed: int = 0) -> list[Record]:
    """`n` instruction records, the task families in turn, contents drawn from `seed`."""
    rng = random.Random(seed)
    return [TASKS[i % len(TASKS)](rng) for i in range(n)]


def pretrain_records(n: int = 300, seed: int = 1) -> list[dict[str, str]]:
    """`n` short paragraphs stating facts of the same kinds as the instruction data."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(3, 6)):
            kind = rng.randrange(4)
            if kind == 0:
                country = rng.choice(sorted(CAPITALS))
                sentences.append(f"The capital of {country} is {CAPITALS[country]}.")
            elif kind == 1:
                a, b = rng.randint(0, 9), rng.randint(0, 9)
                sentences.append(f"{a} plus {b} is {a + b}.")
            elif kind == 2:
                w = rng.choice(WORDS)
                sentences.append(f"The word {w} backwards is {w[::-1]}.")
            else:
                n0 = rng.randint(0, 18)
                sentences.append(f"After {NUMBER_NAMES[n0]} comes {NUMBER_NAMES[n0 + 1]}.")
        out.append({"text": " ".join(sentences)})
    return out


GRPO_FORMAT_SHARE = 0.25  # warm-up responses in the R1 format
GRPO_NAME_TASK = "Write the number as a digit."
GRPO_SUCCESSOR_TASK = "Which number comes right after this one?"


def _grpo_question(rng: random.Random) -> tuple[str, int, str]:
    """(question, answer, a short reasoning text) of one GRPO quickstart prompt."""
    if rng.random() < 0.5:
        n = rng.randint(0, len(NUMBER_NAMES) - 1)
        return f"{GRPO_NAME_TASK}\n{NUMBER_NAMES[n]}", n, f"it is {n}"
    n = rng.randint(0, 19)
    return f"{GRPO_SUCCESSOR_TASK}\n{n}", n + 1, f"after {n} comes {n + 1}"


def grpo_records(n: int = 256, seed: int = 2) -> list[dict[str, str]]:
    """GRPO prompts with their reference answers (`problem`, `answer`)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        question, answer, _ = _grpo_question(rng)
        out.append({"problem": question, "answer": str(answer)})
    return out


def grpo_warmup_records(n: int = 512, seed: int = 3) -> list[Record]:
    """Alpaca records teaching the GRPO questions; a `GRPO_FORMAT_SHARE` of them in the R1 format."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        question, answer, thought = _grpo_question(rng)
        boxed = f"\\boxed{{{answer}}}"
        r1 = rng.random() < GRPO_FORMAT_SHARE
        output = f"<think>{thought}</think><answer>{boxed}</answer>" if r1 else boxed
        out.append({"instruction": question, "input": "", "output": output})
    return out


def corpus(records: Iterable[Record]) -> Iterable[str]:
    """Every text field of the records (tokenizer training input)."""
    for record in records:
        yield from (v for v in record.values() if v)


def write_jsonl(path: str | Path, records: Iterable[dict[str, str]]) -> int:
    """Write records as JSON Lines (UTF-8, one object per line, stable key order); returns the count."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)
