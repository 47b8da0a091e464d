"""Single tests in a separate tier (tests/conftest.py: SEPARATE_TIERS, the tiers that are a marker
rather than a folder): a parametrized case carries the tier's marker when its key is listed."""

import pytest


def param_in_tier(tier, listed, key, *values, **kwargs):
    """pytest.param(*values, **kwargs), marked with separate tier `tier` if `key` is in `listed`."""
    return pytest.param(*values, marks=[getattr(pytest.mark, tier)] if key in listed else [], **kwargs)
