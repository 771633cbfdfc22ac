"""The front-end features over the backend registry: what `config`, `experiments`, `doctor` and `install.sh`
do for any backend, registered or plugged in. Below the CLI, above the backends; registers nothing.

    templates.py         `config` / `experiments`: a commented experiment file from a backend's templates
    exp-config.yaml.j2   the wrapper those templates are rendered into (the documented top-level keys)
    doctor.py            `doctor`: the generic checks around the backend's own (`Backend.checks`)
    install.py           `install.sh <backend>` / `doctor --install-plan`: the backend's plan, run in order

A backend supplies the records (`backends.environment.Check`, `backends.environment.InstallStep`); this
package runs them.
"""
