"""Small programs that plan steps run as subprocesses in the framework's own environment.

They import nothing from ascendfactory (an import contract checks it): that environment may not have it.
"""
