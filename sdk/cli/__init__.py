"""The ``edgekit`` command line: a thin layer over :mod:`edgekit.api`."""
