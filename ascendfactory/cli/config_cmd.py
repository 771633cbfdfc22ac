"""`ascendfactory-cli config`: write a commented experiment yaml (interactive or from parameters)."""

from __future__ import annotations

from typing import Annotated

import typer

EXAMPLES = [
    "ascendfactory-cli config --backend=torch --af_model_name=tiny-demo --exp_name=tiny-sft "
    "--output_file_path=my-exp.yaml",
    "ascendfactory-cli config --backend=mindspeed-llm --af_model_name=qwen2.5-7b --exp_name=full-4k "
    "--output_file_path=/path/to/qwen25-full.yaml",
    "ascendfactory-cli config --output_file_path=exp.yaml      # prompts for backend, model, experiment",
]


def register(app: typer.Typer) -> None:
    @app.command("config", epilog="Examples:\n\n" + "\n\n".join(EXAMPLES))
    def config(
        backend: Annotated[
            str | None,
            typer.Option(
                "--backend", help="The training framework; `ascendfactory-cli experiments` lists them."
            ),
        ] = None,
        af_model_name: Annotated[
            str | None, typer.Option("--af_model_name", help="Model id from `ascendfactory-cli models`.")
        ] = None,
        exp_name: Annotated[
            str | None,
            typer.Option("--exp_name", help="Experiment template, see `ascendfactory-cli experiments`."),
        ] = None,
        output_file_path: Annotated[
            str | None, typer.Option("--output_file_path", help="Where to write the yaml.")
        ] = None,
        force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    ) -> None:
        """Write an experiment yaml with every key explained. Prompts for what is not given."""
        from ascendfactory.backends.registry import backend_names, get_backend
        from ascendfactory.cli._output import out
        from ascendfactory.features.templates import (
            offered_models,
            render_experiment,
            suggested_experiment,
            write_experiment,
        )

        def ask(label: str, choices: list[str], default: str | None = None) -> str:
            from rich.prompt import Prompt

            return Prompt.ask(label, choices=choices, default=default or choices[0], console=out.err_console)

        if backend is None:
            backend = ask("backend", backend_names(), backend_names()[0])
        if af_model_name is None:
            models = offered_models(backend)
            af_model_name = ask("model", models, "tiny-demo" if "tiny-demo" in models else models[0])
        if exp_name is None:
            exps = get_backend(backend, key="--backend").experiments()
            exp_name = ask("experiment", exps, suggested_experiment(backend, af_model_name))
        if output_file_path is None:
            from rich.prompt import Prompt

            output_file_path = Prompt.ask(
                "output file", default=f"{af_model_name}-{exp_name}.yaml", console=out.err_console
            )
        text = render_experiment(
            backend=backend, model_name=af_model_name, exp_name=exp_name, output_file=output_file_path
        )
        write_experiment(text, output_file_path, force=force)
        out.text(f"wrote {output_file_path}")
        out.text(f"next: edit it, then  ascendfactory-cli train {output_file_path} --dry-run")
