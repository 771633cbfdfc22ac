"""The Hydra toolkit: a framework configured by Hydra (verl; ROLL would be the next) gets its `backend_config`
turned into Hydra overrides, composed against the framework's own config, checked key by key. It
registers nothing (as `megatron/` and `msrl/` do not): a backend imports it; importing it registers no
backend.

    schema.py      a config's keys and defaults as data (`Schema`, read from a generated key list), composing
                   overrides against it without the framework (`compose`), OmegaConf-style `${...}` resolution
    overrides.py   nested `backend_config` -> Hydra overrides (`flatten`), values in Hydra's override grammar

Composing with Hydra itself in the framework's environment is still verl's (`backends/verl/composer.py`,
`backends/verl/programs/verl_compose.py`, which name verl's package and config).

The framework's own facts (its key lists, its config name, the keys its backend sets) stay in its backend
package: `backends/verl/schema.py` reads verl's key lists into a `Schema`.
"""
