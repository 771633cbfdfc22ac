"""Programs run by a framework's own python: one process judges a whole batch (JSON lines in, JSON lines
out). They import nothing from ascendfactory or the tests (the framework's environment has neither)."""
