"""mindspeed-mm: generated facts, the generator's parsing, the mm-convert argv, checkout, doctor, install."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascendfactory.backends.mindspeed_mm import environment
from ascendfactory.backends.mindspeed_mm.convert import depth, flatten, render
from ascendfactory.backends.mindspeed_mm.environment import checkout_generation, megatron_version
from ascendfactory.backends.mindspeed_mm.keys import (
    GENERATIONS,
    data_json,
    mm_convert,
    path_params,
    presets,
    training_names,
)
from ascendfactory.errors import ConfigError
from ascendfactory.features.install import run_install
from tests.conftest import REPO
from tests.unit.backends.mindspeed_mm.mm_helpers import make_mm_checkout, plan_for

FACTS = REPO / "ascendfactory" / "backends" / "mindspeed_mm" / "keys"
sys.path.insert(0, str(REPO / "scripts"))
import gen_mindspeed_mm_data as gen  # noqa: E402


# -- the data files -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(FACTS.glob("*.txt")), ids=lambda p: p.name)
def test_every_key_list_names_its_sources(path: Path):
    head = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert any("scripts/gen_mindspeed_mm_data.py" in line for line in head)
    sources = [line for line in head if re.search(r"@ \S+ \([0-9a-f]{12}\): \S+", line)]
    assert sources, "no 'repository @ ref (commit): file' line"
    assert any("Ascend/MindSpeed-MM" in line for line in sources)


@pytest.mark.parametrize("generation", GENERATIONS)
def test_presets_name_their_commits_and_files(generation):
    doc = presets(generation)
    assert re.fullmatch(r"[0-9a-f]{40}", doc["mindspeed_mm"]["commit"])
    assert re.fullmatch(r"[0-9a-f]{40}", doc["megatron"]["commit"])
    for name, preset in doc["models"].items():
        assert (
            preset["source"]["files"][0] == f"examples/qwen2.5vl/finetune_qwen2_5_vl_{name.split('-')[-1]}.sh"
        )
        assert preset["converter"] == "Qwen2_5_VLConverter"


def test_the_generations_differ_where_the_spec_says():
    old, new = training_names("2.1.0"), training_names("master")
    assert {"mm-data", "mm-model", "mm-tool", "use-mcore-models", "enable-dummy-optimizer"} <= old & new
    assert "ckpt-format" in new - old  # Megatron-LM core_v0.12.1
    assert ("Qwen2_5_VLConverter", "lora_hf_to_mm") in mm_convert("master")
    assert ("Qwen2_5_VLConverter", "lora_hf_to_mm") not in mm_convert("2.1.0")
    assert "enable_thinking" in data_json("master").keys["dataset_param.basic_parameters"]
    assert "enable_thinking" not in data_json("2.1.0").keys["dataset_param.basic_parameters"]
    for g in GENERATIONS:
        hf_to_mm = mm_convert(g)[("Qwen2_5_VLConverter", "hf_to_mm")]
        assert hf_to_mm["cfg.parallel_config.llm_pp_layers"].type == "List[List[NonNegativeInt]]"
        assert mm_convert(g)[("Qwen2_5_VLConverter", "mm_to_hf")][
            "cfg.parallel_config.llm_pp_layers"
        ].type == ("List[NonNegativeInt]")
        assert (
            data_json(g).rejected["dataset_param.basic_parameters"]["cutoff_len"].startswith("`cutoff_len`")
        )
    assert "dataset_param.basic_parameters.dataset" in path_params()["mm_data"]


# -- the generator's parsing (on text written here) -------------------------------------------------------
SCRIPT = """#!/bin/bash
source /opt/toolkit/set_env.sh
export A=1
export B="x:y"   # a comment
TP=2
PP=1
MBS=1
GRAD_ACC_STEP=4
CP=1
NPUS_PER_NODE=4
MM_DATA="./d.json"
MM_MODEL="./m.json"
MM_TOOL="./t.json"
LOAD_PATH="in"
SAVE_PATH="out"
GPT_ARGS="
    --tensor-model-parallel-size ${TP} \\
    --bf16 \\
    --load $LOAD_PATH \\
"
OUTPUT_ARGS="
    --save $SAVE_PATH \\
"
torchrun $DISTRIBUTED_ARGS pretrain_vlm.py \\
    $GPT_ARGS \\
    $OUTPUT_ARGS \\
    --distributed-backend nccl \\
    2>&1 | tee logs/x.log
"""


def test_parse_script_reads_the_groups_and_the_torchrun_line():
    facts = gen.parse_script(SCRIPT)
    assert facts["exports"] == {"A": "1", "B": "x:y"}
    assert facts["sources"] == ["/opt/toolkit/set_env.sh"]
    assert facts["groups"]["GPT_ARGS"] == [
        ["tensor-model-parallel-size", "${TP}"],
        ["bf16"],
        ["load", "${LOAD_PATH}"],
    ]
    assert facts["entry"] == {
        "script": "pretrain_vlm.py",
        "groups": ["GPT_ARGS", "OUTPUT_ARGS"],
        "trailing": [["distributed-backend", "nccl"]],
    }


CONVERTER_PACKAGE = {
    "checkpoint/__init__.py": "from checkpoint.conv import MyConverter\n",
    "checkpoint/config.py": (
        "from pydantic import BaseModel\n"
        "class Inner(BaseModel):\n    size: int = 1\n    layers: list[int]\n"
        "class Cfg(BaseModel):\n    out: str\n    inner: Inner\n    extra: Inner | None = None\n"
    ),
    "checkpoint/conv.py": (
        "from abc import ABC, abstractmethod\n"
        "from checkpoint.config import Cfg\n"
        "class Base(ABC):\n    @staticmethod\n    @abstractmethod\n    def go(cfg): ...\n"
        "    @classmethod\n    def add_command(cls, f): ...\n"
        "class MyConverter(Base):\n    @staticmethod\n    def go(cfg: Cfg): ...\n"
        "    @staticmethod\n    def _hidden(cfg: Cfg): ...\n"
    ),
}


def test_mm_convert_options_expand_the_pydantic_models(tmp_path):
    repo = tmp_path / "repo"
    for name, text in CONVERTER_PACKAGE.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
        check=True,
    )
    files, lines = gen.mm_convert_lines(gen.Reader(str(repo), from_files=False), "HEAD")
    assert lines == [
        "MyConverter\tgo\tcfg.out\tstr\trequired",
        "MyConverter\tgo\tcfg.inner.size\tint\toptional",
        "MyConverter\tgo\tcfg.inner.layers\tlist[int]\trequired",
        "MyConverter\tgo\tcfg.extra.size\tint\toptional",
        "MyConverter\tgo\tcfg.extra.layers\tlist[int]\toptional",  # required only when `extra` is given
    ]
    assert files == ["checkpoint/__init__.py", "checkpoint/config.py", "checkpoint/conv.py"]


# -- the mm-convert argv uses only options mm-convert defines ------------------------------------------------
def test_render_and_flatten():
    assert render([[1, 10, 10, 7]]) == "[[1,10,10,7]]" and render(True) == "true" and render(2) == "2"
    assert flatten({"a": {"b": 1}, "c": [1]}) == {"cfg.a.b": 1, "cfg.c": [1]}
    assert (depth(3), depth([1]), depth([[1]])) == (0, 1, 2)


@st.composite
def layouts(draw):
    """A valid 8-device layout of Qwen2.5-VL-7B: TP in {1, 2, 4}, PP dividing what is left, the 28 LLM and
    32 ViT layers spread over the stages (ViT first, every stage with LLM layers)."""
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4, 8) if 8 % (tp * p) == 0 and p <= 28]))
    cuts = sorted(draw(st.lists(st.integers(1, 27), min_size=pp - 1, max_size=pp - 1, unique=True)))
    llm = [b - a for a, b in zip([0, *cuts], [*cuts, 28])]
    vit = [32] + [0] * (pp - 1)
    generation = draw(st.sampled_from(GENERATIONS))
    return generation, tp, pp, vit, llm


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts())
def test_mm_convert_argv_uses_only_options_mm_convert_defines(clean_env, tmp_path, layout):
    generation, tp, pp, vit, llm = layout
    plan = plan_for(
        tmp_path,
        {
            "backend_config": {
                "generation": generation,
                "training": {"tensor-model-parallel-size": tp, "pipeline-model-parallel-size": pp},
                "model": {
                    "image_encoder": {"vision_encoder": {"pipeline_num_layers": vit}},
                    "text_decoder": {"pipeline_num_layers": llm},
                },
                "convert_ckpt_hf2mg": {"cfg": {"trust_remote_code": False}},
            }
        },
    )
    for step, sub in (("hf2mg", "hf_to_mm"), ("mg2hf", "mm_to_hf")):
        argv = plan.step(step).argv
        assert argv[3:5] == ["Qwen2_5_VLConverter", sub]
        keys = [a[2:] for a in argv[5::2]]
        assert set(keys) <= set(mm_convert(generation)[("Qwen2_5_VLConverter", sub)])
        lists = dict(zip(keys, argv[6::2]))
        want_llm = [llm] if sub == "hf_to_mm" else llm
        assert lists["cfg.parallel_config.llm_pp_layers"] == render(want_llm)
        assert lists["cfg.parallel_config.tp_size"] == str(tp)


# -- the checkout ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("generation, minor", [("2.1.0", 8), ("master", 12)])
def test_checkout_generation_and_megatron(tmp_path, generation, minor):
    root = make_mm_checkout(tmp_path / "mm", generation)
    assert checkout_generation(str(root)) == generation
    assert megatron_version(str(root)) == (0, minor)


def test_dry_run_from_a_master_checkout(clean_env, tmp_path, monkeypatch):
    root = make_mm_checkout(tmp_path / "mm", "master")
    monkeypatch.setenv("AF_MINDSPEED_MM_DIR", str(root))
    plan = plan_for(
        tmp_path,
        {
            "backend_config": {
                "training": {"pipeline-model-parallel-size": 2},
                "model": {
                    "image_encoder": {"vision_encoder": {"pipeline_num_layers": [32, 0]}},
                    "text_decoder": {"pipeline_num_layers": [12, 16]},
                },
            }
        },
    )
    assert plan.facts["generation"] == "master"
    assert "has mindspeed_mm/configs/validate_params.json" in plan.facts["generation_reason"]
    assert "--log-tps" in plan.step("train").argv


# -- doctor and install -------------------------------------------------------------------------------------
def test_doctor_reports_the_checkout_generation_and_megatron(clean_env, tmp_path):
    root = make_mm_checkout(tmp_path / "mm", "master", megatron_minor=8)
    checks = {c.name: c for c in environment.checks({"AF_MINDSPEED_MM_DIR": str(root), "PATH": ""})}
    assert checks["MindSpeed-MM checkout"].status == "ok"
    assert checks["MindSpeed-MM generation"].detail.startswith("master")
    assert checks["megatron/ in MindSpeed-MM"].status == "missing"
    assert "MindSpeed-MM master needs core 0.12" in checks["megatron/ in MindSpeed-MM"].detail
    assert (
        checks["Ascend toolkit"].status == "missing" and "cann/set_env.sh" in checks["Ascend toolkit"].detail
    )


def test_doctor_without_a_checkout(clean_env, tmp_path):
    checks = {c.name: c for c in environment.checks({"AF_MINDSPEED_MM_DIR": str(tmp_path / "none")})}
    assert checks["MindSpeed-MM checkout"].status == "missing"
    assert "sh install.sh mindspeed-mm" in checks["MindSpeed-MM checkout"].detail


@pytest.mark.parametrize("generation", GENERATIONS)
def test_install_plan_pins_what_the_facts_were_generated_from(clean_env, tmp_path, generation):
    third = tmp_path / "third"
    steps = environment.install_plan(
        {"AF_THIRD_PARTY_DIR": str(third), "AF_MINDSPEED_MM_GENERATION": generation}
    )
    doc = presets(generation)
    argvs = [list(s.argv) for s in steps]
    assert ["git", "-C", str(third / "MindSpeed-MM"), "checkout", doc["mindspeed_mm"]["commit"]] in argvs
    assert any(a[:3] == ["git", "clone", "--depth"] and doc["megatron"]["ref"] in a for a in argvs)
    assert any(a[-1] == doc["mindspeed"]["commit"] for a in argvs)
    assert [sys.executable, "-m", "pip", "install", "-e", str(third / "MindSpeed-MM")] in argvs
    assert any("transformers" in s.what for s in steps) == (generation == "2.1.0")


def test_install_plan_skips_what_is_there(clean_env, tmp_path):
    """Every clone present: the clones are skipped, and the first command that runs is the checkout."""
    third = tmp_path / "third"
    steps = environment.install_plan({"AF_THIRD_PARTY_DIR": str(third)})
    for s in steps:
        if s.skip_if_exists:
            Path(s.skip_if_exists).mkdir(parents=True, exist_ok=True)
    said: list[str] = []
    code = run_install(steps, say=said.append)
    assert code != 0  # `git -C <empty dir> checkout` fails: the plan stops at the first failing step
    assert [line for line in said if "already present" in line] and "check out MindSpeed-MM" in said[-1]
    assert not any("install MindSpeed-MM" in line for line in said)


def test_install_generation_is_checked():
    with pytest.raises(ConfigError, match="is not a MindSpeed-MM generation"):
        environment.install_plan({"AF_MINDSPEED_MM_GENERATION": "3.0"})


@pytest.mark.parametrize("generation", GENERATIONS)
def test_catalog_agrees_with_every_example_model_json(generation):
    from ascendfactory.config.catalog import from_catalog

    for name, preset in presets(generation)["models"].items():
        arch, text = from_catalog(name), preset["model"]["text_decoder"]
        vit = preset["model"]["image_encoder"]["vision_encoder"]
        assert (text["num_layers"], text["hidden_size"], text["ffn_hidden_size"]) == (
            arch.layers,
            arch.hidden,
            arch.ffn,
        )
        assert (text["num_attention_heads"], text["num_query_groups"], text["vocab_size"]) == (
            arch.heads,
            arch.kv_heads,
            arch.vocab,
        )
        assert (vit["num_layers"], vit["num_attention_heads"]) == (arch.vit_layers, arch.vit_heads)
        assert text["untie_embeddings_and_output_weights"] is not arch.tied


@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.parametrize("size", ["3b", "7b", "32b", "72b"])
def test_every_example_plans_with_its_own_layout(clean_env, tmp_path, generation, size):
    """Each example's own layout (its script's TP/PP and NPUS_PER_NODE, 2 nodes for 32B/72B) plans, with every
    variable of the script filled in by the plan."""
    preset = presets(generation)["models"][f"qwen2.5-vl-{size}"]
    d = preset["defaults"]
    nnodes = 2 if size in ("32b", "72b") else 1
    plan = plan_for(
        tmp_path,
        {
            "af_model_name": f"qwen2.5-vl-{size}",
            "env": {"NPUS_PER_NODE": d["NPUS_PER_NODE"], "NNODES": nnodes},
            "backend_config": {
                "generation": generation,
                "training": {
                    "tensor-model-parallel-size": d["TP"],
                    "pipeline-model-parallel-size": d["PP"],
                    "global-batch-size": None,  # null: the script's MBS x GRAD_ACC_STEP x DP
                },
            },
        },
    )
    argv = plan.step("train").argv
    assert not [a for a in argv if "${" in a]
    dp = d["NPUS_PER_NODE"] * nnodes // (d["TP"] * d["PP"] * d["CP"])
    assert argv[argv.index("--global-batch-size") + 1] == str(d["MBS"] * d["GRAD_ACC_STEP"] * dp)
    assert argv[argv.index("--pipeline-model-parallel-size") + 1] == str(d["PP"])
