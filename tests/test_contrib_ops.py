"""onnxruntime's fused transformer ops (optimum O2+ / ``onnxruntime.transformers.optimizer``) are written out as
standard ONNX (``edgekit.core.contrib``) and deploy like the unfused export.

The reference is onnxruntime running the fused file (its com.microsoft kernels), on token rows padded
differently, so the attention mask is exercised. Before the expansion such a file was refused at load ("cannot
upgrade the model from opset 14 to 19: ... No Adapter From Version $16 for LayerNormalization") or its ops were
unsupported on every target.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_in_process import cli_text
from edgekit.core import contrib
from edgekit.device_agents.bundle import read_bundle
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, SEQ, VOCAB = 16, 2, 8, 50
MS = "com.microsoft"
FLOAT = TensorProto.FLOAT


def fused_encoder(opset: int = 14, attention: dict | None = None) -> onnx.ModelProto:
    """EmbedLayerNormalization -> Attention (1-D mask_index) -> SkipLayerNormalization -> FastGelu FFN ->
    SkipLayerNormalization (bias) -> Attention (raw 2-D mask) -> BiasGelu -> LayerNormalization (default domain,
    below opset 17 as onnxruntime allows) -> QuickGelu -> T5's RMSNorms (SkipSimplifiedLayerNormalization,
    SimplifiedLayerNormalization): what the optimizer writes for a BERT-style encoder."""
    rng = np.random.default_rng(3)

    def w(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    inits = {
        "word": w(VOCAB, HIDDEN), "pos": w(SEQ, HIDDEN), "seg": w(2, HIDDEN),
        "g0": 1 + w(HIDDEN), "b0": w(HIDDEN), "qkv0": w(HIDDEN, 3 * HIDDEN), "qkvb0": w(3 * HIDDEN),
        "g1": 1 + w(HIDDEN), "b1": w(HIDDEN), "fc1": w(HIDDEN, 32), "fb1": w(32), "fc2": w(32, HIDDEN),
        "g2": 1 + w(HIDDEN), "b2": w(HIDDEN), "sb2": w(HIDDEN), "qkv1": w(HIDDEN, 3 * HIDDEN),
        "qkvb1": w(3 * HIDDEN), "gb": w(HIDDEN), "g3": 1 + w(HIDDEN), "b3": w(HIDDEN),
        "g4": 1 + w(HIDDEN), "g5": 1 + w(HIDDEN),
    }  # fmt: skip
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["token_type_ids"], ["seg32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["attention_mask"], ["mask32"], to=TensorProto.INT32),
        helper.make_node(
            "EmbedLayerNormalization",
            ["ids32", "seg32", "word", "pos", "seg", "g0", "b0", "mask32"],
            ["emb", "mask_index"], domain=MS, epsilon=1e-12,
        ),
        helper.make_node(
            "Attention", ["emb", "qkv0", "qkvb0", "mask_index"], ["att0"], domain=MS, num_heads=HEADS,
            **(attention or {}),
        ),
        helper.make_node("SkipLayerNormalization", ["att0", "emb", "g1", "b1"], ["h1"], domain=MS, epsilon=1e-12),
        helper.make_node("MatMul", ["h1", "fc1"], ["f1"]),
        helper.make_node("FastGelu", ["f1", "fb1"], ["a1"], domain=MS),
        helper.make_node("MatMul", ["a1", "fc2"], ["f2"]),
        helper.make_node(
            "SkipLayerNormalization", ["f2", "h1", "g2", "b2", "sb2"], ["h2"], domain=MS, epsilon=1e-12
        ),
        helper.make_node("Attention", ["h2", "qkv1", "qkvb1", "mask32"], ["att1"], domain=MS, num_heads=HEADS),
        helper.make_node("BiasGelu", ["att1", "gb"], ["a2"], domain=MS),
        helper.make_node("LayerNormalization", ["a2", "g3", "b3"], ["h3"], epsilon=1e-5),
        helper.make_node("QuickGelu", ["h3"], ["q"], domain=MS, alpha=1.702),
        helper.make_node("SkipSimplifiedLayerNormalization", ["q", "h3", "g4"], ["r"], domain=MS, epsilon=1e-6),
        helper.make_node("SimplifiedLayerNormalization", ["r", "g5"], ["y"], epsilon=1e-6),
    ]  # fmt: skip
    ids = [
        helper.make_tensor_value_info(n, TensorProto.INT64, [1, SEQ]) for n in ("input_ids", "attention_mask")
    ]
    ids.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [1, SEQ]))
    graph = helper.make_graph(
        nodes, "fused", ids, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    )
    model.ir_version = 8
    return model


def token_rows(count: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, VOCAB, (count, SEQ)).astype(np.int64)
    mask = np.zeros((count, SEQ), np.int64)
    for i in range(count):
        mask[i, : int(rng.integers(3, SEQ + 1))] = 1  # right padding of every length
    ids *= mask
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": (rng.random((count, SEQ)) < 0.3) * mask,
    }


def run_ort(model: onnx.ModelProto, rows: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    count = len(rows["input_ids"])
    return np.concatenate(
        [session.run(None, {k: v[i : i + 1] for k, v in rows.items()})[0] for i in range(count)]
    )


@pytest.mark.parametrize("opset", [14, 17])
def test_expansion_matches_onnxruntimes_fused_kernels(opset: int) -> None:
    fused = fused_encoder(opset)
    rows = token_rows(12, seed=1)
    reference = run_ort(fused, rows)
    expanded = onnx.ModelProto()
    expanded.CopyFrom(fused)
    done = contrib.expand(expanded)
    assert set(done) == {
        "Attention", "BiasGelu", "EmbedLayerNormalization", "FastGelu", "QuickGelu", "SkipLayerNormalization",
        "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization",
    } | ({"LayerNormalization"} if opset < 17 else set())  # fmt: skip
    assert not any(n.domain == MS for n in expanded.graph.node)
    assert MS not in {i.domain for i in expanded.opset_import}
    onnx.checker.check_model(expanded, full_check=True)
    got = run_ort(expanded, rows)
    np.testing.assert_allclose(got, reference, atol=2e-5 * np.abs(reference).max())


def deploys_to_arm_cpu_fp32(source: onnx.ModelProto, tmp_path: Path, capsys) -> None:
    """``source`` deploys to arm-cpu fp32 through the CLI and its verification passes within 1e-4 of the range."""
    model = tmp_path / "model.onnx"
    onnx.save(source, model)
    code, text = cli_text(
        capsys, "deploy", str(model), "-t", "arm-cpu", "--precision", "fp32", "-o", str(tmp_path / "o")
    )
    assert code == 0, text
    verification = read_bundle(tmp_path / "o" / "arm-cpu").manifest.verification
    assert verification["passed"] and verification["max_rel_error"] <= 1e-4, verification


@pytest.mark.parametrize(
    ("target", "precision"), [("arm-cpu", "fp32"), ("arm-cpu", "int8"), ("intel-vpu", "fp16")]
)
def test_fused_encoder_deploys(tmp_path: Path, capsys, target: str, precision: str) -> None:
    model, calib = tmp_path / "fused.onnx", tmp_path / "calib.npz"
    onnx.save(fused_encoder(14), model)
    np.savez(calib, **token_rows(16, seed=2))
    code, text = cli_text(
capsys, "deploy", str(model), "-t", target, "--precision", precision, "--calib", str(calib),
        "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, text
    assert "Traceback" not in text and "written out as standard ONNX" in text
    verification = read_bundle(tmp_path / "out" / target).manifest.verification
    assert verification["passed"], verification


def test_skip_layer_norm_bias_stays_in_its_projection(tmp_path: Path, capsys) -> None:
    """The optimizer moves a projection's bias into the SkipLayerNormalization after it (``f2`` = MatMul, bias
    ``sb2``). The expansion adds that bias to the projection first, so the quantizer sees the unfused export's
    layer: one Gemm with its bias, which the residual rules judge as they do unfused (here: the feed-forward down
    projection into a LayerNorm, kept float). Added after the skip connection, the MatMul was a layer of its
    own, quantized without its bias, and the bias sum requantized again (probe round 13s: BERT QA int8 35.2 dB
    against fp32 unfused, 27.4 fused; 35.5 after)."""
    model, calib, out = tmp_path / "fused.onnx", tmp_path / "calib.npz", tmp_path / "fused.int8.onnx"
    onnx.save(fused_encoder(14), model)
    np.savez(calib, **token_rows(16, seed=2))
    code, text = cli_text(capsys, "quantize", str(model), "--calib", str(calib), "-o", str(out), "-q")
    assert code == 0, text
    qdq = onnx.load(out)
    # what each input is made from: a DequantizeLinear's initializer, else the value itself
    source = {n.output[0]: n.input[0] for n in qdq.graph.node if n.op_type == "DequantizeLinear"}
    layers = [n for n in qdq.graph.node if n.op_type != "DequantizeLinear"]
    (layer,) = [n for n in layers if any(source.get(i, i).startswith("fc2") for i in n.input)]
    assert layer.op_type == "Gemm" and source.get(layer.input[2], layer.input[2]).startswith("sb2"), layer
    # the whole QDQ model still computes the fused file's function (the references: onnxruntime's fused kernels)
    rows = token_rows(8, seed=6)
    reference, got = run_ort(fused_encoder(14), rows), run_ort(qdq, rows)
    cosine = float(np.sum(reference * got) / np.linalg.norm(reference) / np.linalg.norm(got))
    assert cosine > 0.995, cosine


def roberta_fused_attention() -> onnx.ModelProto:
    """What the optimizer writes for RoBERTa / XLM-R (probe round 13s: XLM-R and a bge-reranker-style model at O2
    / O3): their CumSum position ids keep EmbedLayerNormalization from fusing, so the Attention's 1-D mask_index is
    its own ``ReduceSum(Cast(attention_mask, int32), axes=[1], keepdims=0)``, with no shape declared for it."""
    rng = np.random.default_rng(5)
    inits = {
        "word": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32),
        "qkv": (rng.standard_normal((HIDDEN, 3 * HIDDEN)) * 0.4).astype(np.float32),
        "qkvb": (rng.standard_normal(3 * HIDDEN) * 0.1).astype(np.float32),
        "axes": np.array([1], np.int64),
    }
    nodes = [
        helper.make_node("Gather", ["word", "input_ids"], ["emb"]),
        helper.make_node("Cast", ["attention_mask"], ["mask32"], to=TensorProto.INT32),
        helper.make_node("ReduceSum", ["mask32", "axes"], ["mask_index"], keepdims=0),
        helper.make_node(
            "Attention", ["emb", "qkv", "qkvb", "mask_index"], ["y"], domain=MS, num_heads=HEADS
        ),
    ]
    ids = [
        helper.make_tensor_value_info(n, TensorProto.INT64, [1, SEQ]) for n in ("input_ids", "attention_mask")
    ]
    graph = helper.make_graph(
        nodes, "roberta_fused", ids, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def test_attention_mask_index_from_reduce_sum(tmp_path: Path, capsys) -> None:
    fused = roberta_fused_attention()
    rows = {k: v for k, v in token_rows(12, seed=4).items() if k != "token_type_ids"}
    reference = run_ort(fused, rows)
    expanded = onnx.ModelProto()
    expanded.CopyFrom(fused)
    # before: ModelError "Attention node '': a mask_index of rank None is not expanded (1 to 3 are)"
    assert contrib.expand(expanded) == ["Attention"]
    np.testing.assert_allclose(run_ort(expanded, rows), reference, atol=2e-5 * np.abs(reference).max())
    deploys_to_arm_cpu_fp32(fused, tmp_path, capsys)


def test_unexpanded_variant_is_one_typed_line(tmp_path: Path, capsys) -> None:
    """A causal (unidirectional) fused Attention is not expanded: one error line naming the node and why."""
    model = tmp_path / "causal.onnx"
    onnx.save(fused_encoder(14, attention={"unidirectional": 1}), model)
    code, text = cli_text(
        capsys, "deploy", str(model), "-t", "arm-cpu", "--precision", "fp32", "-o", str(tmp_path / "o")
    )
    assert code == 2, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Attention node" in errors[0] and "unidirectional" in errors[0], text
    assert "Traceback" not in text and not (tmp_path / "o" / "arm-cpu").exists()


def onnx23_encoder(three_d: bool, **attention: int) -> onnx.ModelProto:
    """Q/K/V projections -> ONNX Attention (opset 23, as torch's dynamo exporter writes scaled_dot_product_attention
    there): 4-D heads with a boolean mask, or 3-D inputs with ``q_num_heads`` and an additive float mask;
    then RMSNormalization-23 over the last axis."""
    rng = np.random.default_rng(5)
    head = HIDDEN // HEADS

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.4).astype(np.float32)

    keep = np.ones((1, 1, SEQ, SEQ), bool)
    keep[..., SEQ - 2 :] = False  # two padded keys
    inits = {"wq": w(HIDDEN, HIDDEN), "wk": w(HIDDEN, HIDDEN), "wv": w(HIDDEN, HIDDEN), "g": 1 + w(HIDDEN)}
    inits["heads"] = np.array([1, SEQ, HEADS, head], np.int64)
    inits["merge"] = np.array([1, SEQ, HIDDEN], np.int64)
    inits["mask"] = np.where(keep, 0.0, -1e4).astype(np.float32)[0] if three_d else keep
    node = helper.make_node
    nodes = [node("MatMul", ["x", f"w{c}"], [c]) for c in "qkv"]
    if three_d:
        att = [
            node(
                "Attention",
                ["q", "k", "v", "mask"],
                ["a"],
                q_num_heads=HEADS,
                kv_num_heads=HEADS,
                **attention,
            )
        ]
    else:
        for c in "qkv":
            nodes += [
                node("Reshape", [c, "heads"], [c + "r"]),
                node("Transpose", [c + "r"], [c + "h"], perm=[0, 2, 1, 3]),
            ]
        att = [
            node("Attention", ["qh", "kh", "vh", "mask"], ["ah"], **attention),
            node("Transpose", ["ah"], ["at"], perm=[0, 2, 1, 3]),
            node("Reshape", ["at", "merge"], ["a"]),
        ]
    nodes += [*att, node("RMSNormalization", ["a", "g"], ["y"], epsilon=1e-5)]
    graph = helper.make_graph(
        nodes, "onnx23", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 11
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("three_d", [False, True])
def test_onnx23_attention_and_rms_norm_deploy(tmp_path: Path, capsys, three_d: bool) -> None:
    """Before: "unsupported op 'Attention' (node 'node_scaled_dot_product_attention') for target 'arm-cpu'" on
    MobileViT-XXS and ViT exported with dynamo at opset 23. Written out, the model gives onnxruntime's Attention
    and RMSNormalization kernels' outputs, and the fp32 .tflite passes its verification."""
    source = onnx23_encoder(three_d)
    x = {"x": np.random.default_rng(6).standard_normal((1, SEQ, HIDDEN)).astype(np.float32)}
    session = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    (reference,) = session.run(None, x)
    expanded = onnx.ModelProto()
    expanded.CopyFrom(source)
    assert contrib.expand(expanded) == []  # nothing fused: standard ops written out
    ops = [n.op_type for n in expanded.graph.node]
    assert "Attention" not in ops and "RMSNormalization" not in ops and "Softmax" in ops
    session = ort.InferenceSession(expanded.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, x)
    np.testing.assert_allclose(got, reference, atol=1e-5 * np.abs(reference).max())
    deploys_to_arm_cpu_fp32(source, tmp_path, capsys)


def test_causal_onnx_attention_is_one_typed_line(tmp_path: Path, capsys) -> None:
    model = tmp_path / "causal.onnx"
    onnx.save(onnx23_encoder(False, is_causal=1), model)
    code, text = cli_text(
        capsys, "deploy", str(model), "-t", "arm-cpu", "--precision", "fp32", "-o", str(tmp_path / "o")
    )
    assert code == 2, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Attention node" in errors[0] and "is_causal" in errors[0], text
    assert "Traceback" not in text and not (tmp_path / "o" / "arm-cpu").exists()


def col2im_model(
    strides: list[int], dilations: list[int], pads: list[int], image: list[int]
) -> onnx.ModelProto:
    """VOLO's outlook-attention fold as torch's dynamo exporter writes it (opset 18): a MatMul producing the
    columns [1, C * 3 * 3, L], Col2Im back to [1, C, H, W], a Relu."""
    c, k = 4, 3
    grid = [
        (image[d] + pads[d] + pads[d + 2] - dilations[d] * (k - 1) - 1) // strides[d] + 1 for d in range(2)
    ]
    count = grid[0] * grid[1]
    rng = np.random.default_rng(8)
    inits = [
        numpy_helper.from_array(rng.standard_normal((count, count)).astype(np.float32), "mix"),
        numpy_helper.from_array(np.array(image, np.int64), "image_shape"),
        numpy_helper.from_array(np.array([k, k], np.int64), "block_shape"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "mix"], ["cols"]),
        helper.make_node(
            "Col2Im", ["cols", "image_shape", "block_shape"], ["img"], strides=strides, dilations=dilations,
            pads=pads,
        ),
        helper.make_node("Relu", ["img"], ["y"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c * k * k, count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, *image])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(
    ("strides", "dilations", "pads", "image"),
    [
        ([2, 2], [1, 1], [1, 1, 1, 1], [8, 8]),
        ([1, 2], [2, 1], [0, 1, 2, 0], [7, 9]),
        ([3, 2], [1, 1], [0] * 4, [8, 7]),
    ],
)
def test_col2im_is_a_one_hot_conv_transpose(tmp_path: Path, capsys, strides, dilations, pads, image) -> None:
    """Before: "unsupported op 'Col2Im'" on every TFLite target (VOLO exported by dynamo at opset 18). Written out
    as Reshape + ConvTranspose, it gives onnxruntime's Col2Im, and the fp32 .tflite passes its verification
    (the last case: pixels no block reaches, ConvTranspose's output_padding)."""
    source = col2im_model(strides, dilations, pads, image)
    x = {"x": np.random.default_rng(9).standard_normal((1, 36, source.graph.initializer[0].dims[0]))}
    x = {"x": x["x"].astype(np.float32)}
    (reference,) = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, x
    )
    expanded = onnx.ModelProto()
    expanded.CopyFrom(source)
    assert contrib.expand(expanded) == []
    assert "Col2Im" not in [n.op_type for n in expanded.graph.node]
    (got,) = ort.InferenceSession(expanded.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, x
    )
    np.testing.assert_allclose(got, reference, atol=1e-5 * np.abs(reference).max())
    deploys_to_arm_cpu_fp32(source, tmp_path, capsys)


def genai_decoder(past: int, seq: int) -> onnx.ModelProto:
    """One decoder layer as onnxruntime-genai's model builder writes it (round 20k): x [1, S, 64] -> packed QKV
    MatMul -> com.microsoft GroupQueryAttention (4 query heads over 2 KV heads of 16, rotary from cos / sin caches,
    ``seqlens_k`` = ReduceSum(mask) - 1, ``total_sequence_length`` from the mask's shape, past keys / values in,
    present out) -> output MatMul."""
    rng = np.random.default_rng(7)
    inv = 1.0 / 10000 ** (np.arange(0, 16, 2) / 16)
    angles = np.outer(np.arange(16), inv).astype(np.float32)
    inits = [
        numpy_helper.from_array((rng.standard_normal((64, 128)) * 0.2).astype(np.float32), "w_qkv"),
        numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.2).astype(np.float32), "w_o"),
        numpy_helper.from_array(np.cos(angles), "cos_cache"),
        numpy_helper.from_array(np.sin(angles), "sin_cache"),
        numpy_helper.from_array(np.array([1], np.int64), "axes1"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]
    nodes = [
        helper.make_node("ReduceSum", ["attention_mask", "axes1"], ["valid"], keepdims=0),
        helper.make_node("Sub", ["valid", "one"], ["seqlens64"]),
        helper.make_node("Cast", ["seqlens64"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
        helper.make_node("Gather", ["mask_shape", "one"], ["total64"], axis=0),
        helper.make_node("Cast", ["total64"], ["total"], to=TensorProto.INT32),
        helper.make_node("MatMul", ["x", "w_qkv"], ["qkv"]),
        helper.make_node(
            "GroupQueryAttention",
            ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total", "cos_cache", "sin_cache"],
            ["attn", "present_key", "present_value"],
            domain=MS,
            num_heads=4,
            kv_num_heads=2,
            do_rotary=1,
        ),  # fmt: skip
        helper.make_node("MatMul", ["attn", "w_o"], ["y"]),
    ]
    kv = [1, 2, past, 16]
    graph = helper.make_graph(
        nodes, "genai_layer",
        [helper.make_tensor_value_info("x", FLOAT, [1, seq, 64]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, past + seq]),
         helper.make_tensor_value_info("past_key", FLOAT, kv), helper.make_tensor_value_info("past_value", FLOAT, kv)],
        [helper.make_tensor_value_info("y", FLOAT, [1, seq, 64]),
         helper.make_tensor_value_info("present_key", FLOAT, [1, 2, past + seq, 16]),
         helper.make_tensor_value_info("present_value", FLOAT, [1, 2, past + seq, 16])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])


def genai_rows(count: int, past: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    kv = (count, 2, past, 16)
    return {
        "x": rng.standard_normal((count, seq, 64)).astype(np.float32),
        "attention_mask": np.ones((count, past + seq), np.int64),
        "past_key": rng.standard_normal(kv).astype(np.float32),
        "past_value": rng.standard_normal(kv).astype(np.float32),
    }


@pytest.mark.parametrize(
    ("past", "seq"), [(6, 1), (0, 4), (3, 3)]
)  # a step, the prompt, a chunk after a past
def test_group_query_attention_matches_onnxruntime(past: int, seq: int) -> None:
    fused = genai_decoder(past, seq)
    rows = genai_rows(2, past, seq, seed=past)
    expanded = onnx.ModelProto()
    expanded.CopyFrom(fused)
    # before: nothing expanded; the targets said "unsupported op 'com.microsoft::GroupQueryAttention'"
    assert contrib.expand(expanded) == ["GroupQueryAttention"]
    assert not any(n.domain == MS for n in expanded.graph.node)
    runs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (fused, expanded)
    ]
    for i in range(2):
        feed = {k: v[i : i + 1] for k, v in rows.items()}
        reference, got = (s.run(None, feed) for s in runs)
        for r, g in zip(reference, got, strict=True):
            np.testing.assert_allclose(g, r, atol=1e-5 * np.abs(r).max())


@pytest.mark.parametrize(("target", "precision"), [("arm-cpu", "fp32"), ("intel-vpu", "fp16")])
def test_group_query_attention_step_deploys(tmp_path: Path, capsys, target: str, precision: str) -> None:
    model, calib = tmp_path / "genai.onnx", tmp_path / "calib.npz"
    onnx.save(genai_decoder(6, 1), model)
    np.savez(calib, **genai_rows(8, 6, 1, seed=9))
    code, text = cli_text(
        capsys, "deploy", str(model), "-t", target, "--precision", precision, "--calib", str(calib),
        "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, text
    assert "GroupQueryAttention" in text and "Traceback" not in text
    verification = read_bundle(tmp_path / "out" / target).manifest.verification
    assert verification["passed"], verification


@pytest.mark.parametrize(
    ("target", "precision", "said"),
    [("intel-vpu", "fp16", "OpenVINO cannot read back the IR it wrote"),
     ("arm-cpu", "int8", "OpenVINO failed while running the model")],
)  # fmt: skip
def test_openvinos_own_group_query_attention_fails_in_one_line(
    tmp_path: Path, capsys, monkeypatch, target: str, precision: str, said: str
) -> None:
    """Left to OpenVINO (as before the expansion), its ONNX frontend makes an op of its own of GroupQueryAttention:
    its IR cannot be read back, and the CPU plugin's ScatterUpdate check fails on the step (calibration). Both
    were "internal error: RuntimeError: Exception from src/inference/..." (exit 3); now one typed line."""
    monkeypatch.delitem(contrib._EXPANSIONS, "GroupQueryAttention")
    model, calib = tmp_path / "genai.onnx", tmp_path / "calib.npz"
    onnx.save(genai_decoder(6, 1), model)
    np.savez(calib, **genai_rows(4, 6, 1, seed=9))
    code, text = cli_text(
        capsys, "deploy", str(model), "-t", target, "--precision", precision, "--calib", str(calib),
        "-o", str(tmp_path / "out"),
    )  # fmt: skip
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and said in errors[0], text
    assert not (tmp_path / "out" / target).exists()
