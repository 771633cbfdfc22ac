"""Training-log metrics (placeholder, rewritten below)."""
