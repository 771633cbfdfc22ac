"""Backends: one package per training framework, each owning every fact about it.

A backend (`base.Backend`, registered with `registry.register_backend`) turns a validated experiment into a
`Plan` (`ascendfactory.plan`): its name, stages and experiment templates, how its `backend_config` is read
and checked, its steps with their launches, its log and checkpoint specs, its install plan and doctor
checks. `planner.make_plan` gathers the machine facts and asks the backend; nothing here starts a process.

    torch/          the embedded PyTorch backend (MindSpeed-LLM's contract, our own programs)
    mindspeed_llm/  MindSpeed-LLM's own programs
    mindspeed_mm/   MindSpeed-MM's own programs (mm-convert, pretrain_vlm.py), its json configs written
    llamafactory/   LLaMA-Factory in its own environment
    verl/           verl on Ray, in its own environment
    mindspeed_rl/   MindSpeed-RL's GRPO on Ray
    common/         the shared toolkits, which register nothing and import no backend (an import contract):
        megatron/                  what torch, mindspeed_llm and mindspeed_mm share: reading the Megatron
                                   keys, the output tree, the step skeleton
        mindspeed_rl_experiment/   the MindSpeed-RL experiment, shared by mindspeed_rl/ and torch's
                                   `stage: grpo`
        hydra/                     a Hydra-configured framework's config (verl's; ROLL's next): key lists,
                                   overrides, Hydra's own composition in the framework's environment
"""
