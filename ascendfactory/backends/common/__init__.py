"""The shared toolkits: what several backends (or a framework family) use, registering no backend.

    megatron/                  the Megatron-style backends' reading of `backend_config`, output tree and
                               step skeleton (torch, mindspeed-llm, mindspeed-mm)
    mindspeed_rl_experiment/   the MindSpeed-RL experiment (mindspeed-rl, and torch's `stage: grpo`)
    hydra/                     a Hydra-configured framework's config: key lists, overrides, Hydra's own
                               composition in the framework's environment (verl; a ROLL backend would reuse
                               it)

A backend imports a toolkit; a toolkit imports no backend package (pyproject's import contract "Shared
toolkits register nothing and import no backend"), so importing one registers nothing. This module imports
nothing itself.
"""
