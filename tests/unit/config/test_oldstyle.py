import pytest

from ascendfactory.backends.registry import directory
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

OLD = REPO / "cfgs" / "multi_model_cfgs.yaml"


def test_base_model_experiment_cli_precedence():
    loaded = load_experiment(
        OLD,
        ["--backend_config.training.lr=9e-6"],
        model_name="qwen2.5-7b",
        exp_name="full-4k",
        backends=directory(),
    )
    cfg = loaded.config
    training = cfg.backend_config["training"]
    assert loaded.style == "old"
    assert cfg.af_model_name == "qwen2.5-7b" and cfg.exp_name == "full-4k"
    assert cfg.af_output_dir == "./outputs/qwen2.5-7b-full-4k"
    assert training["seq-length"] == 4096 and training["max-position-embeddings"] == 32768  # SEQ_LEN, MAX_PE
    assert training["pipeline-model-parallel-size"] == 2  # experiment block
    assert training["lr"] == 9e-6  # command line beats base
    assert training["prompt-type"] == "qwen"  # model block
    assert cfg.backend_config["preprocess_data"]["handler-name"] == "AlpacaStyleInstructionHandler"
    assert cfg.backend_config["preprocess_data"]["prompt-type"] == "qwen"
    assert cfg.env.NPUS_PER_NODE == 8 and cfg.save_total_limit == 0 and cfg.dataset


def test_shared_experiments_and_old_names():
    cfg = load_experiment(OLD, model_name="llama3.1-8b", exp_name="smoke", backends=directory()).config
    assert cfg.backend_config["training"]["train-iters"] == 10
    cfg = load_experiment(OLD, model_name="llama3.1-8b", exp_name="full-32k", backends=directory()).config
    assert cfg.backend_config["training"]["context-parallel-size"] == 2


@pytest.mark.parametrize(
    "model,exp,fragment",
    [
        ("qwen9", "full-4k", "use one of: qwen2.5-7b, llama3.1-8b, qwen3-8b"),
        ("qwen2.5-7b", "full-8k", "use one of: full-4k, lora-4k, smoke"),
    ],
)
def test_unknown_names_list_what_the_file_has(model, exp, fragment):
    with pytest.raises(ConfigError) as e:
        load_experiment(OLD, model_name=model, exp_name=exp, backends=directory())
    assert fragment in str(e.value)


def test_old_style_file_without_names_says_how_to_run_it():
    with pytest.raises(ConfigError, match="<model_name> <exp_name>"):
        load_experiment(OLD, backends=directory())
