"""Plugin tests: make `tests/kubectl/fake_api.py` importable as `fake_api`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
