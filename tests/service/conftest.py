"""Service tests: make `tests/service/support.py` importable as `support`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
