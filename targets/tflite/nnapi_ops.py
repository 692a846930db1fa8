"""Per-operator rules of the TFLite NNAPI delegate, one small function per builtin op.

Each rule mirrors one ``case`` of ``NNAPIDelegateKernel::Validate`` in TensorFlow's
``tensorflow/lite/delegates/nnapi/nnapi_delegate.cc`` (read from the TensorFlow master of 2024/2025;
the rules are re-written here, not copied). The delegate compares against Android SDK numbers; here
they are NNAPI feature levels: kMinSdkVersionForNNAPI11 (API 28) is level 2, ...NNAPI12 (API 29)
level 3, ...NNAPI13 (API 30) level 4, kNNAPIRuntimeFeatureLevel5..8 levels 5..8.

Besides ``Validate``, the delegate can still fail while it builds the NNAPI model
(``NNAPIDelegateKernel::AddOpsAndTensors`` / ``NNAPIOpBuilder::AddTensor``) for operand types NNAPI
does not accept; ``nnapi.operand_rules`` covers those (int8 below level 4, per-channel quantization
placement, fused activations, tensor types). The delegate's options are taken at their defaults
(``disallow_nnapi_cpu`` true, no accelerator name, ``allow_dynamic_dimensions`` false), under which
``is_accelerator_specified`` is true from feature level 3 (``ShouldUseTargetDevices``).
"""

from __future__ import annotations

from edgekit.targets.tflite.nnapi import (
    FEATURE_LEVEL_6,
    FEATURE_LEVEL_7,
    FLOAT,
    FLOAT_OR_QUANT8,
    NNAPI_1_1,
    NNAPI_1_2,
    NNAPI_1_3,
    QUANT8,
    Check,
    TensorView,
    is_hybrid,
    rule,
)


def _restricted_scales(c: Check) -> None:
    """NNAPI 1.0/1.1 quantized CONV/DEPTHWISE/FC need input_scale * filter_scale < output_scale."""
    x, w, y = c.op.input(0), c.op.input(1), c.op.outputs[0]
    if x is not None and w is not None:
        c.expect(
            x.scale * w.scale < y.scale,
            "below feature level 3 needs input_scale * filter_scale < output_scale",
        )


# --- elementwise arithmetic -------------------------------------------------------------------


@rule("ADD", "MUL")  # Validate: case kTfLiteBuiltinAdd / kTfLiteBuiltinMul
def _add_mul(c: Check) -> None:
    c.max_version(3 if c.op.name == "MUL" and c.accelerator_specified else 2)
    if c.level >= NNAPI_1_3:
        c.input0_in(("float32", "uint8", "int8", "int32"))
        if c.op.input(0) is not None and c.op.input(0).dtype == "int32":
            c.no_activation()
    else:
        c.input0_in(FLOAT_OR_QUANT8)
    c.ranks_at_most(4)


@rule("SUB")  # Validate: case kTfLiteBuiltinSub
def _sub(c: Check) -> None:
    c.max_version(3)
    dtype = c.op.input(0).dtype if c.op.input(0) else "missing"
    if not c.input0_in(("float32", "uint8", "int8", "int32")):
        return
    ok = (
        (c.level >= NNAPI_1_1 and dtype == "float32")
        or (c.level >= NNAPI_1_2 and dtype in QUANT8)
        or (c.level >= NNAPI_1_3 and dtype == "int32")
    )
    c.expect(
        ok, f"SUB on {dtype} needs a higher feature level than {c.level} (float32: 2, quant8: 3, int32: 4)"
    )
    if dtype == "int32":
        c.no_activation()
    c.ranks_at_most(4)


@rule("DIV")  # Validate: case kTfLiteBuiltinDiv
def _div(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_1)
    c.input0_in(FLOAT)
    c.ranks_at_most(4)


@rule("SQUARED_DIFFERENCE")  # Validate: case kTfLiteBuiltinSquaredDifference
def _squared_difference(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_1)
    if c.level >= NNAPI_1_3:
        c.input0_in(("float32", "uint8", "int8", "int32"))
    elif c.level >= NNAPI_1_2:
        c.input0_in(("float32", "uint8"))
    else:
        c.input0_in(FLOAT)
    c.ranks_at_most(4)


@rule("MAXIMUM", "MINIMUM")  # Validate: case kTfLiteBuiltinMaximum / Minimum
def _max_min(c: Check) -> None:
    c.max_version(3)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float32", "uint8", "int8", "int32"))
    for i in (0, 1):
        t = c.op.input(i)
        if t is not None and t.rank == 0:
            c.expect(t.constant, f"scalar input {i} must be constant")


@rule("POW", "ABS", "EXP", "LOG")  # Validate: case kTfLiteBuiltinAbs/Exp/Log/Pow
def _float_unary_l3(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.input0_in(FLOAT)


@rule("SQRT", "SIN", "COS")  # Validate: case kTfLiteBuiltinSqrt / Sin / Cos
def _float_trig(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.input0_in(FLOAT)


@rule("RSQRT")  # Validate: case kTfLiteBuiltinRsqrt
def _rsqrt(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.input0_in(FLOAT if c.level < FEATURE_LEVEL_7 else FLOAT_OR_QUANT8)


@rule("NEG")  # Validate: case kTfLiteBuiltinNeg
def _neg(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float32", "int32"))


@rule("FLOOR")  # Validate: case kTfLiteBuiltinFloor
def _floor(c: Check) -> None:
    c.max_version(1)


@rule("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL")  # Validate: comparisons
def _compare(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float32", "uint8", "int8", "bool", "int32"))


@rule("LOGICAL_OR", "LOGICAL_AND", "LOGICAL_NOT")  # Validate: case kTfLiteBuiltinLogical*
def _logical(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.input0_in(("bool",))


@rule("SELECT")  # Validate: case kTfLiteBuiltinSelect
def _select(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.dtype_in(c.op.input(1), ("float32", "int32", "uint8", "int8"), "value input")
    cond, value = c.op.input(0), c.op.input(1)
    if cond is not None and value is not None:
        c.expect(cond.shape == value.shape, "condition and value inputs must have the same shape")


@rule("CAST")  # Validate: case kTfLiteBuiltinCast
def _cast(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    allowed = ("float32", "int32", "uint8", "int8") if c.level >= NNAPI_1_3 else ("float32", "int32", "uint8")
    c.input0_in(allowed)
    c.dtype_in(c.op.outputs[0], allowed, "output")


# --- activations ------------------------------------------------------------------------------


@rule("RELU", "RELU_N1_TO_1", "RELU6", "LOGISTIC")  # Validate: case kTfLiteBuiltinRelu.../Logistic
def _relu_logistic(c: Check) -> None:
    c.max_version(2)
    c.input0_in(FLOAT_OR_QUANT8)


@rule("TANH")  # Validate: case kTfLiteBuiltinTanh
def _tanh(c: Check) -> None:
    c.max_version(2)
    x = c.op.input(0)
    dtype = x.dtype if x else "missing"
    c.expect(
        dtype == "float32" or (dtype in QUANT8 and c.level >= NNAPI_1_2),
        f"TANH on {dtype} needs float32, or quant8 at feature level >= 3",
    )


@rule("HARD_SWISH")  # Validate: case kTfLiteBuiltinHardSwish (lowered to MUL/ADD below level 4)
def _hard_swish(c: Check) -> None:
    c.input0_in(FLOAT_OR_QUANT8)


@rule("LEAKY_RELU", "PRELU")  # Validate: case kTfLiteBuiltinLeakyRelu / Prelu
def _prelu(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.input0_in(FLOAT_OR_QUANT8)


@rule("ELU")  # Validate: case kTfLiteBuiltinElu
def _elu(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_3)
    c.input0_in(FLOAT)


@rule("SOFTMAX")  # Validate: case kTfLiteBuiltinSoftmax
def _softmax(c: Check) -> None:
    c.max_version(2)
    c.input0_in(FLOAT_OR_QUANT8)
    c.dtype_in(c.op.outputs[0], FLOAT_OR_QUANT8, "output")
    rank = c.op.input(0).rank if c.op.input(0) else 0
    c.expect(rank <= 4, f"input rank {rank} > 4")
    if c.level < NNAPI_1_2:
        c.expect(rank in (2, 4), f"input rank {rank}: below feature level 3 only rank 2 and 4")


@rule("LOG_SOFTMAX")  # Validate: case kTfLiteBuiltinLogSoftmax
def _log_softmax(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.input0_in(FLOAT)


@rule("L2_NORMALIZATION")  # Validate: case kTfLiteBuiltinL2Normalization
def _l2_norm(c: Check) -> None:
    c.max_version(2)
    if c.level < NNAPI_1_2:
        c.input0_in(FLOAT)
        rank = c.op.input(0).rank if c.op.input(0) else 0
        c.expect(rank == 4, f"input rank {rank}: below feature level 3 only rank 4")
    c.no_activation()


@rule("LOCAL_RESPONSE_NORMALIZATION")  # Validate: case kTfLiteBuiltinLocalResponseNormalization
def _lrn(c: Check) -> None:
    c.max_version(1)


# --- convolution, pooling, dense --------------------------------------------------------------


@rule("CONV_2D")  # Validate: case kTfLiteBuiltinConv2d
def _conv_2d(c: Check) -> None:
    c.max_version(5)
    x, w = c.op.input(0), c.op.input(1)
    if c.level < NNAPI_1_2:
        c.expect(not is_hybrid(c.op), "hybrid (float input, quantized weights) needs feature level >= 3")
        c.input0_in(("float32", "uint8"))
        if w is not None:
            c.expect(not w.per_channel, "per-channel quantized weights need feature level >= 3")
        if x is not None and x.dtype == "uint8":
            _restricted_scales(c)
    c.expect(len(c.op.inputs) == 3, "CONV_2D without the bias input is not supported")
    if c.op.opt("dilationWFactor", 1) != 1 or c.op.opt("dilationHFactor", 1) != 1:
        c.expect(c.level >= NNAPI_1_2, f"dilated CONV_2D needs feature level >= 3, target is {c.level}")
    if c.level < NNAPI_1_2 and x is not None and w is not None and x.rank == 4 and w.rank == 4:
        c.expect(x.shape[3] == w.shape[3], "grouped convolution needs feature level >= 3")


@rule("DEPTHWISE_CONV_2D")  # Validate: case kTfLiteBuiltinDepthwiseConv2d
def _depthwise_conv_2d(c: Check) -> None:
    c.max_version(3)
    if c.level < NNAPI_1_2:
        c.input0_in(("float32", "uint8"))
        x = c.op.input(0)
        if x is not None and x.dtype == "uint8":
            _restricted_scales(c)
        dilated = c.op.opt("dilationWFactor", 1) != 1 or c.op.opt("dilationHFactor", 1) != 1
        c.expect(not dilated, f"dilated DEPTHWISE_CONV_2D needs feature level >= 3, target is {c.level}")


@rule("TRANSPOSE_CONV")  # Validate: case kTfLiteBuiltinTransposeConv
def _transpose_conv(c: Check) -> None:
    c.max_version(4)
    c.min_level(NNAPI_1_2)
    c.constant(0, "output shape")
    c.constant(1, "filter")


@rule("FULLY_CONNECTED")  # Validate: case kTfLiteBuiltinFullyConnected
def _fully_connected(c: Check) -> None:
    c.max_version(5)
    c.expect(c.op.outputs[0].dtype != "int16", "int16 output is not supported")
    x = c.op.input(0)
    if c.level < NNAPI_1_2:
        c.expect(not is_hybrid(c.op), "hybrid (float input, quantized weights) needs feature level >= 3")
        c.input0_in(("float32", "uint8"))
        if x is not None and x.dtype == "uint8":
            _restricted_scales(c)
    if c.op.opt("keepNumDims", False):
        c.expect(c.level >= NNAPI_1_3, f"keep_num_dims needs feature level >= 4, target is {c.level}")


@rule("AVERAGE_POOL_2D")  # Validate: case kTfLiteBuiltinAveragePool2d
def _average_pool(c: Check) -> None:
    c.max_version(2)
    c.input0_in(FLOAT_OR_QUANT8)
    x = c.op.input(0)
    if x is not None and x.dtype in QUANT8 and not c.accelerator_specified:
        window = int(c.op.opt("filterWidth", 0)) * int(c.op.opt("filterHeight", 0))
        c.expect(window <= 256, f"quantized filter window {window} > 256 overflows the reference CPU path")


@rule("MAX_POOL_2D")  # Validate: case kTfLiteBuiltinMaxPool2d
def _max_pool(c: Check) -> None:
    c.max_version(2)
    c.input0_in(FLOAT_OR_QUANT8)


@rule("L2_POOL_2D")  # Validate: case kTfLiteBuiltinL2Pool2d
def _l2_pool(c: Check) -> None:
    c.max_version(1)
    c.input0_in(FLOAT)
    if c.level < NNAPI_1_2:
        c.no_activation()


@rule("BATCH_MATMUL")  # Validate: case kTfLiteBuiltinBatchMatmul
def _batch_matmul(c: Check) -> None:
    c.max_version(2)
    c.min_level(FEATURE_LEVEL_6)
    a, b = c.op.input(0), c.op.input(1)
    c.input0_in(("float32", "int32", "int8"))
    if a is None or b is None:
        return
    c.expect(a.dtype == b.dtype, "hybrid BATCH_MATMUL (different input dtypes) is not supported")
    c.expect(2 <= a.rank <= 4, f"input rank {a.rank} not in 2..4")
    broadcast = a.rank != b.rank or a.shape[:-2] != b.shape[:-2]
    c.expect(not broadcast, "broadcasting BATCH_MATMUL is not supported")


# --- shape and data movement ------------------------------------------------------------------


@rule("RESHAPE")  # Validate: case kTfLiteBuiltinReshape
def _reshape(c: Check) -> None:
    c.max_version(1)
    c.input0_in(FLOAT_OR_QUANT8 if c.level < FEATURE_LEVEL_6 else (*FLOAT_OR_QUANT8, "int32"))
    x, y = c.op.input(0), c.op.outputs[0]
    c.expect(x is None or x.rank <= 4, f"input rank {x.rank if x else 0} > 4")
    c.expect(y.rank <= 4, f"output rank {y.rank} > 4")
    if len(c.op.inputs) >= 2:
        c.constant(1, "shape")
    else:
        shape_option = c.op.opt("newShape", None)
        new_shape = [] if shape_option is None else [int(d) for d in shape_option]
        rank = 0 if new_shape == [0] else len(new_shape)
        c.expect(rank > 0, "reshape to a scalar is not supported")


@rule("SQUEEZE")  # Validate: case kTfLiteBuiltinSqueeze
def _squeeze(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_1)
    if c.level == NNAPI_1_1:
        dims = c.op.opt("squeezeDims", None)
        c.expect(dims is not None and len(dims) > 0, "NNAPI 1.1 needs explicit squeeze_dims")


@rule("EXPAND_DIMS")  # Validate: case kTfLiteBuiltinExpandDims
def _expand_dims(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float32", "float16", "int32", "uint8", "int8"))
    axis = c.op.input(1)
    c.expect(axis is not None and axis.dtype == "int32" and axis.constant, "axis must be a constant int32")


@rule("CONCATENATION")  # Validate: case kTfLiteBuiltinConcatenation
def _concatenation(c: Check) -> None:
    c.max_version(2)
    c.no_activation()
    x = c.op.input(0)
    c.expect(x is None or x.rank <= 4, f"input rank {x.rank if x else 0} > 4")
    c.input0_in(("float16", "float32", "uint8", "int8"))
    if x is not None and x.dtype == "uint8" and c.level < NNAPI_1_2:
        same = all(t is not None and (t.scale, t.zero_point) == (x.scale, x.zero_point) for t in c.op.inputs)
        c.expect(same, "below feature level 3 all uint8 inputs need the same scale and zero point")


@rule("PACK")  # Validate: case kTfLiteBuiltinPack (lowered to CONCATENATION + RESHAPE)
def _pack(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_3)
    x = c.op.input(0)
    if c.level >= FEATURE_LEVEL_6:
        c.input0_in(("int32", "float32", "int8", "uint8"))
    else:
        c.input0_in(("float32", "int8"))
        axis = int(c.op.opt("axis", 0))
        c.expect(axis != -1 and (x is None or axis != x.rank), "packing along the last axis is not supported")


@rule("UNPACK")  # Validate: case kTfLiteBuiltinUnpack
def _unpack(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_3)
    c.input0_in(FLOAT_OR_QUANT8)
    rank = c.op.input(0).rank if c.op.input(0) else 0
    c.expect(1 < rank <= 4, f"input rank {rank} not in 2..4")
    axis = int(c.op.opt("axis", 0))
    c.expect(axis not in (-1, rank - 1), "unpacking along the last axis is not supported")


@rule("SPLIT")  # Validate: case kTfLiteBuiltinSplit (inputs: axis, value)
def _split(c: Check) -> None:
    c.max_version(3)
    c.min_level(NNAPI_1_2)
    allowed = ("float32", "uint8", "int8", "int32") if c.level >= NNAPI_1_3 else ("float32", "uint8", "int32")
    c.dtype_in(c.op.input(1), allowed)
    axis = c.op.input(0)
    c.expect(axis is not None and axis.dtype == "int32" and axis.constant, "axis must be a constant int32")


@rule("SPLIT_V")  # Validate: case kTfLiteBuiltinSplitV (inputs: value, size_splits, axis)
def _split_v(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_3)
    x, sizes, axis = c.op.input(0), c.op.input(1), c.op.input(2)
    c.dtype_in(x, ("float32", "uint8", "int8", "int32"))
    sizes_ok = sizes is not None and sizes.dtype == "int32" and sizes.rank == 1 and sizes.values() is not None
    axis_ok = axis is not None and axis.dtype == "int32" and axis.values() is not None
    c.expect(sizes_ok, "size_splits must be a constant int32 vector")
    c.expect(axis_ok, "axis must be a constant int32")
    if sizes_ok and axis_ok and x is not None:
        split = [int(v) for v in sizes.values().ravel()]
        dim = int(axis.values().ravel()[0]) % x.rank
        known = sum(v for v in split if v != -1)
        unknown = x.shape[dim] - known if -1 in split else -1
        c.expect(0 not in split and unknown != 0, "zero-sized splits are not supported")


@rule("TRANSPOSE")  # Validate: case kTfLiteBuiltinTranspose
def _transpose(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_1)
    c.expect(len(c.op.inputs) > 1, "the permutation input is missing")
    if len(c.op.inputs) > 1:
        c.constant(1, "permutation")


@rule("PAD", "PADV2")  # Validate: case kTfLiteBuiltinPad / Padv2
def _pad(c: Check) -> None:
    c.max_version(2)
    c.input0_in(FLOAT_OR_QUANT8)
    c.min_level(NNAPI_1_1)
    x = c.op.input(0)
    c.expect(x is None or 0 not in x.shape, "empty input tensors are not supported")
    c.expect(len(c.op.inputs) >= 2, "the paddings input is missing")
    if len(c.op.inputs) == 3:
        c.expect(c.level >= NNAPI_1_2, f"an explicit pad value needs feature level >= 3, target is {c.level}")
    elif c.level < NNAPI_1_2:
        c.input0_in(FLOAT)


@rule("MIRROR_PAD")  # Validate: case kTfLiteBuiltinMirrorPad
def _mirror_pad(c: Check) -> None:
    c.max_version(2)
    c.min_level(FEATURE_LEVEL_7)
    c.input0_in((*FLOAT_OR_QUANT8, "int32"))
    x = c.op.input(0)
    c.expect(x is None or 0 not in x.shape, "empty input tensors are not supported")
    c.expect(len(c.op.inputs) == 2, "expects 2 inputs")


@rule("SLICE")  # Validate: case kTfLiteBuiltinSlice
def _slice(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float32", "int32", "uint8", "int8"))
    c.dtype_in(c.op.input(1), ("int32",), "begin")
    c.dtype_in(c.op.input(2), ("int32",), "size")


@rule("STRIDED_SLICE")  # Validate: case kTfLiteBuiltinStridedSlice
def _strided_slice(c: Check) -> None:
    c.max_version(2)
    c.input0_in(FLOAT_OR_QUANT8)
    c.min_level(NNAPI_1_1)


@rule("GATHER")  # Validate: case kTfLiteBuiltinGather
def _gather(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float32", "float16", "int32", "uint8", "int8"))
    positions = c.op.input(1)
    c.dtype_in(positions, ("int32",), "positions")
    c.expect(positions is None or positions.rank != 0, "scalar positions are not supported")


@rule("TILE")  # Validate: case kTfLiteBuiltinTile
def _tile(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float32", "int8", "uint8", "int32"))
    c.dtype_in(c.op.input(1), ("int32",), "multipliers")


@rule("SPACE_TO_DEPTH")  # Validate: case kTfLiteBuiltinSpaceToDepth
def _space_to_depth(c: Check) -> None:
    c.max_version(2)
    c.input0_in(FLOAT_OR_QUANT8)


@rule("DEPTH_TO_SPACE")  # Validate: case kTfLiteBuiltinDepthToSpace
def _depth_to_space(c: Check) -> None:
    c.input0_in(FLOAT_OR_QUANT8)


@rule("SPACE_TO_BATCH_ND")  # Validate: case kTfLiteBuiltinSpaceToBatchNd
def _space_to_batch(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_1)


@rule("BATCH_TO_SPACE_ND")  # Validate: case kTfLiteBuiltinBatchToSpaceNd
def _batch_to_space(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_1)
    crops = c.op.input(2)
    values = crops.values() if crops is not None else None
    zero = values is not None and values.size == 4 and not values.any()
    c.expect(zero, "crops must be a constant with all four values 0")


@rule("RESIZE_BILINEAR")  # Validate: case kTfLiteBuiltinResizeBilinear
def _resize_bilinear(c: Check) -> None:
    c.max_version(3)
    x, y = c.op.input(0), c.op.outputs[0]
    c.expect(x is not None and x.rank == 4, "input must have rank 4")
    c.input0_in(FLOAT_OR_QUANT8)
    _resize_size_and_flags(c)
    if c.level < NNAPI_1_2:
        c.expect(
            y.rank == 4 and y.shape[1] == y.shape[2], "below feature level 3 output height must equal width"
        )
        c.input0_in(FLOAT)


@rule("RESIZE_NEAREST_NEIGHBOR")  # Validate: case kTfLiteBuiltinResizeNearestNeighbor
def _resize_nearest(c: Check) -> None:
    c.max_version(3)
    c.min_level(NNAPI_1_2)
    c.input0_in(FLOAT_OR_QUANT8)
    _resize_size_and_flags(c)


def _resize_size_and_flags(c: Check) -> None:
    c.expect(len(c.op.inputs) >= 2, "the size input is missing")
    if len(c.op.inputs) >= 2:
        c.constant(1, "size")
    if c.level <= NNAPI_1_2:
        c.expect(not c.op.opt("alignCorners", False), "align_corners needs feature level >= 4")
        c.expect(not c.op.opt("halfPixelCenters", False), "half_pixel_centers needs feature level >= 4")


@rule("FILL")  # Validate: case kTfLiteBuiltinFill
def _fill(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_3)
    dims, value = c.op.input(0), c.op.input(1)
    c.expect(dims is not None and dims.constant, "the dims input must be constant")
    c.dtype_in(dims, ("int32", "int64"), "dims")
    if dims is not None and dims.constant:
        c.expect(dims.shape[:1] != (0,), "filling a scalar is not supported")
        c.expect(_fits_int32(dims), "int64 dims must fit in int32")
    c.dtype_in(value, ("float32", "int32", "int64"), "value")
    if value is not None and value.constant:
        c.expect(_fits_int32(value), "an int64 value must fit in int32")


def _fits_int32(t: TensorView) -> bool:
    values = t.values()
    if t.dtype != "int64" or values is None:
        return True
    return bool(values.size == 0 or (values.min() >= -(2**31) and values.max() < 2**31))


@rule("REVERSE_V2")  # Validate: case kTfLiteBuiltinReverseV2
def _reverse(c: Check) -> None:
    c.max_version(3)
    c.min_level(FEATURE_LEVEL_7)
    c.input0_in((*FLOAT_OR_QUANT8, "int32"))
    c.expect(len(c.op.inputs) == 2, "expects 2 inputs")


# --- reductions, arg ops ----------------------------------------------------------------------


@rule("MEAN")  # Validate: case kTfLiteBuiltinMean
def _mean(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_1)
    c.input0_in(FLOAT_OR_QUANT8 if c.level >= NNAPI_1_2 else FLOAT)
    c.expect(c.op.outputs[0].rank > 0, "a scalar output is not supported")
    rank = c.op.input(0).rank if c.op.input(0) else 0
    c.expect(rank <= 4, f"input rank {rank} > 4")


@rule("REDUCE_MAX", "REDUCE_MIN")  # Validate: case kTfLiteBuiltinReduceMax / ReduceMin
def _reduce_max_min(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.input0_in(FLOAT_OR_QUANT8)
    c.expect(c.op.input(0) is None or c.op.input(0).rank != 0, "a scalar input is not supported")


@rule("SUM", "REDUCE_PROD")  # Validate: case kTfLiteBuiltinSum / ReduceProd
def _sum_prod(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.expect(c.op.outputs[0].rank != 0, "a scalar output is not supported")
    c.input0_in(FLOAT)


@rule("REDUCE_ANY")  # Validate: case kTfLiteBuiltinReduceAny
def _reduce_any(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.expect(c.op.outputs[0].rank != 0, "a scalar output is not supported")


@rule("ARG_MAX", "ARG_MIN")  # Validate: case kTfLiteBuiltinArgMax / ArgMin
def _arg_max_min(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float16", "float32", "int32", "uint8", "int8"))
    axis = c.op.input(1)
    if axis is not None and axis.dtype == "int64":
        c.expect(axis.constant and _fits_int32(axis), "an int64 axis must be a constant that fits in int32")
    else:
        c.dtype_in(axis, ("int32",), "axis")
    c.dtype_in(c.op.outputs[0], ("int32",), "output")


@rule("TOPK_V2")  # Validate: case kTfLiteBuiltinTopkV2
def _topk(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.input0_in(("float32", "int32", "uint8", "int8"))
    k = c.op.input(1)
    c.expect(k is not None and k.dtype == "int32" and k.constant, "k must be a constant int32")


# --- quantization -----------------------------------------------------------------------------


@rule("QUANTIZE")  # Validate: case kTfLiteBuiltinQuantize
def _quantize(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    x, y = c.op.input(0), c.op.outputs[0]
    c.input0_in(FLOAT_OR_QUANT8)
    if x is not None and x.dtype in QUANT8:
        c.expect(x.scale > 0, "input scale must be > 0")
    c.dtype_in(y, ("uint8",) if c.level < NNAPI_1_3 else QUANT8, "output")
    c.expect(y.scale > 0, "output scale must be > 0")


@rule("DEQUANTIZE")  # Validate: case kTfLiteBuiltinDequantize
def _dequantize(c: Check) -> None:
    x = c.op.input(0)
    if c.level >= NNAPI_1_3 and x is not None and x.dtype == "float16" and not x.constant:
        return  # fp16 -> fp32 dequantize is always taken from level 4
    c.max_version(2)
    if c.level < NNAPI_1_2:
        c.input0_in(("uint8",))
    else:
        c.input0_in(QUANT8)
        if c.level == NNAPI_1_2 and x is not None and x.dtype == "int8":
            c.expect(x.zero_point == 0, "at feature level 3 an int8 input must be symmetric (zero point 0)")


@rule("DENSIFY")  # Validate: case kTfLiteBuiltinDensify
def _densify(c: Check) -> None:
    c.min_level(NNAPI_1_3)
    c.constant(0, "sparse weights")


# --- recurrent and lookup ops -----------------------------------------------------------------


@rule("LSTM")  # Validate: case kTfLiteBuiltinLstm
def _lstm(c: Check) -> None:
    c.max_version(3)
    c.min_level(NNAPI_1_1)
    n = len(c.op.inputs)
    basic = n == 5
    if not basic:
        c.expect(c.level >= NNAPI_1_2 or not is_hybrid(c.op, 2), "hybrid LSTM needs feature level >= 3")
    weights = c.op.input(2 if basic else 4)
    wtype = weights.dtype if weights else "missing"
    if basic:
        c.expect(wtype == "uint8", "the basic LSTM kernel needs uint8 weights")
        x, y = c.op.input(0), c.op.outputs[0]
        for t, role in ((x, "input"), (y, "output")):
            c.expect(
                t is not None and (t.scale, t.zero_point) == (1 / 128, 128),
                f"{role} must be scale 1/128, zp 128",
            )
        c.constant(2, "weights")
        c.constant(3, "biases")
        return
    if n == 24:
        c.min_level(NNAPI_1_2)
    allowed = ("float32", "uint8", "int8") if c.level >= NNAPI_1_3 else ("float32", "uint8")
    c.expect(wtype in allowed, f"weights dtype {wtype} not in [{', '.join(allowed)}]")


@rule("UNIDIRECTIONAL_SEQUENCE_LSTM")  # Validate: case kTfLiteBuiltinUnidirectionalSequenceLstm
def _uni_lstm(c: Check) -> None:
    c.max_version(2)
    c.min_level(NNAPI_1_2)
    c.expect(not is_hybrid(c.op, 2), "the hybrid version is not supported")
    c.expect(len(c.op.inputs) in (20, 24), "only the 20- and 24-input variants are supported")


@rule("BIDIRECTIONAL_SEQUENCE_LSTM")  # Validate: case kTfLiteBuiltinBidirectionalSequenceLstm
def _bi_lstm(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.expect(not is_hybrid(c.op, 2), "the hybrid version is not supported")


@rule("UNIDIRECTIONAL_SEQUENCE_RNN")  # Validate: case kTfLiteBuiltinUnidirectionalSequenceRnn
def _uni_rnn(c: Check) -> None:
    c.max_version(1)
    c.min_level(NNAPI_1_2)
    c.expect(not is_hybrid(c.op, 1), "the hybrid version is not supported")


@rule("RNN")  # Validate: case kTfLiteBuiltinRnn
def _rnn(c: Check) -> None:
    c.max_version(1)
    c.expect(len(c.op.inputs) == 5, "expects 5 inputs")
    c.dtype_in(c.op.input(1), FLOAT, "weights")


@rule("SVDF")  # Validate: case kTfLiteBuiltinSvdf
def _svdf(c: Check) -> None:
    c.max_version(1)
    c.expect(len(c.op.inputs) == 5, "expects 5 inputs")
    c.dtype_in(c.op.input(1), FLOAT, "weights")
    c.min_level(NNAPI_1_1)


@rule("EMBEDDING_LOOKUP")  # Validate: case kTfLiteBuiltinEmbeddingLookup
def _embedding_lookup(c: Check) -> None:
    c.max_version(1)
    c.dtype_in(c.op.input(1), FLOAT, "values")


@rule("HASHTABLE_LOOKUP")  # Validate: case kTfLiteBuiltinHashtableLookup
def _hashtable_lookup(c: Check) -> None:
    c.max_version(1)
    c.dtype_in(c.op.outputs[0], FLOAT, "output")


@rule("LSH_PROJECTION")  # Validate: case kTfLiteBuiltinLshProjection
def _lsh_projection(c: Check) -> None:
    c.max_version(1)
    if c.op.opt("type", 0) == 2:  # LSHProjectionType.SPARSE
        c.min_level(NNAPI_1_2)
        c.expect(len(c.op.inputs) == 2, "sparse projection with weights is not supported")
