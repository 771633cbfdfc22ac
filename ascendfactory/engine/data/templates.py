"""Prompt templates as data, with the semantics of MindSpeed-LLM's `configs/finetune/templates.json`.

A conversation is a list of (user, assistant) turns plus an optional system text. Each turn renders to a
*prompt* (masked out of the loss) and a *response* (trained on):

- turn 0 prompt = `prefix` + `system` (when a system text, or the template's default, is present) + `user`;
- turn k > 0 prompt = `separator` + `user`;
- response = `assistant` (by default the content followed by the end-of-sequence token).

Pieces are plain strings (with a `{content}` placeholder) or the markers `BOS` / `EOS`, which become the
tokenizer's bos / eos token ids. With `replace_eos`, `EOS` is the template's first stop word instead (e.g.
`<|im_end|>` for ChatML), as MindSpeed-LLM does by replacing the tokenizer's eos token. The llama2 format puts
the system block inside the first user message (`system_in_first_user`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ascendfactory.errors import ConfigError, Problem


class Special(str, Enum):
    """A special-token slot resolved against the tokenizer at encode time."""

    BOS = "bos"
    EOS = "eos"


BOS, EOS = Special.BOS, Special.EOS
Piece = str | Special


@dataclass(frozen=True)
class Turn:
    """One rendered turn: the prompt pieces (loss-masked) and the response pieces (trained on)."""

    prompt: tuple[Piece, ...]
    response: tuple[Piece, ...]


@dataclass(frozen=True)
class Template:
    """A chat format. Strings may hold `{content}`; see the module docstring for how turns are built."""

    name: str
    user: tuple[Piece, ...]
    assistant: tuple[Piece, ...] = ("{content}", EOS)
    system: tuple[Piece, ...] = ("{content}",)
    prefix: tuple[Piece, ...] = ()
    separator: str = ""
    default_system: str = ""
    stop_words: tuple[str, ...] = ()
    replace_eos: bool = False
    system_in_first_user: bool = False

    @property
    def eos_text(self) -> str | None:
        """The token text that `EOS` stands for, when the template fixes it (None: the tokenizer's eos)."""
        return self.stop_words[0] if self.replace_eos and self.stop_words else None

    def turns(self, pairs: list[tuple[str, str]], system: str | None = None) -> list[Turn]:
        """Render (user, assistant) pairs; `system` None or empty falls back to `default_system`."""
        system_text = system or self.default_system
        out: list[Turn] = []
        for k, (user, assistant) in enumerate(pairs):
            prompt: list[Piece] = []
            content = user
            if k == 0:
                prompt += self.prefix
                if system_text:
                    block = _fill(self.system, system_text)
                    if self.system_in_first_user:
                        content = "".join(p for p in block if not isinstance(p, Special)) + user
                    else:
                        prompt += block
            elif self.separator:
                prompt.append(self.separator)
            prompt += _fill(self.user, content)
            out.append(Turn(prompt=_merge(prompt), response=_merge(_fill(self.assistant, assistant))))
        return out

    def render(
        self, pairs: list[tuple[str, str]], system: str | None = None, *, bos: str = "", eos: str = ""
    ) -> str:
        """The whole conversation as one string (`bos`/`eos` stand for the special tokens)."""
        eos = self.eos_text or eos
        text = []
        for turn in self.turns(pairs, system):
            for piece in (*turn.prompt, *turn.response):
                text.append(bos if piece is BOS else eos if piece is EOS else piece)
        return "".join(text)


def _fill(pieces: tuple[Piece, ...], content: str) -> list[Piece]:
    return [p if isinstance(p, Special) else p.replace("{content}", content) for p in pieces]


def _merge(pieces: list[Piece]) -> tuple[Piece, ...]:
    """Join adjacent strings so each run of text is tokenized once."""
    out: list[Piece] = []
    for p in pieces:
        if not isinstance(p, Special) and out and not isinstance(out[-1], Special):
            out[-1] = out[-1] + p
        elif isinstance(p, Special) or p:
            out.append(p)
    return tuple(out)


_CHATML_USER = ("<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n",)
_CHATML_SYSTEM = ("<|im_start|>system\n{content}<|im_end|>\n",)

TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template(
            name="qwen",
            user=_CHATML_USER,
            system=_CHATML_SYSTEM,
            separator="\n",
            default_system="You are a helpful assistant.",
            stop_words=("<|im_end|>",),
            replace_eos=True,
        ),
        Template(
            name="chatml",
            user=_CHATML_USER,
            system=_CHATML_SYSTEM,
            separator="\n",
            stop_words=("<|im_end|>", "<|im_start|>"),
            replace_eos=True,
        ),
        Template(
            name="llama3",
            user=(
                "<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n",
            ),
            system=("<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",),
            prefix=(BOS,),
            stop_words=("<|eot_id|>",),
            replace_eos=True,
        ),
        Template(
            name="llama2",
            user=(BOS, "[INST] {content} [/INST]"),
            system=("<<SYS>>\n{content}\n<</SYS>>\n\n",),
            system_in_first_user=True,
        ),
        Template(
            name="alpaca",
            user=("### Instruction:\n{content}\n\n### Response:\n",),
            separator="\n\n",
            default_system="Below is an instruction that describes a task. "
            "Write a response that appropriately completes the request.\n\n",
        ),
        Template(name="empty", user=("{content}",), assistant=("{content}",)),
    )
}


def get_template(name: str) -> Template:
    """The template called `name`, or a ConfigError listing the valid names."""
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ConfigError(
            Problem(
                key="--prompt-type",
                message=f"unknown prompt type {name!r}",
                fix=f"use one of: {', '.join(sorted(TEMPLATES))}",
                source="command line",
            )
        ) from None


def list_templates() -> list[str]:
    """Names of the shipped templates."""
    return sorted(TEMPLATES)
