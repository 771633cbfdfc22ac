"""The converter's failures: exit codes and messages that say what to do."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from ascendfactory.engine.convert.__main__ import _strip_v1_flags, build_parser, main
from ascendfactory.engine.convert.verify import VerificationError, compare_signatures


def run(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_wrong_tp_names_the_valid_values(tiny_models, tmp_path, capsys):
    code, err = run(
        capsys,
        "--load-dir",
        tiny_models[("qwen3", False)],
        "--save-dir",
        tmp_path,
        "--target-tensor-parallel-size",
        3,
    )
    assert code == 2
    assert "--target-tensor-parallel-size" in err and "num_query_groups / KV heads (4)" in err
    assert "use a TP size in [1, 2, 4]" in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_bad_num_layer_list(tiny_models, tmp_path, capsys):
    code, err = run(
        capsys,
        "--load-dir",
        tiny_models[("qwen3", False)],
        "--save-dir",
        tmp_path,
        "--target-pipeline-parallel-size",
        2,
        "--num-layer-list",
        "2,3",
    )
    assert code == 2 and "sum (5) is not the number of layers (4)" in err and "e.g. 2,2" in err
    code, err = run(
        capsys,
        "--load-dir",
        tiny_models[("qwen3", False)],
        "--save-dir",
        tmp_path,
        "--target-pipeline-parallel-size",
        3,
    )
    assert code == 2 and "use PP in [1, 2, 4]" in err


def test_unknown_tensor_is_named_with_known_patterns(tiny_models, tmp_path, capsys):
    src = tiny_models[("llama2", False)]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((src / "config.json").read_text())
    sd = load_file(str(src / "model.safetensors"))
    sd["model.layers.0.mlp.experts.0.w1.weight"] = torch.zeros(2, 2)
    save_file(sd, str(bad / "model.safetensors"))
    code, err = run(capsys, "--load-dir", bad, "--save-dir", tmp_path / "out")
    assert code == 1
    assert "'model.layers.0.mlp.experts.0.w1.weight' has no mapping in family 'llama2'" in err
    assert "model.layers.*.mlp.gate_proj.weight" in err
    assert not (tmp_path / "out" / "latest_checkpointed_iteration.txt").exists()


def test_model_type_hf_mismatch_and_v1_llama2_alias(tiny_models, tmp_path, capsys):
    src = tiny_models[("qwen25", False)]
    code, err = run(capsys, "--load-dir", src, "--save-dir", tmp_path / "a", "--model-type-hf", "qwen3")
    assert code == 2 and "use --model-type-hf qwen25" in err
    code, err = run(
        capsys,
        "--load-dir",
        src,
        "--save-dir",
        tmp_path / "b",
        "--model-type-hf",
        "llama2",
        "--add-qkv-bias",
        "--use-mcore-models",
        "--model-type",
        "GPT",
        "--tokenizer-model",
        "t.json",
    )
    assert code == 0 and "ignoring v1-only flags" in err and "using 'qwen25'" in err


def test_missing_checkpoint_and_bad_flags(tmp_path, capsys):
    code, err = run(
        capsys,
        "--load-model-type",
        "mg",
        "--save-model-type",
        "hf",
        "--load-dir",
        tmp_path,
        "--save-dir",
        tmp_path / "o",
    )
    assert code == 2 and "latest_checkpointed_iteration.txt is missing" in err
    code, err = run(
        capsys,
        "--load-dir",
        tmp_path,
        "--save-dir",
        tmp_path,
        "--load-model-type",
        "hf",
        "--save-model-type",
        "hf",
    )
    assert code == 2 and "hf -> hf is not a conversion" in err
    code, err = run(capsys, "--load-dir", tmp_path, "--save-dir", tmp_path, "--noop-layers", "2")
    assert code == 2 and "unrecognized arguments" in err
    code, err = run(
        capsys, "--load-dir", tmp_path, "--save-dir", tmp_path, "--target-expert-parallel-size", "0"
    )
    assert code == 2 and "--target-expert-parallel-size" in err and "must be >= 1" in err


def test_strip_v1_flags():
    argv = [
        "--use-mcore-models",
        "--model-type",
        "GPT",
        "--load-dir",
        "x",
        "--tokenizer-model=t",
        "--add-qkv-bias",
    ]
    kept, dropped = _strip_v1_flags(argv)
    assert kept == ["--load-dir", "x"] and dropped == [
        "--use-mcore-models",
        "--model-type",
        "--tokenizer-model",
        "--add-qkv-bias",
    ]


def test_verification_names_the_tensor():
    exp = {"a": ((2, 3), "float32"), "b": ((4,), "float32")}
    with pytest.raises(
        VerificationError, match=r"tensor 'a': source shape \[2, 3\] float32, converted shape"
    ):
        compare_signatures(exp, {"a": ((3, 2), "float32"), "b": ((4,), "float32")}, what="x")
    with pytest.raises(VerificationError, match="missing tensor 'b'"):
        compare_signatures(exp, {"a": ((2, 3), "float32")}, what="x")
    with pytest.raises(VerificationError, match="--no-verify"):
        compare_signatures(exp, {**exp, "c": ((1,), "bfloat16")}, what="x")


def test_help_is_light_and_complete():
    help_text = build_parser().format_help()
    for flag in (
        "--load-model-type",
        "--target-tensor-parallel-size",
        "--num-layer-list",
        "--hf-cfg-dir",
        "--max-shard-size",
        "--no-verify",
        "--verify-logits",
        "--make-vocab-size-divisible-by",
    ):
        assert flag in help_text
    code = (
        "import sys, ascendfactory.engine.convert.__main__ as m; m.build_parser(); "
        "print(sorted(k for k in ('torch', 'safetensors', 'transformers') if k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
