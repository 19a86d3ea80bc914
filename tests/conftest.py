import matplotlib
import numpy as np
import pytest

# Figures are drawn off-screen in the tests. Not through the MPLBACKEND variable: the kernels
# that nbval starts would inherit it, and plt.show() would then store no figure at all.
matplotlib.use("Agg")


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
