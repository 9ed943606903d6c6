"""Source tests: make `tests/sources/source_fakes.py` importable as `source_fakes`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
