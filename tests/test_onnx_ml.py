"""scikit-learn models as skl2onnx writes them: the ``ai.onnx.ml`` ops (``edgekit.core.onnx_ml``).

A StandardScaler + MLPClassifier pipeline (``zipmap: False``) is ``Scaler`` -> MatMul/Add/Relu -> Softmax, with the
class label ``ArrayFeatureExtractor(classes, ArgMax(probabilities))``; a LogisticRegression is one
``LinearClassifier`` (LOGISTIC post-transform). Before, the first was refused ("ai.onnx.ml.Scaler is a custom op
whose output shape onnx cannot infer"), the second as an unsupported op, and a deploy with ``--eval`` of any model
with an output named ``label`` crashed ("internal error: ValueError: name already used as a name or title"). Now
the four exact ops are written out as standard ONNX (the reference: onnxruntime running the original file with
its ai.onnx.ml kernels), and the rest of the domain (tree ensembles, ZipMap) is refused in one typed line.
The graphs are written here with ``onnx.helper`` as skl2onnx 1.20 writes them (the tests need no skl2onnx).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_in_process import cli_text
from edgekit.core import onnx_ml
from edgekit.device_agents.bundle import read_bundle
from onnx import TensorProto, helper, numpy_helper

ML = "ai.onnx.ml"
FEATURES, CLASSES = 12, 4


def _graph(nodes, inits, outputs, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, FEATURES])],
        outputs,
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15), helper.make_opsetid(ML, 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def mlp_pipeline(zipmap: bool = False) -> onnx.ModelProto:
    """StandardScaler + MLPClassifier(16) on 12 features, 4 classes (labels 3, 5, 7, 9)."""
    rng = np.random.default_rng(0)
    inits = {
        "w1": rng.normal(0, 0.5, (FEATURES, 16)).astype(np.float32), "b1": rng.normal(0, 0.1, 16).astype(np.float32),
        "w2": rng.normal(0, 0.5, (16, CLASSES)).astype(np.float32), "b2": rng.normal(0, 0.1, CLASSES).astype(np.float32),
        "classes": np.array([3, 5, 7, 9], np.int64), "shape": np.array([-1], np.int64),
    }  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Scaler", ["input"], ["scaled"], domain=ML, offset=rng.normal(5, 2, FEATURES).tolist(),
             scale=rng.uniform(0.1, 2, FEATURES).tolist()),
        node("Cast", ["scaled"], ["x"], to=TensorProto.FLOAT),
        node("MatMul", ["x", "w1"], ["h1"]), node("Add", ["h1", "b1"], ["h2"]), node("Relu", ["h2"], ["h3"]),
        node("MatMul", ["h3", "w2"], ["h4"]), node("Add", ["h4", "b2"], ["h5"]),
        node("Softmax", ["h5"], ["probabilities"]),
        node("ArgMax", ["probabilities"], ["best"], axis=1),
        node("ArrayFeatureExtractor", ["classes", "best"], ["picked"], domain=ML),
        node("Reshape", ["picked", "shape"], ["reshaped"]),
        node("Cast", ["reshaped"], ["label"], to=TensorProto.INT64),
    ]  # fmt: skip
    outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, [None])]
    if zipmap:
        nodes.append(node("ZipMap", ["probabilities"], ["output_probability"], name="ZipMap", domain=ML,
                          classlabels_int64s=[3, 5, 7, 9]))  # fmt: skip
        seq = helper.make_sequence_type_proto(
            helper.make_map_type_proto(
                TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
            )
        )
        outputs.append(helper.make_value_info("output_probability", seq))
    else:
        outputs.append(helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, CLASSES]))
    return _graph(nodes, inits, outputs, "mlp")


def logistic_regression(transform: str = "LOGISTIC") -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    node = helper.make_node(
        "LinearClassifier", ["input"], ["label", "probabilities"], domain=ML, classlabels_ints=[0, 1, 2, 4],
        coefficients=rng.normal(0, 0.3, CLASSES * FEATURES).tolist(), intercepts=rng.normal(0, 1, CLASSES).tolist(),
        multi_class=0, post_transform=transform,
    )  # fmt: skip
    outputs = [
        helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
        helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, CLASSES]),
    ]
    return _graph([node], {}, outputs, "logreg")


def tree_regressor() -> onnx.ModelProto:
    """A GradientBoostingRegressor's form: one stump on feature 3."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["input"], ["y"], name="trees", domain=ML, n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[3, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.5, 0.0, 0.0], nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
        target_weights=[1.0, 2.0],
    )  # fmt: skip
    return _graph([node], {}, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])], "trees")


def rows(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(5, 3, (count, FEATURES)).astype(np.float32)


def run_ort(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})


@pytest.mark.parametrize(
    "build", [mlp_pipeline, logistic_regression, lambda: logistic_regression("SOFTMAX")],
    ids=["scaler-mlp", "logreg-logistic", "logreg-softmax"],
)  # fmt: skip
def test_lowering_matches_onnxruntimes_ml_kernels(build) -> None:
    source = build()
    lowered = onnx.ModelProto()
    lowered.CopyFrom(source)
    assert onnx_ml.lower(lowered)
    assert not any(n.domain == ML for n in lowered.graph.node) and ML not in {
        i.domain for i in lowered.opset_import
    }
    x = rows(64, 2)
    for got, want in zip(run_ort(lowered, x), run_ort(source, x), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert len(set(run_ort(source, x)[0].tolist())) > 1  # the label is not a constant on these rows


def test_tabular_classifier_deploys_int8_with_npy_calibration(tmp_path: Path, capsys) -> None:
    """The user's path with a tabular model: 2-D [N, features] rows as .npy, int8 arm-cpu: the .tflite's label
    output equals onnxruntime's on the original file, and its probabilities are within int8's reach."""
    model, calib = tmp_path / "mlp.onnx", tmp_path / "calib.npy"
    source = mlp_pipeline()
    onnx.save(source, model)
    np.save(calib, rows(32, 3))
    code, text = cli_text(
capsys, "deploy", str(model), "-t", "arm-cpu", "--precision", "int8", "--calib", str(calib),
        "-o", str(tmp_path / "o"),
    )  # fmt: skip
    assert code == 0, text
    assert "Traceback" not in text and "ai.onnx.ml op(s) written out as standard ONNX" in text
    assert read_bundle(tmp_path / "o" / "arm-cpu").manifest.verification["passed"]
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(tmp_path / "o" / "arm-cpu" / "model.tflite"))
    interpreter.allocate_tensors()
    names = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    x = rows(8, 4)
    want_label, want_probs = run_ort(source, x)
    for i in range(len(x)):
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x[i : i + 1])
        interpreter.invoke()
        probs = interpreter.get_tensor(names["probabilities"])[0]
        np.testing.assert_allclose(probs, want_probs[i], atol=0.05)
        label = int(interpreter.get_tensor(names["label"]).reshape(-1)[0])
        assert label == [3, 5, 7, 9][int(np.argmax(probs))]
        assert label == want_label[i] or np.sort(want_probs[i])[-2] > want_probs[i].max() - 0.05


def test_reference_keeps_an_output_named_label() -> None:
    """The host reference's records hold the sample's label beside the outputs: an output named ``label`` (every
    skl2onnx classifier's) crashed the deploy's evaluation."""
    from edgekit.device_eval import Reference

    with Reference({"input": (1, FEATURES)}, ["label", "probabilities"]) as ref:
        for i in range(3):
            ref.append(
                {"label": np.array([i + 7], np.int64), "probabilities": np.full((1, 4), i, np.float32)}, i
            )
        outputs, labels = ref.batch(0, 3)
    assert labels == [0, 1, 2] and outputs["label"].reshape(-1).tolist() == [7, 8, 9]
    assert outputs["probabilities"][:, 0, 0].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (lambda: mlp_pipeline(zipmap=True), "ai.onnx.ml.ZipMap node 'ZipMap': it outputs a sequence of maps"),
        (
            tree_regressor,
            "ai.onnx.ml.TreeEnsembleRegressor node 'trees': decision-tree ensembles have no TFLite or OpenVINO op",
        ),
    ],
    ids=["zipmap", "tree-ensemble"],
)
def test_rest_of_the_domain_is_one_typed_line(tmp_path: Path, capsys, source, expected: str) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(source(), model)
    code, text = cli_text(
        capsys, "deploy", str(model), "-t", "arm-cpu", "--precision", "fp32", "-o", str(tmp_path / "o")
    )
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and expected in errors[0], text
    assert "Traceback" not in text and not (tmp_path / "o" / "arm-cpu").exists()


def test_top1_reads_the_probabilities_behind_a_label_output() -> None:
    """skl2onnx writes a classifier's predicted label (int64) first and its probabilities second: top-1 and
    agreement read the probabilities (before: the label, one value, was no score vector: no top-1 at all)."""
    from edgekit.core.metrics import Comparison, primary_output

    probs = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]], np.float32)
    ref = {"label": np.array([[1], [0], [2]], np.int64), "probabilities": probs[:, None]}
    cand = {"label": np.array([[1], [1], [2]], np.int64), "probabilities": probs[[0, 0, 2]][:, None]}
    assert primary_output({n: a[0] for n, a in ref.items()}) == "probabilities"
    assert primary_output({"logits": probs[0], "label": np.array([1])}) == "logits"
    comparison = Comparison()
    comparison.update_batch(ref, cand, [1, 0, 0])
    result = comparison.to_json()
    assert result["primary_output"] == "probabilities" and result["top1_agreement"] == pytest.approx(200 / 3)
    assert result["accuracy"]["labelled_samples"] == 3


def scaler_pca(spread: float) -> onnx.ModelProto:
    """StandardScaler + PCA(4) on features whose standard deviations span ``spread`` (load_wine's: 0.1 to 300)."""
    rng = np.random.default_rng(5)
    std = np.geomspace(1.0, spread, FEATURES)
    node = helper.make_node
    nodes = [
        node("Scaler", ["input"], ["scaled"], domain=ML, offset=(std * 2).tolist(), scale=(1 / std).tolist()),
        node("MatMul", ["scaled", "components"], ["pca"]),
    ]
    inits = {"components": np.linalg.qr(rng.normal(size=(FEATURES, FEATURES)))[0][:, :4].astype(np.float32)}
    return _graph(nodes, inits, [helper.make_tensor_value_info("pca", TensorProto.FLOAT, [None, 4])], "pca")


def test_a_tables_standardisation_stays_float_in_int8() -> None:
    """One int8 scale for raw table columns of very different ranges rounds the small ones away: round 12a's
    StandardScaler + PCA on load_wine gave cosine 0.39 to fp32 in every int8 case. The standardisation is
    float now (quantize.patterns.input_standardizations) and the PCA reads int8 standardised features; an
    image's per-channel normalisation (a spread of 1.02) is not such a case."""
    from edgekit.core.data import Sample
    from edgekit.core.model import load_proto
    from edgekit.quantize import patterns
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize

    source = scaler_pca(3000.0)
    std = np.geomspace(1.0, 3000.0, FEATURES).astype(np.float32)
    x = (np.random.default_rng(6).normal(size=(48, FEATURES)) * std + 2 * std).astype(np.float32)
    samples = [Sample({"input": x[i : i + 1]}, None, str(i)) for i in range(32)]
    qdq = quantize(load_proto(source), samples, QuantizeOptions(activations="int8", samples=32)).proto()
    want = run_ort(source, x[32:])[0]
    got = np.concatenate([run_ort(qdq, x[i : i + 1])[0] for i in range(32, 48)])
    cosine = float((want * got).sum() / np.linalg.norm(want) / np.linalg.norm(got))
    assert cosine >= 0.999, cosine  # 0.51 with the raw input quantized
    image_like = patterns.input_standardizations(load_proto(scaler_pca(1.02)))
    assert (
        image_like == {} and len(patterns.input_standardizations(load_proto(source))) == 3
    )  # Cast, Sub, Mul
