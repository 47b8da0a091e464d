"""Writing matplotlib figures to PNG files without a display, for every suite's plots."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig, path):
    """Writes `fig` to `path` (creating its directory), closes it and returns the path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
