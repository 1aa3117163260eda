"""The secret key that splits a private table into sample-and-aggregate blocks.

Each release draws a fresh key here, from ``os.urandom`` like all of dpsql's randomness
(dpsql.noise), and binds it to the exact query's ``HASH(key, ...)`` (dpsql.sample_aggregate).
The privacy argument does not rest on the key being secret or random (the bound holds for any
fixed split in which a row's block depends on that row alone: docs/privacy.md,
"Sample-and-aggregate"); a fresh secret key makes the split independent of the data and of the
analyst, so no one can arrange rows to land together, and repeated releases use independent
splits. Only tests choose the key, through a test sampler with a ``block_key()`` method.
"""

from __future__ import annotations

import os

#: keys are uniform on [0, 2^63): a non-negative BIGINT in every backend
KEY_BITS = 63


def block_key(sampler: object | None = None) -> int:
    """A fresh uniform key in [0, 2^63) from ``os.urandom``; a test ``sampler`` that defines
    ``block_key()`` supplies its own instead (production samplers do not define it)."""
    chosen = getattr(sampler, "block_key", None)
    if callable(chosen):
        key = chosen()
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < 2**KEY_BITS:
            raise ValueError("a sampler's block_key() must return an integer in [0, 2^63)")
        return key
    return int.from_bytes(os.urandom(8), "big") >> (64 - KEY_BITS)
