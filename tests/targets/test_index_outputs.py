"""An ArgMax index map as a model output (segmentation_models_pytorch's ``activation="argmax2d"``: the class of
every pixel) is verified on the scores it was chosen from: near-tied scores swap whole indices under float32
rounding, which max error over the indices took for a wrong conversion (probe round 14s: smp's Unet-MobileNetV2
at 256x256 refused at arm-cpu fp32, 1-5 of 65,536 pixels a sample flipped, every one at a margin under 2.3e-5 of
the scores' range)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from edgekit.core.errors import TargetError
from edgekit.targets import yardstick
from edgekit.targets.tflite import package
from edgekit.targets.tflite.converter import convert
from onnx import TensorProto, helper, numpy_helper

CLASSES, SIDE = 6, 32


def argmax_head(last: bool = False) -> onnx.ModelProto:
    """Conv 3x3 (3 -> 6 classes) + ArgMax over the classes, keepdims 0: a segmentation head's class map. The last
    two classes are a hair apart (1e-5) wherever they lead: near-ties, as the argmax of a real head has somewhere
    in 65,536 pixels."""
    rng = np.random.default_rng(14)
    w = rng.normal(0, 0.3, (CLASSES, 3, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.1, CLASSES).astype(np.float32)
    w[-1], b[-1] = w[-2], b[-2] + 1e-5  # two classes a hair apart wherever they lead: near-ties
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["scores"], pads=[1, 1, 1, 1]),
        helper.make_node("ArgMax", ["scores"], ["y"], axis=1, keepdims=0, select_last_index=int(last)),
    ]
    graph = helper.make_graph(
        nodes,
        "argmax_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1, SIDE, SIDE])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(count: int = 3) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [{"x": rng.normal(0, 1, (1, 3, SIDE, SIDE)).astype(np.float32)} for _ in range(count)]


def scores_and_indices(proto: onnx.ModelProto, samples) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    with_scores = onnx.ModelProto()
    with_scores.CopyFrom(proto)
    with_scores.graph.output.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, None))
    session = ort.InferenceSession(with_scores.SerializeToString(), providers=["CPUExecutionProvider"])
    runs = [session.run(["y", "scores"], s) for s in samples]
    return np.stack([r[1] for r in runs]).astype(np.float64), [{"y": r[0]} for r in runs]


def test_the_index_output_kind_names_its_scores() -> None:
    kinds = yardstick.output_kinds(ir.from_proto(argmax_head()))
    assert kinds["y"].selection == "ArgMax"
    assert kinds["y"].scores == ("scores", 1, False)
    # the last index among ties is REVERSE_V2 + ARG_MAX: judged as before
    assert yardstick.output_kinds(ir.from_proto(argmax_head(last=True)))["y"].scores is None


def test_indices_swapped_at_near_ties_pass_on_the_scores_and_wrong_ones_fail() -> None:
    samples = feeds()
    scores, reference = scores_and_indices(argmax_head(), samples)
    kinds = yardstick.output_kinds(ir.from_proto(argmax_head()))
    ordered = np.sort(scores, axis=2)
    margin = (ordered[:, :, -1] - ordered[:, :, -2]) / (scores.max() - scores.min())
    runner_up = np.argsort(scores, axis=2)[:, :, -2]
    # the runner-up where the best two scores are within float32 rounding of each other (2e-5 of the range, as
    # the seeded smp Unet's flipped pixels): what another float32 runtime may pick
    near = margin < 2e-5
    assert 0 < near.sum() < near.size // 2
    flipped = [{"y": np.where(near[i], runner_up[i], reference[i]["y"])} for i in range(len(samples))]
    stick = yardstick.yardstick("fp32", 1e-4)
    with pytest.raises(TargetError, match="ArgMax choice"):  # max error over indices: a whole class apart
        yardstick.verify_outputs(reference, flipped, stick, kinds, "arm-cpu", "the .tflite")
    figures = yardstick.verify_outputs(
        reference, flipped, stick, kinds, "arm-cpu", "the .tflite", scores=lambda: {"y": scores}
    )
    assert figures["outputs"]["y"]["checks"] == [
        {"metric": "index_choices_allowed", "value": 1.0, "threshold": 1.0, "passed": True}
    ]
    # the runner-up where the scores are not near-tied, or a map transposed (H and W swapped): refused
    wrong = margin > 1e-2
    for bad in (
        [
            {"y": np.where(wrong[i] & (np.arange(SIDE) < 2), runner_up[i], reference[i]["y"])}
            for i in range(3)
        ],
        [{"y": np.swapaxes(r["y"], 1, 2).copy()} for r in reference],
    ):
        with pytest.raises(TargetError, match="index_choices_allowed"):
            yardstick.verify_outputs(
                reference, bad, stick, kinds, "arm-cpu", "the .tflite", scores=lambda: {"y": scores}
            )


def test_the_tflite_verification_judges_an_argmax_output_on_the_hosts_scores() -> None:
    proto = argmax_head()
    model = ir.from_proto(proto)
    samples = feeds()
    figures = package.verify(model, convert(proto), samples, None, "arm-cpu")
    entry = figures["outputs"]["y"]
    assert entry["index_of"] == {"scores": "scores", "axis": 1, "keepdims": False}
    host_scores = package.index_scores(model, yardstick.output_kinds(model), samples, "host")
    ort_scores, _ = scores_and_indices(proto, samples)
    np.testing.assert_allclose(host_scores["y"], ort_scores, rtol=0, atol=1e-5)
