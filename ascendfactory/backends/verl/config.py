"""The verl backend's own options in `backend_config` (every other key there is verl's config, checked
against verl's own schema: `schema.py`, `backends/common/hydra/`), typed.

A value these options refuse becomes a Problem through `config.problems` (key, message with the value, fix).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool


class VerlOptions(BaseModel):
    """The options of `backend_config` that are ours, not verl's."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    env_dir: str | None = Field(
        None, description="the verl environment (default: env AF_VERL_ENV, else install.sh's)"
    )
    merge: StrictBool = Field(
        True,
        description="merge the newest actor checkpoint into Hugging Face weights at the end (default true)",
    )


# The option names and what each does (the messages list them).
OPTIONS = {name: str(f.description) for name, f in VerlOptions.model_fields.items()}
