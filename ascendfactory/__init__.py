"""ascendfactory-cli: one experiment YAML in, a validated and resumable LLM training pipeline out."""

__version__ = "0.1.0"
