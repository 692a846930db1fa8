"""Outputs that hold ±inf by design (``edgekit.targets.yardstick.matched_infinities``): Grounding DINO's logits are
``masked_fill(~text_token_mask, -inf)`` on the padding tokens of its text prompt (round 15r). Every case was
refused with "the source model gives non-finite values for output 'logits' on the verification samples; give
realistic inputs (--calib)", with --calib too. The model below is that head: projected image features against
text features, -inf where the attention mask is 0."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(15)
    nodes = [
        helper.make_node("MatMul", ["image", "w"], ["queries"]),  # [1, 6, 8]
        helper.make_node("Gather", ["table", "ids"], ["text"]),  # [1, 5, 8]
        helper.make_node("Transpose", ["text"], ["text_t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["queries", "text_t"], ["scores"]),  # [1, 6, 5]
        helper.make_node("Unsqueeze", ["mask", "one"], ["mask3"]),  # [1, 1, 5]
        helper.make_node("Equal", ["mask3", "zero"], ["padding"]),
        helper.make_node("Where", ["padding", "minus_inf", "scores"], ["logits"]),
    ]
    inits = {
        "w": (rng.standard_normal((8, 8)) * 0.5).astype(np.float32),
        "table": rng.standard_normal((20, 8)).astype(np.float32),
        "one": np.array([1], np.int64), "zero": np.array(0, np.int64),
        "minus_inf": np.array(-np.inf, np.float32),
    }  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "masked_logits",
        [
            helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 6, 8]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 5]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 5]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 6, 5])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _samples(count: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 5, count)  # padding in every sample
    return {
        "image": rng.uniform(-1, 1, (count, 6, 8)).astype(np.float32),
        "ids": rng.integers(0, 20, (count, 5)).astype(np.int64),
        "mask": (np.arange(5)[None] < lengths[:, None]).astype(np.int64),
    }


def test_matched_infinities_pass_and_a_lost_one_fails():
    from edgekit.core.errors import TargetError
    from edgekit.targets.yardstick import verify_outputs, yardstick

    ref = [
        {"y": np.array([[1.0, -np.inf, 3.0]], np.float32)},
        {"y": np.array([[-2.0, 0.5, -np.inf]], np.float32)},
    ]
    same = [{"y": r["y"] + np.float32(1e-6) * np.isfinite(r["y"])} for r in ref]
    figures = verify_outputs(ref, same, yardstick("fp32"), None, "arm-cpu", "the .tflite")
    entry = figures["outputs"]["y"]
    assert entry["infinite_in_reference"] == 2 and entry["reference_range"] == pytest.approx(5.0)
    assert entry["max_rel_error"] < 1e-6
    lost = [{"y": np.where(np.isinf(r["y"]), np.float32(-30.0), r["y"])} for r in ref]  # finite, not -inf
    with pytest.raises(TargetError, match="verification failed"):
        verify_outputs(ref, lost, yardstick("fp32"), None, "arm-cpu", "the .tflite")
    nan = [{"y": np.array([[np.nan, 1.0, 2.0]], np.float32)}, ref[1]]  # NaN stays refused
    with pytest.raises(TargetError, match="non-finite values"):
        verify_outputs(nan, nan, yardstick("fp32"), None, "arm-cpu", "the .tflite")


def test_deploy_masked_logits_to_arm_cpu(tmp_path):
    """arm-cpu fp32 (refused before) passes; the .tflite gives -inf exactly where onnxruntime does and the other
    logits within 1e-4 of their range."""
    import json

    import edgekit
    import onnxruntime as ort
    from edgekit.core import isolated
    from edgekit.core.litert_run import TensorInfo, run_tflite_samples

    proto = _model()
    path = tmp_path / "masked.onnx"
    onnx.save(proto, path)
    calib = tmp_path / "calib.npz"
    np.savez(calib, **_samples(8, 1))
    result = edgekit.deploy(path, ["arm-cpu"], output=tmp_path / "out", calib=calib, precision="fp32")
    result.raise_for_failures()
    verification = result.bundle("arm-cpu").verification
    assert verification["passed"] and verification["outputs"]["logits"]["infinite_in_reference"] > 0
    bundle = tmp_path / "out" / "arm-cpu"
    manifest = json.loads((bundle / "manifest.json").read_text())

    def infos(specs):
        return [TensorInfo(s["name"], tuple(s["shape"]), s["dtype"], s["layout"], None) for s in specs]

    data = _samples(3, 9)
    samples = [{k: v[i : i + 1] for k, v in data.items()} for i in range(3)]
    got = isolated.call(
        run_tflite_samples, (bundle / "model.tflite").read_bytes(), infos(manifest["inputs"]),
        infos(manifest["outputs"]), samples, what="LiteRT", doing="infinite outputs",
    )  # fmt: skip
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for sample, tflite in zip(samples, got, strict=True):
        (want,) = session.run(None, sample)
        have = tflite["logits"]
        assert np.array_equal(np.isneginf(have), np.isneginf(want)) and np.isneginf(want).any()
        finite = np.isfinite(want)
        span = float(want[finite].max() - want[finite].min())
        assert np.max(np.abs(have[finite] - want[finite])) / span <= 1e-4


def test_quantize_fp16_keeps_the_infinities_and_checks_the_rest(tmp_path):
    """``edgekit quantize --precision fp16`` verified the fp16 file with compare_outputs directly and refused the
    masked logits as non-finite; now the infinities are matched, and the fp16 file gives -inf where onnxruntime
    runs the float32 source to -inf, the other logits within float16's rounding."""
    import edgekit
    import onnxruntime as ort

    proto = _model()
    path = tmp_path / "masked.onnx"
    onnx.save(proto, path)
    options = edgekit.QuantizeOptions(precision="fp16")
    result = edgekit.quantize_model(path, options=options, output=tmp_path / "masked.fp16.onnx")
    verification = result.report["verification"]
    assert verification["passed"] and verification["outputs"]["logits"]["infinite_in_reference"] > 0
    source = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    half = ort.InferenceSession(str(tmp_path / "masked.fp16.onnx"), providers=["CPUExecutionProvider"])
    data = _samples(3, 4)
    for i in range(3):
        sample = {k: v[i : i + 1] for k, v in data.items()}
        (want,), (have,) = source.run(None, sample), half.run(None, sample)
        assert np.array_equal(np.isneginf(have), np.isneginf(want)) and np.isneginf(want).any()
        finite = np.isfinite(want)
        np.testing.assert_allclose(have[finite], want[finite], rtol=1e-2, atol=1e-2)


def test_quantize_refuses_an_activation_that_overflows_on_calibration(tmp_path, capsys):
    """An anchor decode's Exp of a box regression that overflows float32 on one calibration sample (round 16d:
    a seeded EfficientDet-d0 with effdet's decode in the graph, tw = 70 on one photo): the range [lo, inf] gave a
    NaN scale and every int8 case crashed (``cannot convert float NaN to integer``, exit 3). Now exit 2 with one
    line naming the tensor, and no file written."""
    from edgekit.cli.common import run_app
    from edgekit.cli.main import app

    nodes = [
        helper.make_node("Mul", ["x", "gain"], ["t"], name="scale"),
        helper.make_node("Exp", ["t"], ["wh"], name="exp"),
        helper.make_node("Mul", ["wh", "anchor"], ["boxes"], name="decode"),
    ]
    inits = [
        numpy_helper.from_array(np.float32(30.0), "gain"),
        numpy_helper.from_array(np.float32(16.0), "anchor"),
    ]
    graph = helper.make_graph(
        nodes,
        "decode",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, calib, out = tmp_path / "decode.onnx", tmp_path / "calib.npz", tmp_path / "q.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(16).uniform(-0.1, 0.1, (8, 1, 8)).astype(np.float32)
    x[3, 0, 5] = 3.5  # exp(105) overflows float32
    np.savez(calib, x=x)
    with pytest.raises(SystemExit) as exit_info:
        run_app(app, ["quantize", str(path), "--calib", str(calib), "-o", str(out), "-q"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: tensor 'wh' reaches infinity on the calibration data"), err
    assert not out.exists()
