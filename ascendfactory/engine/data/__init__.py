"""Data preprocessing for the embedded backend: indexed datasets, prompt templates, the preprocess program."""
