"""The TFLite int8 kernel rules live in one table, ``edgekit.quantize.rules.TFLITE_KERNELS``: the converter's
integer pass (``targets/tflite/quantized.py``) reads every kernel fact from it and spells no kernel's name in
a table of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from edgekit.quantize.rules import TFLITE_KERNELS
from edgekit.targets.tflite import quantized

SOURCE = Path(quantized.__file__)


def _literal_kernel_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Kernel names written as dict keys or set/list/tuple elements anywhere in the module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Set | ast.List | ast.Tuple):
            elements = node.elts
        else:
            continue
        found += [
            (e.lineno, e.value) for e in elements if isinstance(e, ast.Constant) and e.value in TFLITE_KERNELS
        ]
    return found


def test_the_integer_pass_holds_no_kernel_table() -> None:
    assert _literal_kernel_names(ast.parse(SOURCE.read_text())) == []


def test_the_check_finds_a_copied_table() -> None:
    copied = ast.parse('_WEIGHT_AXIS = {"CONV_2D": 0}\n_AVERAGING = frozenset({"AVERAGE_POOL_2D"})\n')
    assert _literal_kernel_names(copied) == [(1, "CONV_2D"), (2, "AVERAGE_POOL_2D")]


def test_the_pass_reads_the_table() -> None:
    kernels = TFLITE_KERNELS
    assert set(kernels) == quantized.INTEGER_KERNELS
    assert set(quantized._WEIGHT_AXIS) == {c for c, k in kernels.items() if k.symmetric_weights}
    assert quantized._FIXED_OUTPUT["SOFTMAX"] == kernels["SOFTMAX"].fixed_output == (1 / 256, -128)
    assert quantized._BIAS_INDEX["TRANSPOSE_CONV"] == 3 and quantized._INPUT_INDEX == {"TRANSPOSE_CONV": 2}
    assert {"GATHER", "PAD", "PADV2"} == quantized._SINK_DEQUANTIZE - quantized._HOIST_QUANTIZE
    assert {"AVERAGE_POOL_2D"} == quantized._AVERAGING and quantized._SAME_SCALE >= quantized._AVERAGING
    assert (
        quantized._TABULATED
        == {
            "HARD_SWISH": "HardSwish",
            "LEAKY_RELU": "LeakyRelu",
            "LOGISTIC": "Sigmoid",
            "PRELU": "PRelu",  # one table per slope value (its slope input)
            "TANH": "Tanh",
        }
        == {c: k.table for c, k in kernels.items() if k.table}
    )
    assert quantized._TABLE_ATTRIBUTES == {"LEAKY_RELU": ("alpha",)}
