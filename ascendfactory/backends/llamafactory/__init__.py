"""The `llamafactory` backend: LLaMA-Factory's train and export in an environment of its own."""

from ascendfactory.backends.llamafactory import backend as backend  # registers LlamaFactoryBackend
