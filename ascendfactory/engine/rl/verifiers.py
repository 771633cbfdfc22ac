"""Rule verifiers by MindSpeed-RL's names (`rl_config.verifier_function`), with its scores (my own code).

Semantics follow MindSpeed-RL's `models/rule_verifier.py`; `response` is the decoded response with special
tokens skipped, `answer` the decoded `labels` of the prompt:

- `base_acc`: 1.0 when the whole response matches
  `<think>.*</think>.*<answer>.*\\boxed{.*}.*</answer>` and the boxed answer grades equal to `answer`,
  else 0.0.
- `math_17k_acc`, `acc_for_ppo`: 1.0 when the last `\\boxed{...}` grades equal to `answer`, else 0.0.
- `acc`: the answer extracted from the response (last `\\boxed{}`, else "the answer is ...", else the
  last number): 1.0 when equal, -0.5 when not, -1.0 when the response has no `boxed` or nothing to extract.
- `format`: 1.0 when the response is `<think>...</think> <answer>...</answer>` (nothing around), else 0.0.
- `strict_format`: 1.0 when it has exactly one each of `<think>`, `</think>`, `<answer>`, `\\boxed{..}`,
  `</answer>`, in that order, starting with `<think>` and ending with `</answer>`; else -0.5.
- `step`: min(1, step markers / 3); markers: `Step N:`, `N.` at a line start, `\\n-`, `\\n*`, `First,`,
  `Second,`, `Next,`, `Finally,`.

Grading (`grade`) is a documented subset of MindSpeed-RL's (mathruler / math_eval_toolkit, which use sympy):
LaTeX noise is normalised away (`\\text{}`, `\\left`/`\\right`, `$`, spaces, `\\!`, `^\\circ`, a trailing
`.`, `dfrac`/`tfrac`), then two answers are equal when the strings match or both read as numbers (integers,
decimals, `a/b`, `\\frac{a}{b}`, `%`) that agree within a relative 1e-4. Symbolic equivalence
(`x+1` vs `1+x`) is not checked. `acc_for_dapo`, `math_verify_reward` and `retool_reward` are MindSpeed-RL
names this backend does not implement: `check_names` refuses them, as it refuses any unknown name
(MindSpeed-RL itself scores an unknown name 0 without a word).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

Verifier = Callable[[str, str], float]

_FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL | re.MULTILINE)
_R1 = re.compile(r"<think>.*</think>.*<answer>.*\\boxed\{.*\}.*</answer>", re.DOTALL)
_STEPS = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")
_NUMBER = re.compile(r"-?\d*\.?\d+")
_FRAC = re.compile(r"^(-?)\\frac\{([^{}]+)\}\{([^{}]+)\}$")
_STOP_WORDS = ("</s>", "<|im_end|>", "<|endoftext|>")


# -- answer extraction ----------------------------------------------------------------------------------
def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (braces balanced), or None when there is none."""
    start = text.rfind("\\boxed")
    while start >= 0:
        i = start + len("\\boxed")
        if i < len(text) and text[i] == "{":
            depth, j = 1, i + 1
            while j < len(text):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    return text[i + 1 : j]
                j += 1
        start = text.rfind("\\boxed", 0, start)
    return None


def extract_answer(text: str) -> str:
    """MindSpeed-RL's `extract_answer(..., data_name="math")` order: boxed, 'the answer is', last number."""
    if "boxed" in text:
        tail = text.split("boxed")[-1]
        if not tail:
            return ""
        if tail[0] != "{":
            return tail.split("$")[0].strip()
        depth, out = 1, []
        for c in tail[1:]:
            depth += {"{": 1, "}": -1}.get(c, 0)
            if depth == 0:
                break
            out.append(c)
        return "".join(out)
    for marker in ("he answer is", "final answer is"):
        if marker in text:
            return text.split(marker)[-1].strip()
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else ""


# -- grading --------------------------------------------------------------------------------------------
def normalize(answer: str) -> str:
    s = answer.strip()
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\mbox\{([^{}]*)\}", r"\1", s)
    for noise in ("\\left", "\\right", "\\!", "\\,", "\\;", "$", "^\\circ", "^{\\circ}"):
        s = s.replace(noise, "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac")
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


def as_number(answer: str) -> float | None:
    s = normalize(answer).replace(",", "")
    scale = 1.0
    if s.endswith("\\%") or s.endswith("%"):
        s, scale = s.rstrip("%").rstrip("\\"), 0.01
    m = _FRAC.match(s)
    if m:
        s = f"{m.group(1)}({m.group(2)})/({m.group(3)})"
    s = s.replace("(", "").replace(")", "")
    try:
        if "/" in s:
            num, den = s.split("/", 1)
            return float(num) / float(den) * scale
        return float(s) * scale
    except (ValueError, ZeroDivisionError):
        return None


def grade(given: str | None, answer: str) -> bool:
    """Whether `given` equals the reference `answer` (see the module docstring)."""
    if given is None:
        return False
    a, b = normalize(given), normalize(answer)
    if not a:
        return False
    if a == b:
        return True
    x, y = as_number(a), as_number(b)
    if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
        return False
    return math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-12)


# -- the verifiers --------------------------------------------------------------------------------------
def base_acc(response: str, answer: str) -> float:
    return 1.0 if _R1.fullmatch(response) and grade(last_boxed(response), answer) else 0.0


def boxed_acc(response: str, answer: str) -> float:
    return 1.0 if grade(last_boxed(response), answer) else 0.0


def acc(response: str, answer: str) -> float:
    text = response
    for stop in _STOP_WORDS:
        text = text.split(stop)[0].strip() if stop in text else text
    given = extract_answer(text)
    if not given or "boxed" not in text:
        return -1.0
    return 1.0 if grade(given, answer) else -0.5


def format_reward(response: str, answer: str) -> float:
    return 1.0 if _FORMAT.match(response) else 0.0


def strict_format(response: str, answer: str) -> float:
    tags = ("<think>", "</think>", "<answer>", None, "</answer>")  # None: the boxed expression
    positions = []
    for tag in tags:
        if tag is None:
            found = list(re.finditer(r"\\boxed\{.*?\}", response))
            if len(found) != 1:
                return -0.5
            positions.append(found[0].start())
        else:
            if response.count(tag) != 1:
                return -0.5
            positions.append(response.find(tag))
    ordered = positions == sorted(positions)
    framed = response.startswith("<think>") and response.endswith("</answer>")
    return 1.0 if ordered and framed else -0.5


def steps(response: str, answer: str) -> float:
    return min(1.0, len(_STEPS.findall(response)) / 3)


VERIFIERS: dict[str, Verifier] = {
    "acc": acc,
    "format": format_reward,
    "step": steps,
    "strict_format": strict_format,
    "base_acc": base_acc,
    "math_17k_acc": boxed_acc,
    "acc_for_ppo": boxed_acc,
}
NOT_IMPLEMENTED = ("acc_for_dapo", "math_verify_reward", "retool_reward")  # MindSpeed-RL names


def check_names(names: Sequence[str]) -> list[str]:
    """One message per name that is not a verifier of this backend (empty when all are known)."""
    out = []
    for name in names:
        if name in NOT_IMPLEMENTED:
            out.append(
                f"'{name}' is a MindSpeed-RL verifier the embedded torch backend does not implement "
                f"(it implements: {', '.join(VERIFIERS)})"
            )
        elif name not in VERIFIERS:
            out.append(f"unknown verifier '{name}' (known: {', '.join(VERIFIERS)})")
    return out


def score(
    responses: Sequence[str], answers: Sequence[str], names: Sequence[str], weights: Sequence[float]
) -> tuple[list[float], dict[str, list[float]]]:
    """(weighted sum per response, `<name>_rewards/mean` -> per-response scores), as MindSpeed-RL's
    `verifier()` returns them."""
    totals = [0.0] * len(responses)
    per_name: dict[str, list[float]] = {}
    for name, weight in zip(names, weights):
        fn = VERIFIERS[name]
        values = [fn(r, a) for r, a in zip(responses, answers)]
        per_name[f"{name}_rewards/mean"] = values
        totals = [t + v * weight for t, v in zip(totals, values)]
    return totals, per_name
