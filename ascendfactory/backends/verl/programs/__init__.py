"""Step programs the `verl` backend runs by path in verl's environment (verl_compose.py: Hydra composition
against verl's own config; verl_merge.py: the model merger on the newest checkpoint).

They import nothing of ascendfactory (an import contract checks it): that environment may not have it.
"""

import os

PROGRAMS_DIR = os.path.dirname(os.path.abspath(__file__))
