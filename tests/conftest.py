"""Shared fixtures: the built-in digits example, trained once per test session."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def digits(tmp_path_factory: pytest.TempPathFactory):
    """The digits example's model and data (``.model``, ``.calib``, ``.val``, ``.accuracy``)."""
    spec = importlib.util.spec_from_file_location(
        "digits_train_session", ROOT / "examples" / "digits" / "train.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.main(tmp_path_factory.mktemp("digits-session"), verbose=False)


@pytest.fixture(autouse=True)
def _edgekit_logger_as_found():
    """Each test leaves the ``edgekit`` logger as it found it: a CLI run in-process routes the library's warnings
    to stderr and stops their propagation, which hid them from ``caplog`` in whichever test the worker ran next."""
    logger = logging.getLogger("edgekit")
    handlers, propagate, level = list(logger.handlers), logger.propagate, logger.level
    yield
    logger.handlers[:] = handlers
    logger.propagate, logger.level = propagate, level
