"""Options of the quantization pipeline (a frozen dataclass: what you pass is what runs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from edgekit.core.errors import QuantizationError

METHODS = ("minmax", "mean_minmax", "percentile", "entropy", "mse")
#: The methods that need histograms of the activations (the others reduce min/max inside the graph).
HISTOGRAM_METHODS = ("percentile", "entropy", "mse")
ACTIVATION_DTYPES = ("int8", "uint8")
#: How the static recipes round their int8 weights (:mod:`edgekit.quantize.gptq`).
WEIGHT_ROUNDINGS = ("nearest", "gptq")


@dataclass(frozen=True)
class QuantizeOptions:
    #: Activation type, asymmetric per tensor: ``uint8`` (the default: a standalone QDQ file runs right on
    #: onnxruntime and OpenVINO alike) or ``int8`` (TFLite's scheme; OpenVINO runs it less exactly). Targets
    #: choose their own (``Target.activation_dtype``): the TFLite converter takes either.
    activations: str = "uint8"
    #: Calibration method for activation ranges.
    method: str = "minmax"
    #: Number of calibration samples used (the first N of the data set).
    samples: int = 100
    #: Percentile kept by the ``percentile`` method.
    percentile: float = 99.999
    #: Histogram bins of the histogram methods (fixed memory per tensor).
    bins: int = 2048
    #: Correct the per-channel mean shift that weight quantization causes, on the calibration data.
    bias_correction: bool = False
    #: Per-channel weights for Gemm/MatMul too (False for NNAPI, whose FULLY_CONNECTED takes one weight scale).
    dense_per_channel: bool = True
    #: A Softmax/Sigmoid/Tanh/LogSoftmax whose output is a model output stays float (its input is quantized).
    #: Targets with float outputs dequantize there anyway; its fixed int8 grid (1/256) would tie close scores.
    #: Fully integer targets (nnapi) set it False.
    float_output_heads: bool = True
    #: Node names kept in float.
    exclude: frozenset[str] = field(default_factory=frozenset)
    #: The recipe (``edgekit.quantize.recipes.RECIPES``): ``int8`` (static), ``int16x8``, ``w8``, ``w4``,
    #: ``fp16``. ``activations`` is the 8-bit type of the static int8 recipe.
    precision: str = "int8"
    #: Per-layer recipes, ``((node name, recipe), ...)``: those nodes take that recipe instead.
    layer_precision: tuple[tuple[str, str], ...] = ()
    #: Block size of the blockwise int4 weights (``w4``).
    block_size: int = 32
    #: Per-layer calibration methods, ``((node name, method), ...)``: the range of that node's output (its
    #: fused activation's, when it has one) is chosen by that method (the accuracy-aware search's int8 fix).
    layer_method: tuple[tuple[str, str], ...] = ()
    #: Nodes whose bias absorbs the weight-rounding shift (``bias_correction`` for these layers only).
    layer_bias_correction: frozenset[str] = field(default_factory=frozenset)
    #: Depthwise-input equalization (``edgekit.quantize.equalize``): each depthwise Conv input computed by a Conv
    #: and homogeneous activations is rescaled per channel so that every channel spans its per-tensor grid.
    equalize: bool = True
    #: Rounding of the static recipes' (int8, int16x8) int8 weights at their per-channel scales: ``nearest`` (a
    #: convolution kernel's tap sum kept within half a step), or ``gptq``: each Conv / MatMul / Gemm weight
    #: row rounded to minimise the layer's output error on the calibration inputs (their second moments are
    #: collected during calibration; rows where that does not beat nearest keep nearest).
    weight_rounding: str = "nearest"

    def __post_init__(self) -> None:
        if self.activations not in ACTIVATION_DTYPES:
            raise QuantizationError(
                f"--activations must be one of {', '.join(ACTIVATION_DTYPES)}, got {self.activations!r}"
            )
        if self.method not in METHODS:
            raise QuantizationError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.samples < 1:
            raise QuantizationError(f"--samples must be at least 1, got {self.samples}")
        if not 50.0 < self.percentile <= 100.0:
            raise QuantizationError(f"--percentile must be in (50, 100], got {self.percentile}")
        from edgekit.quantize.recipes import W4_BLOCK_SIZES, get_recipe

        get_recipe(self.precision)
        for node, recipe in self.layer_precision:
            if not node:
                raise QuantizationError(f"--layer-precision needs NAME=RECIPE, got {node!r}={recipe!r}")
            get_recipe(recipe, f"the recipe of --layer-precision {node}")
        for node, method in self.layer_method:
            if method not in METHODS:
                raise QuantizationError(
                    f"layer method must be one of {', '.join(METHODS)}, got {method!r} for {node!r}"
                )
        if self.block_size not in W4_BLOCK_SIZES:
            raise QuantizationError(
                f"--block-size must be one of {', '.join(map(str, W4_BLOCK_SIZES))}, got {self.block_size}"
            )
        if self.weight_rounding not in WEIGHT_ROUNDINGS:
            raise QuantizationError(
                f"--weight-rounding must be one of {', '.join(WEIGHT_ROUNDINGS)}, got {self.weight_rounding!r}"
            )
        if self.bins < 256:
            raise QuantizationError(f"histogram bins must be at least 256, got {self.bins}")

    def to_json(self) -> dict:
        return {
            "activations": self.activations,
            "weights": "int8 symmetric per-channel"
            + ("" if self.dense_per_channel else " (Gemm/MatMul per-tensor)"),
            "method": self.method,
            "samples": self.samples,
            "percentile": self.percentile if self.method == "percentile" else None,
            "bias_correction": self.bias_correction,
            "float_output_heads": self.float_output_heads,
            "exclude": sorted(self.exclude),
            "precision": self.precision,
            "layer_precision": dict(self.layer_precision),
            "block_size": self.block_size if self.precision == "w4" else None,
            "layer_method": dict(self.layer_method),
            "layer_bias_correction": sorted(self.layer_bias_correction),
            "equalize": self.equalize,
            "weight_rounding": self.weight_rounding,
        }
