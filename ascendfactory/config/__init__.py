"""Experiment configuration: schema, loading (new and old style), overrides, interpolation, catalog."""
