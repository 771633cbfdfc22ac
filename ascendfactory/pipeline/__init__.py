"""Steps, plans, the runner that executes them, launchers, monitors and signal handling."""
