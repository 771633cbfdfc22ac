"""verl 0.9.1's own verdict on main_ppo command lines, many per process: run with verl's python.

    <env>/bin/python verl_worker.py < cases.jsonl > verdicts.jsonl

Each input line: `{"id": ..., "args": ["data.train_batch_size=32", ...]}`, the overrides our plan passes to
`python -m verl.trainer.main_ppo`. Each output line: `{"id", "ok", "error", "at"}` (`at`: a refusal's
traceback, `file:line` places). What decides, in the order
`main_ppo.main` runs it before Ray starts:

1. Hydra: the overrides composed against verl's `trainer/config/ppo_trainer.yaml` (Hydra's own
   `hydra.*` overrides configure only Hydra's output directory and are left out);
2. `auto_set_device(config)`;
3. `verl.utils.config.validate_config(config, need_reference_policy(config), need_critic(config))`:
   batch arithmetic, ActorConfig/CriticConfig dataclasses and their `validate`, micro-batch keys, the
   sampling temperature, the LoRA rank;
4. `OmegaConf.resolve(config)`, what TaskRunner.run does first.

Where it stops: the next step is `ray.init` and the workers, which need a GPU or NPU (their own config
dataclasses are built on the device).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import judging  # noqa: E402


class Composer:
    """Hydra's compose, split where it is slow: the defaults list and the merged config files depend only on
    the config-group overrides (`model_engine=...`), so they are built once per group choice; the value
    overrides are then applied by Hydra's own `ConfigLoaderImpl._apply_overrides_to_config` in struct mode,
    as `ConfigLoaderImpl._load_configuration_impl` does. Until a group choice has once given the same config
    as `hydra.compose` on a whole command line, every case of it is composed by `hydra.compose` itself."""

    def __init__(self) -> None:
        from hydra._internal.config_repository import CachingConfigRepository
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.loader = GlobalHydra.instance().config_loader()
        self.repo = CachingConfigRepository(self.loader.repository)
        self.parser = OverridesParser.create()
        self.cache: dict = {}
        self.verified: set = set()

    def __call__(self, overrides: list[str]):  # noqa: ANN204
        from hydra import compose
        from hydra._internal.defaults_list import create_defaults_list
        from omegaconf import OmegaConf

        parsed = self.parser.parse_overrides(overrides)
        is_group = [self.repo.group_exists(o.key_or_group) for o in parsed]
        groups = tuple(o.input_line for o, g in zip(parsed, is_group) if g)
        values = [o for o, g in zip(parsed, is_group) if not g]
        if groups not in self.cache:
            found = create_defaults_list(
                repo=self.repo,
                config_name=NAME,
                overrides_list=[o for o, g in zip(parsed, is_group) if g],
                prepend_hydra=True,
                skip_missing=False,
            )
            self.cache[groups] = self.loader._compose_config_from_defaults_list(
                defaults=found.defaults, repo=self.repo
            )
        if groups in self.verified:
            return self._apply(self.cache[groups], values)
        whole = compose(NAME, overrides=overrides)  # raises as main_ppo would
        fast = self._apply(self.cache[groups], values)
        if OmegaConf.to_container(fast, resolve=False) == OmegaConf.to_container(whole, resolve=False):
            self.verified.add(groups)
        return whole

    @staticmethod
    def _apply(base, overrides):  # noqa: ANN001, ANN205
        import copy

        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from omegaconf import OmegaConf, open_dict

        cfg = copy.deepcopy(base)
        OmegaConf.set_struct(cfg, True)
        OmegaConf.set_readonly(cfg.hydra, False)
        ConfigLoaderImpl._apply_overrides_to_config(overrides, cfg)
        with open_dict(cfg):
            cfg.pop("hydra", None)
        return cfg


NAME = "ppo_trainer"
# validate_config asks the installed vLLM for its LoRA limit: without vLLM here the verdict is the
# environment's, not the experiment's (a real run's check step asks the GPU node's vLLM).
UNDECIDED = "vllm version None not supported"


def main() -> int:
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        from hydra import initialize_config_dir
        from omegaconf import OmegaConf
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        from verl.utils.device import auto_set_device

        spec = importlib.util.find_spec("verl")
        config_dir = os.path.join(spec.submodule_search_locations[0], "trainer", "config")
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            compose = Composer()
            for line in sys.stdin:
                if not line.strip():
                    continue
                request = json.loads(line)
                overrides = [o for o in request["args"] if not o.startswith(("hydra.", "hydra/"))]
                error, at = None, []
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        config = compose(overrides)
                        auto_set_device(config)
                        validate_config(
                            config=config,
                            use_reference_policy=need_reference_policy(config),
                            use_critic=need_critic(config),
                        )
                        OmegaConf.resolve(config)
                except Exception as e:  # noqa: BLE001 - the framework's refusal is the answer
                    text = [t for t in str(e).strip().splitlines() if t.strip()]
                    error = f"{type(e).__name__}: {' | '.join(text[:2])}"[:300]
                    at = judging.places(e)
                ok = error is None if not (error and UNDECIDED in error) else None
                out.write(json.dumps({"id": request["id"], "ok": ok, "error": error, "at": at}) + "\n")
                out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
