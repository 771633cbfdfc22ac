"""Rule verifiers: MindSpeed-RL's names and scores, answer extraction, grading, unknown names refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascendfactory.engine.rl import verifiers as V

R1_OK = "<think>it is 7</think><answer>\\boxed{7}</answer>"


@pytest.mark.parametrize(
    "name,response,answer,score",
    [
        ("base_acc", R1_OK, "7", 1.0),
        ("base_acc", R1_OK, "8", 0.0),
        ("base_acc", "\\boxed{7}", "7", 0.0),  # right answer, no R1 format
        ("base_acc", "<think>x</think><answer>\\boxed{7}</answ", "7", 0.0),  # cut off
        ("math_17k_acc", "so \\boxed{7}", "7", 1.0),
        ("math_17k_acc", "\\boxed{6} then \\boxed{7}", "7", 1.0),  # the last box counts
        ("math_17k_acc", "7", "7", 0.0),
        ("acc_for_ppo", "\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("acc", "\\boxed{7}", "7", 1.0),
        ("acc", "\\boxed{8}", "7", -0.5),
        ("acc", "the answer is 7", "7", -1.0),  # an answer, but no boxed
        ("acc", "no number", "7", -1.0),
        ("acc", "\\boxed{7}<|im_end|>garbage \\boxed{9}", "7", 1.0),  # cut at the stop word
        ("format", "<think>a</think> <answer>b</answer>", "", 1.0),
        ("format", "x<think>a</think><answer>b</answer>", "", 0.0),
        ("format", "<think>a</think><answer>b</answer> trailing", "", 0.0),
        ("strict_format", R1_OK, "", 1.0),
        ("strict_format", "<think>a</think><answer>b</answer>", "", -0.5),  # no boxed
        ("strict_format", "<answer>\\boxed{1}</answer><think>a</think>", "", -0.5),
        ("step", "Step 1: a\nStep 2: b", "", pytest.approx(2 / 3)),
        ("step", "First, a. Second, b. Finally, c. Next, d", "", 1.0),
    ],
)
def test_scores(name, response, answer, score):
    assert V.VERIFIERS[name](response, answer) == score


@pytest.mark.parametrize(
    "given,answer,equal",
    [
        ("12", "12", True),
        (" 12 ", "12.", True),
        ("12.0", "12", True),
        ("\\frac{3}{4}", "0.75", True),
        ("\\dfrac{3}{4}", "3/4", True),
        ("50\\%", "0.5", True),
        ("\\text{Paris}", "Paris", True),
        ("1,000", "1000", True),
        ("13", "12", False),
        ("", "", False),
        (None, "1", False),
        ("x+1", "1+x", False),  # no symbolic equivalence (documented)
    ],
)
def test_grade(given, answer, equal):
    assert V.grade(given, answer) is equal


def test_extraction_order_boxed_then_phrase_then_last_number():
    assert V.extract_answer("the answer is 5 but \\boxed{6}") == "6"
    assert V.extract_answer("so the answer is 5") == "5"
    assert V.extract_answer("3 apples and 4 pears") == "4"
    assert V.extract_answer("\\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}"


@given(st.text(alphabet=st.characters(blacklist_characters="{}\\"), max_size=20))
def test_last_boxed_returns_what_was_boxed(content):
    assert V.last_boxed(f"pre \\boxed{{{content}}} post") == content
    assert V.last_boxed(content) is None


def test_unknown_and_unimplemented_names_are_named():
    assert V.check_names(["base_acc", "format"]) == []
    [unknown] = V.check_names(["base_accc"])
    assert "unknown verifier 'base_accc'" in unknown and "base_acc" in unknown
    [missing] = V.check_names(["acc_for_dapo"])
    assert "does not implement" in missing


def test_score_weights_and_per_verifier_metrics():
    totals, per = V.score([R1_OK, "\\boxed{7}"], ["7", "7"], ["base_acc", "format"], [0.8, 0.2])
    assert totals == [pytest.approx(1.0), 0.0]
    assert per == {"base_acc_rewards/mean": [1.0, 0.0], "format_rewards/mean": [1.0, 0.0]}
