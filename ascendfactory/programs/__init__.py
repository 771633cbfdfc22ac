"""Small programs that plan steps run as subprocesses (in the framework's own environment); they import nothing from ascendfactory."""
