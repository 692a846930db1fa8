"""The built-in example: a numpy-trained CNN on scikit-learn's 8x8 digits, exported to ONNX with its data."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.core.data import InputSpec, open_dataset
from onnx import numpy_helper

TRAIN_PY = Path(__file__).resolve().parents[1] / "examples" / "digits" / "train.py"


def _load_trainer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("digits_train", TRAIN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trainer() -> ModuleType:
    return _load_trainer()


@pytest.fixture(scope="module")
def built(trainer: ModuleType, tmp_path_factory: pytest.TempPathFactory):
    return trainer.main(tmp_path_factory.mktemp("digits"), verbose=False)


def _ort_outputs(model_path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    return np.concatenate([session.run(None, {name: x[i : i + 1]})[0] for i in range(len(x))])


def test_onnxruntime_reaches_the_reported_accuracy(built) -> None:
    val = np.load(built.val)
    x, labels = val["input"], val["labels"]
    probs = _ort_outputs(built.model, x)
    accuracy = float((probs.argmax(axis=1) == labels).mean())
    assert accuracy >= 0.95
    assert abs(accuracy - built.accuracy) <= 1 / len(labels) + 1e-9, (accuracy, built.accuracy)
    assert json.loads(built.metrics.read_text())["accuracy"] == built.accuracy
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)  # a Softmax output


def test_numpy_forward_equals_onnxruntime(trainer: ModuleType, built) -> None:
    model = onnx.load(built.model)
    params = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = np.load(built.val)["input"]
    expected = _ort_outputs(built.model, x)
    np.testing.assert_allclose(trainer.forward(params, x), expected, rtol=0, atol=1e-5)
    logits = trainer.forward(params, x[:20], softmax=False)
    assert float(np.abs(logits).max()) > 1.0  # not a degenerate network


def test_exported_graph_and_data_sets(built) -> None:
    model = onnx.load(built.model)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 13
    ops = [n.op_type for n in model.graph.node]
    assert ops[:3] == ["Conv", "BatchNormalization", "Relu"] and "Gemm" in ops and ops[-1] == "Softmax"
    bn = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name.startswith("bn1.")}
    assert not np.allclose(bn["bn1.mean"], 0) and not np.allclose(bn["bn1.var"], 1)  # trained running stats

    calib, val = np.load(built.calib), np.load(built.val)
    assert calib.files == ["input"] and calib["input"].shape == (200, 1, 8, 8)
    assert val["input"].shape == (360, 1, 8, 8) and val["labels"].dtype == np.int64
    assert calib["input"].dtype == np.float32 and calib["input"].min() >= 0 and calib["input"].max() <= 1
    assert sorted(set(val["labels"].tolist())) == list(range(10))

    spec = [InputSpec("input", (1, 1, 8, 8), np.float32)]
    assert len(open_dataset(built.calib, spec)) == 200
    val_ds = open_dataset(built.val, spec)
    assert len(val_ds) == 360 and val_ds.has_labels
    first = next(iter(val_ds))
    np.testing.assert_array_equal(first.inputs["input"][0], val["input"][0])


def test_backprop_matches_finite_differences(trainer: ModuleType) -> None:
    rng = np.random.default_rng(3)
    params = {k: v.astype(np.float64) for k, v in trainer.init_params(rng).items()}
    params["bn1.scale"] = rng.uniform(0.5, 1.5, 8)
    params["bn1.bias"] = rng.normal(0, 0.1, 8)
    x = rng.uniform(0, 1, (6, 1, 8, 8))
    y = rng.integers(0, 10, 6)
    _, grads = trainer._train_step(dict(params), x, y)
    eps = 1e-5
    for key in trainer.TRAINABLE:
        flat = params[key].reshape(-1)
        for index in rng.choice(flat.size, size=min(4, flat.size), replace=False):
            plus, minus = dict(params), dict(params)
            plus[key] = flat.copy()
            plus[key][index] += eps
            minus[key] = flat.copy()
            minus[key][index] -= eps
            plus[key], minus[key] = (
                plus[key].reshape(params[key].shape),
                minus[key].reshape(params[key].shape),
            )
            numeric = (trainer._train_step(plus, x, y)[0] - trainer._train_step(minus, x, y)[0]) / (2 * eps)
            analytic = float(grads[key].reshape(-1)[index])
            assert analytic == pytest.approx(numeric, rel=2e-3, abs=1e-5), (key, index)


def test_training_is_deterministic(trainer: ModuleType) -> None:
    x, y, _, _ = trainer.load_split(0)
    options = trainer.TrainOptions(epochs=1)
    first = trainer.train(x[:400], y[:400], options)
    second = trainer.train(x[:400], y[:400], options)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])


def test_runs_as_a_script(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(TRAIN_PY), "--out", str(tmp_path / "out"), "--epochs", "1", "--no-softmax"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "held-out accuracy" in proc.stdout
    model = onnx.load(tmp_path / "out" / "digits.onnx")
    assert model.graph.node[-1].op_type == "Gemm" and model.graph.output[0].name == "probs"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "calib.npz",
        "digits.onnx",
        "metrics.json",
        "val.npz",
    ]


def test_loader_folds_the_batchnorm_and_openvino_agrees(built) -> None:
    from edgekit.core.model import load_model, to_proto
    from edgekit.core.runtime import HostRunner

    prepared = to_proto(load_model(built.model))
    assert "BatchNormalization" not in [n.op_type for n in prepared.graph.node]
    x = np.load(built.val)["input"][:40]
    runner = HostRunner(prepared)
    got = np.concatenate([runner.run({"input": x[i : i + 1]})["probs"] for i in range(len(x))])
    np.testing.assert_allclose(got, _ort_outputs(built.model, x), rtol=0, atol=1e-5)
