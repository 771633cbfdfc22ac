"""`ascendfactory-cli` with this folder's backend registered: python cli.py train exp.yaml."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import plugin_backend.backend  # noqa: E402,F401  (registers lightning-demo, its format, formula and scheme)
from ascendfactory.cli.app import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
