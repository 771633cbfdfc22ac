"""The transformers-free tokenizer loader builds exactly AutoTokenizer's tokenizer, or declines."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from data_helpers import write_jsonl

from ascendfactory.engine.data.demo_data import pretrain_records, sft_records
from ascendfactory.engine.data.fast_tokenizer import fast_backend
from ascendfactory.engine.data.preprocess import main
from ascendfactory.engine.data.tokenizer import Encoder, load_tokenizer_spec

TEXTS = [
    "",
    "Hello world",
    "  leading spaces and trailing  ",
    "digits 1234567 and 3.14",
    "line one\nline two\r\n\n",
    "naïve café — ünïcödé, 中文字符, emoji 🙂",
    "<|im_start|>user\nhi<|im_end|>\n",
    "a<|endoftext|>b",
    "tabs\tand\ttabs",
    "What's up? I'll go; they're here.",
    "x" * 300,
]


def _variant(
    src: Path,
    dst: Path,
    edit: Callable[[dict[str, Any], dict[str, Any]], None],
    model_type: str | None = None,
) -> Path:
    """A copy of the tokenizer at `src` with `edit(config, tokenizer_json)` applied (and a config.json)."""
    shutil.copytree(src, dst)
    if model_type is not None:
        (dst / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    config = json.loads((dst / "tokenizer_config.json").read_text(encoding="utf-8"))
    data = json.loads((dst / "tokenizer.json").read_text(encoding="utf-8"))
    edit(config, data)
    (dst / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (dst / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    return dst


def _template(bos: str | None, eos: str | None) -> dict[str, Any]:
    """A tokenizer.json post-processor adding bos and/or eos around the text, as Llama 3 ships (bos)."""
    ids = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}

    def special(token: str | None, type_id: int) -> list[dict[str, Any]]:
        return [] if token is None else [{"SpecialToken": {"id": token, "type_id": type_id}}]

    def seq(name: str, type_id: int) -> list[dict[str, Any]]:
        return [{"Sequence": {"id": name, "type_id": type_id}}]

    single = special(bos, 0) + seq("A", 0) + special(eos, 0)
    return {
        "type": "TemplateProcessing",
        "single": single,
        "pair": single + special(bos, 1) + seq("B", 1) + special(eos, 1),
        "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (bos, eos) if t},
    }


def _plain(config: dict[str, Any], data: dict[str, Any]) -> None:
    config["tokenizer_class"] = "PreTrainedTokenizerFast"


def _plain_bos(config: dict[str, Any], data: dict[str, Any]) -> None:
    """Llama 3 style: bos added by the post-processor of tokenizer.json."""
    config.update(tokenizer_class="PreTrainedTokenizerFast", bos_token="<|endoftext|>")
    data["post_processor"] = _template("<|endoftext|>", None)


def _qwen_bos_eos(config: dict[str, Any], data: dict[str, Any]) -> None:
    """bos and eos from the post-processor; add_bos_token of the config is ignored by transformers."""
    config.update(bos_token="<|endoftext|>", add_bos_token=True, add_eos_token=False)
    data["post_processor"] = _template("<|endoftext|>", "<|im_end|>")


def _qwen25_style(config: dict[str, Any], data: dict[str, Any]) -> None:
    """As Qwen2.5 ships: add_bos_token false, a byte-level post-processor, the added tokens in the config."""
    config.update(
        add_bos_token=False,
        add_prefix_space=False,
        errors="replace",
        split_special_tokens=False,
        added_tokens_decoder={
            str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in data["added_tokens"]
        },
    )
    data["post_processor"] = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }


def _no_post_processor(config: dict[str, Any], data: dict[str, Any]) -> None:
    config.update(tokenizer_class="PreTrainedTokenizerFast", bos_token="<|endoftext|>")
    data["post_processor"] = None


SUPPORTED = {
    "plain": _plain,
    "plain_bos": _plain_bos,
    "qwen_bos_eos": _qwen_bos_eos,
    "qwen25_style": _qwen25_style,
    "no_post_processor": _no_post_processor,
}


def _unknown_key(config: dict[str, Any], data: dict[str, Any]) -> None:
    config["legacy"] = True


def _other_class(config: dict[str, Any], data: dict[str, Any]) -> None:
    config["tokenizer_class"] = "LlamaTokenizerFast"


def _eos_not_added(config: dict[str, Any], data: dict[str, Any]) -> None:
    config["eos_token"] = "Hello"


def _other_pre_tokenizer(config: dict[str, Any], data: dict[str, Any]) -> None:
    data["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True


DECLINED = {
    "unknown_key": _unknown_key,
    "other_class": _other_class,
    "eos_not_added": _eos_not_added,
    "other_pre_tokenizer": _other_pre_tokenizer,
}


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model directory of the llama family (its tokenizer files and config.json)."""
    from ascendfactory.engine.demo import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("llama_demo"), family="llama")


def _assert_same_as_auto(path: Path) -> None:
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(path)
    fast = fast_backend(str(path))
    assert fast is not None, "the fast loader declined a supported tokenizer"
    backend, ids = fast
    assert json.loads(backend.to_str()) == json.loads(auto.backend_tokenizer.to_str())
    assert ids["bos_token"] == auto.bos_token_id and ids["eos_token"] == auto.eos_token_id
    assert ids["pad_token"] == auto.pad_token_id
    spec = load_tokenizer_spec(str(path))
    assert (spec.vocab_size, spec.bos_id, spec.eos_id, spec.pad_id) == (
        len(auto),
        auto.bos_token_id,
        auto.eos_token_id,
        auto.pad_token_id,
    )
    encoder = Encoder(spec)
    for special in (True, False):
        assert encoder.encode_batch(TEXTS, add_special_tokens=special) == [
            auto.encode(t, add_special_tokens=special) for t in TEXTS
        ]
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "not-a-token"):
        assert encoder.token_id(token) == (
            auto.convert_tokens_to_ids(token) if token in auto.get_vocab() else None
        )


def test_demo_tokenizer_is_loaded_without_transformers(tokenizer_dir: Path) -> None:
    _assert_same_as_auto(tokenizer_dir)


def test_demo_llama_family(llama_dir: Path) -> None:
    _assert_same_as_auto(llama_dir)


@pytest.mark.parametrize("name", sorted(SUPPORTED))
@pytest.mark.parametrize("model_type", [None, "qwen2", "llama", "qwen3"])
def test_supported_variants_match_auto_tokenizer(
    name: str, model_type: str | None, tokenizer_dir: Path, tmp_path: Path
) -> None:
    _assert_same_as_auto(_variant(tokenizer_dir, tmp_path / name, SUPPORTED[name], model_type))


@pytest.mark.parametrize("edit", [_plain_bos, _qwen_bos_eos])
def test_bos_is_added_like_auto_tokenizer(
    edit: Callable[..., None], tokenizer_dir: Path, tmp_path: Path
) -> None:
    path = _variant(tokenizer_dir, tmp_path / "bos", edit)
    spec = load_tokenizer_spec(str(path))
    assert spec.bos_id == 0
    assert Encoder(spec).encode_batch(["Hello"], add_special_tokens=True)[0][0] == spec.bos_id
    assert Encoder(spec).encode_batch(["Hello"], add_special_tokens=False)[0][0] != spec.bos_id


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_unsupported_variants_fall_back(name: str, tokenizer_dir: Path, tmp_path: Path) -> None:
    path = _variant(tokenizer_dir, tmp_path / name, DECLINED[name])
    assert fast_backend(str(path)) is None
    spec = load_tokenizer_spec(str(path))  # AutoTokenizer loads it
    assert spec.vocab_size > 0


@pytest.mark.parametrize("model_type", ["mistral", "glm4", "gemma"])
def test_unchecked_model_types_fall_back(model_type: str, tokenizer_dir: Path, tmp_path: Path) -> None:
    assert fast_backend(str(_variant(tokenizer_dir, tmp_path / "m", _plain, model_type))) is None


def test_special_tokens_map_without_added_tokens_decoder_falls_back(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    path = _variant(tokenizer_dir, tmp_path / "legacy", _plain)
    (path / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>"}), encoding="utf-8")
    assert fast_backend(str(path)) is None


def test_no_transformers_or_torch_import(tokenizer_dir: Path) -> None:
    code = (
        "import sys; from ascendfactory.engine.data.tokenizer import load_tokenizer_spec; "
        f"load_tokenizer_spec({str(tokenizer_dir)!r}); "
        "print(sorted(m for m in ('transformers', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_outputs_identical_to_auto_tokenizer_loading(
    workers: str, tokenizer_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pretrain = write_jsonl(tmp_path / "pt.jsonl", pretrain_records(40, seed=3))
    sft = write_jsonl(tmp_path / "sft.jsonl", sft_records()[:40])
    outputs = {}
    for loader in ("transformers", "fast"):
        monkeypatch.setenv("AF_TOKENIZER_LOADER", loader)
        out = tmp_path / loader
        assert (
            main(
                [
                    "--input",
                    str(pretrain),
                    "--tokenizer-name-or-path",
                    str(tokenizer_dir),
                    "--append-eod",
                    "--output-prefix",
                    str(out / "pt"),
                    "--workers",
                    workers,
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "--input",
                    str(sft),
                    "--tokenizer-name-or-path",
                    str(tokenizer_dir),
                    "--output-prefix",
                    str(out / "sft"),
                    "--handler-name",
                    "AlpacaStyleInstructionHandler",
                    "--prompt-type",
                    "qwen",
                    "--workers",
                    workers,
                ]
            )
            == 0
        )
        outputs[loader] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert len(outputs["fast"]) == 8 and outputs["fast"] == outputs["transformers"]
