"""Step programs the `mindspeed_rl` backend runs by path in MindSpeed-RL's environment (metric_lines.py:
copies the driver's metric lines into a log of their own).

They import nothing of ascendfactory (an import contract checks it): that environment may not have it.
"""

import os

PROGRAMS_DIR = os.path.dirname(os.path.abspath(__file__))
