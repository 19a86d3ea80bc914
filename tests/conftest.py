import os

import matplotlib
import numpy as np
import pytest

# The Triton kernel (mha_lessons/triton_attention.py) is checked by Triton's interpreter on CPU tensors on every
# machine, with a GPU or without: Triton reads this when it is first imported, and the notebook kernels that
# nbval starts inherit it. (A session started with TRITON_INTERPRET=0 compiles, and the kernel's tests fail.)
os.environ.setdefault("TRITON_INTERPRET", "1")

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
