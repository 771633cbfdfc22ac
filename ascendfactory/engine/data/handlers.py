"""The `--handler-name` handlers: which fields of a record are read and which token files they become.

- `GeneralPretrainHandler`: one document per record and per `--json-keys` key (string field), tokenized with
  the tokenizer's own special tokens, plus EOD (the eos id) with `--append-eod`.
- `AlpacaStyleInstructionHandler`: `instruction` / `input` / `output` (+ optional `system`, and
  `history` as `[[q, a], ...]`), renamed with `--map-keys` (`prompt`, `query`, `response`, `system`,
  `history`).
- `SharegptStyleInstructionHandler`: `conversations`, a list of `{"from": "human"|"gpt"|"system",
  "value"}` (+ optional `system`); `--map-keys` `{"messages": ..., "system": ..., "tags": {"role_tag",
  "content_tag", "user_tag", "assistant_tag", "system_tag"}}` for other layouts (e.g. OpenAI `messages`
  with `role` / `content`).
- `GeneralInstructionHandler`: single-turn `instruction` / `input` / `output`, `alpaca` template by default.
- `R1AlpacaStyleInstructionHandler` (and `Math17kAlpacaStyleInstructionHandler`, the same): MindSpeed-RL's
  prompt datasets for GRPO: Alpaca fields as above; `input_ids` is the rendered prompt up to the
  assistant's turn (no response), `labels` the response text's tokens without special tokens (the
  reference answer the verifiers compare with), `attention_mask` ones over `input_ids`.

Instruction handlers write `input_ids`, `attention_mask` (ones) and `labels` (`-100` on prompt tokens).
With `--seq-length`, a conversation is cut to that many tokens, each turn's budget split between prompt and
response in proportion to their lengths (at least one response token), as MindSpeed-LLM does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ascendfactory.engine.data.templates import BOS, EOS, Piece, Special, Template, get_template
from ascendfactory.engine.data.tokenizer import Encoder
from ascendfactory.errors import ConfigError, Problem

IGNORE_INDEX = -100
INSTRUCTION_KEYS = ("input_ids", "attention_mask", "labels")

_ALPACA_KEYS = {
    "prompt": "instruction",
    "query": "input",
    "response": "output",
    "system": "system",
    "history": "history",
}
_SHAREGPT_KEYS: dict[str, Any] = {
    "messages": "conversations",
    "system": "system",
    "tags": {
        "role_tag": "from",
        "content_tag": "value",
        "user_tag": "human",
        "assistant_tag": "gpt",
        "system_tag": "system",
    },
}


class RecordError(ValueError):
    """A record without the fields (or types) the handler needs; the message says which."""


@dataclass(frozen=True)
class HandlerConfig:
    """The handler's settings from the command line (picklable: it is sent to every worker)."""

    name: str
    json_keys: tuple[str, ...] = ("text",)
    prompt_type: str | None = None
    map_keys: dict[str, Any] = field(default_factory=dict)
    append_eod: bool = False
    seq_length: int | None = None


@dataclass(frozen=True)
class Conversation:
    pairs: list[tuple[str, str]]
    system: str | None


def _str_field(record: dict[str, Any], key: str, *, required: bool = True) -> str:
    if key not in record or record[key] is None:
        if required:
            raise RecordError(f"missing field {key!r}")
        return ""
    value = record[key]
    if not isinstance(value, str):
        raise RecordError(f"field {key!r} must be a string, got {type(value).__name__}")
    return value


class Handler:
    """Base: turns a batch of parsed records into token lists per output key."""

    kind = "pretrain"

    def __init__(self, cfg: HandlerConfig, encoder: Encoder) -> None:
        self.cfg, self.encoder = cfg, encoder

    @property
    def output_keys(self) -> tuple[str, ...]:
        return self.cfg.json_keys

    def extract(self, record: dict[str, Any]) -> Any:
        """The fields this handler uses, or RecordError."""
        return tuple(_str_field(record, key) for key in self.cfg.json_keys)

    def encode(self, items: list[Any]) -> list[dict[str, list[int]]]:
        """Token lists per output key for each extracted item (one batch-encode call per key)."""
        out: list[dict[str, list[int]]] = [{} for _ in items]
        eod = [self.encoder.spec.eos_id] if self.cfg.append_eod else []
        for k, key in enumerate(self.cfg.json_keys):
            ids = self.encoder.encode_batch([item[k] for item in items], add_special_tokens=True)
            for doc, tokens in zip(out, ids):
                doc[key] = tokens + eod if eod else tokens
        return out


class GeneralPretrainHandler(Handler):
    """Plain text documents (`--json-keys`, default `text`)."""


class _InstructionHandler(Handler):
    kind = "instruction"
    default_prompt_type: str | None = None

    def __init__(self, cfg: HandlerConfig, encoder: Encoder) -> None:
        super().__init__(cfg, encoder)
        name = cfg.prompt_type or self.default_prompt_type
        if name is None:
            raise ConfigError(
                Problem(
                    key="--prompt-type",
                    message=f"{cfg.name} needs a chat template",
                    fix="pass --prompt-type (e.g. qwen, llama3, alpaca, empty)",
                    source="command line",
                )
            )
        self.template: Template = get_template(name)
        self._special = {BOS: self._special_id(BOS), EOS: self._special_id(EOS)}

    def _special_id(self, which: Special) -> int | None:
        spec = self.encoder.spec
        if which is BOS:
            return spec.bos_id
        text = self.template.eos_text
        tid = self.encoder.token_id(text) if text else spec.eos_id
        needed = any(p is EOS for p in self.template.assistant)
        if tid is None and needed:
            what = f"the token {text!r}" if text else "an eos token"
            raise ConfigError(
                Problem(
                    key="--prompt-type",
                    message=f"template {self.template.name!r} needs {what}, "
                    f"which the tokenizer at {spec.path} does not have",
                    fix="use a matching --prompt-type (e.g. qwen for Qwen tokenizers, llama3 for Llama 3)",
                    source="command line",
                )
            )
        return tid

    @property
    def output_keys(self) -> tuple[str, ...]:
        return INSTRUCTION_KEYS

    def encode(self, items: list[Conversation]) -> list[dict[str, list[int]]]:
        """Token lists per output key; `self.fit` gets (answer cut short?, untruncated length) per item."""
        rendered = [[(t.prompt, t.response) for t in self.template.turns(c.pairs, c.system)] for c in items]
        tokens = self._tokens(rendered)
        self.fit = [(self._cut_short(turns), sum(len(a) + len(b) for a, b in turns)) for turns in tokens]
        return [self._assemble(turns) for turns in tokens]

    def _cut_short(self, turns: list[tuple[list[int], list[int]]]) -> bool:
        """Whether `--seq-length` truncation (`_assemble`) removes any answer token of the conversation."""
        cutoff, used = self.cfg.seq_length, 0
        if cutoff is None:
            return False
        for source, target in turns:
            left = cutoff - used
            if left <= 0:
                return bool(target)
            max_source, max_target = split_budget(len(source), len(target), left)
            if max_target < len(target):
                return True
            used += min(max_source, len(source)) + len(target)
        return False

    def _tokens(
        self, rendered: list[list[tuple[tuple[Piece, ...], tuple[Piece, ...]]]]
    ) -> list[list[tuple[list[int], list[int]]]]:
        """Token ids of each (prompt pieces, response pieces) pair; text pieces in one batch-encode call."""
        texts = [
            p
            for turns in rendered
            for prompt, response in turns
            for p in (*prompt, *response)
            if not isinstance(p, Special)
        ]
        ids = iter(self.encoder.encode_batch(texts, add_special_tokens=False))

        def tokens(pieces: tuple[Piece, ...]) -> list[int]:
            out: list[int] = []
            for p in pieces:
                if isinstance(p, Special):
                    tid = self._special[p]
                    if tid is not None:
                        out.append(tid)
                else:
                    out.extend(next(ids))
            return out

        return [[(tokens(prompt), tokens(response)) for prompt, response in turns] for turns in rendered]

    def _assemble(self, turns: list[tuple[list[int], list[int]]]) -> dict[str, list[int]]:
        input_ids: list[int] = []
        labels: list[int] = []
        cutoff = self.cfg.seq_length
        for source, target in turns:
            if cutoff is not None:
                left = cutoff - len(input_ids)
                if left <= 0:
                    break
                max_source, max_target = split_budget(len(source), len(target), left)
                source, target = source[:max_source], target[:max_target]
            input_ids += source + target
            labels += [IGNORE_INDEX] * len(source) + target
        return {"input_ids": input_ids, "attention_mask": [1] * len(input_ids), "labels": labels}


def split_budget(source_len: int, target_len: int, budget: int) -> tuple[int, int]:
    """(max prompt tokens, max response tokens) of a turn that has `budget` tokens left."""
    total = source_len + target_len
    max_target = int(budget * target_len / total) if total else 0
    max_target = max(max_target, 1)
    return budget - min(max_target, target_len), max_target


class AlpacaStyleInstructionHandler(_InstructionHandler):
    """Alpaca records: instruction (+ input) -> output, optional system and history."""

    def keys(self) -> dict[str, str]:
        return {**_ALPACA_KEYS, **self.cfg.map_keys}

    def extract(self, record: dict[str, Any]) -> Conversation:
        keys = self.keys()
        instruction = _str_field(record, keys["prompt"])
        query = _str_field(record, keys["query"], required=False)
        user = "\n".join(part for part in (instruction, query) if part)
        pairs = self._history(record, keys["history"]) + [(user, _str_field(record, keys["response"]))]
        return Conversation(pairs, _str_field(record, keys["system"], required=False) or None)

    @staticmethod
    def _history(record: dict[str, Any], key: str) -> list[tuple[str, str]]:
        history = record.get(key)
        if history is None:
            return []
        if not isinstance(history, list) or not all(
            isinstance(h, (list, tuple)) and len(h) == 2 and all(isinstance(s, str) for s in h)
            for h in history
        ):
            raise RecordError(f"field {key!r} must be a list of [question, answer] string pairs")
        return [(q, a) for q, a in history]


class GeneralInstructionHandler(AlpacaStyleInstructionHandler):
    """Single-turn instruction / input / output records (the `alpaca` template unless --prompt-type)."""

    default_prompt_type = "alpaca"

    def keys(self) -> dict[str, str]:
        return {**super().keys(), "history": "\0no-history"}


class R1AlpacaStyleInstructionHandler(AlpacaStyleInstructionHandler):
    """GRPO prompts: the prompt tokens only, and the answer's tokens as `labels` (MindSpeed-RL's layout)."""

    def encode(self, items: list[Conversation]) -> list[dict[str, list[int]]]:
        prompts = [[(turn.prompt, ()) for turn in self.template.turns(c.pairs, c.system)] for c in items]
        answers = self.encoder.encode_batch([c.pairs[-1][1] for c in items], add_special_tokens=False)
        out = []
        for turns, answer in zip(self._tokens(prompts), answers):
            ids = [t for source, _ in turns for t in source]
            out.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": list(answer)})
        return out


class Math17kAlpacaStyleInstructionHandler(R1AlpacaStyleInstructionHandler):
    """MindSpeed-RL's name for the same handler with MATH-17k's field names (through map_keys)."""


class SharegptStyleInstructionHandler(_InstructionHandler):
    """ShareGPT records: alternating user / assistant messages."""

    def extract(self, record: dict[str, Any]) -> Conversation:
        keys = {**_SHAREGPT_KEYS, **self.cfg.map_keys}
        tags = {**_SHAREGPT_KEYS["tags"], **keys.get("tags", {})}
        messages = record.get(keys["messages"])
        if not isinstance(messages, list) or not messages:
            raise RecordError(f"field {keys['messages']!r} must be a non-empty list of messages")
        system = _str_field(record, keys["system"], required=False) or None
        roles: list[str] = []
        contents: list[str] = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise RecordError(f"message {i} must be an object, got {type(m).__name__}")
            role, content = m.get(tags["role_tag"]), m.get(tags["content_tag"])
            if not isinstance(content, str):
                raise RecordError(f"message {i} has no string {tags['content_tag']!r}")
            if role == tags["system_tag"] and i == 0:
                system = content
                continue
            roles.append(role)
            contents.append(content)
        expected = [tags["user_tag"], tags["assistant_tag"]] * (len(roles) // 2)
        if not roles or len(roles) % 2 or roles != expected:
            raise RecordError(
                f"messages must alternate {tags['user_tag']!r} / {tags['assistant_tag']!r} "
                f"and end with {tags['assistant_tag']!r}; got roles {roles}"
            )
        return Conversation(list(zip(contents[::2], contents[1::2])), system)


HANDLERS: dict[str, type[Handler]] = {
    cls.__name__: cls
    for cls in (
        GeneralPretrainHandler,
        AlpacaStyleInstructionHandler,
        SharegptStyleInstructionHandler,
        GeneralInstructionHandler,
        R1AlpacaStyleInstructionHandler,
        Math17kAlpacaStyleInstructionHandler,
    )
}


def handler_class(name: str) -> type[Handler]:
    """The handler class for `--handler-name` (empty means GeneralPretrainHandler)."""
    try:
        return HANDLERS[name or "GeneralPretrainHandler"]
    except KeyError:
        raise ConfigError(
            Problem(
                key="--handler-name",
                message=f"unknown handler {name!r}",
                fix=f"use one of: {', '.join(HANDLERS)}",
                source="command line",
            )
        ) from None
