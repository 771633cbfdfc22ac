"""`ascendfactory-cli` with the test backends of this folder registered: python cli.py train exp.yaml."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ray_contract.backend  # noqa: E402,F401  (registers ray-contract)
from ascendfactory.cli.app import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
