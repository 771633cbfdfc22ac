"""Step programs the `verl` backend runs by path in verl's environment (verl_check.py: what the environment
lacks; verl_merge.py: the model merger on the newest checkpoint). Hydra's composition against verl's own
config is the Hydra toolkit's program (`backends/common/hydra/programs/hydra_compose.py`).

They import nothing of ascendfactory (an import contract checks it): that environment may not have it.
"""

import os

PROGRAMS_DIR = os.path.dirname(os.path.abspath(__file__))
