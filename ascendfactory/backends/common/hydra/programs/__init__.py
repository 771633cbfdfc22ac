"""The step program the Hydra toolkit runs by path in a framework's own environment (hydra_compose.py:
Hydra's composition of overrides against the framework's own config directory, the framework not imported).

It imports nothing of ascendfactory (an import contract checks it): that environment may not have it.
"""

import os

PROGRAMS_DIR = os.path.dirname(os.path.abspath(__file__))
