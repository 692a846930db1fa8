"""Run a written .tflite file in LiteRT, by tensor name (tests of bundles the CLI wrote)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np


def run_tflite_file(path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs of LiteRT running ``path`` on ``feeds`` (one thread), keyed by the tensors' names."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], feeds[d["name"]])
    interpreter.invoke()
    return {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}
