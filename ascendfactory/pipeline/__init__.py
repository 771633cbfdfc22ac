"""Running a plan (`ascendfactory.plan`): the runner, launchers, step processes and logs, manifests, the
device monitor, progress, tracker runs, the run summary and signal handling. It reads only the plan."""
