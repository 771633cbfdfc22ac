"""The Hydra toolkit: a framework configured by Hydra (verl; ROLL would be the next) gets its `backend_config`
turned into Hydra overrides, composed against the framework's own config, checked key by key. It
registers nothing (no toolkit under `common/` does): a backend imports it; importing it registers no
backend.

    schema.py      a config's keys and defaults as data (`Schema`, read from a generated key list), composing
                   overrides against it without the framework (`compose`), OmegaConf-style `${...}` resolution
    overrides.py   nested `backend_config` -> Hydra overrides (`flatten`), values in Hydra's override grammar
    compose.py     Hydra itself in the framework's environment (`ask`, `warm`): one compose program a
                   python, the package, config directory and config name in the request; its findings in
                   our words (`problem`)
    programs/      hydra_compose.py, the compose program (runs in the framework's python, imports nothing
                   of ascendfactory, does not import the framework)

The framework's own facts (its key lists, its package, config directory and config name, the keys its
backend sets) stay in its backend package: `backends/verl/schema.py` reads verl's key lists into a
`Schema`, `backends/verl/composer.py` names verl's config and falls back to the key lists.
"""
