"""'Did you mean' for unknown keys: the one spelling check of the house (`ascendfactory.registry`)."""

from ascendfactory.registry import did_you_mean

__all__ = ["did_you_mean"]
