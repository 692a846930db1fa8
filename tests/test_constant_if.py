"""An If whose condition is a shape test becomes the branch it takes once the input shapes are fixed.

Silero VAD v6 (``silero_vad_half.onnx``, ``silero_vad_16k_op15.onnx``) branches on ``x.shape[-1]`` and on the
state's batch: declined as control flow before, deployed now (OpenVINO converts the same If). The model here
has its pattern: dynamic batch and samples, a shape-tested If with another If nested in the branch taken, and
branches that read outer-scope values; it runs against onnxruntime on the dynamic original.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.cli.common import run_app
from edgekit.cli.main import app
from onnx import TensorProto, helper, numpy_helper
from tflite_files import run_tflite_file

FLOAT = TensorProto.FLOAT


def _silero_like() -> onnx.ModelProto:
    """x [batch, samples] -> Conv1d + Relu -> c [batch, 4, samples]; If samples == 8 (then: mean over time, and
    If the state's batch == 1 (then x2, else as is); else: max over time); out [batch, 4]; stateN = state + out."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 1, 3)).astype(np.float32), "w")
    consts = {
        "axis1": np.array([1], np.int64), "axis2": np.array([2], np.int64), "i2": np.array(2, np.int64),
        "i1": np.array(1, np.int64), "eight": np.array(8, np.int64), "two": np.array(2.0, np.float32),
    }  # fmt: skip
    inits = [w, *(numpy_helper.from_array(v, k) for k, v in consts.items())]
    out_info = [helper.make_tensor_value_info("r", FLOAT, None)]
    inner = helper.make_node(
        "If", ["cond_state"], ["r"], name="if_state",
        then_branch=helper.make_graph([helper.make_node("Mul", ["mean", "two"], ["r"])], "x2", [], out_info),
        else_branch=helper.make_graph([helper.make_node("Identity", ["mean"], ["r"])], "same", [], out_info),
    )  # fmt: skip
    then_nodes = [
        helper.make_node("ReduceMean", ["c", "axis2"], ["mean"], keepdims=0),
        helper.make_node("Shape", ["state"], ["state_shape"]),
        helper.make_node("Gather", ["state_shape", "i1"], ["state_batch"]),
        helper.make_node("Equal", ["state_batch", "i1"], ["cond_state"]),
        inner,
    ]
    y_info = [helper.make_tensor_value_info("r", FLOAT, None)]
    outer = helper.make_node(
        "If", ["cond_len"], ["pooled"], name="if_len",
        then_branch=helper.make_graph(then_nodes, "mean", [], y_info),
        else_branch=helper.make_graph([helper.make_node("ReduceMax", ["c", "axis2"], ["r"], keepdims=0)], "max", [],
                                      y_info),
    )  # fmt: skip
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axis1"], ["x3"]),
        helper.make_node("Conv", ["x3", "w"], ["conv"], pads=[1, 1]),
        helper.make_node("Relu", ["conv"], ["c"]),
        helper.make_node("Shape", ["c"], ["c_shape"]),
        helper.make_node("Gather", ["c_shape", "i2"], ["samples"]),
        helper.make_node("Equal", ["samples", "eight"], ["cond_len"]),
        outer,
        helper.make_node("Add", ["state", "pooled"], ["stateN"]),
    ]
    graph = helper.make_graph(
        nodes, "silero_like",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", "samples"]),
         helper.make_tensor_value_info("state", FLOAT, [2, "batch", 4])],
        [helper.make_tensor_value_info("pooled", FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("stateN", FLOAT, [2, "batch", 4])],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    return model


def _deploy(model_path: Path, out: Path, samples: int, capsys) -> tuple[int, str]:
    args = ["deploy", str(model_path), "-t", "arm-cpu", "-o", str(out),
            "--input-shape", f"x=1,{samples}", "--input-shape", "state=2,1,4"]  # fmt: skip
    try:
        run_app(app, args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("samples", [8, 6])  # the then branch (with its nested If) and the else branch
def test_shape_tested_if_deploys_as_the_branch_taken(tmp_path, capsys, samples):

    path = tmp_path / "silero_like.onnx"
    onnx.save(_silero_like(), path)
    code, err = _deploy(path, tmp_path / "out", samples, capsys)
    assert code == 0, err
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, samples)).astype(np.float32),
             "state": rng.standard_normal((2, 1, 4)).astype(np.float32)}  # fmt: skip
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    (tflite,) = (tmp_path / "out" / "arm-cpu").glob("*.tflite")
    got = run_tflite_file(tflite, feeds)
    np.testing.assert_allclose(got["pooled"], expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["stateN"], expected[1], rtol=1e-5, atol=1e-6)


def test_an_if_on_a_run_time_value_is_still_declined(tmp_path, capsys):
    """Silero VAD's top-level If tests the sample rate, a graph input: that stays control flow, declined."""
    model = _silero_like()
    outer = next(n for n in model.graph.node if n.op_type == "If")
    outer.input[0] = "cond_x"
    model.graph.node.insert(
        len(model.graph.node) - 2, helper.make_node("ReduceMax", ["x"], ["any"], keepdims=0)
    )
    model.graph.node.insert(
        len(model.graph.node) - 2, helper.make_node("Greater", ["any", "two"], ["cond_x"])
    )
    path = tmp_path / "runtime_if.onnx"
    onnx.save(model, path)
    code, err = _deploy(path, tmp_path / "out", 8, capsys)
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        "error: If node 'if_len': control flow (If/Loop/Scan) is not supported"
    ), err
    assert "its condition is computed from the value of input(s) 'x'" in err, err


def test_an_optimum_merged_decoder_is_declined_with_what_to_deploy(tmp_path, capsys):
    """optimum's merged decoder (``decoder_model_merged.onnx``): an If on the boolean input ``use_cache_branch``
    between the with-past step (one new token: [1, 1, 4] out) and the no-past prompt graph (every token: [1, 2, 4]
    out). Round 20k: the line named the input but said to unroll a loop; it now says which files to deploy."""
    info = [helper.make_tensor_value_info("logits", FLOAT, None)]
    step = helper.make_graph([helper.make_node("Add", ["past", "new"], ["logits"])], "with_past", [], info)
    prompt = helper.make_graph(
        [helper.make_node("Concat", ["past", "new"], ["logits"], axis=1)], "no_past", [], info
    )
    node = helper.make_node("If", ["use_cache_branch"], ["logits"], name="optimum::if",
                            then_branch=step, else_branch=prompt)  # fmt: skip
    graph = helper.make_graph(
        [node], "merged",
        [helper.make_tensor_value_info("past", FLOAT, [1, 1, 4]), helper.make_tensor_value_info("new", FLOAT, [1, 1, 4]),
         helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info("logits", FLOAT, None)],
    )  # fmt: skip
    path = tmp_path / "decoder_model_merged.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    try:
        run_app(app, ["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out")])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: If node 'optimum::if': control flow"), lines
    assert "its condition is the input 'use_cache_branch'" in lines[-1], lines
    assert "decoder_with_past_model.onnx" in lines[-1], lines
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.tflite"))


def _verified_head() -> onnx.ModelProto:
    """openWakeWord's "hey jarvis" head: x [1, 16, 8] -> MLP -> p1 [1, 1]; If p1 >= 0.5 (then: a verifier MLP on
    the same x, its score; else: p1)."""
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array(rng.standard_normal((128, 1)).astype(np.float32) * 0.1, "w1"),
        numpy_helper.from_array(rng.standard_normal((128, 1)).astype(np.float32) * 0.1, "w2"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    out_info = [helper.make_tensor_value_info("r", FLOAT, [1, 1])]
    verifier = [
        helper.make_node("Flatten", ["x"], ["xv"]),
        helper.make_node("Gemm", ["xv", "w2"], ["s2"]),
        helper.make_node("Sigmoid", ["s2"], ["r"]),
    ]
    nodes = [
        helper.make_node("Flatten", ["x"], ["xf"]),
        helper.make_node("Gemm", ["xf", "w1"], ["s1"]),
        helper.make_node("Sigmoid", ["s1"], ["p1"]),
        helper.make_node("GreaterOrEqual", ["p1", "half"], ["ge"]),
        helper.make_node("Cast", ["ge"], ["cond"], to=TensorProto.BOOL),
        helper.make_node(
            "If", ["cond"], ["score"], name="verify",
            then_branch=helper.make_graph(verifier, "verifier", [], out_info),
            else_branch=helper.make_graph([helper.make_node("Identity", ["p1"], ["r"])], "first", [], out_info),
        ),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "verified_head", [helper.make_tensor_value_info("x", FLOAT, [1, 16, 8])],
        [helper.make_tensor_value_info("score", FLOAT, [1, 1])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def test_an_if_of_plain_branches_on_a_run_time_value_deploys_as_a_select(tmp_path, capsys):
    """Both branches computed and the output chosen by Where: the .tflite gives onnxruntime's score on inputs
    that take the verifier branch and on inputs that do not (declined as control flow before)."""
    model = _verified_head()
    path = tmp_path / "verified_head.onnx"
    onnx.save(model, path)
    try:
        run_app(app, ["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out")])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 0, capsys.readouterr().err
    (tflite,) = (tmp_path / "out" / "arm-cpu").glob("*.tflite")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    w1 = numpy_helper.to_array(model.graph.initializer[0]).reshape(16, 8)
    taken = set()
    for sign in (1.0, -1.0, 0.3, -0.3):  # along w1 and against it: first scores above and below 0.5
        x = (sign * 10 * w1 + np.random.default_rng(3).normal(0, 0.05, w1.shape)).astype(np.float32)[None]
        first = 1 / (1 + np.exp(-float(x.reshape(-1) @ w1.reshape(-1))))
        taken.add(first >= 0.5)
        (expected,) = session.run(None, {"x": x})
        got = run_tflite_file(tflite, {"x": x})["score"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert taken == {True, False}


#: torchvision's detector tail, exported by :func:`_torchvision_nms_tail` (``python tests/test_constant_if.py``
#: rewrites it; torch is not in CI), committed: 4 KB
NMS_TAIL = Path(__file__).parent / "data" / "torchvision_nms_tail.onnx"


def _torchvision_nms_tail(path: Path) -> None:
    """The post-processing torchvision's detectors export (SSD, RetinaNet, FCOS, Faster R-CNN): score
    threshold, TopK, ``batched_nms`` (scripted while tracing: ``If(boxes.numel() == 0)``, an empty [0] tensor
    in one branch and NonMaxSuppression's kept indices in the other), the kept boxes and scores."""
    import torch
    import torchvision.ops as ops

    torch.manual_seed(0)

    class Tail(torch.nn.Module):
        def forward(self, boxes, scores):
            scores, labels = scores[0].max(dim=1)
            keep = torch.where(scores > 0.2)[0]
            boxes, scores, labels = boxes[0][keep], scores[keep], labels[keep]
            kept = ops.batched_nms(boxes, scores, labels, 0.5)[:10]
            return boxes[kept], scores[kept]

    xy = torch.rand(1, 32, 2) * 48
    boxes, scores = torch.cat([xy, xy + 16], dim=2), torch.rand(1, 32, 3)
    torch.onnx.export(Tail(), (boxes, scores), str(path), input_names=["boxes", "scores"],
                      output_names=["kept_boxes", "kept_scores"], opset_version=17, dynamo=False)  # fmt: skip


def test_torchvision_batched_nms_if_becomes_its_else_branch(tmp_path, capsys):
    """torchvision's ``batched_nms`` If (``if boxes.numel() == 0: []``, else NonMaxSuppression) is its else branch:
    given no box that branch selects none too. arm-cpu then keeps the boxes onnxruntime keeps, also where no score
    passes the threshold (no row); intel-vpu refuses the run-time row count in one line. Before: every target
    refused the If as control flow."""

    path = NMS_TAIL
    assert any(n.op_type == "If" for n in onnx.load(str(path)).graph.node)
    code, text = _cli(
        capsys, "deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out"), "--precision", "fp32"
    )
    assert code == 0, text
    session = ort.InferenceSession(str(path))
    rng = np.random.default_rng(1)
    kept = set()
    for scale in (1.0, 1.0, 0.1):  # the last: every score under the 0.2 threshold
        xy = rng.uniform(0, 48, (1, 32, 2)).astype(np.float32)
        feeds = {
            "boxes": np.concatenate([xy, xy + 16], 2),
            "scores": rng.random((1, 32, 3), dtype=np.float32) * scale,
        }
        want = session.run(None, feeds)
        got = run_tflite_file(tmp_path / "out" / "arm-cpu" / "model.tflite", feeds)
        for name, w in zip(("kept_boxes", "kept_scores"), want, strict=True):
            assert got[name].shape == w.shape, (name, got[name].shape, w.shape)
            np.testing.assert_allclose(got[name], w, rtol=0, atol=1e-5)
        kept.add(len(want[0]))
    assert 0 in kept and len(kept) > 1, kept
    code, text = _cli(capsys, "deploy", str(path), "-t", "intel-vpu", "-o", str(tmp_path / "vpu"))
    lines = [ln for ln in text.splitlines() if ln.startswith("error")]
    assert code == 2 and len(lines) == 1 and "selects at run time" in text, text
    assert "control flow" not in text, text


def _cli(capsys, *args: str) -> tuple[int, str]:
    try:
        run_app(app, list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _eval_samples(path: Path) -> list[dict[str, np.ndarray]]:
    """Four samples for the NMS tail: 9 or 10 boxes kept on three, none on the fourth (every score under the 0.2
    threshold)."""
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 48, (4, 32, 2)).astype(np.float32)
    scores = rng.random((4, 32, 3), dtype=np.float32) * np.float32([0.22, 0.3, 1, 0.19])[:, None, None]
    boxes = np.concatenate([xy, xy + 16], 2)
    np.savez(path, boxes=boxes, scores=scores)
    return [{"boxes": boxes[i : i + 1], "scores": scores[i : i + 1]} for i in range(4)]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_eval_matches_the_rows_a_selection_keeps_with_fp32s(tmp_path, capsys, precision):
    """--eval on outputs whose rows vary from sample to sample (a detector's selection): the device's rows are
    matched with fp32's of the same sample, each output's and, read together, the outputs one selection sizes. The report's counts are those onnxruntime (fp32) and LiteRT running
    the shipped .tflite (the device) give on the same samples; at fp32 every row matches. Before: refused in one
    line ("--eval compares outputs of one shape sample by sample")."""
    data = tmp_path / "eval.npz"
    feeds = _eval_samples(data)
    out = tmp_path / "out"
    code, text = _cli(
        capsys, "deploy", str(NMS_TAIL), "-t", "arm-cpu", "--precision", precision, "--calib", str(data),
        "--eval", str(data), "-o", str(out), "--report", str(out / "report.html"),
    )  # fmt: skip
    assert code == 0, text
    session = ort.InferenceSession(str(NMS_TAIL))
    want = [session.run(None, f) for f in feeds]
    got = [run_tflite_file(out / "arm-cpu" / "model.tflite", f) for f in feeds]
    assert {len(w[0]) for w in want} == {0, 9, 10}
    report = json.loads((out / "report.json").read_text())
    selections = report["targets"][0]["evaluation"]["selections"]
    for i, name in enumerate(("kept_boxes", "kept_scores")):
        m = selections[name]
        assert m["samples"] == 4
        assert m["reference_rows"] == sum(len(w[i]) for w in want)
        assert m["candidate_rows"] == sum(len(g[name]) for g in got)
        assert m["same_count_samples"] == sum(
            len(w[i]) == len(g[name]) for w, g in zip(want, got, strict=True)
        )
        if precision == "fp32":
            assert m["matched_rows"] == m["reference_rows"] == m["candidate_rows"], m
            assert m["max_matched_error"] < 1e-5, m
        else:
            assert (
                0.9 * m["reference_rows"]
                <= m["matched_rows"]
                <= min(m["reference_rows"], m["candidate_rows"])
            )
    # the boxes and their scores, selected by one NMS, are also matched as one row each
    joint = selections["kept_boxes + kept_scores"]
    assert joint["reference_rows"] == selections["kept_boxes"]["reference_rows"]
    assert joint["matched_rows"] <= min(selections[n]["matched_rows"] for n in ("kept_boxes", "kept_scores"))
    if precision == "fp32":
        assert joint["matched_rows"] == joint["reference_rows"], joint
    line = f"arm-cpu: kept_boxes + kept_scores: {joint['matched_rows']} of fp32's {joint['reference_rows']} rows matched"
    assert line in text, text
    assert "fp32 rows kept %" in (out / "report.md").read_text()


def test_quantize_eval_reports_the_rows_a_selection_keeps(tmp_path, capsys):
    """`edgekit quantize --eval` on a detector whose selection sets its outputs' rows: the report's rows are those
    onnxruntime gives for fp32 and OpenVINO (f32, the host's runtime) for the QDQ file, and the terminal says them.
    Before: an internal ValueError ("shape mismatch")."""
    import openvino as ov

    data = tmp_path / "eval.npz"
    feeds = _eval_samples(data)
    out, report = tmp_path / "q.onnx", tmp_path / "q.json"
    code, text = _cli(
        capsys, "quantize", str(NMS_TAIL), "--calib", str(data), "--eval", str(data), "-o", str(out),
        "--report", str(report),
    )  # fmt: skip
    assert code == 0, text
    fp32 = ort.InferenceSession(str(NMS_TAIL))
    compiled = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    want = sum(len(fp32.run(None, f)[0]) for f in feeds)
    got = sum(len(compiled(f)[compiled.outputs[0]]) for f in feeds)
    m = json.loads(report.read_text())["evaluation"]["selections"]["kept_boxes"]
    assert (m["reference_rows"], m["candidate_rows"]) == (want, got), m
    assert m["matched_rows"] <= min(want, got)
    assert "kept_boxes: fp32 rows kept %" in text, text


def _scored_selection(path: Path) -> Path:
    """A quantizable body (MatMul, Sigmoid) scoring 32 boxes, then NonMaxSuppression and the kept boxes: an
    output of as many rows as the selection keeps (17 or 18 on the samples below)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["feats", "W"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["s"]),
        helper.make_node("Transpose", ["s"], ["scores"], perm=[0, 2, 1]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxk", "iou", "thr"], ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["idx"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["boxes0"]),
        helper.make_node("Gather", ["boxes0", "idx"], ["kept"], axis=0),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=(8, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(np.array([10], np.int64), "maxk"),
        numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
        numpy_helper.from_array(np.array([0.6], np.float32), "thr"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
    ]
    graph = helper.make_graph(
        nodes, "scored_selection",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 32, 8]),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 32, 4])],
        [helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["k", 4])], inits,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    xy = rng.uniform(0, 48, (16, 1, 32, 2)).astype(np.float32)
    data = path.with_suffix(".npz")
    np.savez(
        data, feats=rng.normal(size=(16, 1, 32, 8)).astype(np.float32), boxes=np.concatenate([xy, xy + 16], 3)
    )
    return data


@pytest.mark.parametrize("budget", [("--min-cosine", "0.99"), ("--min-agreement", "90")])
def test_an_accuracy_budget_on_outputs_a_selection_sizes_is_one_line(tmp_path, capsys, budget):
    """The accuracy search compares outputs of one shape per sample: on a detector whose output keeps as many rows
    as its NMS finds it is refused in one line naming the output, nothing written (was an internal ValueError from
    numpy's matmul: 68 values against 72)."""
    model = tmp_path / "scored_selection.onnx"
    data = _scored_selection(model)
    session = ort.InferenceSession(str(model))
    arrays = np.load(data)
    rows = {len(session.run(None, {k: arrays[k][i] for k in arrays})[0]) for i in range(16)}
    assert len(rows) > 1, rows  # the rows vary from sample to sample
    out = tmp_path / "q.onnx"
    code, text = _cli(
        capsys, "quantize", str(model), "--calib", str(data), "--eval", str(data), *budget, "-o", str(out)
    )
    lines = [ln for ln in text.splitlines() if ln.startswith("error")]
    assert code == 2 and len(lines) == 1, text
    assert (
        f"{budget[0]} is measured on outputs of one shape per sample" in lines[0] and "'kept'" in lines[0]
    ), text
    assert not out.exists()


def test_rows_match_closest_first_each_once_within_the_tolerance():
    """:func:`match_rows` pairs rows one to one, closest first, within 2 % of each column's scale: permuted rows
    match, a row moved by 3 % of its column's scale does not, an extra row does not."""
    from edgekit.core.metrics import match_rows

    ref = np.array([[0, 0.9, 10, 10, 50, 50], [1, 0.8, 20, 20, 60, 60], [2, 0.5, 0, 0, 5, 5]], np.float32)
    cand = ref[[2, 0, 1]].copy()
    assert match_rows(ref, cand) == (3, 0.0)
    cand[0, 4] += 0.03 * 60  # the third row's x2, 3 % of that column's scale (60)
    cand = np.concatenate([cand, ref[:1] + 0.001])  # a near copy of row 0: row 0 is taken by its exact copy
    pairs, worst = match_rows(ref, cand)
    assert pairs == 2 and worst == 0.0
    assert match_rows(ref, cand[:0]) == (0, 0.0)


if __name__ == "__main__":
    _torchvision_nms_tail(NMS_TAIL)
