"""verl's own checks of a run's overrides, before Ray starts: run in verl's environment.

    <env>/bin/python verl_check.py OVERRIDE...

What `verl.trainer.main_ppo.main` runs before `ray.init`: Hydra composes the overrides against verl's
`trainer/config/ppo_trainer.yaml` (Hydra's own `hydra.*` overrides, which set only its output directory,
are left out), `auto_set_device`, then `verl.utils.config.validate_config` (batch arithmetic, the actor and
critic config dataclasses and their `validate`, micro-batch keys, temperature, LoRA rank) and
`OmegaConf.resolve`, what its TaskRunner does first. Nothing after that: the workers need the devices.

Exit 0 with one summary line, or 2 with one `error:` line (verl's own message). Imports nothing from
ascendfactory (that environment does not have it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
import time


def say(text: str) -> None:
    print(f"[verl-check] {text}", flush=True)


def clients_missing(argv: list[str]) -> str | None:
    """`--clients=a,b` and `--clients-fix=TEXT`, taken out of `argv`: the error for the tracker clients
    (the modules a framework's tracker integration imports) this environment lacks, or None."""
    wanted = {
        a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith(("--clients=", "--clients-fix="))
    }
    argv[:] = [a for a in argv if not a.startswith(("--clients=", "--clients-fix="))]
    absent = [m for m in wanted.get("--clients", "").split(",") if m and importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (
        f"error: report_to: {', '.join(absent)} is not installed in this environment ({sys.prefix})\n"
        f"  fix: {wanted.get('--clients-fix', 'install it into this environment')}"
    )


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    clients = clients_missing(argv)  # `--clients=...`: the tracker clients `report_to` needs here
    if clients:
        say(clients)
        return 2
    overrides = [o for o in argv if not o.startswith(("hydra.", "hydra/"))]
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        say("error: verl is not installed in this environment")
        return 2
    config_dir = os.path.join(spec.submodule_search_locations[0], "trainer", "config")
    try:
        from hydra import compose, initialize_config_dir
        from omegaconf import OmegaConf
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        from verl.utils.device import auto_set_device

        imported = time.perf_counter()
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            config = compose("ppo_trainer", overrides=overrides)
        auto_set_device(config)
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines; errors raise
            validate_config(
                config=config,
                use_reference_policy=need_reference_policy(config),
                use_critic=need_critic(config),
            )
        OmegaConf.resolve(config)
    except Exception as e:  # noqa: BLE001 - the framework's own message is the report
        lines = [t for t in str(e).strip().splitlines() if t.strip()]
        say(f"error: {type(e).__name__}: {' | '.join(lines[:2])}")
        return 2
    done = time.perf_counter()
    say(
        f"ok: {len(overrides)} overrides composed, validate_config passed "
        f"(import {imported - t0:.1f} s, checks {done - imported:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
