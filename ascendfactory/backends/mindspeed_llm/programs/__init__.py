"""Step programs the `mindspeed_llm` backend runs by path in MindSpeed-LLM's environment (v1_mg2hf_output.py:
makes the v1 converter's mg->hf output land where v2's does).

They import nothing of ascendfactory (an import contract checks it): that environment may not have it.
"""

import os

PROGRAMS_DIR = os.path.dirname(os.path.abspath(__file__))
