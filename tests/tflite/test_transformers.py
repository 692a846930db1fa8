"""Transformer encoders through the TFLite converter and the quantizer (issue 12, item 3).

The committed zoo models (``tests/zoo/models``: a BERT-style encoder at opsets 13 and 17, a DeiT-tiny) are
converted and run in LiteRT in a child process (LiteRT aborts the process on some bad graphs): fp32 against
onnxruntime, int8 against the QDQ model run exactly (``HostRunner``). Then one focused test per new converter
(comparisons, logical ops, Where, int64 ids into Gather) against onnxruntime, and the quantizer's patterns.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from edgekit.targets.tflite.converter import ConversionResult, convert
from onnx import TensorProto, helper, numpy_helper
from tflite_helpers import assert_close_to_range, edgekit_qdq, op_types, run_onnx

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "tests" / "zoo" / "models"
ENTRIES = {e["file"]: e for e in json.loads((ZOO / "zoo_transformers.json").read_text())["models"]}

_CHILD = """
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter
model, feeds, out = sys.argv[1:4]
it = Interpreter(model_path=model, num_threads=1)
it.allocate_tensors()
data = np.load(feeds)
for d in it.get_input_details():
    it.set_tensor(d["index"], data[d["name"]])
it.invoke()
np.savez(out, **{d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()})
"""


def run_in_child(result: ConversionResult, feeds: dict[str, np.ndarray], tmp_path: Path) -> np.ndarray:
    """The first output of the .tflite model on ONNX-layout float/int feeds, run by LiteRT in a child process."""
    from edgekit.core.litert_run import from_model_output, to_model_input

    model, inputs, out = tmp_path / "m.tflite", tmp_path / "in.npz", tmp_path / "out.npz"
    model.write_bytes(result.data)
    np.savez(inputs, **{i.name: to_model_input(i, np.asarray(feeds[i.name])) for i in result.inputs})
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model), str(inputs), str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, f"LiteRT child exited {proc.returncode}: {proc.stderr[-2000:]}"
    info = result.outputs[0]
    return from_model_output(info, np.load(out)[info.name])


def zoo_samples(entry: dict, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Token ids with padding masks (each row padded differently) for encoders; normal images otherwise."""
    rng = np.random.default_rng(seed)
    samples = []
    for k in range(count):
        feeds = {}
        for spec in entry["inputs"]:
            shape = spec["shape"]
            if spec["name"] == "attention_mask":
                mask = np.ones(shape, np.int64)
                mask[..., shape[-1] - k % (shape[-1] // 2) :] = 0
                feeds[spec["name"]] = mask
            elif spec["dtype"] == "int64":
                feeds[spec["name"]] = rng.integers(1, entry["data"]["vocab_size"], shape).astype(np.int64)
            else:
                feeds[spec["name"]] = rng.standard_normal(shape).astype(spec["dtype"])
        samples.append(feeds)
    return samples


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module", params=sorted(ENTRIES))
def zoo_model(request) -> tuple[onnx.ModelProto, dict]:
    entry = ENTRIES[request.param]
    return onnx.load(ZOO / entry["file"]), entry


def prepared(model: onnx.ModelProto):
    """The model as edgekit loads it (``load_model``'s passes), for the converter."""
    from edgekit.core.model import load_proto

    return load_proto(model)


# -- the zoo models ---------------------------------------------------------------------------------------------
def test_zoo_fp32_matches_onnxruntime(zoo_model, tmp_path: Path) -> None:
    model, entry = zoo_model
    result = convert(prepared(model))
    if entry["kind"] == "encoder":
        assert {i.dtype for i in result.inputs} == {"int32"}  # int64 ids and masks become TFLite's int32
        assert op_types(result).get("GELU") == 2 and "ERF" not in op_types(result)
    for feeds in zoo_samples(entry, 2, seed=0):
        expected = run_onnx(model, feeds)[0]
        assert_close_to_range(run_in_child(result, feeds, tmp_path), expected, rel=1e-4)


def test_zoo_int8_matches_its_qdq_model(zoo_model, tmp_path: Path) -> None:
    """The int8 .tflite (LiteRT, child process) against its QDQ model's exact semantics, and against fp32."""
    from edgekit.core.exact import ExactRunner

    model, entry = zoo_model
    qdq = edgekit_qdq(model, zoo_samples(entry, 16, seed=1), float_output_heads=True)
    result = convert(qdq)
    counts = op_types(result)
    assert counts.get("BATCH_MATMUL") == 4 and counts.get("FULLY_CONNECTED", 0) >= 8
    assert counts.get("GELU") == 2  # the Erf-GELU runs as TFLite's int8 GELU
    exact = ExactRunner(qdq, [result.outputs[0].name])
    for feeds in zoo_samples(entry, 3, seed=2):
        reference = exact.run(feeds)[result.outputs[0].name]
        got = run_in_child(result, feeds, tmp_path)
        assert cosine(got, reference) >= 0.999
        # the quantization itself is sane (the attention mask kept float; a quantized one gives noise)
        assert cosine(got, run_onnx(model, feeds)[0]) >= 0.99


def test_zoo_manifest_matches_the_models() -> None:
    for name, entry in ENTRIES.items():
        model = onnx.load(ZOO / name)
        graph_inputs = {i.name: i for i in model.graph.input}
        assert [s["name"] for s in entry["inputs"]] == list(graph_inputs)
        for spec in entry["inputs"]:
            ttype = graph_inputs[spec["name"]].type.tensor_type
            assert [d.dim_value for d in ttype.shape.dim] == spec["shape"]
            assert helper.tensor_dtype_to_np_dtype(ttype.elem_type) == np.dtype(spec["dtype"])
        assert (ZOO / name).stat().st_size < 1.5e6


def test_deploy_cli_encoder_every_tflite_and_openvino_target(tmp_path: Path) -> None:
    """The CLI end to end (a child process): int64 inputs verified through the int32 .tflite inputs."""
    entry = ENTRIES["bert_tiny_op17.onnx"]
    samples = zoo_samples(entry, 8, seed=3)
    calib = tmp_path / "calib.npz"
    np.savez(calib, **{k: np.stack([s[k] for s in samples]) for k in samples[0]})
    exe = Path(sys.executable).with_name("edgekit")
    for precision in ("fp32", "int8"):
        out = tmp_path / precision
        cmd = [str(exe), "deploy", str(ZOO / entry["file"]), "-t", "arm-cpu", "-t", "intel-vpu"]
        cmd += ["--precision", precision, "--calib", str(calib), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
        assert (out / "arm-cpu").is_dir() and (out / "intel-vpu").is_dir()


# -- one converter at a time --------------------------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [onnx.ValueInfoProto(name=n) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> ConversionResult:
    from edgekit.targets.tflite.package import run_tflite

    result = convert(model)
    outputs = run_tflite(result.data, result, feeds)  # int64 feeds cast to the int32 inputs as deployed
    for got, expected in zip([outputs[o.name] for o in result.outputs], run_onnx(model, feeds), strict=True):
        assert got.shape == expected.shape
        if expected.dtype == np.bool_:
            np.testing.assert_array_equal(got, expected)
        else:
            assert_close_to_range(got, expected, rel=1e-5)
    return result


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_comparison_of_int64_input_with_a_constant(op: str) -> None:
    model = _model(
        [helper.make_node(op, ["x", "c"], ["y"])],
        [("x", TensorProto.INT64, [2, 5])],
        ["y"],
        {"c": np.array(2, np.int64)},
    )
    result = _check(model, {"x": np.arange(10, dtype=np.int64).reshape(2, 5) % 4})
    assert result.inputs[0].dtype == "int32"


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
def test_comparison_of_two_float_inputs_broadcast(op: str) -> None:
    model = _model(
        [helper.make_node(op, ["a", "b"], ["y"])],
        [("a", TensorProto.FLOAT, [2, 3]), ("b", TensorProto.FLOAT, [3])],
        ["y"],
    )
    a = np.array([[0, 1, 2], [2, 1, 0]], np.float32)
    _check(model, {"a": a, "b": np.array([1, 1, 1], np.float32)})


@pytest.mark.parametrize("op", ["And", "Or"])
def test_logical_ops_and_not(op: str) -> None:
    model = _model(
        [
            helper.make_node("Greater", ["a", "z"], ["p"]),
            helper.make_node("Less", ["b", "z"], ["q"]),
            helper.make_node(op, ["p", "q"], ["r"]),
            helper.make_node("Not", ["r"], ["y"]),
        ],
        [("a", TensorProto.FLOAT, [3, 4]), ("b", TensorProto.FLOAT, [3, 4])],
        ["y"],
        {"z": np.array(0.0, np.float32)},
    )
    rng = np.random.default_rng(0)
    _check(model, {k: rng.standard_normal((3, 4)).astype(np.float32) for k in "ab"})


def test_where_mask_bias_expanded_and_added_to_scores() -> None:
    """HF's sdpa-style mask: where(expand(mask) == 0, float_min, 0) added to the attention scores."""
    lowest = np.finfo(np.float32).min
    model = _model(
        [
            helper.make_node("Unsqueeze", ["mask", "axes"], ["m4"]),
            helper.make_node("Expand", ["m4", "shape"], ["me"]),
            helper.make_node("Equal", ["me", "zero"], ["pad"]),
            helper.make_node("Where", ["pad", "low", "fzero"], ["bias"]),
            helper.make_node("Add", ["scores", "bias"], ["masked"]),
            helper.make_node("Softmax", ["masked"], ["y"], axis=-1),
        ],
        [("mask", TensorProto.INT64, [1, 6]), ("scores", TensorProto.FLOAT, [1, 2, 6, 6])],
        ["y"],
        {
            "axes": np.array([1, 2], np.int64),
            "shape": np.array([1, 1, 6, 6], np.int64),
            "zero": np.array(0, np.int64),
            "low": np.array(lowest, np.float32),
            "fzero": np.array(0.0, np.float32),
        },
    )
    rng = np.random.default_rng(1)
    feeds = {
        "mask": np.array([[1, 1, 1, 1, 0, 0]], np.int64),
        "scores": rng.standard_normal((1, 2, 6, 6)).astype(np.float32),
    }
    result = _check(model, feeds)
    assert {"SELECT_V2", "BROADCAST_TO", "EQUAL"} <= set(op_types(result))


def test_where_with_two_tensors_and_a_float_condition_source() -> None:
    model = _model(
        [
            helper.make_node("GreaterOrEqual", ["a", "b"], ["c"]),
            helper.make_node("Where", ["c", "a", "b"], ["y"]),
        ],
        [("a", TensorProto.FLOAT, [2, 3, 4]), ("b", TensorProto.FLOAT, [3, 1])],
        ["y"],
    )
    rng = np.random.default_rng(2)
    _check(model, {"a": rng.standard_normal((2, 3, 4)).astype(np.float32), "b": np.zeros((3, 1), np.float32)})


def test_int64_token_ids_gather_embeddings_and_cast_mask() -> None:
    """int64 ids index an embedding table at run time; the mask is cast to float and pools the rows."""
    table = np.random.default_rng(3).standard_normal((50, 8)).astype(np.float32)
    model = _model(
        [
            helper.make_node("Gather", ["table", "ids"], ["emb"]),
            helper.make_node("Unsqueeze", ["mask", "axis"], ["m3"]),
            helper.make_node("Cast", ["m3"], ["mf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["emb", "mf"], ["masked"]),
            helper.make_node("ReduceSum", ["masked", "one"], ["y"], keepdims=0),
        ],
        [("ids", TensorProto.INT64, [1, 7]), ("mask", TensorProto.INT64, [1, 7])],
        ["y"],
        {"table": table, "axis": np.array([-1], np.int64), "one": np.array([1], np.int64)},
    )
    feeds = {
        "ids": np.array([[0, 49, 7, 3, 3, 12, 0]], np.int64),
        "mask": np.array([[1, 1, 1, 1, 1, 0, 0]], np.int64),
    }
    result = _check(model, feeds)
    assert [i.dtype for i in result.inputs] == ["int32", "int32"]
    assert op_types(result)["GATHER"] == 1


def test_default_verify_samples_give_valid_ids_and_binary_masks() -> None:
    from edgekit.core.model import load_proto
    from edgekit.targets.base import default_verify_samples

    model = load_proto(onnx.load(ZOO / "bert_tiny_op13.onnx"))
    for feeds in default_verify_samples(model, count=3):
        assert feeds["input_ids"].min() >= 0 and feeds["input_ids"].max() < 1000
        assert set(np.unique(feeds["attention_mask"])) <= {0, 1}


def _sentence_embedding() -> onnx.ModelProto:
    """sentence-transformers' tail as its ONNX exports write it: masked mean pooling of the hidden states, then
    L2 normalisation with ReduceL2 / Clip / Expand / Div (TFLite has no REDUCE_L2: SUM of squares, SQRT)."""
    w = np.random.default_rng(9).standard_normal((16, 16)).astype(np.float32) / 4
    return _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["m", "last"], ["m3"]),
            helper.make_node("Mul", ["h", "m3"], ["hm"]),
            helper.make_node("ReduceSum", ["hm", "one"], ["total"], keepdims=0),
            helper.make_node("ReduceSum", ["m3", "one"], ["count"], keepdims=0),
            helper.make_node("Clip", ["count", "tiny"], ["count_c"]),
            helper.make_node("Div", ["total", "count_c"], ["pooled"]),
            helper.make_node("ReduceL2", ["pooled"], ["norm"], axes=[1], keepdims=1),
            helper.make_node("Clip", ["norm", "eps"], ["norm_c"]),
            helper.make_node("Expand", ["norm_c", "shape"], ["wide"]),
            helper.make_node("Div", ["pooled", "wide"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, [1, 6, 16]), ("mask", TensorProto.INT64, [1, 6])],
        ["y"],
        {
            "w": w,
            "last": np.array([-1], np.int64),
            "one": np.array([1], np.int64),
            "tiny": np.array(1e-9, np.float32),
            "eps": np.array(1e-12, np.float32),
            "shape": np.array([1, 16], np.int64),
        },
        opset=14,
    )


def test_sentence_embedding_l2_normalisation(tmp_path) -> None:
    """fp32 against onnxruntime; int8 (the normalisation float between DEQUANTIZE/QUANTIZE) against its QDQ model,
    in a LiteRT child process. Before: "unsupported op 'ReduceL2'" on every TFLite target."""
    from edgekit.core.litert_run import to_model_input

    model = _sentence_embedding()
    rng = np.random.default_rng(10)
    samples = []
    for k in range(6):
        mask = np.zeros((1, 6), np.int64)
        mask[0, : 2 + k % 4] = 1
        samples.append({"x": rng.standard_normal((1, 6, 16)).astype(np.float32), "mask": mask})
    counts = op_types(_check(model, samples[0]))
    assert counts.get("SQRT") == 1 and "REDUCE_L2" not in counts
    qdq = edgekit_qdq(model, samples, float_output_heads=True)
    result = convert(qdq)
    assert any(op.startswith("SQRT") for op in result.float_ops)
    assert [to_model_input(i, samples[0][i.name]).dtype for i in result.inputs] == [np.float32, np.int32]
    for feeds in samples[:2]:
        got = run_in_child(result, feeds, tmp_path)
        (expected,) = run_onnx(qdq, feeds)
        assert cosine(got, expected) >= 0.9999
        np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-3)


# -- the quantizer's patterns --------------------------------------------------------------------------------------
def test_quantizer_keeps_mask_layer_norm_and_gelu_internals_float() -> None:
    from edgekit.core.model import load_proto
    from edgekit.quantize import patterns

    model = load_proto(onnx.load(ZOO / "bert_tiny_op13.onnx"))
    mask = patterns.mask_paths(model)
    by_type: dict[str, int] = {}
    for node in model.graph:
        if node.name in mask:
            by_type[node.op_type] = by_type.get(node.op_type, 0) + 1
    assert by_type.get("Softmax") == 2 and by_type.get("Where") == 1 and by_type.get("Cast") == 2
    assert "Gather" not in by_type and "MatMul" not in by_type  # ids index the table; scores are data
    layer_norms = patterns.layer_norms(model)
    assert sum(n.op_type == "Sqrt" for n in model.graph if n.name in layer_norms) == 5
    gelus = patterns.erf_gelus(model)
    assert sum(n.op_type == "Erf" for n in model.graph if n.name in gelus) == 2
    assert all(n.op_type in ("Div", "Erf", "Add", "Mul") for n in model.graph if n.name in gelus)


def test_qdq_encoder_quantizes_matmuls_and_not_the_mask() -> None:
    model = onnx.load(ZOO / "bert_tiny_op17.onnx")
    entry = ENTRIES["bert_tiny_op17.onnx"]
    qdq = edgekit_qdq(model, zoo_samples(entry, 4, seed=4), float_output_heads=True)
    producers = {o: n for n in qdq.graph.node for o in n.output}
    quantized = {producers[n.input[0]].op_type for n in qdq.graph.node if n.op_type == "QuantizeLinear"}
    assert {"MatMul", "Gather", "LayerNormalization"} <= quantized  # outputs feeding int8 kernels
    assert "Softmax" not in quantized  # the probabilities feed the float attention core
    for node in qdq.graph.node:
        if node.op_type in ("Where", "Cast", "Sub") or (node.op_type == "Softmax"):
            for name in node.input:
                producer = producers.get(name)
                assert producer is None or producer.op_type != "DequantizeLinear", node.name


@pytest.mark.parametrize("name", ["bert_tiny_op13.onnx", "bert_tiny_op17.onnx"])
def test_attention_core_and_residual_sums_stay_float(name: str) -> None:
    """The attention core (Q K^T, scale, mask, Softmax, times V) and each post-LayerNorm residual sum with the
    feed-forward down projection into it stay float; the Q/K/V, output and up projections are int8 (weights
    per channel), and the residual Add reads the LayerNorm's float output, not its int8 copy."""
    from edgekit.core.model import load_proto
    from edgekit.quantize import patterns
    from edgekit.quantize.plan import make_plan

    model = load_proto(onnx.load(ZOO / name))
    attention = patterns.attention_cores(model)
    residual = patterns.residual_sums(model)
    kinds = lambda found: sorted(n.op_type for n in model.graph if n.name in found)  # noqa: E731
    assert kinds(attention) == sorted(["MatMul"] * 4 + ["Mul"] * 2 + ["Add"] * 2 + ["Softmax"] * 2)
    # 2 layers x 2 sums; 2 x the down projection (Gemm with its bias, and the Reshape back to [1, S, N])
    assert kinds(residual) == sorted(["Add"] * 4 + ["Gemm"] * 2 + ["Reshape"] * 2)
    down = {n.name for n in model.graph if n.op_type == "Gemm" and n.name in residual}
    plan = make_plan(model, float_output_heads=True)
    weighted = {w.node for w in plan.weights}
    projections = {
        n.name
        for n in model.graph
        if n.op_type == "Gemm" and n.inputs[1].const_value is not None and n.name not in residual
    }
    assert len(projections) == 2 * 5 and projections <= weighted  # Q, K, V, output, up: int8
    assert not (down | {n.name for n in model.graph if n.name in attention}) & weighted
    float_reasons = {f.node: f.reason for f in plan.float_ops}
    assert all(
        float_reasons[n] == patterns.ATTENTION_REASON
        for n in attention
        if n not in patterns.mask_paths(model)
    )
    assert all(float_reasons[n] == patterns.RESIDUAL_REASON for n in residual)
    assert len(plan.float_reads) == 4  # each residual Add's skip input
    wide = make_plan(model, float_output_heads=True, precision="int16x8")  # 256 times finer: quantized
    assert not {f.reason for f in wide.float_ops} & patterns.INT8_ONLY_REASONS and not wide.float_reads

    qdq = edgekit_qdq(onnx.load(ZOO / name), zoo_samples(ENTRIES[name], 4, seed=4), float_output_heads=True)
    producers = {o: n for n in qdq.graph.node for o in n.output}
    nodes = {n.name: n for n in qdq.graph.node}
    for add, index in plan.float_reads:
        skip = producers[nodes[add].input[index]]
        assert skip.op_type != "DequantizeLinear"  # the LayerNorm's float output
        others = [u for u in qdq.graph.node if skip.output[0] in u.input and u.op_type == "QuantizeLinear"]
        assert others  # ... which the Q/K/V projections read quantized


def test_residual_sums_need_a_post_layer_norm_skip() -> None:
    """A pre-LayerNorm block (ViT: x + f(LN(x))) has no LayerNorm output in its residual Add: nothing matches."""
    from edgekit.core.model import load_proto
    from edgekit.quantize import patterns

    model = load_proto(onnx.load(ZOO / "vit_tiny_op17.onnx"))
    assert patterns.residual_sums(model) == {}
    assert sum(n.op_type == "Softmax" for n in model.graph if n.name in patterns.attention_cores(model)) == 2


def _written_out_layer_norm(extra_output: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["x", "mu"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["y"]),
    ]
    outputs = ["y", "var"] if extra_output else ["y"]
    inits = {
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-12, np.float32),
        "gamma": (1 + 0.3 * rng.standard_normal(16)).astype(np.float32),
        "beta": (0.2 * rng.standard_normal(16)).astype(np.float32),
    }
    return _model(nodes, [("x", TensorProto.FLOAT, [1, 5, 16])], outputs, inits, opset=13)


@pytest.mark.parametrize("extra_output", [False, True], ids=["fused", "variance-read-outside"])
def test_written_out_layer_norm(extra_output: bool) -> None:
    model = _written_out_layer_norm(extra_output)
    x = (3 + 2 * np.random.default_rng(6).standard_normal((1, 5, 16))).astype(np.float32)
    counts = op_types(_check(model, {"x": x}))
    if extra_output:  # an intermediate value is a model output: converted op by op
        assert counts.get("SQRT") == 1 and counts.get("DIV") == 1
    else:  # one LayerNorm, as the LayerNormalization op converts
        assert counts.get("RSQRT") == 1 and counts.get("SQUARED_DIFFERENCE") == 1
        assert "SQRT" not in counts and "DIV" not in counts and "POW" not in counts


def test_mask_path_ends_at_softmax_and_weighted_ops() -> None:
    """Integer-input arithmetic stays float up to the Softmax (or a MatMul) that reads it; the rest quantizes."""
    import onnx_ir as ir
    from edgekit.quantize import patterns
    from edgekit.quantize.plan import make_plan

    model = _model(
        [
            helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
            helper.make_node("Sub", ["one", "mf"], ["inv"]),
            helper.make_node("Mul", ["inv", "low"], ["bias"]),
            helper.make_node("Add", ["x", "bias"], ["masked"]),
            helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "w"], ["h"]),
            helper.make_node("Mul", ["x", "mf"], ["xm"]),
            helper.make_node("MatMul", ["xm", "w"], ["g"]),
            helper.make_node("Add", ["h", "g"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, [2, 8]), ("mask", TensorProto.INT64, [2, 8])],
        ["y"],
        {
            "one": np.array(1.0, np.float32),
            "low": np.array(-10000.0, np.float32),
            "w": np.random.default_rng(7).standard_normal((8, 4)).astype(np.float32),
        },
        opset=13,
    )
    graph = ir.from_proto(model)
    for i, node in enumerate(graph.graph):
        node.name = f"n{i}_{node.op_type}"
    on_path = {
        n.op_type + "@" + n.outputs[0].name for n in graph.graph if n.name in patterns.mask_paths(graph)
    }
    assert on_path == {"Cast@mf", "Sub@inv", "Mul@bias", "Add@masked", "Softmax@p", "Mul@xm", "MatMul@g"}
    plan = make_plan(graph)
    assert {"p", "h", "g", "y"} <= set(plan.activations)  # quantized again after the Softmax / the MatMul
    assert not {"mf", "inv", "bias", "masked", "xm"} & set(plan.activations)
    assert {f.reason for f in plan.float_ops if f.op_type == "Sub"} == {patterns.MASK_REASON}


def test_roberta_position_ids_cumsum_and_casts() -> None:
    """RoBERTa's position ids: cumsum(ids != pad) * (ids != pad) + pad, indexing a position table."""
    table = np.random.default_rng(8).standard_normal((20, 4)).astype(np.float32)
    model = _model(
        [
            helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
            helper.make_node("Not", ["is_pad"], ["ne"]),
            helper.make_node("Cast", ["ne"], ["m"], to=TensorProto.INT32),
            helper.make_node("CumSum", ["m", "axis"], ["c"]),
            helper.make_node("Mul", ["c", "m"], ["cm"]),
            helper.make_node("Cast", ["cm"], ["cm64"], to=TensorProto.INT64),
            helper.make_node("Add", ["cm64", "pad"], ["pos"]),
            helper.make_node("Gather", ["table", "pos"], ["y"]),
            helper.make_node("Cast", ["is_pad"], ["y2"], to=TensorProto.FLOAT),
        ],
        [("ids", TensorProto.INT64, [1, 9])],
        ["y", "y2"],
        {"pad": np.array(1, np.int64), "axis": np.array(1, np.int64), "table": table},
        opset=13,
    )
    result = _check(model, {"ids": np.array([[0, 5, 9, 17, 4, 2, 1, 1, 1]], np.int64)})
    assert "CUMSUM" in op_types(result)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_float_options(exclusive: int, reverse: int) -> None:
    model = _model(
        [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
        [("x", TensorProto.FLOAT, [2, 3, 5])],
        ["y"],
        {"axis": np.array(-1, np.int64)},
    )
    _check(model, {"x": np.random.default_rng(9).standard_normal((2, 3, 5)).astype(np.float32)})


@pytest.mark.parametrize(
    "src,dst",
    [
        (TensorProto.FLOAT, TensorProto.BOOL),  # HF's sdpa mask: inverted_mask.to(torch.bool)
        (TensorProto.INT64, TensorProto.BOOL),
        (TensorProto.INT64, TensorProto.FLOAT),
        (TensorProto.FLOAT, TensorProto.INT64),
    ],
)
def test_cast_between_mask_types(src: int, dst: int) -> None:
    model = _model(
        [
            helper.make_node("Cast", ["x"], ["b"], to=dst),
            helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT),
        ],
        [("x", src, [2, 6])],
        ["y"],
    )
    values = np.array([[0, 1, 0, 3, 1, 0], [1, 1, 0, 0, 2, 1]])
    _check(model, {"x": values.astype(helper.tensor_dtype_to_np_dtype(src))})


@pytest.mark.parametrize("rank", [5, 6])
def test_batch_matmul_ranks(rank: int) -> None:
    """TFLite's BATCH_MATMUL takes ranks 2 to 5 (batch_matmul.cc Prepare): rank 5 converts, rank 6 is refused."""
    from edgekit.core.errors import TargetError

    shape_a, shape_b = [1] * (rank - 3) + [2, 3, 4], [1] * (rank - 3) + [2, 4, 5]
    model = _model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", TensorProto.FLOAT, shape_a), ("b", TensorProto.FLOAT, shape_b)],
        ["y"],
    )
    rng = np.random.default_rng(10)
    feeds = {
        "a": rng.standard_normal(shape_a).astype(np.float32),
        "b": rng.standard_normal(shape_b).astype(np.float32),
    }
    if rank <= 5:
        _check(model, feeds)
    else:
        with pytest.raises(TargetError, match="BATCH_MATMUL takes ranks 2 to 5"):
            convert(model)


def _causal_attention_with_nan_guard() -> onnx.ModelProto:
    """CLIP's text attention as ``torch.onnx.export(dynamo=True)`` writes scaled_dot_product_attention: a causal
    mask constant (-3.4e38 above the diagonal) added to the scores, Softmax, ``where(isnan(p), 0, p)``, times V."""
    rng = np.random.default_rng(8)
    seq, width = 8, 16
    w = lambda *s: (rng.standard_normal(s) * 0.4).astype(np.float32)  # noqa: E731
    causal = np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), 1)[None]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Add", ["s", "causal"], ["a"]),
        helper.make_node("Softmax", ["a"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["pg"]),
        helper.make_node("MatMul", ["pg", "v"], ["o"]),
        helper.make_node("MatMul", ["o", "wo"], ["y"]),
    ]
    inits = {"wq": w(width, width), "wk": w(width, width), "wv": w(width, width), "wo": w(width, width)}
    inits |= {"causal": causal, "zero": np.array(0.0, np.float32)}
    return _model(nodes, [("x", TensorProto.FLOAT, [1, seq, width])], ["y"], inits.items(), opset=18)


def test_dynamo_attention_nan_guard_stays_in_the_float_core(tmp_path: Path) -> None:
    """The guard between the Softmax and the MatMul (dynamo's SDPA) no longer hides the attention core: the
    -3.4e38 mask Add stays float. Before, it was quantized at a scale of 1.3e36 (the scores became 0) and LiteRT
    aborted on the int8 ADD's requantize multiplier (SIGABRT in QuantizeMultiplierSmallerThanOneExp)."""
    from edgekit.core.exact import ExactRunner
    from edgekit.core.model import load_proto
    from edgekit.quantize import patterns

    model = _causal_attention_with_nan_guard()
    core = patterns.attention_cores(load_proto(model))
    kinds = sorted(n.op_type for n in load_proto(model).graph if n.name in core)
    assert kinds == sorted(["MatMul", "Add", "Softmax", "IsNaN", "Where", "MatMul"])
    rng = np.random.default_rng(9)
    feeds = [{"x": rng.standard_normal((1, 8, 16)).astype(np.float32)} for _ in range(8)]
    qdq = edgekit_qdq(model, feeds, float_output_heads=True)
    result = convert(qdq)
    exact = ExactRunner(qdq, [result.outputs[0].name])
    for sample in feeds[:3]:
        got = run_in_child(result, sample, tmp_path)
        assert cosine(got, exact.run(sample)[result.outputs[0].name]) >= 0.999
        assert cosine(got, run_onnx(model, sample)[0]) >= 0.99


def _t5_rms_norm_block(reciprocal: bool) -> onnx.ModelProto:
    """T5's RMSNorm as torch exports it (``x * rsqrt(mean(x^2) + eps) * w``: Pow, ReduceMean, Add, Sqrt, Div(1, .),
    Mul, Mul; or ``x / sqrt(...)``) between two projections."""
    rng = np.random.default_rng(10)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Pow", ["h", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        *(
            [helper.make_node("Div", ["one", "sd"], ["r"]), helper.make_node("Mul", ["h", "r"], ["n"])]
            if reciprocal
            else [helper.make_node("Div", ["h", "sd"], ["n"])]
        ),
        helper.make_node("Mul", ["gamma", "n"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["y"]),
    ]
    inits = {
        "w1": (0.5 * rng.standard_normal((16, 32))).astype(np.float32),
        "w2": (0.3 * rng.standard_normal((32, 16))).astype(np.float32),
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-6, np.float32),
        "one": np.array(1.0, np.float32),
        "gamma": (1 + 0.3 * rng.standard_normal(32)).astype(np.float32),
    }
    return _model(nodes, [("x", TensorProto.FLOAT, [1, 6, 16])], ["y"], inits.items(), opset=13)


@pytest.mark.parametrize("reciprocal", [True, False], ids=["times-reciprocal", "divide"])
def test_written_out_rms_norm_stays_float_inside(reciprocal: bool, tmp_path: Path) -> None:
    """An RMSNorm written out is float inside like a LayerNorm (one int8 step of a row's mean square rescales
    the whole row; the T5 encoder's int8 TFLite missed the 0.999 cosine to its QDQ model with it quantized),
    quantized at its input and output; the int8 TFLite equals its QDQ model."""
    from edgekit.core.exact import ExactRunner
    from edgekit.core.model import load_proto
    from edgekit.quantize import patterns
    from edgekit.quantize.plan import make_plan

    model = _t5_rms_norm_block(reciprocal)
    prepared_model = load_proto(model)
    found = patterns.layer_norms(prepared_model)
    kinds = sorted(n.op_type for n in prepared_model.graph if n.name in found)
    expected = ["Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul"] + (["Mul"] if reciprocal else [])
    assert kinds == sorted(expected)
    reasons = {f.node: f.reason for f in make_plan(prepared_model).float_ops}
    assert all(reasons.get(n) == patterns.LAYER_NORM_REASON for n in found)
    rng = np.random.default_rng(11)
    feeds = [{"x": rng.standard_normal((1, 6, 16)).astype(np.float32)} for _ in range(8)]
    qdq = edgekit_qdq(model, feeds, float_output_heads=True)
    result = convert(qdq)
    exact = ExactRunner(qdq, [result.outputs[0].name])
    for sample in feeds[:2]:
        got = run_in_child(result, sample, tmp_path)
        assert cosine(got, exact.run(sample)[result.outputs[0].name]) >= 0.999
        assert cosine(got, run_onnx(model, sample)[0]) >= 0.99
