import os

import numpy as np
import pytest

# Figures are drawn off-screen in every test; set before any test module imports matplotlib.
os.environ["MPLBACKEND"] = "Agg"


@pytest.fixture
def rng():
    """A fresh, seeded generator for each test, so tests do not depend on their order."""
    return np.random.default_rng(20261123)


@pytest.fixture
def fig():
    """A fresh matplotlib figure, for the widgets' draw functions; every figure is closed afterwards."""
    import matplotlib.pyplot as plt

    figure = plt.figure()
    yield figure
    plt.close("all")
