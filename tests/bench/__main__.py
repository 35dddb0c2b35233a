"""``python -m tests.bench``: run the benchmark and print its table (see tests/bench/driver.py)."""

from __future__ import annotations

import sys

from .driver import main

sys.exit(main())
