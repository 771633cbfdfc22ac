"""MindSpeed-RL's own verdict on the GRPO yaml our plan writes, many per process, on CPU: run with a python
that has torch and Hydra (verl's environment has both).

    python msrl_worker.py MINDSPEED_RL_DIR < cases.jsonl > verdicts.jsonl
    python msrl_worker.py --stand-ins          (the stand-in table, as JSON)

Each input line: `{"id": ..., "args": {"yaml": <mindspeed_rl_grpo.yaml, its text or its mapping>, "nnodes":
N}}`. Each output line: `{"id", "ok", "error", "at"}`; `ok` is null when a stand-in was reached, `at` is a
refusal's traceback (`file:line` places).

What decides, in the order `cli/train_grpo.py` runs it before Ray starts its workers:

1. Hydra: `--config-path <dir> --config-name mindspeed_rl_grpo` composed (its own `hydra.*` overrides
   only place Hydra's output directory and are left out);
2. `main`: `RLConfig(rl_config)`, the runtime env yaml it names (`runtime_env_path`, read from the
   checkout), `GenerateConfig(generate_config)`;
3. `train` -> `parse_training_config` (the checkout's own function, compiled from cli/train_grpo.py with
   its lines: that module imports ray and the trainers): the actor (and, without the integrated worker,
   reference and reward) `MegatronConfig` of megatron_training + its section + `model`, the
   use_integrated_worker rules, `validate_rl_args(actor, ref, reward, rl, generate)`, then the profiler and
   msprobe configs.

Where it stops: `ray.init`, then the worker groups on the NPUs.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import types
import typing
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import judging  # noqa: E402
import standins  # noqa: E402

NAME = "mindspeed_rl_grpo"
STAND_INS = (
    (
        "torch_npu",
        "Ascend's torch extension (mindspeed_rl/utils/loggers.py imports it)",
        "inert placeholders",
    ),
    (
        "mindspeed_rl/__init__.py, mindspeed_rl/utils/__init__.py",
        "import the trainers, models and tokenizers (vLLM, torch_npu kernels)",
        "empty packages; config_cls/ and utils/loggers.py import as usual",
    ),
    (
        "mindspeed_rl.utils.utils",
        "imports torch_npu and torch.distributed helpers; validate_rl_args uses only get_node_nums, which "
        "counts the live nodes of the Ray cluster (ray.nodes())",
        "a module whose get_node_nums() is the case's env.NNODES: the cluster our plan starts and waits "
        "for holds exactly those nodes",
    ),
)


class Framework:
    def __init__(self, rl_dir: str) -> None:
        self.rl_dir = rl_dir
        sys.path.insert(0, rl_dir)
        standins.install(("torch_npu",))
        standins.empty_package("mindspeed_rl", os.path.join(rl_dir, "mindspeed_rl"))
        standins.empty_package("mindspeed_rl.utils", os.path.join(rl_dir, "mindspeed_rl", "utils"))
        self.nodes = 1
        node_utils = types.ModuleType("mindspeed_rl.utils.utils")
        node_utils.get_node_nums = lambda: self.nodes
        sys.modules["mindspeed_rl.utils.utils"] = node_utils
        from mindspeed_rl.utils.loggers import Loggers

        sys.modules["mindspeed_rl.utils"].Loggers = Loggers
        from mindspeed_rl.config_cls.generate_config import GenerateConfig
        from mindspeed_rl.config_cls.megatron_config import MegatronConfig
        from mindspeed_rl.config_cls.mindstudio_config import MsprobeConfig, ProfilerConfig
        from mindspeed_rl.config_cls.rl_config import RLConfig
        from mindspeed_rl.config_cls.validate_config import validate_rl_args

        self.GenerateConfig, self.MegatronConfig, self.RLConfig = GenerateConfig, MegatronConfig, RLConfig
        # cli/train_grpo.py's parse_training_config itself: the config classes, the integrated-worker rules,
        # validate_rl_args, then the profiler and msprobe configs
        self.parse_training_config = self.own_function(
            "cli/train_grpo.py",
            "parse_training_config",
            {
                "Dict": typing.Dict,
                "MegatronConfig": MegatronConfig,
                "RLConfig": RLConfig,
                "GenerateConfig": GenerateConfig,
                "validate_rl_args": validate_rl_args,
                "ProfilerConfig": ProfilerConfig,
                "MsprobeConfig": MsprobeConfig,
            },
        )

    def compose(self, text: str):  # noqa: ANN201
        from hydra import compose, initialize_config_dir

        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, NAME + ".yaml"), "w", encoding="utf-8") as f:
                f.write(text)
            with initialize_config_dir(config_dir=d, version_base=None):
                return compose(NAME)

    def judge(self, text: str, nnodes: int) -> None:
        import yaml

        self.nodes = nnodes
        config = self.compose(text)
        rl_config = self.RLConfig(config.get("rl_config"))  # main()
        with open(os.path.join(self.rl_dir, rl_config.runtime_env_path)) as file:
            yaml.safe_load(file)
        self.GenerateConfig(config.get("generate_config"))
        self.parse_training_config(config)  # train(), first thing

    def own_function(self, rel: str, name: str, namespace: dict):  # noqa: ANN205
        """`name` from the checkout's `rel`, compiled from its own source with its own file and line numbers
        (so a refusal's traceback names that file's lines), its globals the names it uses: the module itself
        imports ray, the trainers and vLLM."""
        import ast

        path = os.path.join(self.rl_dir, rel)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), namespace)  # noqa: S102
        return namespace[name]


def verdict(framework: Framework, request: dict) -> tuple[bool | None, str | None]:
    standins.Placeholder.active = True
    try:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            text = request["yaml"]
            if not isinstance(text, str):  # the mapping our plan writes, dumped as the plan dumps it
                import yaml

                text = yaml.safe_dump(text, sort_keys=False, allow_unicode=True)
            framework.judge(text, int(request.get("nnodes", 1)))
    except standins.StandInCalled as e:
        return None, f"undecided: {e}"
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the framework's refusal is the answer
        return False, judging.refusal(e)
    finally:
        standins.Placeholder.active = False
    return True, None


def main() -> int:
    return judging.serve(STAND_INS, lambda: Framework(sys.argv[1]), verdict)


if __name__ == "__main__":
    sys.exit(main())
