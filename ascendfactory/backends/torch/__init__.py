"""The embedded `torch` backend (the default): MindSpeed-LLM's contract run by our own PyTorch programs."""

from ascendfactory.backends.torch import backend as backend  # registers TorchBackend
