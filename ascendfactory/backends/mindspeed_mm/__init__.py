"""The `mindspeed-mm` backend: MindSpeed-MM's programs (mm-convert, pretrain_vlm.py), run in its checkout."""

from ascendfactory.backends.mindspeed_mm import backend as backend  # registers MindSpeedMMBackend
