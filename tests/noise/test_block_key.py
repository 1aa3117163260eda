"""dpsql/noise/block_key.py: fresh 63-bit keys from os.urandom; only a test sampler picks one."""

from __future__ import annotations

import pytest

from dpsql.noise.block_key import block_key
from dpsql.noise.mechanisms import default_sampler


def test_keys_are_fresh_and_in_range():
    keys = {block_key() for _ in range(200)}
    assert len(keys) == 200
    assert all(0 <= k < 2**63 for k in keys)
    assert max(keys) > 2**60  # uses the high bits


def test_the_production_sampler_does_not_choose_keys():
    assert not hasattr(default_sampler(), "block_key")
    assert block_key(default_sampler()) != block_key(default_sampler())


class _Fixed:
    def __init__(self, key: object) -> None:
        self.key = key

    def block_key(self) -> object:
        return self.key


def test_a_test_sampler_chooses_and_is_checked():
    assert block_key(_Fixed(7)) == 7
    for bad in (-1, 2**63, 1.5, True, "7"):
        with pytest.raises(ValueError, match="block_key"):
            block_key(_Fixed(bad))


def test_randomness_comes_only_from_os_urandom():
    from dpsql.noise import block_key as module
    from tests.noise.randomness import assert_secure_randomness

    assert_secure_randomness(module, reads_urandom=True)
