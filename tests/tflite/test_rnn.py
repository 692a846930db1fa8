"""LSTM and GRU unrolled into TFLite ops: LiteRT matches onnxruntime (<= 1e-5 of the output range)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from edgekit.errors import TargetError
from onnx import helper
from tflite_helpers import (
    assert_close_to_range,
    convert_proto,
    make_model,
    op_types,
    random_feeds,
    run_onnx,
    run_tflite,
)

SEQ, HIDDEN, INPUT = 5, 8, 6
ZOO = Path(__file__).resolve().parents[1] / "zoo" / "models"


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.4).astype(np.float32)


def _rnn_model(
    op: str,
    *,
    direction: str = "forward",
    batch: int = 1,
    bias: bool = True,
    initial: str = "none",  # none | const | input
    outputs: tuple[str, ...] = ("y", "y_h", "y_c"),
    layout: int = 0,
    peepholes: bool = False,
    **attrs,
) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    gates = 4 if op == "LSTM" else 3
    nd = 2 if direction == "bidirectional" else 1
    x_shape = (SEQ, batch, INPUT) if layout == 0 else (batch, SEQ, INPUT)
    state_shape = (nd, batch, HIDDEN) if layout == 0 else (batch, nd, HIDDEN)
    inits = {"W": _w(rng, nd, gates * HIDDEN, INPUT), "R": _w(rng, nd, gates * HIDDEN, HIDDEN)}
    inputs = {"x": x_shape}
    names = ["x", "W", "R", "", "", "", "", ""]
    if bias:
        inits["B"] = _w(rng, nd, 2 * gates * HIDDEN)
        names[3] = "B"
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    for k, state in enumerate(states):
        if initial == "const":
            inits[state] = _w(rng, *state_shape)
        elif initial == "input":
            inputs[state] = state_shape
        if initial != "none":
            names[5 + k] = state
    if peepholes:
        inits["P"] = _w(rng, nd, 3 * HIDDEN)
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    outs = list(outputs[: 3 if op == "LSTM" else 2])
    node = helper.make_node(
        op, names, outs, name=f"{op.lower()}_node", direction=direction, hidden_size=HIDDEN, **attrs
    )
    if layout:
        node.attribute.append(helper.make_attribute("layout", layout))
    return make_model([node], inputs, [o for o in outs if o], inits, opset=14 if layout else 13)


CASES = {
    "lstm_forward": ("LSTM", {}),
    "lstm_reverse_b2": ("LSTM", {"direction": "reverse", "batch": 2}),
    "lstm_bidir_b2_const_init": ("LSTM", {"direction": "bidirectional", "batch": 2, "initial": "const"}),
    "lstm_input_init_nobias": ("LSTM", {"initial": "input", "bias": False}),
    "lstm_only_y_h": ("LSTM", {"outputs": ("", "y_h")}),
    "lstm_peepholes": ("LSTM", {"initial": "input", "peepholes": True}),
    "lstm_layout1_bidir": ("LSTM", {"direction": "bidirectional", "batch": 2, "layout": 1, "initial": "input"}),
    "gru_forward": ("GRU", {}),
    "gru_lbr1": ("GRU", {"linear_before_reset": 1}),
    "gru_reverse_b2_const_init": ("GRU", {"direction": "reverse", "batch": 2, "initial": "const"}),
    "gru_bidir_lbr1_input_init": (
        "GRU",
        {"direction": "bidirectional", "batch": 2, "initial": "input", "linear_before_reset": 1},
    ),
    "gru_nobias_b2": ("GRU", {"bias": False, "batch": 2}),
    "gru_only_y": ("GRU", {"outputs": ("y", "")}),
    "gru_layout1": ("GRU", {"layout": 1, "batch": 2, "initial": "input", "linear_before_reset": 1}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rnn_matches_onnx(case: str) -> None:
    op, kwargs = CASES[case]
    model = _rnn_model(op, **kwargs)
    result = convert_proto(model)
    ops = op_types(result)
    assert "FULLY_CONNECTED" in ops and "LOGISTIC" in ops, ops
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        expected = _reference(model, feeds) if kwargs.get("layout") else run_onnx(model, feeds)
        actual = run_tflite(result, feeds)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_close_to_range(a, e, rel=1e-5)


def _reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """onnxruntime has no layout=1 RNNs: the onnx reference evaluator checks those."""
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feeds))


@pytest.mark.parametrize(
    ("op", "kwargs", "message"),
    [
        ("LSTM", {"activations": ["Relu", "Tanh", "Tanh"]}, "activations"),
        ("GRU", {"clip": 2.0}, "clip"),
        ("LSTM", {"input_forget": 1}, "input_forget"),
    ],
)
def test_unsupported_rnn_features_are_refused(op: str, kwargs: dict, message: str) -> None:
    model = _rnn_model(op, **kwargs)
    with pytest.raises(TargetError, match=message):
        convert_proto(model)


def test_sequence_lens_shorter_than_sequence_is_refused() -> None:
    model = _rnn_model("GRU")
    lens = onnx.numpy_helper.from_array(np.array([SEQ - 1], np.int32), "lens")
    model.graph.initializer.append(lens)
    node = model.graph.node[0]
    node.input.extend(["", "lens"][len(node.input) - 3 :])
    with pytest.raises(TargetError, match="sequence_lens"):
        convert_proto(model)


def test_sequence_lens_equal_to_sequence_is_accepted() -> None:
    model = _rnn_model("GRU")
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([SEQ], np.int32), "lens"))
    model.graph.node[0].input.extend(["lens"])
    result = convert_proto(model)
    feeds = random_feeds(model, 0)
    for a, e in zip(run_tflite(result, feeds), run_onnx(model, feeds), strict=True):
        assert_close_to_range(a, e, rel=1e-5)


@pytest.mark.parametrize("name", ["kws_gru", "kws_lstm"])
def test_zoo_kws_models_match_onnx(name: str) -> None:
    path = ZOO / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout (the zoo models come with the zoo branch)")
    model = onnx.load(path)
    result = convert_proto(model)
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        for a, e in zip(run_tflite(result, feeds), run_onnx(model, feeds), strict=True):
            assert_close_to_range(a, e, rel=1e-4)
