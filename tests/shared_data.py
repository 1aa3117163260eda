"""The user's shared sample data, expected beside the repository (not a test module).

``../shared/data`` holds the PUMS sample that ``schemas/pums.yaml`` and the peer/scale
benchmarks read; it is not copied into the project. A clone elsewhere cannot reach it, so the
tests that read it skip there, saying where the file is expected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
PUMS_CSV = SHARED_DATA / "PUMS.csv"

#: both sample files (``PUMS_pid.csv`` feeds the peer and scale benchmarks) are there
PUMS_PRESENT = PUMS_CSV.is_file() and (SHARED_DATA / "PUMS_pid.csv").is_file()

needs_pums = pytest.mark.skipif(
    not PUMS_PRESENT,
    reason=f"the PUMS sample is not beside the repository ({SHARED_DATA}): clone dpsql next "
           "to shared/ to run this test",
)
