"""Tiny one-op (or few-op) ONNX models covering every op the TFLite converter supports, per opset."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import helper

R = np.random.default_rng(1234)


def w(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (R.standard_normal(shape) * scale).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def f32(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


@dataclass
class Case:
    id: str
    nodes: list
    inputs: dict
    outputs: list = field(default_factory=lambda: ["y"])
    inits: dict = field(default_factory=dict)
    opset: int = 19
    int8: bool = False  # also tested quantized (QDQ int8) against the QDQ model
    low: float = -2.0
    high: float = 2.0


def n(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs) -> object:
    outputs = outputs or ["y"]
    return helper.make_node(op, inputs, outputs, name=f"{op.lower()}_node_{outputs[0]}", **attrs)


X4 = {"x": (1, 3, 8, 8)}
CASES: list[Case] = [
    # convolutions
    Case(
        "conv",
        [n("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1])],
        X4,
        inits={"w": w(4, 3, 3, 3), "b": w(4)},
        int8=True,
    ),
    Case(
        "conv_nobias_stride",
        [n("Conv", ["x", "w"], strides=[2, 2])],
        X4,
        inits={"w": w(5, 3, 3, 3)},
        int8=True,
    ),
    Case(
        "conv_asym_pads",
        [n("Conv", ["x", "w", "b"], pads=[0, 1, 2, 1])],
        X4,
        inits={"w": w(4, 3, 3, 3), "b": w(4)},
        int8=True,
    ),
    Case(
        "conv_same_upper",
        [n("Conv", ["x", "w", "b"], auto_pad="SAME_UPPER", strides=[2, 2])],
        X4,
        inits={"w": w(4, 3, 3, 3), "b": w(4)},
    ),
    Case(
        "conv_same_lower",
        [n("Conv", ["x", "w", "b"], auto_pad="SAME_LOWER", strides=[2, 2])],
        X4,
        inits={"w": w(4, 3, 2, 2), "b": w(4)},
    ),
    Case(
        "conv_dilated",
        [n("Conv", ["x", "w", "b"], dilations=[2, 2], pads=[2, 2, 2, 2])],
        X4,
        inits={"w": w(4, 3, 3, 3), "b": w(4)},
    ),
    Case(
        "depthwise",
        [n("Conv", ["x", "w", "b"], group=3, pads=[1, 1, 1, 1])],
        X4,
        inits={"w": w(3, 1, 3, 3), "b": w(3)},
        int8=True,
    ),
    Case(
        "depthwise_multiplier",
        [n("Conv", ["x", "w", "b"], group=3)],
        X4,
        inits={"w": w(6, 1, 3, 3), "b": w(6)},
        int8=True,
    ),
    Case(
        "grouped_conv",
        [n("Conv", ["x", "w", "b"], group=2, pads=[1, 1, 1, 1])],
        {"x": (1, 4, 6, 6)},
        inits={"w": w(6, 2, 3, 3), "b": w(6)},
    ),
    Case(
        "conv_transpose",
        [n("ConvTranspose", ["x", "w", "b"], strides=[2, 2])],
        X4,
        inits={"w": w(3, 4, 3, 3), "b": w(4)},
        int8=True,
    ),
    Case(
        "conv_transpose_output_padding_beyond_pads",
        [n("ConvTranspose", ["x", "w", "b"], strides=[3, 2], output_padding=[1, 1])],
        X4,
        inits={"w": w(3, 2, 3, 3), "b": w(2)},
    ),
    Case(
        "conv_transpose_output_shape",
        [n("ConvTranspose", ["x", "w"], strides=[2, 2], output_shape=[16, 17])],
        X4,
        inits={"w": w(3, 2, 3, 3)},
    ),
    Case(
        "conv_transpose_same_upper",
        [n("ConvTranspose", ["x", "w", "b"], strides=[2, 2], auto_pad="SAME_UPPER")],
        X4,
        inits={"w": w(3, 2, 3, 3), "b": w(2)},
    ),
    Case(
        "conv_transpose_pads",
        [n("ConvTranspose", ["x", "w"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])],
        X4,
        inits={"w": w(3, 2, 3, 3)},
    ),
    Case(
        "conv1d",
        [n("Conv", ["x", "w", "b"], pads=[1, 2], strides=[2])],
        {"x": (1, 3, 11)},
        inits={"w": w(4, 3, 3), "b": w(4)},
        int8=True,
    ),
    # 3-D (video models: R3D / R(2+1)D / S3D / MViT): one CONV_2D over temporal taps gathered into channels
    Case(
        "conv3d",
        [n("Conv", ["x", "w", "b"], pads=[1, 1, 0, 1, 1, 2], strides=[2, 1, 2])],
        {"x": (1, 3, 5, 7, 6)},
        inits={"w": w(4, 3, 3, 3, 3), "b": w(4)},
        int8=True,
    ),
    Case(
        "conv3d_depthwise_dilated",
        [n("Conv", ["x", "w"], pads=[2, 1, 1, 2, 1, 1], dilations=[2, 1, 1], group=4)],
        {"x": (2, 4, 6, 5, 5)},
        inits={"w": w(4, 1, 3, 3, 3)},
        int8=True,
    ),
    Case(
        "conv3d_spatial_depthwise",
        [n("Conv", ["x", "w", "b"], pads=[0, 1, 1, 0, 1, 1], strides=[1, 2, 2], group=3)],
        {"x": (1, 3, 4, 8, 8)},
        inits={"w": w(6, 1, 1, 3, 3), "b": w(6)},
        int8=True,
    ),
    # 3-D transposed (MONAI UNet / DynUNet / UNETR decoders): one TRANSPOSE_CONV over gathered temporal taps
    Case(
        "conv_transpose3d_k2s2",
        [n("ConvTranspose", ["x", "w", "b"], strides=[2, 2, 2])],
        {"x": (2, 4, 3, 4, 5)},
        inits={"w": w(4, 3, 2, 2, 2), "b": w(3)},
        int8=True,
    ),
    Case(
        "conv_transpose3d_overlap_pads",
        [
            n(
                "ConvTranspose",
                ["x", "w", "b"],
                strides=[2, 2, 1],
                pads=[1, 1, 0, 1, 0, 1],
                output_padding=[1, 1, 0],
            )
        ],
        {"x": (1, 3, 4, 5, 4)},
        inits={"w": w(3, 5, 3, 3, 2), "b": w(5)},
        int8=True,
    ),
    Case(
        "conv_transpose3d_dilated_time",
        [n("ConvTranspose", ["x", "w", "b"], strides=[3, 1, 2], dilations=[2, 1, 1], auto_pad="SAME_UPPER")],
        {"x": (1, 2, 3, 4, 4)},
        inits={"w": w(2, 3, 2, 3, 3), "b": w(3)},
    ),
    Case("maxpool1d", [n("MaxPool", ["x"], kernel_shape=[3], strides=[2])], {"x": (1, 3, 11)}),
    Case("avgpool1d", [n("AveragePool", ["x"], kernel_shape=[2], strides=[2])], {"x": (1, 3, 10)}),
    # matrix products
    Case(
        "gemm",
        [n("Gemm", ["x", "w", "b"], transB=1)],
        {"x": (2, 6)},
        inits={"w": w(5, 6), "b": w(5)},
        int8=True,
    ),
    Case(
        "gemm_alpha_beta",
        [n("Gemm", ["x", "w", "b"], alpha=0.5, beta=2.0)],
        {"x": (2, 6)},
        inits={"w": w(6, 5), "b": w(1, 5)},
    ),
    Case(
        "gemm_matrix_c",
        [n("Gemm", ["x", "w", "c"], transA=1)],
        {"x": (6, 3)},
        inits={"w": w(6, 5), "c": w(3, 5)},
    ),
    Case("matmul_const", [n("MatMul", ["x", "w"])], {"x": (2, 3, 6)}, inits={"w": w(6, 4)}, int8=True),
    Case("matmul_1d", [n("MatMul", ["x", "w"])], {"x": (6,)}, inits={"w": w(6, 4)}),
    Case(
        "gemm_runtime_c_beta",
        [n("Gemm", ["x", "w", "c"], beta=0.5)],
        {"x": (2, 6), "c": (2, 5)},
        inits={"w": w(6, 5)},
    ),
    Case("matmul_dynamic", [n("MatMul", ["x", "z"])], {"x": (2, 3, 6), "z": (2, 6, 4)}),
    # element-wise with broadcasting
    *[
        Case(
            f"{op.lower()}_broadcast",
            [n(op, ["x", "z"])],
            {"x": (1, 3, 4, 4), "z": (3, 1, 1)},
            int8=op in ("Add", "Mul"),
        )
        for op in ("Add", "Sub", "Mul", "Max", "Min")
    ],
    Case("div", [n("Div", ["x", "c"])], {"x": (2, 3, 4)}, inits={"c": f32(0.5, -2.0, 4.0, 1.5)}),
    Case("pow", [n("Pow", ["x", "e"])], {"x": (2, 3)}, inits={"e": f32(3.0)}, low=0.1),
    Case("pow_int_exponent", [n("Pow", ["x", "e"])], {"x": (2, 3)}, inits={"e": np.array(3, np.int64)}),
    Case("pow_square", [n("Pow", ["x", "e"])], {"x": (2, 3)}, inits={"e": f32(2.0)}),
    Case("add_const_nchw", [n("Add", ["x", "c"])], X4, inits={"c": w(3, 1, 1)}, int8=True),
    Case("sum3", [n("Sum", ["x", "z", "x"])], {"x": (2, 3), "z": (2, 3)}),
    # activations
    *[
        Case(
            op.lower(), [n(op, ["x"])], {"x": (2, 3, 4)}, int8=op in ("Relu", "Sigmoid", "Tanh", "HardSwish")
        )
        for op in (
            "Relu",
            "Sigmoid",
            "Tanh",
            "Exp",
            "Abs",
            "Neg",
            "HardSwish",
            "Floor",
            "Ceil",
            "Erf",
            "Reciprocal",
        )
    ],
    Case("log", [n("Log", ["x"])], {"x": (2, 3, 4)}, low=0.1),
    Case("sqrt", [n("Sqrt", ["x"])], {"x": (2, 3, 4)}, low=0.0),
    Case("leaky_relu", [n("LeakyRelu", ["x"], alpha=0.2)], {"x": (2, 3, 4)}, int8=True),
    Case("prelu", [n("PRelu", ["x", "s"])], X4, inits={"s": w(3, 1, 1)}),
    Case("elu", [n("Elu", ["x"])], {"x": (2, 3, 4)}),
    Case("elu_alpha", [n("Elu", ["x"], alpha=0.5)], {"x": (2, 3, 4)}),
    Case("hard_sigmoid", [n("HardSigmoid", ["x"])], {"x": (2, 3, 4)}, low=-4, high=4),
    Case(
        "clip_relu6",
        [n("Clip", ["x", "lo", "hi"])],
        {"x": (2, 3)},
        inits={"lo": f32(0.0).reshape(()), "hi": f32(6.0).reshape(())},
        low=-8,
        high=8,
        int8=True,
    ),
    Case(
        "clip_general",
        [n("Clip", ["x", "lo", "hi"])],
        {"x": (2, 3)},
        inits={"lo": f32(-0.5).reshape(()), "hi": f32(1.5).reshape(())},
    ),
    Case("clip_v6_attrs", [n("Clip", ["x"], min=-1.0, max=1.0)], {"x": (2, 3)}, opset=6),
    Case("gelu", [n("Gelu", ["x"])], {"x": (2, 3, 4)}, opset=20),
    Case(
        "gelu_erf_pattern_pytorch",
        [
            n("Div", ["x", "sqrt2"], ["d"]),
            n("Erf", ["d"], ["e"]),
            n("Add", ["e", "one"], ["a"]),
            n("Mul", ["x", "a"], ["m"]),
            n("Mul", ["m", "half"]),
        ],
        {"x": (2, 3, 4)},
        inits={"sqrt2": f32(2**0.5).reshape(()), "one": f32(1.0).reshape(()), "half": f32(0.5).reshape(())},
    ),
    Case(
        "gelu_erf_pattern_half_first",
        [
            n("Mul", ["x", "half"], ["h"]),
            n("Mul", ["x", "isqrt2"], ["d"]),
            n("Erf", ["d"], ["e"]),
            n("Add", ["one", "e"], ["a"]),
            n("Mul", ["h", "a"]),
        ],
        {"x": (2, 3, 4)},
        inits={"isqrt2": f32(2**-0.5).reshape(()), "one": f32(1.0).reshape(()), "half": f32(0.5).reshape(())},
    ),
    Case("gelu_tanh", [n("Gelu", ["x"], approximate="tanh")], {"x": (2, 3, 4)}, opset=20),
    Case(
        "relu_fused_conv",
        [n("Conv", ["x", "w", "b"], ["c"]), n("Relu", ["c"])],
        X4,
        inits={"w": w(4, 3, 3, 3), "b": w(4)},
        int8=True,
    ),
    # pooling and reductions
    Case("maxpool", [n("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])], X4, int8=True),
    Case(
        "maxpool_pads_ceil",
        [n("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0], ceil_mode=1)],
        {"x": (1, 2, 7, 7)},
    ),
    Case(
        "avgpool_same", [n("AveragePool", ["x"], kernel_shape=[3, 3], auto_pad="SAME_UPPER")], X4, int8=True
    ),
    Case(
        "avgpool_include_pad",
        [n("AveragePool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)],
        X4,
    ),
    Case("avgpool_pads_exclude", [n("AveragePool", ["x"], kernel_shape=[3, 3], pads=[1, 0, 2, 1])], X4),
    Case(
        "avgpool_ceil",
        [n("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
        {"x": (1, 2, 8, 7)},
    ),
    Case(
        "avgpool_ceil_include_pad",
        [
            n(
                "AveragePool",
                ["x"],
                kernel_shape=[3, 3],
                strides=[2, 2],
                pads=[1, 1, 1, 1],
                ceil_mode=1,
                count_include_pad=1,
            )
        ],
        {"x": (1, 2, 8, 7)},
        opset=19,
    ),
    Case("global_avgpool", [n("GlobalAveragePool", ["x"])], X4, int8=True),
    Case("global_maxpool", [n("GlobalMaxPool", ["x"])], X4),
    Case(
        "reduce_mean_v13",
        [n("ReduceMean", ["x"], axes=[1], keepdims=0)],
        {"x": (2, 3, 4)},
        opset=13,
        int8=True,
    ),
    Case(
        "reduce_mean_v18",
        [n("ReduceMean", ["x", "a"], keepdims=1)],
        {"x": (2, 3, 4)},
        inits={"a": i64(-1)},
        opset=18,
    ),
    Case("reduce_max_v13", [n("ReduceMax", ["x"], axes=[0, 2])], {"x": (2, 3, 4)}, opset=13),
    Case(
        "reduce_max_v18",
        [n("ReduceMax", ["x", "a"], keepdims=0)],
        {"x": (2, 3, 4)},
        inits={"a": i64(1)},
        opset=18,
    ),
    Case(
        "reduce_sum_v13",
        [n("ReduceSum", ["x", "a"], keepdims=0)],
        {"x": (2, 3, 4)},
        inits={"a": i64(2)},
        opset=13,
    ),
    # no TFLite builtin: SUM of the squares [SQRT]; the sentence-transformers L2 normalisation tail
    Case("reduce_l2_v13", [n("ReduceL2", ["x"], axes=[-1], keepdims=1)], {"x": (2, 3, 4)}, opset=13),
    Case(
        "reduce_l2_v18",
        [n("ReduceL2", ["x", "a"], keepdims=0)],
        {"x": (2, 3, 4)},
        inits={"a": i64(1)},
        opset=18,
    ),
    Case(
        "reduce_sum_square_v13",
        [n("ReduceSumSquare", ["x"], axes=[0, 2], keepdims=0)],
        {"x": (2, 3, 4)},
        opset=13,
    ),
    Case(
        "l2_normalize",
        [
            n("ReduceL2", ["x"], ["norm"], axes=[1], keepdims=1),
            n("Clip", ["norm", "eps"], ["clipped"]),
            n("Expand", ["clipped", "shape"], ["wide"]),
            n("Div", ["x", "wide"]),
        ],
        {"x": (2, 16)},
        inits={"eps": np.array(1e-12, np.float32), "shape": i64(2, 16)},
        opset=14,
    ),
    # shape ops
    Case("reshape", [n("Reshape", ["x", "s"])], X4, inits={"s": i64(1, -1, 16)}, int8=True),
    Case("reshape_zero", [n("Reshape", ["x", "s"])], X4, inits={"s": i64(0, 3, 0, -1)}),
    Case("flatten", [n("Flatten", ["x"], axis=2)], X4),
    Case("squeeze_v11", [n("Squeeze", ["x"], axes=[0])], {"x": (1, 3, 4)}, opset=11),
    Case("squeeze_v13", [n("Squeeze", ["x", "a"])], {"x": (1, 3, 1, 4)}, inits={"a": i64(2)}, opset=13),
    Case("unsqueeze_v11", [n("Unsqueeze", ["x"], axes=[0, 3])], {"x": (3, 4)}, opset=11),
    Case("unsqueeze_v13", [n("Unsqueeze", ["x", "a"])], {"x": (3, 4)}, inits={"a": i64(1)}, opset=13),
    Case("transpose", [n("Transpose", ["x"], perm=[0, 2, 3, 1])], X4, int8=True),
    Case("transpose_default", [n("Transpose", ["x"])], {"x": (2, 3, 4)}),
    Case("concat", [n("Concat", ["x", "z"], axis=1)], {"x": (1, 2, 4, 4), "z": (1, 3, 4, 4)}, int8=True),
    Case("concat_neg_axis", [n("Concat", ["x", "z"], axis=-1)], {"x": (2, 3), "z": (2, 5)}),
    Case(
        "split_v11", [n("Split", ["x"], ["y", "y2"], axis=1, split=[1, 2])], X4, outputs=["y", "y2"], opset=11
    ),
    Case(
        "split_v13",
        [n("Split", ["x", "s"], ["y", "y2"], axis=-1)],
        {"x": (2, 6)},
        inits={"s": i64(2, 4)},
        outputs=["y", "y2"],
        opset=13,
    ),
    Case(
        "split_v18",
        [n("Split", ["x"], ["y", "y2", "y3"], axis=0, num_outputs=3)],
        {"x": (6, 2)},
        outputs=["y", "y2", "y3"],
        opset=18,
    ),
    Case("slice_v1", [n("Slice", ["x"], starts=[1, 0], ends=[3, 2], axes=[0, 2])], {"x": (4, 3, 4)}, opset=9),
    Case(
        "slice_v13",
        [n("Slice", ["x", "s", "e", "a"])],
        X4,
        inits={"s": i64(1, 2), "e": i64(100, -1), "a": i64(2, 3)},
        opset=13,
        int8=True,
    ),
    Case(
        "slice_steps",
        [n("Slice", ["x", "s", "e", "a", "t"])],
        {"x": (5, 6)},
        inits={"s": i64(-1, 0), "e": i64(-100, 6), "a": i64(0, 1), "t": i64(-2, 3)},
    ),
    Case("pad_constant", [n("Pad", ["x", "p"])], X4, inits={"p": i64(0, 0, 1, 2, 0, 0, 2, 1)}, int8=True),
    Case(
        "pad_value",
        [n("Pad", ["x", "p", "v"])],
        {"x": (2, 3)},
        inits={"p": i64(1, 0, 0, 2), "v": f32(1.5).reshape(())},
    ),
    Case("pad_reflect", [n("Pad", ["x", "p"], mode="reflect")], X4, inits={"p": i64(0, 0, 1, 2, 0, 0, 2, 1)}),
    # edge / wrap: one GATHER per padded axis (kornia's replicate-padded spatial gradients, KeyNet)
    Case(
        "pad_edge",
        [n("Pad", ["x", "p"], mode="edge")],
        X4,
        inits={"p": i64(0, 1, 1, 3, 0, 0, 2, 1)},
        int8=True,
    ),
    Case("pad_wrap", [n("Pad", ["x", "p"], mode="wrap")], X4, inits={"p": i64(0, 0, 2, 1, 0, 0, 1, 3)}),
    Case("pad_v2_attrs", [n("Pad", ["x"], pads=[0, 1, 1, 0], value=0.5)], {"x": (2, 3)}, opset=2),
    Case(
        "pad_v18_axes",
        [n("Pad", ["x", "p", "", "a"])],
        {"x": (2, 3, 4)},
        inits={"p": i64(1, 2, 0, 1), "a": i64(0, 2)},
        opset=18,
    ),
    Case(
        "gather", [n("Gather", ["x", "i"], axis=1)], {"x": (2, 5, 3)}, inits={"i": i64(4, 0, -1)}, int8=True
    ),
    Case(
        "gather_scalar",
        [n("Gather", ["x", "i"], axis=0)],
        {"x": (4, 3)},
        inits={"i": np.asarray(2, np.int64)},
    ),
    Case(
        "resize_nearest_asym",
        [
            n(
                "Resize",
                ["x", "", "sc"],
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
        ],
        X4,
        inits={"sc": f32(1, 1, 2, 2)},
        int8=True,
    ),
    Case(
        "resize_nearest_default",
        [n("Resize", ["x", "", "sc"], mode="nearest")],
        X4,
        inits={"sc": f32(1, 1, 2, 2)},
    ),
    Case(
        "resize_bilinear_half_pixel",
        [n("Resize", ["x", "", "", "sz"], mode="linear")],
        X4,
        inits={"sz": i64(1, 3, 12, 16)},
        int8=True,
    ),
    Case(
        "resize_bilinear_align",
        [n("Resize", ["x", "", "", "sz"], mode="linear", coordinate_transformation_mode="align_corners")],
        X4,
        inits={"sz": i64(1, 3, 13, 5)},
    ),
    Case(
        "resize_v10", [n("Resize", ["x", "sc"], mode="nearest")], X4, inits={"sc": f32(1, 1, 2, 3)}, opset=10
    ),
    # Resizes TFLite's kernels do not compute: lowered to GATHERs (+ MUL/ADD by constant weights)
    # antialiased downscaling (Resize-18): the filter stretched over 1 / scale taps (torch antialias=True)
    Case(
        "resize_linear_antialias",
        [n("Resize", ["x", "", "sc"], mode="linear", antialias=1)],
        {"x": (1, 3, 12, 10)},
        inits={"sc": f32(1, 1, 0.5, 0.6)},
    ),
    Case(
        "resize_cubic_antialias_sizes",
        [
            n(
                "Resize",
                ["x", "", "", "sz"],
                mode="cubic",
                antialias=1,
                coordinate_transformation_mode="pytorch_half_pixel",
            )
        ],
        {"x": (1, 2, 15, 9)},
        inits={"sz": i64(1, 2, 4, 5)},
    ),
    Case(
        "resize_nearest_half_pixel_downsample",
        [n("Resize", ["x", "", "", "sz"], mode="nearest")],
        X4,
        inits={"sz": i64(1, 3, 5, 3)},
    ),
    Case(
        "resize_nearest_ceil_align_corners",
        [
            n(
                "Resize",
                ["x", "", "", "sz"],
                mode="nearest",
                coordinate_transformation_mode="align_corners",
                nearest_mode="ceil",
            )
        ],
        X4,
        inits={"sz": i64(1, 3, 11, 13)},
    ),
    Case(
        "resize_linear_scales_not_size_ratio",
        [n("Resize", ["x", "", "sc"], mode="linear")],
        X4,
        inits={"sc": f32(1, 1, 0.7, 1.3)},
    ),
    Case(
        "resize_linear_pytorch_half_pixel_to_one",
        [
            n(
                "Resize",
                ["x", "", "", "sz"],
                mode="linear",
                coordinate_transformation_mode="pytorch_half_pixel",
            )
        ],
        X4,
        inits={"sz": i64(1, 3, 1, 5)},
    ),
    Case(
        "resize_cubic",
        [n("Resize", ["x", "", "sc"], mode="cubic")],
        X4,
        inits={"sc": f32(1, 1, 1.5, 0.75)},
    ),
    Case(
        "resize_cubic_exclude_outside_axes",
        [n("Resize", ["x", "", "", "sz"], mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5, axes=[3])],
        X4,
        inits={"sz": i64(12)},
    ),
    Case(
        "resize_crop_and_resize_extrapolation",
        [
            n(
                "Resize",
                ["x", "roi", "", "sz"],
                mode="linear",
                coordinate_transformation_mode="tf_crop_and_resize",
                extrapolation_value=2.5,
            )
        ],
        X4,
        inits={"roi": f32(0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4), "sz": i64(1, 3, 6, 7)},
    ),
    Case(
        "resize_nearest_keep_aspect_not_larger",
        [
            n(
                "Resize",
                ["x", "", "", "sz"],
                mode="nearest",
                keep_aspect_ratio_policy="not_larger",
                axes=[2, 3],
            )
        ],
        {"x": (1, 2, 6, 8)},
        inits={"sz": i64(9, 9)},
    ),
    Case(
        "resize_rank3_linear",
        [n("Resize", ["x", "", "", "sz"], mode="linear")],
        {"x": (2, 3, 5)},
        inits={"sz": i64(2, 4, 9)},
    ),
    Case(
        "conv_transpose_group2",
        [n("ConvTranspose", ["x", "w", "b"], group=2, strides=[2, 2], pads=[1, 1, 0, 0])],
        {"x": (1, 4, 5, 5)},
        inits={"w": w(4, 3, 3, 3), "b": w(6)},
    ),
    Case(
        "conv_transpose_dilated",
        [n("ConvTranspose", ["x", "w"], dilations=[2, 3], pads=[1, 0, 2, 1])],
        {"x": (1, 2, 4, 5)},
        inits={"w": w(2, 3, 3, 2)},
    ),
    # pooling TFLite's kernels cannot express: per-axis GATHERs
    Case(
        "maxpool_3d_pads_strides",
        [n("MaxPool", ["x"], kernel_shape=[2, 3, 3], strides=[1, 2, 2], pads=[1, 1, 0, 0, 1, 1])],
        {"x": (1, 2, 4, 6, 7)},
    ),
    Case(
        "avgpool_3d_count_include_pad_ceil",
        [
            n(
                "AveragePool",
                ["x"],
                kernel_shape=[3, 2, 3],
                strides=[2, 2, 2],
                pads=[1, 1, 1, 1, 0, 0],
                count_include_pad=1,
                ceil_mode=1,
            )
        ],
        {"x": (1, 2, 5, 6, 7)},
    ),
    Case(
        "maxpool_2d_dilated_pads",
        [n("MaxPool", ["x"], kernel_shape=[3, 2], dilations=[2, 3], pads=[2, 1, 1, 1])],
        X4,
    ),
    Case(
        "avgpool_2d_dilated_pads",
        [n("AveragePool", ["x"], kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 2, 1, 2], strides=[2, 1])],
        X4,
    ),
    Case(
        "conv_transpose_1d",
        [n("ConvTranspose", ["x", "w", "b"], strides=[2], pads=[1, 0], output_padding=[1])],
        {"x": (1, 3, 6)},
        inits={"w": w(3, 2, 3), "b": w(2)},
        int8=True,
    ),
    Case(
        "split_empty_part_then_concat",
        [n("Split", ["x", "s"], ["a", "b"], axis=2), n("Concat", ["b", "a"], axis=2)],
        {"x": (2, 3, 4)},
        inits={"s": i64(4, 0)},
    ),
    # softmax and normalisation (opset-specific semantics)
    Case("softmax_v11_axis1_4d", [n("Softmax", ["x"])], {"x": (1, 5, 2, 2)}, opset=11),
    Case("softmax_v11_axis_last", [n("Softmax", ["x"], axis=2)], {"x": (2, 3, 4)}, opset=11),
    Case("softmax_v13_axis1_4d", [n("Softmax", ["x"], axis=1)], {"x": (1, 5, 2, 2)}, opset=13),
    Case("softmax_v13_default", [n("Softmax", ["x"])], {"x": (2, 3, 4)}, opset=13, int8=True),
    Case("log_softmax_v11", [n("LogSoftmax", ["x"])], {"x": (2, 3, 4)}, opset=11),
    Case("log_softmax_v13", [n("LogSoftmax", ["x"], axis=1)], {"x": (2, 3, 4)}, opset=13),
    Case(
        "layer_norm",
        [n("LayerNormalization", ["x", "g", "b"], axis=-1, epsilon=1e-5)],
        {"x": (2, 3, 8)},
        inits={"g": w(8), "b": w(8)},
        opset=17,
    ),
    Case(
        "layer_norm_two_axes",
        [n("LayerNormalization", ["x", "g"], axis=1)],
        {"x": (2, 3, 4)},
        inits={"g": w(3, 4)},
        opset=17,
    ),
    Case(
        "instance_norm",
        [n("InstanceNormalization", ["x", "s", "b"], epsilon=1e-3)],
        X4,
        inits={"s": w(3), "b": w(3)},
        opset=11,
    ),
    Case(
        "instance_norm_rank3",
        [n("InstanceNormalization", ["x", "s", "b"])],
        {"x": (2, 4, 6)},
        inits={"s": np.ones(4, np.float32), "b": np.zeros(4, np.float32)},
        opset=11,
    ),
    # GroupNorm(2 groups) as torch.onnx exports it (SCRFD's heads): Reshape [N, G, -1], InstanceNormalization
    # with an identity affine, Reshape back, the per-channel Mul and Add
    Case(
        "group_norm_written_out",
        [
            n("Reshape", ["x", "grouped"], ["g"]),
            n("InstanceNormalization", ["g", "ones", "zeros"], ["in"]),
            n("Reshape", ["in", "back"], ["r"]),
            n("Mul", ["r", "gamma"], ["m"]),
            n("Add", ["m", "beta"]),
        ],
        {"x": (1, 4, 5, 6)},
        inits={
            "grouped": i64(0, 2, -1),
            "ones": np.ones(2, np.float32),
            "zeros": np.zeros(2, np.float32),
            "back": i64(1, 4, 5, 6),
            "gamma": w(4, 1, 1),
            "beta": w(4, 1, 1),
        },
        opset=11,
    ),
    # the same GroupNorm with the normalisation written out (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div over the
    # group's values), as exporters without InstanceNormalization write it, and an InstanceNorm over H and W
    Case(
        "group_norm_reduce_mean",
        [
            n("Reshape", ["x", "grouped"], ["g"]),
            n("ReduceMean", ["g"], ["mean"], axes=[-1]),
            n("Sub", ["g", "mean"], ["d"]),
            n("Pow", ["d", "two"], ["sq"]),
            n("ReduceMean", ["sq"], ["var"], axes=[-1]),
            n("Add", ["var", "eps"], ["ve"]),
            n("Sqrt", ["ve"], ["std"]),
            n("Div", ["d", "std"], ["nd"]),
            n("Reshape", ["nd", "back"], ["r"]),
            n("Mul", ["r", "gamma"], ["m"]),
            n("Add", ["m", "beta"]),
        ],
        {"x": (1, 4, 5, 6)},
        inits={
            "grouped": i64(0, 2, -1),
            "two": np.float32(2.0),
            "eps": np.float32(1e-5),
            "back": i64(1, 4, 5, 6),
            "gamma": w(4, 1, 1),
            "beta": w(4, 1, 1),
        },
        opset=13,
    ),
    Case(
        "instance_norm_reduce_mean",
        [
            n("ReduceMean", ["x"], ["mean"], axes=[2, 3]),
            n("Sub", ["x", "mean"], ["d"]),
            n("Pow", ["d", "two"], ["sq"]),
            n("ReduceMean", ["sq"], ["var"], axes=[2, 3]),
            n("Add", ["var", "eps"], ["ve"]),
            n("Sqrt", ["ve"], ["std"]),
            n("Div", ["d", "std"]),
        ],
        X4,
        inits={"two": np.float32(2.0), "eps": np.float32(1e-5)},
        opset=13,
    ),
    Case(
        "batchnorm",
        [n("BatchNormalization", ["x", "s", "b", "m", "v"])],
        X4,
        inits={"s": w(3), "b": w(3), "m": w(3), "v": np.abs(w(3)) + 0.1},
        int8=True,
    ),
    Case(
        "batchnorm_2d",
        [n("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)],
        {"x": (2, 3)},
        inits={"s": w(3), "b": w(3), "m": w(3), "v": np.abs(w(3)) + 0.1},
    ),
    Case("depth_to_space", [n("DepthToSpace", ["x"], blocksize=2)], {"x": (1, 8, 2, 3)}),
    Case("space_to_depth", [n("SpaceToDepth", ["x"], blocksize=2)], {"x": (1, 2, 4, 6)}),
    Case("depth_to_space_crd", [n("DepthToSpace", ["x"], blocksize=2, mode="CRD")], {"x": (1, 8, 2, 3)}),
    Case("argmax_keepdims", [n("ArgMax", ["x"], axis=1)], {"x": (2, 5, 3)}),
    # Floor makes ties, so the first and the last extremum differ.
    Case(
        "argmax_select_last_index",
        [n("Floor", ["x"], ["f"]), n("ArgMax", ["f"], axis=1, select_last_index=1)],
        {"x": (2, 5, 3)},
    ),
    Case(
        "argmin_select_last_index_no_keepdims",
        [n("Floor", ["x"], ["f"]), n("ArgMin", ["f"], axis=-1, keepdims=0, select_last_index=1)],
        {"x": (2, 3, 6)},
    ),
    # CLIP's text pooling: hidden[arange(B), argmax(ids == eos)] as ArgMax + row offset from Shape, Gather
    Case(
        "argmax_plus_shape_offset_gather",
        [
            n("ArgMax", ["x"], ["a"], axis=-1, keepdims=0),
            n("Shape", ["h"], ["s"]),
            n("Gather", ["s", "one"], ["len"], axis=0),
            n("Mul", ["rows", "len"], ["off"]),
            n("Add", ["a", "off"], ["i"]),
            n("Flatten", ["h"], ["f"], axis=2),
            n("Gather", ["f", "i"], axis=0),
        ],
        {"x": (2, 5), "h": (2, 5, 4)},
        inits={"one": np.array(1, np.int64), "rows": i64(0, 1)},
    ),
    Case("argmin_last_axis", [n("ArgMin", ["x"], axis=-1, keepdims=0)], {"x": (2, 5, 3)}),
    Case(
        "conv_then_reduce_spatial",
        [n("Conv", ["x", "w"], ["c"]), n("ReduceMean", ["c"], axes=[2, 3], keepdims=0)],
        X4,
        inits={"w": w(4, 3, 1, 1)},
        opset=13,
    ),
    Case(
        "conv_then_reduce_channels",
        [n("Conv", ["x", "w"], ["c"]), n("ReduceMax", ["c"], axes=[1], keepdims=0)],
        X4,
        inits={"w": w(4, 3, 1, 1)},
        opset=13,
    ),
    Case(
        "conv_then_concat_pad_prelu",
        [
            n("Conv", ["x", "w"], ["c"]),
            n("Concat", ["c", "c"], ["cc"], axis=1),
            n("Pad", ["cc", "p"], ["pp"]),
            n("PRelu", ["pp", "s"]),
        ],
        X4,
        inits={"w": w(4, 3, 1, 1), "p": i64(0, 0, 1, 0, 0, 0, 0, 2), "s": w(8, 1, 1)},
    ),
    Case(
        "identity_dropout",
        [
            n("Identity", ["x"], ["a"]),
            n("Dropout", ["a"]),
        ],
        {"x": (2, 3)},
        outputs=["y"],
    ),
    # training mode with ratio 0 keeps every value: the identity (the onnx test_training_dropout_zero_ratio)
    Case(
        "training_dropout_zero_ratio",
        [n("Dropout", ["x", "r", "t"])],
        {"x": (2, 3)},
        inits={"r": f32(0.0).reshape(()), "t": np.array(True)},
    ),
    Case("cast_float", [n("Cast", ["x"], to=1)], {"x": (2, 3)}),
    Case("expand", [n("Expand", ["x", "s"])], {"x": (3, 1)}, inits={"s": i64(2, 3, 4)}),
    Case("tile", [n("Tile", ["x", "r"])], {"x": (2, 3)}, inits={"r": i64(2, 1)}),
]

# Ops TFLite has no builtin for, written exactly with its builtins (ops_math.py, ops_index.py, ops_einsum.py).
# Integer and boolean values are computed in the graph (ArgMax, Cast, comparisons): the inputs are float.
CASES += [
    Case("softplus", [n("Softplus", ["x"])], {"x": (2, 3, 4)}, low=-30, high=30),
    Case("mish", [n("Mish", ["x"])], {"x": (2, 3, 4)}, opset=18, low=-6, high=6),
    # YOLOv4's exports write Mish out as x * tanh(softplus(x))
    Case(
        "mish_pattern",
        [n("Softplus", ["x"], ["sp"]), n("Tanh", ["sp"], ["t"]), n("Mul", ["x", "t"])],
        {"x": (1, 3, 4, 4)},
        low=-6,
        high=6,
    ),
    Case("softsign", [n("Softsign", ["x"])], {"x": (2, 3, 4)}, low=-5, high=5),
    Case("selu", [n("Selu", ["x"])], {"x": (2, 3, 4)}),
    Case("selu_attrs", [n("Selu", ["x"], alpha=0.5, gamma=2.0)], {"x": (2, 3, 4)}),
    Case("celu", [n("Celu", ["x"], alpha=0.5)], {"x": (2, 3, 4)}, opset=12),
    Case("thresholded_relu", [n("ThresholdedRelu", ["x"], alpha=0.5)], {"x": (2, 3, 4)}),
    Case("sign", [n("Round", ["x"], ["r"]), n("Sign", ["r"])], {"x": (2, 3, 4)}),
    # halves exactly (floor(4x) / 2): round half to even
    Case(
        "round_half_to_even",
        [
            n("Mul", ["x", "four"], ["m"]),
            n("Floor", ["m"], ["f"]),
            n("Mul", ["f", "half"], ["h"]),
            n("Round", ["h"]),
        ],
        {"x": (4, 8)},
        inits={"four": f32(4.0), "half": f32(0.5)},
        low=-3,
        high=3,
    ),
    Case(
        "mod_fmod",
        [n("Mod", ["x", "c"], fmod=1)],
        {"x": (3, 4)},
        inits={"c": f32(0.7, -1.3, 2.0, -0.4)},
        low=-5,
        high=5,
    ),
    Case(
        "mod_int_floor",
        [
            n("Mul", ["x", "ten"], ["m"]),
            n("Floor", ["m"], ["f"]),
            n("Cast", ["f"], ["i"], to=7),
            n("Mod", ["i", "c"], ["r"]),
            n("Cast", ["r"], to=1),
        ],
        {"x": (3, 4)},
        inits={"ten": f32(10.0), "c": i64(3, -4, 5, -7)},
    ),
    Case("is_nan", [n("Log", ["x"], ["l"]), n("IsNaN", ["l"], ["b"]), n("Cast", ["b"], to=1)], {"x": (3, 4)}),
    *[
        Case(
            f"is_inf_{pos}{neg}",
            [
                n("Floor", ["z"], ["f"]),
                n("Div", ["x", "f"], ["d"]),
                n("IsInf", ["d"], ["b"], detect_positive=pos, detect_negative=neg),
                n("Cast", ["b"], to=1),
            ],
            {"x": (4, 6), "z": (4, 6)},
        )
        for pos, neg in ((1, 1), (1, 0), (0, 1))
    ],
    Case("mean3", [n("Mean", ["x", "z", "x"])], {"x": (2, 3), "z": (3,)}),
    Case(
        "xor",
        [
            n("Greater", ["x", "zero"], ["a"]),
            n("Less", ["z", "half"], ["b"]),
            n("Xor", ["a", "b"], ["c"]),
            n("Cast", ["c"], to=1),
        ],
        {"x": (3, 4), "z": (3, 4)},
        inits={"zero": f32(0.0), "half": f32(0.5)},
    ),
    Case(
        "reduce_log_sum_exp_v13",
        [n("ReduceLogSumExp", ["x"], axes=[1], keepdims=0)],
        {"x": (2, 5, 4)},
        opset=13,
        low=-100,
        high=100,
    ),
    Case(
        "reduce_log_sum_exp_v18",
        [n("ReduceLogSumExp", ["x", "a"], keepdims=1)],
        {"x": (2, 5, 4)},
        inits={"a": i64(-1, 0)},
        opset=18,
    ),
    Case("reduce_log_sum_v13", [n("ReduceLogSum", ["x"], axes=[2])], {"x": (2, 3, 4)}, opset=13, low=0.1),
    Case("reduce_l1_v18", [n("ReduceL1", ["x"], keepdims=0)], {"x": (2, 3, 4)}, opset=18),
    Case("lp_norm_p2", [n("LpNormalization", ["x"], axis=1)], {"x": (2, 5, 3)}),
    Case("lp_norm_p1", [n("LpNormalization", ["x"], p=1)], {"x": (2, 5, 3)}),
    # Caffe's AlexNet / GoogLeNet LRN (ONNX zoo, opsets 7-9); a large alpha so the normalization is visible
    Case("lrn_size5", [n("LRN", ["x"], size=5, alpha=0.5, beta=0.75, bias=1.0)], {"x": (1, 7, 4, 5)}),
    Case("lrn_size3", [n("LRN", ["x"], size=3, alpha=2.0, beta=0.5, bias=2.0)], {"x": (2, 4, 3, 6)}),
    Case(
        "gather_elements_const",
        [n("GatherElements", ["x", "i"], axis=1)],
        {"x": (2, 5, 3)},
        inits={"i": np.array([[[4, 0, -1], [1, 1, 2]], [[0, -5, 3], [2, 2, 2]]], np.int64)},
    ),
    # indices computed at run time (a detector's decode: the best anchor's box)
    Case(
        "gather_elements_runtime",
        [n("ArgMax", ["z"], ["i"], axis=-1, keepdims=1), n("GatherElements", ["x", "i"], axis=-1)],
        {"x": (2, 3, 6), "z": (2, 3, 6)},
    ),
    Case(
        "gather_nd_const",
        [n("GatherND", ["x", "i"])],
        {"x": (3, 4, 5)},
        inits={"i": np.array([[2, 1], [0, -1], [-3, 3]], np.int64)},
    ),
    Case(
        "gather_nd_batch_dims",
        [n("GatherND", ["x", "i"], batch_dims=1)],
        {"x": (2, 4, 5)},
        inits={"i": np.array([[[3], [0]], [[1], [-1]]], np.int64)},
    ),
    Case(
        "gather_nd_runtime_batch_dims",
        [
            n("ArgMax", ["z"], ["i"], axis=-1, keepdims=1),
            n("GatherND", ["x", "i"], batch_dims=1),
        ],
        {"x": (3, 6, 2), "z": (3, 6)},
    ),
    # YOLOv5-era Detect: y[..., 0:2] = (sigmoid(y[..., 0:2]) * 2 - 0.5) written in place with ScatterND
    Case(
        "scatter_nd_slice_in_place",
        [
            n("Slice", ["x", "s", "e", "a"], ["sl"]),
            n("Sigmoid", ["sl"], ["u"]),
            n("ScatterND", ["x", "i", "u"]),
        ],
        {"x": (1, 3, 4, 6)},
        inits={
            "s": i64(0),
            "e": i64(2),
            "a": i64(3),
            "i": np.stack(np.meshgrid(*[np.arange(d) for d in (1, 3, 4, 2)], indexing="ij"), -1).astype(
                np.int64
            ),
        },
    ),
    Case(
        "scatter_nd_rows_add_duplicates",
        [n("ScatterND", ["x", "i", "z"], reduction="add")],
        {"x": (5, 3), "z": (3, 3)},
        inits={"i": np.array([[1], [3], [1]], np.int64)},
        opset=16,
    ),
    # repeated indices: applied in rounds (each round's indices distinct)
    *[
        Case(
            f"scatter_nd_{reduction}_duplicates",
            [n("ScatterND", ["x", "i", "z"], reduction=reduction)],
            {"x": (4, 3), "z": (4,)},
            inits={"i": np.array([[0, 2], [3, 1], [0, 2], [0, 2]], np.int64)},
            opset=18,
        )
        for reduction in ("max", "min", "mul")
    ],
    Case(
        "scatter_nd_rows_none",
        [n("ScatterND", ["x", "i", "z"])],
        {"x": (5, 3), "z": (2, 3)},
        inits={"i": np.array([[4], [-5]], np.int64)},
    ),
    # torch's dynamo exporter writes select_scatter (LightGlue's assignment border) as a ScatterElements
    Case(
        "scatter_elements_select_scatter",
        [n("ScatterElements", ["x", "i", "z"], axis=2)],
        {"x": (1, 5, 6), "z": (1, 5, 1)},
        inits={"i": np.full((1, 5, 1), -1, np.int64)},
    ),
    # TabNet's categorical columns: float values cast to ids of an embedding table; a negative id counts from the
    # end in ONNX, and TFLite's GATHER refuses it (the indices are wrapped first)
    Case(
        "gather_ids_cast_from_float",
        [n("Cast", ["x"], ["ids"], to=7), n("Gather", ["t", "ids"], ["y"])],
        {"x": (2, 5)},
        inits={"t": np.arange(24, dtype=np.float32).reshape(8, 3)},
    ),
    # torch's scatter_add / scatter_reduce (torch_geometric's aggregation): ScatterElements over full coordinates
    Case(
        "scatter_elements_axis0_add_duplicates",
        [n("ScatterElements", ["x", "i", "z"], axis=0, reduction="add")],
        {"x": (5, 3), "z": (4, 3)},
        inits={"i": np.array([[1, 0, 4], [3, 3, 4], [1, 0, -1], [1, 2, 0]], np.int64)},
        opset=16,
    ),
    Case(
        "scatter_elements_axis1_none",
        [n("ScatterElements", ["x", "i", "z"], axis=1)],
        {"x": (3, 6), "z": (3, 2)},
        inits={"i": np.array([[0, 5], [-1, 2], [3, 1]], np.int64)},
        opset=13,
    ),
    *[
        Case(
            f"scatter_elements_{reduction}_duplicates",
            [n("ScatterElements", ["x", "i", "z"], axis=0, reduction=reduction)],
            {"x": (4, 2), "z": (5, 2)},
            inits={"i": np.array([[0, 2], [3, 1], [0, 2], [0, 0], [3, 1]], np.int64)},
            opset=18,
        )
        for reduction in ("max", "min", "mul")
    ],
    Case(
        "topk_axis1_largest",
        [n("TopK", ["x", "k"], ["y", "idx"], axis=1)],
        {"x": (2, 6, 3)},
        inits={"k": i64(3)},
        outputs=["y", "idx"],
        opset=11,
    ),
    Case(
        "topk_smallest_ties",
        [n("Round", ["x"], ["r"]), n("TopK", ["r", "k"], ["y", "idx"], largest=0)],
        {"x": (3, 8)},
        inits={"k": i64(4)},
        outputs=["y", "idx"],
        opset=11,
    ),
    Case("topk_v1", [n("TopK", ["x"], ["y", "idx"], k=2)], {"x": (3, 5)}, outputs=["y", "idx"], opset=9),
    Case(
        "trilu_upper",
        [n("Trilu", ["x", "k"])],
        {"x": (2, 4, 5)},
        inits={"k": np.array(1, np.int64)},
        opset=14,
    ),
    Case(
        "trilu_lower",
        [n("Trilu", ["x", "k"], upper=0)],
        {"x": (2, 5, 4)},
        inits={"k": np.array(-1, np.int64)},
        opset=14,
    ),
    Case(
        "one_hot_runtime_indices",
        [n("ArgMax", ["x"], ["i"], axis=1, keepdims=0), n("OneHot", ["i", "d", "v"], axis=1)],
        {"x": (3, 4, 2)},
        inits={"d": i64(5), "v": f32(-1.0, 3.0)},
    ),
    Case(
        "one_hot_const_negative",
        [n("OneHot", ["i", "d", "v"], ["o"]), n("Add", ["o", "x"])],
        {"x": (2, 3, 4)},
        inits={"i": np.array([[0, -1, 2], [-4, 3, 1]], np.int64), "d": i64(4), "v": f32(0.0, 1.0)},
    ),
    Case("hardmax_v13", [n("Hardmax", ["x"], axis=1)], {"x": (2, 5, 3)}, opset=13),
    Case("hardmax_v11_flatten", [n("Hardmax", ["x"])], {"x": (2, 3, 4)}, opset=11),
    Case(
        "einsum_attention_scores",
        [n("Einsum", ["x", "z"], equation="bhqd,bhkd->bhqk")],
        {"x": (1, 2, 3, 4), "z": (1, 2, 5, 4)},
        int8=True,
    ),
    Case(
        "einsum_attention_context",
        [n("Einsum", ["x", "z"], equation="bhqk,bhkd->bhqd")],
        {"x": (1, 2, 3, 5), "z": (1, 2, 5, 4)},
        int8=True,
    ),
    Case(
        "einsum_bmm",
        [n("Einsum", ["x", "z"], equation="bij,bjk->bik")],
        {"x": (2, 3, 4), "z": (2, 4, 5)},
        int8=True,
    ),
    Case(
        "einsum_weight_ellipsis",
        [n("Einsum", ["x", "w"], equation="...i,ij->...j")],
        {"x": (2, 3, 4)},
        inits={"w": w(4, 6)},
        int8=True,
    ),
    Case("einsum_outer_implicit", [n("Einsum", ["x", "z"], equation="i,j")], {"x": (3,), "z": (4,)}),
    Case("einsum_transpose_sum", [n("Einsum", ["x"], equation="bij->jb")], {"x": (2, 3, 4)}),
    Case(
        "einsum_sum_one_operand_label",
        [n("Einsum", ["x", "z"], equation="bnd,bmd->bn")],
        {"x": (2, 3, 4), "z": (2, 5, 4)},
    ),
]
CASES += [
    Case(
        "cast_like",
        [n("Cast", ["x"], ["i"], to=6), n("CastLike", ["i", "x"])],
        {"x": (2, 3)},
        opset=15,
        low=-5,
        high=5,
    ),
]
