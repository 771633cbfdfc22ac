"""Stands in for torchaudio where no torchaudio build loads with the installed torch (ascendfactory-cli).

Text training never calls it. Audio datasets need a real torchaudio built for this torch:
`<env>/bin/pip uninstall af-torchaudio-shim && <env>/bin/pip install torchaudio==<matching version>`.
"""

__version__ = "0+af.shim"
MESSAGE = (
    "torchaudio is not available in this LLaMA-Factory environment (no build of it loads with this torch); "
    "audio datasets need a real torchaudio: pip uninstall af-torchaudio-shim, then install a matching one"
)


def _unavailable(*args, **kwargs):
    raise RuntimeError(MESSAGE)


load = _unavailable


class _Functional:
    resample = staticmethod(_unavailable)


functional = _Functional()
