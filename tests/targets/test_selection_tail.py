"""Detectors exported with their NMS inside (ultralytics ``export(nms=True)``, PaddleDetection's ``multiclass_nms3``):
the number of boxes is known only at run time.

intel-vpu (OpenVINO runs NonMaxSuppression with its data-dependent output), arm-cpu and nnapi (LiteRT sizes the
selection's tensors while it runs: ``edgekit.targets.tflite.selection``) and ``edgekit quantize`` take such a model.
Each artifact is verified in two parts (``edgekit.targets.selection_tail``): the body on the tensors the selection
reads, the selection against the source's run on the artifact's own values. The model here is built in the test: a strided Conv head giving boxes and
class scores, joined by a Concat and split again (as ultralytics' export does), then NonMaxSuppression and the
boxes it kept, ``[K, 4]`` with K known only at run time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_in_process import cli_text
from edgekit.core.errors import TargetError
from edgekit.targets.selection_tail import selection_tail, verify_with_tail
from edgekit.targets.yardstick import YARDSTICKS
from onnx import TensorProto, helper, numpy_helper

CLASSES = 3
ROWS = 12  # at most 4 boxes a class


def _detector(padded: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.4, (4 + CLASSES, 3, 4, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.2, 4 + CLASSES).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([1, 4 + CLASSES, 64], np.int64), "flat"),
        numpy_helper.from_array(np.array([32.0], np.float32), "px"),
    ]

    def const(name: str, values: list[int | float], dtype=np.int64) -> None:
        inits.append(numpy_helper.from_array(np.array(values, dtype), name))

    for name, values in {
        "z": [0], "zz": [0, 0], "four": [4], "big": [99], "ax1": [1], "ax2": [2], "max_out": [ROWS // CLASSES],
        "n_rows": [ROWS], "rows4": [ROWS, 4], "rows3": [ROWS, 3],
    }.items():  # fmt: skip
        const(name, values)
    const("iou", [0.5], np.float32)
    const("thr", [0.55], np.float32)
    const("two", 2)
    const("ax0", [0])
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["h"], strides=[4, 4], name="head"),
        helper.make_node("Reshape", ["h", "flat"], ["r"]),
        helper.make_node("Slice", ["r", "z", "four", "ax1"], ["raw_boxes"]),
        helper.make_node("Sigmoid", ["raw_boxes"], ["unit_boxes"]),
        helper.make_node("Mul", ["unit_boxes", "px"], ["boxes"]),
        helper.make_node("Slice", ["r", "four", "big", "ax1"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["scores"]),
        helper.make_node("Concat", ["boxes", "scores"], ["joined"], axis=1, name="joined"),
        helper.make_node("Transpose", ["joined"], ["rows"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["rows", "z", "four", "ax2"], ["cxcywh"]),
        helper.make_node("Slice", ["rows", "four", "big", "ax2"], ["row_scores"]),
        helper.make_node("Transpose", ["row_scores"], ["class_scores"], perm=[0, 2, 1]),
        helper.make_node(
            "NonMaxSuppression",
            ["cxcywh", "class_scores", "max_out", "iou", "thr"],
            ["selected"],
            center_point_box=1,
            name="nms",
        ),
        helper.make_node("Gather", ["selected", "two"], ["box_index"], axis=1),
        helper.make_node("Squeeze", ["cxcywh", "ax0"], ["all_boxes"]),
        helper.make_node("Gather", ["all_boxes", "box_index"], ["kept_boxes"], axis=0),
        # padded to ROWS rows as ultralytics pads to 300: the outputs' shapes are static, their rows are not
        helper.make_node("Shape", ["kept_boxes"], ["kept_shape"], end=1),
        helper.make_node("Sub", ["n_rows", "kept_shape"], ["missing"]),
        helper.make_node("Concat", ["zz", "missing", "z"], ["pads"], axis=0),
        helper.make_node("Pad", ["kept_boxes", "pads"], ["padded_boxes"]),
        helper.make_node("Reshape", ["padded_boxes", "rows4"], ["detections"]),
        helper.make_node("Pad", ["selected", "pads"], ["padded_selected"]),
        helper.make_node("Reshape", ["padded_selected", "rows3"], ["selected_rows"]),
    ]
    outputs = [
        helper.make_tensor_value_info("detections", TensorProto.FLOAT, [ROWS, 4]),
        helper.make_tensor_value_info("selected_rows", TensorProto.INT64, [ROWS, 3]),
    ]
    if not padded:  # PaddleDetection's form: as many rows as the selection keeps
        nodes = nodes[:-7]
        outputs = [helper.make_tensor_value_info("kept_boxes", TensorProto.FLOAT, ["K", 4])]
    graph = helper.make_graph(
        nodes,
        "nms_detector",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.fixture(scope="module")
def detector(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nms") / "detector.onnx"
    onnx.save(_detector(), path)
    return path


def _kept(detections: np.ndarray) -> int:
    """The number of boxes selected: the padding rows are zero, a kept box's (a sigmoid times 32) is not."""
    return int(np.any(detections != 0, axis=1).sum())


def _samples(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 1, (1, 3, 32, 32)).astype(np.float32) for _ in range(n)]


def test_the_tail_starts_at_the_selection_and_reads_the_split_scores(detector):
    tail = selection_tail(onnx.shape_inference.infer_shapes(onnx.load(detector)))
    assert tail is not None and "NonMaxSuppression" in tail.selection
    assert set(tail.frontier) == {"cxcywh", "class_scores", "all_boxes"}
    assert set(tail.outputs) == {"detections", "selected_rows"}
    session = ort.InferenceSession(str(detector))
    counts = {_kept(session.run(None, {"x": x})[0]) for x in _samples(6, 1)}
    assert len(counts) > 1 and min(counts) > 0, counts  # the number of boxes depends on the data


def _tflite_outputs(bundle: Path, samples: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(bundle / "model.tflite"))
    interpreter.allocate_tensors()
    (inp,) = interpreter.get_input_details()
    runs = []
    for x in samples:
        feed = x.transpose(0, 2, 3, 1) if tuple(inp["shape"]) != x.shape else x  # NHWC image input
        interpreter.set_tensor(inp["index"], feed)
        interpreter.invoke()
        runs.append({d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()})
    return runs


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "kept-rows"])
def test_arm_cpu_and_nnapi_run_the_selection_on_tensors_sized_at_run_time(padded, tmp_path, capsys):
    """The selection is written with tensors LiteRT sizes while it runs (NON_MAX_SUPPRESSION_V4, WHERE...): the
    fp32 .tflite keeps the boxes onnxruntime keeps, sample by sample, also where the number of rows is the
    selection's ([K, 4], PaddleDetection's form); int8 and nnapi pass the two-part verification."""
    path = tmp_path / "detector.onnx"
    model = _detector(padded=padded)
    onnx.save(model, path)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.concatenate(_samples(4, 3)))
    code, text = cli_text(
        capsys, "deploy", str(path), "-t", "arm-cpu", "--precision", "fp32", "--calib", str(calib),
        "-o", str(tmp_path / "f"),
    )  # fmt: skip
    assert code == 0, text
    bundle = tmp_path / "f" / "arm-cpu"
    manifest = json.loads((bundle / "manifest.json").read_text())
    held_out = _samples(6, 11)
    session = ort.InferenceSession(str(path))
    names = [o.name for o in model.graph.output]
    kept = set()
    for x, got in zip(held_out, _tflite_outputs(bundle, held_out), strict=True):
        for name, want in zip(names, session.run(None, {"x": x}), strict=True):
            assert got[name].shape == want.shape, (name, got[name].shape, want.shape)
            np.testing.assert_allclose(got[name], want, rtol=0, atol=1e-4)
        kept.add(_kept(got[names[0]]))
    assert len(kept) > 1 and min(kept) > 0, kept  # the rows differ from sample to sample
    if not padded:
        assert manifest["outputs"][0]["shape"] == [-1, 4], manifest["outputs"]
    assert "selection_tail" in manifest["verification"], manifest["verification"].keys()
    for target, extra in (("arm-cpu", ["--precision", "int8"]), ("nnapi", [])):
        out = tmp_path / f"q-{target}"
        code, text = cli_text(
            capsys, "deploy", str(path), "-t", target, "--calib", str(calib), *extra, "-o", str(out)
        )
        assert code == 0, text
        assert "NON_MAX_SUPPRESSION_V4" in json.dumps(
            json.loads((out / target / "manifest.json").read_text())
        )


def test_a_selection_tail_with_an_op_not_sized_at_run_time_is_refused_in_one_line(tmp_path, capsys):
    model = _detector(padded=False)
    model.graph.node.append(
        helper.make_node("Hardmax", ["kept_boxes"], ["soft_boxes"], axis=-1, name="after_nms")
    )
    model.graph.output[0].name = "soft_boxes"
    path = tmp_path / "softmax_after.onnx"
    onnx.save(model, path)
    for target in ("arm-cpu", "nnapi"):
        calib = _calib(tmp_path)
        code, text = cli_text(
            capsys, "deploy", str(path), "-t", target, "--calib", str(calib), "-o", str(tmp_path / target)
        )
        lines = [ln for ln in text.splitlines() if ln.startswith("error")]
        assert code == 2 and len(lines) == 1, text
        assert "Hardmax node 'after_nms' after it does not run on tensors sized at run time" in text, text
        assert "NonMaxSuppression ('nms')" in text, text
        assert "quantizing for" not in text, text  # refused before calibration is spent on it
        assert not (tmp_path / target / target).exists()


def test_intel_vpu_refuses_a_selection_of_run_time_size_in_one_line(tmp_path, capsys):
    """NPUs compile static shapes only: ``[K, 4]`` boxes are refused, saying how to export them."""
    path = tmp_path / "unpadded.onnx"
    onnx.save(_detector(padded=False), path)
    code, text = cli_text(capsys, "deploy", str(path), "-t", "intel-vpu", "-o", str(tmp_path / "out"))
    assert code == 2, text
    assert "NonMaxSuppression 'nms' selects at run time" in text and "need static shapes" in text, text
    assert not (tmp_path / "out" / "intel-vpu").exists()
    code, text = cli_text(
        capsys, "deploy", str(path), "-t", "intel-vpu", "--precision", "int8", "--calib", str(_calib(tmp_path)),
        "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2 and "selects at run time" in text, text
    assert "quantizing for" not in text, text  # refused before calibration is spent on it
    assert not (tmp_path / "out" / "intel-vpu").exists()
    code, text = cli_text(
        capsys, "quantize", str(path), "--calib", str(_calib(tmp_path)), "-o", str(tmp_path / "q.onnx")
    )
    assert code == 0, text  # onnxruntime and OpenVINO run the QDQ model's selection as it is
    q = ort.InferenceSession(str(tmp_path / "q.onnx"))
    assert {len(q.run(None, {"x": x})[0]) for x in _samples(4, 7)} - {0}


def _calib(folder: Path) -> Path:
    path = folder / "calib.npz"
    np.savez(path, x=np.concatenate(_samples(16, 3)))
    return path


def _ir_outputs(xml: Path, samples: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    import openvino as ov

    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    results = []
    for x in samples:
        out = compiled.create_infer_request().infer({"x": x})
        results.append({port.get_any_name(): np.array(v) for port, v in out.items()})
    return results


def test_intel_vpu_ir_selects_the_boxes_onnxruntime_selects(detector, tmp_path, capsys):
    """fp32 IR: OpenVINO's NonMaxSuppression keeps exactly the boxes onnxruntime keeps, sample by sample."""
    code, text = cli_text(
        capsys, "deploy", str(detector), "-t", "intel-vpu", "--precision", "fp32", "-o", str(tmp_path)
    )
    assert code == 0, text
    manifest = json.loads((tmp_path / "intel-vpu" / "manifest.json").read_text())
    assert manifest["verification"]["selection_tail"]["selection"] == "NonMaxSuppression node 'nms'"
    session = ort.InferenceSession(str(detector))
    samples = _samples(8, 2)
    for x, got in zip(samples, _ir_outputs(tmp_path / "intel-vpu" / "model.xml", samples), strict=True):
        boxes, selected = session.run(None, {"x": x})
        np.testing.assert_array_equal(got["selected_rows"], selected)
        np.testing.assert_allclose(got["detections"], boxes, rtol=1e-5, atol=1e-5)


def test_intel_vpu_fp16_and_int8_pass_the_two_part_verification(detector, tmp_path, capsys):
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.concatenate(_samples(16, 3)))
    for precision in ("fp16", "int8"):
        out = tmp_path / precision
        code, text = cli_text(
            capsys, "deploy", str(detector), "-t", "intel-vpu", "--precision", precision, "--calib", str(calib),
            "-o", str(out),
        )  # fmt: skip
        assert code == 0, text
        verification = json.loads((out / "intel-vpu" / "manifest.json").read_text())["verification"]
        tail = verification["selection_tail"]
        assert tail["frontier"] and all(f["passed"] for f in tail["frontier"].values())
        assert set(verification["outputs"]) == {"detections", "selected_rows"}


def _ort_runs(model: onnx.ModelProto, samples, extra=()):
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for name in extra:
        model.graph.output.append(helper.make_value_info(name, onnx.TypeProto()))
    session = ort.InferenceSession(model.SerializeToString())
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(None, s), strict=True)) for s in samples]


def _verify(proto, artifact_run, stick=YARDSTICKS["fp16"], exact_tail_run=None):
    tail = selection_tail(proto)
    samples = [{"x": x} for x in _samples(4, 4)]

    def tail_run(model, feeds):
        session = ort.InferenceSession(model.SerializeToString())
        names = [o.name for o in session.get_outputs()]
        return [dict(zip(names, session.run(None, f), strict=True)) for f in feeds]

    return verify_with_tail(
        proto,
        tail,
        samples,
        lambda extra: _ort_runs(proto, samples, extra),
        lambda extra: artifact_run(samples, extra),
        tail_run,
        stick,
        {},
        "test",
        "the artifact",
        exact_tail_run=exact_tail_run,
    )


def test_a_wrong_body_or_a_wrong_selection_is_refused():
    proto = onnx.shape_inference.infer_shapes(_detector())
    report = _verify(proto, lambda samples, extra: _ort_runs(proto, samples, extra))
    assert report["selection_tail"]["end_to_end"]["samples_with_the_same_selection"] == {
        "detections": 4,
        "selected_rows": 4,
    }

    def wrong_body(samples, extra):  # x and y swapped (a layout error): the frontier misses the yardstick
        runs = _ort_runs(proto, samples, extra)
        for run in runs:
            run["cxcywh"] = run["cxcywh"][..., [1, 0, 2, 3]]
        return runs

    with pytest.raises(TargetError, match="before the selection by NonMaxSuppression"):
        _verify(proto, wrong_body)

    looser = onnx.ModelProto.FromString(proto.SerializeToString())
    next(t for t in looser.graph.initializer if t.name == "iou").CopyFrom(
        numpy_helper.from_array(np.array([0.9], np.float32), "iou")
    )  # a selection that keeps more boxes than the source's on the same scores

    with pytest.raises(TargetError, match="differs from the source's selection run on the same values"):
        _verify(proto, lambda samples, extra: _ort_runs(looser, samples, extra))


def test_fp32_judges_the_tensors_the_selection_reads_together():
    """fp32's bar (1e-4 of the range) on the boxes and scores together, as the detector exported without its NMS
    outputs them: float32-sized noise on the scores alone (range 1 against the boxes' 32) passes; scores off by a
    wrong conversion do not."""
    proto = onnx.shape_inference.infer_shapes(_detector())
    stick = YARDSTICKS["fp32"]

    def nudged(scale):
        def run(samples, extra):
            runs = _ort_runs(proto, samples, extra)
            for r in runs:
                r["class_scores"] = r["class_scores"] + scale * np.float32(1e-3)  # 1e-3 of the scores' range
            return runs

        return run

    report = _verify(proto, nudged(1), stick)
    assert report["selection_tail"]["frontier"].keys() == {"the tensors the selection reads, together"}
    with pytest.raises(TargetError, match="before the selection by NonMaxSuppression"):
        _verify(proto, nudged(100), stick)  # 0.1: a score 10 % of its range off


def test_quantize_keeps_the_selection_and_the_split_concat_float(detector, tmp_path, capsys):
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.concatenate(_samples(16, 5)))
    out = tmp_path / "q.onnx"
    code, text = cli_text(capsys, "quantize", str(detector), "--calib", str(calib), "-o", str(out))
    assert code == 0, text
    assert "nodes from nms" in text  # the selection's nodes are one row of the table
    q = onnx.load(out)
    quantized = {n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    # boxes (0..32) and scores (0..1) never share one int8 grid; after the selection nothing is quantized
    assert quantized and not quantized & {"joined", "rows", "kept_boxes", "detections", "selected"}
    scales = {n.input[0]: n.input[1] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    values = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    for scores in {"scores", "row_scores", "class_scores"} & set(scales):
        assert float(values[scales[scores]]) <= 1.01 / 255, scores
    source, qdq = ort.InferenceSession(str(detector)), ort.InferenceSession(str(out))
    for x in _samples(6, 6):
        fp32, int8 = _kept(source.run(None, {"x": x})[0]), _kept(qdq.run(None, {"x": x})[0])
        assert int8 > 0 and abs(int8 - fp32) <= 2, (fp32, int8)


def _detector_keeping_boxes_in_an_if() -> onnx.ModelProto:
    """The unpadded detector with its last Gather inside an If's branch (torchvision-style guards around the
    kept boxes): the branch reads the selection's indices from the outer graph by name, not as an If input."""
    model = _detector(padded=False)
    graph = model.graph
    gather = next(n for n in graph.node if n.output[0] == "kept_boxes")
    graph.node.remove(gather)
    then_branch = helper.make_graph(
        [helper.make_node("Gather", ["all_boxes", "box_index"], ["then_boxes"], axis=0)],
        "then",
        [],
        [helper.make_tensor_value_info("then_boxes", TensorProto.FLOAT, ["K", 4])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Slice", ["all_boxes", "z", "z", "ax0"], ["no_boxes"])],
        "else",
        [],
        [helper.make_tensor_value_info("no_boxes", TensorProto.FLOAT, [0, 4])],
    )
    graph.node.extend(
        [
            helper.make_node("ReduceMax", ["class_scores"], ["best"], keepdims=0),
            helper.make_node("Greater", ["best", "thr"], ["any_box"]),
            helper.make_node("Squeeze", ["any_box"], ["cond"]),
            helper.make_node(
                "If", ["cond"], ["kept_boxes"], then_branch=then_branch, else_branch=else_branch
            ),
        ]
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_branch_reading_the_selection_by_name_is_in_the_tail():
    import onnx_ir as ir
    from edgekit.core.shape_checks import data_dependent_tail

    model = onnx.shape_inference.infer_shapes(_detector_keeping_boxes_in_an_if())
    session = ort.InferenceSession(model.SerializeToString())
    assert {session.run(None, {"x": x})[0].shape[0] for x in _samples(6, 1)} != {0}  # the If keeps boxes
    tail = selection_tail(model)
    assert tail is not None and tail.outputs == ("kept_boxes",)  # the If's output comes out of the selection
    assert "If" in {model.graph.node[k].op_type for k in tail.nodes}
    assert "box_index" not in tail.frontier  # the If's read of it is inside the tail
    graph = ir.from_proto(model).graph
    assert "If" in {n.op_type for n in data_dependent_tail(graph)}


def _bar_model(padded: bool) -> onnx.ModelProto:
    """NonMaxSuppression over 8 boxes, then the boxes kept: ``[K, 4]``, or padded to ``[8, 4]``."""
    inits = [
        numpy_helper.from_array(np.array([8], np.int64), "max_out"),
        numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
        numpy_helper.from_array(np.array([0.1], np.float32), "thr"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
        numpy_helper.from_array(np.array([8], np.int64), "rows"),
        numpy_helper.from_array(np.array([0, 0], np.int64), "zz"),
        numpy_helper.from_array(np.array([8, 4], np.int64), "rows4"),
    ]
    nodes = [
        helper.make_node(
            "NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["selected"], name="nms"
        ),
        helper.make_node("Gather", ["selected", "two"], ["index"], axis=1),
        helper.make_node("Squeeze", ["boxes", "ax0"], ["all_boxes"]),
        helper.make_node("Gather", ["all_boxes", "index"], ["kept"], axis=0),
    ]
    output = helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["K", 4])
    if padded:
        nodes += [
            helper.make_node("Shape", ["kept"], ["kept_shape"], end=1),
            helper.make_node("Sub", ["rows", "kept_shape"], ["missing"]),
            helper.make_node("Concat", ["zz", "missing", "ax0"], ["pads"], axis=0),
            helper.make_node("Pad", ["kept", "pads"], ["padded"]),
            helper.make_node("Reshape", ["padded", "rows4"], ["detections"]),
        ]
        output = helper.make_tensor_value_info("detections", TensorProto.FLOAT, [8, 4])
    graph = helper.make_graph(
        nodes,
        "bar",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 8, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 8]),
        ],
        [output],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _bar_samples(folder: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """Pairs of boxes, [0, 0, 2, 1] and [0, 0, 1, 1], overlapping at IoU 0.5 exactly, each pair apart."""
    boxes = np.array([[[4 * i, 0, 4 * i + 2, 1], [4 * i, 0, 4 * i + 1, 1]] for i in range(4)], np.float32)
    boxes = np.repeat(boxes.reshape(1, 1, 8, 4), 3, axis=0)
    scores = np.random.default_rng(0).uniform(0.2, 1, (3, 1, 1, 8)).astype(np.float32)
    path = folder / "bar.npz"
    np.savez(path, boxes=boxes.reshape(3, 8, 4), scores=scores.reshape(3, 1, 8))
    return path, boxes, scores


def test_every_target_keeps_a_box_at_the_iou_bar_as_onnx_does(tmp_path, capsys):
    """Boxes overlapping exactly at the IoU bar (int8 boxes on a grid meet it): ONNX (onnxruntime, the onnx
    reference evaluator) keeps the second box; OpenVINO's NonMaxSuppression suppresses it, LiteRT's too. The
    .tflite and the IR keep it (ov_nms, ops_selection), and both verifications judge the selection by ONNX's
    semantics (against OpenVINO's, the .tflite failed)."""
    calib, boxes, scores = _bar_samples(tmp_path)
    for padded, target in ((False, "arm-cpu"), (True, "intel-vpu")):
        model = _bar_model(padded)
        path = tmp_path / f"bar_{target}.onnx"
        onnx.save(model, path)
        code, text = cli_text(
            capsys, "deploy", str(path), "-t", target, "--precision", "fp32", "--calib", str(calib),
            "-o", str(tmp_path / target),
        )  # fmt: skip
        assert code == 0, text
        want = ort.InferenceSession(str(path)).run(None, {"boxes": boxes[0], "scores": scores[0]})[0]
        assert np.count_nonzero(np.any(want != 0, axis=1)) == 8  # every box kept: none overlaps above the bar
        feeds = {"boxes": boxes[0], "scores": scores[0]}
        if target == "arm-cpu":
            from tflite_files import run_tflite_file

            got = run_tflite_file(tmp_path / target / target / "model.tflite", feeds)["kept"]
        else:
            import openvino as ov

            compiled = ov.Core().compile_model(str(tmp_path / target / target / "model.xml"), "CPU")
            got = next(iter(compiled.create_infer_request().infer(feeds).values()))
        np.testing.assert_array_equal(got, want)


def test_the_source_selection_runs_where_the_reference_evaluator_cannot():
    """The onnx reference evaluator cannot Flatten an empty array (RetinaNet's level without a candidate box):
    the source's selection then runs on OpenVINO, its IoU bar read as ONNX's, and gives onnxruntime's values."""
    from edgekit.targets.selection_tail import onnx_tail_run

    graph = helper.make_graph(
        [helper.make_node("Flatten", ["kept"], ["flat"], axis=1)],
        "empty",
        [helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["K", 2, 2])],
        [helper.make_tensor_value_info("flat", TensorProto.FLOAT, ["K", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = [{"kept": np.zeros((0, 2, 2), np.float32)}, {"kept": np.ones((3, 2, 2), np.float32)}]
    got = onnx_tail_run(model, feeds)
    session = ort.InferenceSession(model.SerializeToString())
    for f, g in zip(feeds, got, strict=True):
        want = session.run(None, f)[0]
        assert g["flat"].shape == want.shape
        np.testing.assert_array_equal(g["flat"], want)


def test_the_tail_is_judged_against_its_float64_run_where_float32_is_off():
    """A tail output beyond fp32's bar of the source's float32 tail (both fed the artifact's values) is judged
    against the same tail in float64 sample by sample (``_judge_tail``), as fp32 judges a body: within the bar of
    float64, or, on a sample where the source's float32 tail is itself beyond the bar (a mask head amplifying
    rounding), within 16x its distance while another sample keeps the bar. Farther, or off on the well-conditioned
    sample, or without a float64 run row for row: refused."""
    from edgekit.targets.selection_tail import SelectionTail, _judge_tail

    tail = SelectionTail(nodes=(), frontier=(), outputs=("masks",), selection="NonMaxSuppression node 'nms'")
    rng = np.random.default_rng(3)
    exact = [rng.uniform(0, 1, (5, 28)), rng.uniform(0, 1, (3, 28))]  # two samples, their own row counts
    source = [{"masks": (exact[0] + 3e-4 * rng.uniform(-1, 1, (5, 28))).astype(np.float32)},  # ill-conditioned
              {"masks": (exact[1] + 1e-6).astype(np.float32)}]  # fmt: skip

    def judged(off_ill: float, off_well: float, wide=exact) -> list[str]:
        got = [
            {"masks": (exact[0] + off_ill).astype(np.float32)},
            {"masks": (exact[1] + off_well).astype(np.float32)},
        ]
        return _judge_tail(tail, source, got, lambda: None if wide is None else [{"masks": w} for w in wide])[
            1
        ]

    assert judged(-2e-4, 2e-6) == []  # 4e-4 of the range off the float32 tail, nearer float64 than it
    assert judged(2e-3, 2e-6) == []  # within 16x float32's own distance where float32 is off
    assert judged(1e-2, 2e-6)  # beyond 16x it
    assert judged(-2e-4, 5e-4)  # off on the sample where float32 keeps the bar
    assert judged(-2e-4, 2e-6, wide=None)  # no float64 tail: the float32 judgement
    assert judged(-2e-4, 2e-6, wide=[exact[0][:4], exact[1]])  # float64 kept other rows


def test_a_tail_off_where_float32_itself_is_off_asks_for_gentler_samples():
    """``verify_with_tail``: a tail output beyond the bar of the source's float32 tail and of its float64 run, on
    samples where that float32 tail is itself beyond the bar off float64, is refused as IllConditionedSamples (a
    deploy without data then retries gentler seeded samples, as for a body); with one sample on which float32
    keeps the bar, within 16x float32's own distance elsewhere, it passes."""
    from edgekit.targets.yardstick import IllConditionedSamples

    proto = onnx.shape_inference.infer_shapes(_detector())
    tail = selection_tail(proto)
    samples = [{"x": x} for x in _samples(4, 4)]
    scale = float(np.ptp(np.concatenate([r["detections"].ravel() for r in _ort_runs(proto, samples)])))

    def shifted(runs, by):  # detections moved by a fraction of their range on the samples of ``by``
        for k, r in enumerate(runs):
            r["detections"] = r["detections"] + np.float32(by.get(k, 0.0) * scale)
        return runs

    def case(exact_by, artifact_by):
        def exact(model, feeds):
            session = ort.InferenceSession(model.SerializeToString())
            names = [o.name for o in session.get_outputs()]
            runs = [dict(zip(names, session.run(None, f), strict=True)) for f in feeds]
            return [
                {n: v.astype(np.float64) if v.dtype.kind == "f" else v for n, v in r.items()}
                for r in shifted(runs, exact_by)
            ]

        return _verify(
            proto,
            lambda s, extra: shifted(_ort_runs(proto, s, extra), artifact_by),
            YARDSTICKS["fp32"],
            exact,
        )

    assert "detections" in tail.outputs
    every = dict.fromkeys(range(4), -3e-4)
    with pytest.raises(
        IllConditionedSamples, match="differs from the source's selection run on the same values"
    ):
        case(every, dict.fromkeys(range(4), 1e-3))
    case({0: -3e-4}, {0: 1e-3})  # 1.3e-3 off float64 where float32 is 3e-4 off; the others exact
    with pytest.raises(IllConditionedSamples):
        case({0: -3e-4}, {0: 1e-3, 1: 5e-4})  # and off on a sample float32 keeps the bar: refused here too
    with pytest.raises(TargetError, match="differs from the source's selection") as refused:
        case({}, {1: 5e-4})  # float32 keeps the bar everywhere: a wrong tail, not the samples
    assert refused.type is TargetError
