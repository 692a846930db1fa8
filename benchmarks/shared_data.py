"""Helpers the benchmarks share for reading ../shared (models and data nobody on the team made)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def default_shared() -> Path:
    """The shared folder: beside the repository (CI and fresh clones) or the workplace's."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[2] / "shared", here.parents[1] / "shared", Path("/work/shared")):
        if (candidate / "models").is_dir():
            return candidate
    return here.parents[2] / "shared"


def mnist_npz(shared: Path, count: int, folder: Path) -> Path:
    """The first ``count`` MNIST test images as raw 0..255 floats (mnist-8's input ``Input3``) with labels,
    written to ``folder/mnist.npz``."""
    with gzip.open(shared / "data/mnist/t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:count]
    with gzip.open(shared / "data/mnist/t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:count]
    path = folder / "mnist.npz"
    np.savez(path, Input3=images.astype(np.float32), labels=labels.astype(np.int64))
    return path
