"""The llamafactory backend's own options in `backend_config` (besides `training`, LLaMA-Factory's train
keys, which `rules.py` checks against the key lists generated from LLaMA-Factory's source), typed.

A value these options refuse becomes a Problem through `config.problems` (key, message with the value, fix);
an option name that is not one of these is refused by `read._options`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool


class LFOptions(BaseModel):
    """`backend_config` of the llamafactory backend."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    training: dict[str, Any] = Field(default_factory=dict, description="LLaMA-Factory's train keys")
    merge_lora: StrictBool = Field(
        True, description="merge a LoRA adapter into lora_merged/ at the end (default true)"
    )
    merge: dict[str, Any] = Field(
        default_factory=dict,
        description="extra `llamafactory-cli export` keys for the merge (export_size, export_device, ...)",
    )
    env_dir: str | None = Field(
        None,
        description="the LLaMA-Factory environment (default: env AF_LLAMAFACTORY_ENV, else install.sh's)",
    )


# The option names and what each does (the messages list them).
OPTIONS = {name: str(f.description) for name, f in LFOptions.model_fields.items()}
