"""LSTM and GRU unrolled into TFLite ops: LiteRT matches onnxruntime (<= 1e-5 of the output range)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from edgekit.core.errors import TargetError
from onnx import helper
from tflite_helpers import (
    assert_close_to_range,
    convert_proto,
    edgekit_qdq,
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
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
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
    while outs and not outs[-1]:
        outs.pop()
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
    "lstm_layout1_bidir": (
        "LSTM",
        {"direction": "bidirectional", "batch": 2, "layout": 1, "initial": "input"},
    ),
    "gru_forward": ("GRU", {}),
    "gru_lbr1": ("GRU", {"linear_before_reset": 1}),
    "gru_reverse_b2_const_init": ("GRU", {"direction": "reverse", "batch": 2, "initial": "const"}),
    "gru_bidir_lbr1_input_init": (
        "GRU",
        {"direction": "bidirectional", "batch": 2, "initial": "input", "linear_before_reset": 1},
    ),
    "gru_bidir_explicit_default_activations": (
        "GRU",
        {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh", "Sigmoid", "Tanh"]},
    ),
    "gru_nobias_b2": ("GRU", {"bias": False, "batch": 2}),
    "gru_only_y": ("GRU", {"outputs": ("y", "")}),
    "gru_layout1": ("GRU", {"layout": 1, "batch": 2, "initial": "input", "linear_before_reset": 1}),
    "rnn_forward": ("RNN", {}),
    "rnn_bidir_b2_input_init": ("RNN", {"direction": "bidirectional", "batch": 2, "initial": "input"}),
    "rnn_reverse_const_init_nobias": ("RNN", {"direction": "reverse", "initial": "const", "bias": False}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rnn_matches_onnx(case: str) -> None:
    op, kwargs = CASES[case]
    model = _rnn_model(op, **kwargs)
    result = convert_proto(model)
    ops = op_types(result)
    assert "FULLY_CONNECTED" in ops and ("LOGISTIC" in ops or op == "RNN"), ops
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
        ("RNN", {"activations": ["Relu"]}, "activations"),
        ("GRU", {"activations": ["Sigmoid", "Tanh"], "activation_alpha": [1.0]}, "activation_alpha"),
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
    model = onnx.load(path)
    result = convert_proto(model)
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        for a, e in zip(run_tflite(result, feeds), run_onnx(model, feeds), strict=True):
            assert_close_to_range(a, e, rel=1e-4)


def _rnn_between_matmuls(op: str) -> onnx.ModelProto:
    """MatMul -> Relu -> RNN (Y) -> MatMul: the quantizer has integer rules around the RNN, none for it."""
    rng = np.random.default_rng(3)
    gates = 4 if op == "LSTM" else 3
    outs = ["y", "y_h", "y_c"][: 3 if op == "LSTM" else 2]
    nodes = [
        helper.make_node("MatMul", ["x", "w_in"], ["proj"], name="proj"),
        helper.make_node("Relu", ["proj"], ["act"], name="act"),
        helper.make_node(op, ["act", "W", "R", "B"], outs, name="rnn", hidden_size=HIDDEN),
        helper.make_node("Squeeze", ["y", "axes"], ["seq"], name="squeeze"),
        helper.make_node("MatMul", ["seq", "w_out"], ["out"], name="head"),
    ]
    inits = {
        "w_in": _w(rng, INPUT, INPUT),
        "W": _w(rng, 1, gates * HIDDEN, INPUT),
        "R": _w(rng, 1, gates * HIDDEN, HIDDEN),
        "B": _w(rng, 1, 2 * gates * HIDDEN),
        "axes": np.array([1], np.int64),
        "w_out": _w(rng, HIDDEN, 4),
    }
    return make_model(nodes, {"x": (SEQ, 1, INPUT)}, ["out"], inits, opset=13)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_int8_model_keeps_the_rnn_as_a_float_island(op: str) -> None:
    from edgekit.targets.tflite.converter import ConvertOptions

    model = _rnn_between_matmuls(op)
    calib = [random_feeds(model, seed) for seed in range(8)]
    qdq = edgekit_qdq(model, calib)
    assert op in {n.op_type for n in qdq.graph.node}
    result = convert_proto(qdq, ConvertOptions(io_dtype="float32"))
    ops = op_types(result)
    assert ops.get("DEQUANTIZE", 0) >= 1 and ops.get("QUANTIZE", 0) >= 1, ops
    assert ops.get("LOGISTIC", 0) >= SEQ, ops
    for seed in (20, 21):
        feeds = random_feeds(model, seed)
        (actual,) = run_tflite(result, feeds)
        (expected,) = run_onnx(qdq, feeds)
        assert_close_to_range(actual, expected, rel=0.02)


def test_zoo_kws_gru_int8_deploy_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edgekit.cli.common import run_app
    from edgekit.cli.main import app
    from edgekit.device_agents.bundle import read_bundle

    path = ZOO / "kws_gru.onnx"
    calib = tmp_path / "calib.npz"
    np.savez(calib, mfcc=np.random.default_rng(0).standard_normal((8, 1, 49, 40)).astype(np.float32))
    args = ["deploy", str(path), "-t", "arm-cpu", "--precision", "int8", "--calib", str(calib)]
    try:
        run_app(app, [*args, "-o", str(tmp_path / "out")])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = read_bundle(tmp_path / "out" / "arm-cpu").manifest
    assert manifest.verification["precision"] == "int8" and manifest.verification["passed"]


def test_a_long_unrolled_lstm_converts_in_linear_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resemblyzer's trained speaker encoder (3 LSTM layers over 160 frames, about 10k TFLite ops unrolled) timed out
    its fp32 deploy after 600 s: the integer-kernel pass built the producer / consumer maps again for every op it
    looked at. Now they are built again only after a rewrite: a 2-layer LSTM over 96 steps converts with at most 60
    map builds (3463 before), and LiteRT still matches onnxruntime."""
    from edgekit.targets.tflite import graph as tflite_graph

    steps, rng = 96, np.random.default_rng(5)
    nodes = [
        helper.make_node("LSTM", ["x", "W1", "R1", "B1"], ["y1"], hidden_size=HIDDEN),
        helper.make_node("Squeeze", ["y1", "axes"], ["s1"]),
        helper.make_node("LSTM", ["s1", "W2", "R2", "B2"], ["y2", "h2"], hidden_size=HIDDEN),
    ]
    inits = {
        "W1": _w(rng, 1, 4 * HIDDEN, INPUT),
        "R1": _w(rng, 1, 4 * HIDDEN, HIDDEN),
        "B1": _w(rng, 1, 8 * HIDDEN),
        "axes": np.array([1], np.int64),
        "W2": _w(rng, 1, 4 * HIDDEN, HIDDEN),
        "R2": _w(rng, 1, 4 * HIDDEN, HIDDEN),
        "B2": _w(rng, 1, 8 * HIDDEN),
    }
    model = make_model(nodes, {"x": (steps, 1, INPUT)}, ["h2"], inits, opset=13)
    calls = {"consumers": 0}
    built = tflite_graph.Graph.consumers

    def counted(self):
        calls["consumers"] += 1
        return built(self)

    monkeypatch.setattr(tflite_graph.Graph, "consumers", counted)
    result = convert_proto(model)
    assert calls["consumers"] <= 60, calls
    feeds = random_feeds(model, 0)
    for a, e in zip(run_tflite(result, feeds), run_onnx(model, feeds), strict=True):
        assert_close_to_range(a, e, rel=1e-4)
