"""Reading an experiment's `backend_config` into the Hydra overrides of one verl run.

Three kinds of override, in this order on the command line:

1. the user's: `backend_config` flattened (`overrides.flatten`), in the file's order;
2. the ones AscendFactory decides (`OWNED`): a user value that differs is an error naming the generic key
   that decides it (`trainer.default_local_dir` is `{af_output_dir}/saved_checkpoints`, the documented
   tree that resume, retention and the merge step read; `trainer.nnodes` / `n_gpus_per_node` come from
   `env`; the resume mode from `train_auto_resume` / `ckpt_load_type`; checkpoint rotation from
   `save_total_limit`; `trainer.device` from the machine);
3. defaults the user may change (`trainer.project_name` = af_model_name, `trainer.experiment_name` =
   exp_name, `trainer.logger` with `console` always in it (our logs are its lines) and `tensorboard` when
   the experiment's `tensorboard` is set, `algorithm.adv_estimator=grpo` for the grpo and dapo stages), and
   Hydra's own `hydra.run.dir=.`, `hydra.output_subdir=null`, `hydra/job_logging=stdout` (no `outputs/`
   folder or `main_ppo.log` written into the working directory; the console output is unchanged).

`ray_kwargs.ray_init.num_cpus` is not passed to verl (its `ray.init` attaches to the cluster the plan
starts, where num_cpus is refused): it becomes each node's `ray start --num-cpus`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends.common.hydra import overrides as ov
from ascendfactory.backends.common.hydra.schema import Override, Schema
from ascendfactory.backends.verl import schema as sc
from ascendfactory.backends.verl.config import OPTIONS, VerlOptions
from ascendfactory.config.problems import validate_with_defaults
from ascendfactory.errors import Problem
from ascendfactory.monitors import TensorboardConfig
from ascendfactory.output_tree import OutputTree

HYDRA_OVERRIDES = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout")
# Keys the plan decides: (what decides it, the fix).
OWNED: dict[str, tuple[str, str]] = {
    "trainer.default_local_dir": (
        "af_output_dir",
        "remove it: checkpoints go to {af_output_dir}/saved_checkpoints",
    ),
    "trainer.nnodes": ("env.NNODES", "set env.NNODES instead"),
    "trainer.n_gpus_per_node": (
        "the devices per node",
        "set env.NPUS_PER_NODE (ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES win when set) instead",
    ),
    "trainer.resume_mode": (
        "train_auto_resume and ckpt_load_type",
        "remove it; set train_auto_resume instead",
    ),
    "trainer.resume_from_path": (
        "ckpt_load_type: 2 with user_converted_ckpt_path",
        "remove it; set ckpt_load_type: 2 and user_converted_ckpt_path instead",
    ),
    "trainer.max_actor_ckpt_to_keep": ("save_total_limit", "remove it; set save_total_limit instead"),
    "trainer.max_critic_ckpt_to_keep": ("save_total_limit", "remove it; set save_total_limit instead"),
    "trainer.device": (
        "the machine (npu or cuda); on a machine without one, the value given",
        "remove it, or plan on a machine of that device",
    ),
}
# ray.init arguments that are refused when attaching to a running cluster (ray_node.py started it).
RAY_INIT_REFUSED = ("num_gpus", "resources", "object_store_memory", "address", "labels", "_temp_dir")
PATH_KEYS = (
    "data.train_files",
    "data.val_files",
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.tokenizer_path",
    "critic.model.path",
    "custom_reward_function.path",
)
# the model paths verl's HFModelConfig takes as text (a list or number fails in its __post_init__)
MODEL_PATHS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.tokenizer_path",
    "critic.model.path",
    "critic.model.tokenizer_path",
)
STAGE_ESTIMATORS = {"grpo": "grpo", "dapo": "grpo"}
HYDRA_KEY = re.compile(r"^[A-Za-z_$][A-Za-z0-9_\-$@]*$")  # one part of a dotted Hydra override key


@dataclass
class VerlRun:
    engine: str
    schema: Schema
    user: list[Override]  # from backend_config
    filled: list[Override]  # decided by the plan
    options: VerlOptions  # backend_config's keys that are ours (OPTIONS)
    num_cpus: float | None  # ray_kwargs.ray_init.num_cpus: each node's `ray start --num-cpus`
    resume: str  # the resume mode, in words
    problems: list[Problem] = field(default_factory=list)  # keys in verl's config (or top-level ones)

    @property
    def overrides(self) -> list[Override]:
        return [*self.user, *self.filled]

    def texts(self, *, hydra: bool = True) -> list[str]:
        """The command line's overrides (`hydra`: with Hydra's own three)."""
        return [ov.override_text(o) for o in self.overrides] + (list(HYDRA_OVERRIDES) if hydra else [])


def read(
    backend_config: Mapping[str, Any],
    *,
    stage: str | None,
    af_model_name: str,
    exp_name: str,
    output_dir: str,
    nnodes: int,
    devices_per_node: int,
    device: str,
    train_auto_resume: bool,
    ckpt_load_type: int,
    user_converted_ckpt_path: str | None,
    save_total_limit: int,
    tensorboard: TensorboardConfig | None,
    cwd: str,
) -> VerlRun:
    """The run's overrides in their three kinds (the module docstring), and every problem found."""
    problems: list[Problem] = []
    bc = dict(backend_config)
    engine = str(bc.get("model_engine", "dp"))
    if engine not in sc.ENGINES:
        problems.append(
            Problem(
                "model_engine",
                f"'{engine}' is not a verl model_engine",
                "use one of: " + ", ".join(sc.ENGINES),
            )
        )
        engine = "dp"
    schema = sc.load(engine)
    options = validate_with_defaults(
        VerlOptions,
        {k: bc.pop(k) for k in list(bc) if k in OPTIONS},
        source_of=lambda key: "",  # as every problem of this reading: the backend names the source
        prefix="",
        problems=problems,
    )
    problems += _unknown_sections(bc, schema)
    user = _user_overrides(bc, schema, cwd, problems)
    user, num_cpus = _ray_init(user, problems)
    out = os.path.abspath(output_dir)
    resume = _resume(out, train_auto_resume, ckpt_load_type, user_converted_ckpt_path, problems)
    owned_values: dict[str, Any] = {
        "trainer.default_local_dir": OutputTree(out).saved_checkpoints,
        "trainer.nnodes": nnodes,
        "trainer.n_gpus_per_node": devices_per_node,
        "trainer.resume_mode": resume.mode,
        "trainer.device": device,
    }
    if resume.path:
        owned_values["trainer.resume_from_path"] = resume.path
    if save_total_limit > 0:
        owned_values["trainer.max_actor_ckpt_to_keep"] = save_total_limit
        owned_values["trainer.max_critic_ckpt_to_keep"] = save_total_limit
    if ckpt_load_type == 1 and user_converted_ckpt_path:
        _converted_weights(user, os.path.abspath(user_converted_ckpt_path), problems)
    problems += _owned_problems(user, owned_values)
    filled = [Override(k, v, source="plan") for k, v in owned_values.items()]
    filled += _defaults(user, stage, af_model_name, exp_name, tensorboard, problems)
    return VerlRun(
        engine=engine,
        schema=schema,
        user=user,
        filled=filled,
        options=options,
        num_cpus=num_cpus,
        resume=resume.text,
        problems=problems,
    )


def _unknown_sections(bc: dict[str, Any], schema: Schema) -> list[Problem]:
    """Top-level keys that are neither verl's sections nor our OPTIONS (taken out of `bc`)."""
    import difflib

    sections = set(schema.children(""))
    problems = []
    for key in list(bc):
        if key.lstrip("+") not in sections:
            close = difflib.get_close_matches(key, [*sections, *OPTIONS], n=2, cutoff=0.6)
            problems.append(
                Problem(
                    key,
                    f"is neither a section of verl {schema.version}'s config nor an option of this backend",
                    ("did you mean " + " or ".join(close) + "? " if close else "")
                    + "verl's sections: "
                    + ", ".join(sorted(sections))
                    + "; ours: "
                    + ", ".join(OPTIONS),
                )
            )
            bc.pop(key)
    return problems


def _user_overrides(bc: dict[str, Any], schema: Schema, cwd: str, problems: list[Problem]) -> list[Override]:
    """`bc` flattened into overrides (local paths absolute), less the keys Hydra cannot name and the
    sections given a value (each a problem)."""
    user = _absolute_paths(ov.flatten(bc, schema), cwd)
    for o in [o for o in user if not all(HYDRA_KEY.match(part) for part in o.key.split("."))]:
        problems.append(
            Problem(
                o.key,
                "is not a key a Hydra override can name (letters, digits, '_' and '-', not starting with a "
                "digit or '-')",
                "check the key's spelling against verl's config",
            )
        )
        user.remove(o)
    for o in [o for o in user if schema.kind(o.key) == "node" and not isinstance(o.value, dict)]:
        problems.append(  # Hydra would say only "Error merging override" (or fail on a null)
            Problem(
                o.key,
                f"is a section of verl's config (keys: {', '.join(schema.children(o.key)[:8])}), not a value "
                f"(got {o.value!r:.40})",
                f"set keys under it: {o.key}.<key>",
            )
        )
        user.remove(o)
    for o in [
        o for o in user if o.key in MODEL_PATHS and o.value is not None and not isinstance(o.value, str)
    ]:
        # verl 0.9.1 verl/workers/config/model.py HFModelConfig.__post_init__ reads the paths as text
        problems.append(
            Problem(
                o.key,
                f"must be one path as text (got {type(o.value).__name__} {o.value!r:.40}): verl's "
                "HFModelConfig reads it as a path and stops with a TypeError",
                "give one path as text (quote it if it is made of digits)",
            )
        )
        user.remove(o)
    return user


def _ray_init(user: list[Override], problems: list[Problem]) -> tuple[list[Override], float | None]:
    """ray_kwargs.ray_init: num_cpus goes to `ray start` (returned), arguments ray.init refuses on a
    cluster are errors; the other overrides are returned as they are."""
    num_cpus = None
    kept = []
    for o in user:
        if o.key == "ray_kwargs.ray_init.num_cpus":
            if o.value is not None:
                if isinstance(o.value, (int, float)) and not isinstance(o.value, bool) and o.value > 0:
                    num_cpus = float(o.value)
                else:
                    problems.append(
                        Problem(
                            o.key,
                            f"is {o.value!r}: a number of logical CPUs is needed",
                            "set a positive number",
                        )
                    )
            continue
        if o.key.startswith("ray_kwargs.ray_init.") and o.key.split(".")[2] in RAY_INIT_REFUSED:
            problems.append(
                Problem(
                    o.key,
                    "is refused by ray.init when it attaches to a running cluster, and the plan "
                    "starts the cluster "
                    "itself (ray start on every node, the devices detected by Ray)",
                    "remove it; ray_kwargs.ray_init.num_cpus sets each node's logical CPUs",
                )
            )
            continue
        kept.append(o)
    return kept, num_cpus


@dataclass(frozen=True)
class Resume:
    """verl's resume mode, the checkpoint it names (resume_path only) and the mode in words."""

    mode: str
    path: str | None
    text: str


def _resume(
    out: str,
    train_auto_resume: bool,
    ckpt_load_type: int,
    user_converted_ckpt_path: str | None,
    problems: list[Problem],
) -> Resume:
    """The resume mode the generic keys decide (auto, a given global_step_N, or none)."""
    if ckpt_load_type == 0:
        problems.append(
            Problem(
                "ckpt_load_type",
                "is 0 (no weights), but verl always starts from the weights at actor_rollout_ref.model.path",
                "use ckpt_load_type 1",
            )
        )
    if train_auto_resume:
        return Resume(
            "auto",
            None,
            f"auto: verl resumes from the newest checkpoint in {OutputTree(out).saved_checkpoints}",
        )
    if ckpt_load_type == 2 and user_converted_ckpt_path:
        path = os.path.abspath(user_converted_ckpt_path)
        if "global_step_" not in os.path.basename(path.rstrip("/")):
            problems.append(
                Problem(
                    "user_converted_ckpt_path",
                    f"'{user_converted_ckpt_path}' is not a global_step_N directory, which verl's "
                    "resume_path needs",
                    "point it at .../global_step_N",
                )
            )
        return Resume("resume_path", path, f"resume_path: {path}")
    return Resume("disable", None, "disabled: training starts from actor_rollout_ref.model.path")


def _converted_weights(user: list[Override], path: str, problems: list[Problem]) -> None:
    """ckpt_load_type 1: the converted weights become actor_rollout_ref.model.path (unless it names others:
    a problem)."""
    given = next((o for o in user if o.key == "actor_rollout_ref.model.path"), None)
    if given is not None and os.path.abspath(str(given.value)) != path:
        problems.append(
            Problem(
                "user_converted_ckpt_path",
                f"names weights ({path}) other than actor_rollout_ref.model.path ({given.value})",
                "keep one of the two",
            )
        )
    elif given is None:
        user.append(Override("actor_rollout_ref.model.path", path, source="user_converted_ckpt_path"))


def _owned_problems(user: list[Override], owned_values: Mapping[str, Any]) -> list[Problem]:
    """User values for the keys the plan owns (taken out of `user`): a different one is a problem."""
    problems = []
    for o in list(user):
        if o.key in OWNED:
            decided_by, fix = OWNED[o.key]
            ours = owned_values.get(o.key)
            same = o.value == ours or (
                o.key == "trainer.default_local_dir" and os.path.abspath(str(o.value)) == ours
            )
            if not same:
                problems.append(
                    Problem(o.key, f"is {o.value!r}; the plan sets it from {decided_by} ({ours!r})", fix)
                )
            user.remove(o)
    return problems


def _defaults(
    user: list[Override],
    stage: str | None,
    af_model_name: str,
    exp_name: str,
    tensorboard: TensorboardConfig | None,
    problems: list[Problem],
) -> list[Override]:
    """The defaults a user may change: project and experiment names, the loggers (console always, the
    user's `trainer.logger` merged in and taken out of `user`) and the stage's advantage estimator."""
    filled = []
    set_keys = {o.key for o in user}
    if "trainer.project_name" not in set_keys:
        filled.append(Override("trainer.project_name", af_model_name, source="af_model_name"))
    if "trainer.experiment_name" not in set_keys:
        filled.append(Override("trainer.experiment_name", exp_name, source="exp_name"))
    loggers = next((o for o in user if o.key == "trainer.logger"), None)
    wanted = ["console"] + (["tensorboard"] if tensorboard else [])
    given_list = (
        []
        if loggers is None
        else ([loggers.value] if isinstance(loggers.value, str) else list(loggers.value or []))
    )
    merged = [*wanted, *[x for x in given_list if x not in wanted]]
    if loggers is not None:
        user.remove(loggers)
    filled.append(Override("trainer.logger", merged[0] if merged == ["console"] else merged, source="plan"))
    estimator = STAGE_ESTIMATORS.get(stage or "")
    given_estimator = next((o.value for o in user if o.key == "algorithm.adv_estimator"), None)
    if estimator and given_estimator is None:
        filled.append(Override("algorithm.adv_estimator", estimator, source=f"stage {stage}"))
    elif estimator and given_estimator != estimator:
        problems.append(
            Problem(
                "algorithm.adv_estimator",
                f"is '{given_estimator}', but stage {stage} is verl's GRPO recipe (adv_estimator "
                f"{estimator})",
                "remove it, or use stage ppo for another estimator",
            )
        )
    return filled


def _absolute_paths(user: list[Override], cwd: str) -> list[Override]:
    """Local paths relative to the working directory, made absolute (verl's Ray actors run elsewhere)."""

    def fix(value: Any) -> Any:
        if isinstance(value, list):
            return [fix(v) for v in value]
        if (
            isinstance(value, str)
            and value
            and not os.path.isabs(value)
            and not value.startswith(("~", "hdfs:"))
        ):
            candidate = os.path.join(cwd, value)
            if value.startswith(("./", "../")) or os.path.exists(candidate):
                return os.path.normpath(candidate)
        return value

    return [Override(o.key, fix(o.value), o.plus, o.source) if o.key in PATH_KEYS else o for o in user]
