import numpy as np
import pytest


@pytest.fixture
def rng():
    """A fresh, seeded generator for each test, so tests do not depend on their order."""
    return np.random.default_rng(20261123)
