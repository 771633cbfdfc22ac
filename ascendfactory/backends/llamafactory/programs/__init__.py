"""Step programs the `llamafactory` backend runs by path in LLaMA-Factory's environment (lf_check.py: its own
argument parser over the run's yaml; lf_install.py: installs it).

They import nothing of ascendfactory (an import contract checks it): that environment may not have it.
"""

import os

PROGRAMS_DIR = os.path.dirname(os.path.abspath(__file__))
