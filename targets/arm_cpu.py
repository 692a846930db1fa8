"""The ``arm-cpu`` target: a .tflite for the LiteRT/TFLite CPU path (XNNPACK) on ARM boards and phones.

Float models become an fp32 .tflite, or with ``--precision fp16`` one whose weights are FLOAT16 buffers read
through DEQUANTIZE (TFLite's float16 quantization: half the size, float32 compute); QDQ models (from
``edgekit quantize``) become int8 kernels with the QDQ model's scales (int16 QDQ: TFLite's 16x8 kernels, int16
activations and int8 weights), with float inputs and outputs (QUANTIZE/DEQUANTIZE at the edges). Weight-only
models (``w8``, ``w4``) keep their int8 / blockwise int4 weights on LiteRT's hybrid kernels
(``tflite/weight_only.py``); where those fail verification, the int8 weights go through DEQUANTIZE into the
float kernels instead. The
converter is ``edgekit.targets.tflite``; every artifact is verified in LiteRT against the source model
on the host before the bundle is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx_ir as ir
from edgekit.core.errors import TargetError
from edgekit.targets.base import PackageOptions, Problem, Target, register_target
from edgekit.targets.tflite.converter import ConvertOptions
from edgekit.targets.tflite.package import check_model, package_tflite
from edgekit.targets.tflite.selection import selection_refusal

log = logging.getLogger("edgekit")


#: What an int8 .tflite that fails verification can try instead (TFLite's 16x8 kernels: int16 activations).
INT16X8_HINT = "try --precision int16x8 (int16 activations, TFLite's 16x8 kernels), which arm-cpu runs"


@dataclass(frozen=True)
class ArmCpuOptions:
    """Options of the ``arm-cpu`` target.

    ``keep_io_layout``: keep ONNX's NCHW layout for image inputs/outputs (one transpose at each edge)
    instead of NHWC. ``fp32_tolerance``: the largest verification error of an fp32 .tflite against the
    source model, relative to the output's scale; an int8 .tflite is judged against its QDQ model by the
    int8 yardstick (:data:`edgekit.targets.yardstick.YARDSTICKS`).
    """

    keep_io_layout: bool = False
    fp32_tolerance: float = 1e-4


#: TFLite's int16 QUANTIZE / DEQUANTIZE and 16x8 kernels check zero point 0 in Prepare (quantize.cc, conv.cc)
ASYMMETRIC_INT16 = (
    "16-bit activations with zero point {1} (QuantizeLinear {0!r}): TFLite's int16 QUANTIZE and 16x8 kernels "
    "take symmetric int16 only (zero point 0); quantize with symmetric activations (onnxruntime: "
    "ActivationSymmetric=True) or deploy the float model with --calib DATA --precision int16x8"
)


def _asymmetric_int16(model: ir.Model) -> tuple[str, int] | None:
    """The first 16-bit QuantizeLinear whose zero point is not 0 (uint16 or asymmetric int16): name, zero point."""
    from edgekit.core.irutil import const_array

    for node in model.graph:
        if node.op_type != "QuantizeLinear" or len(node.inputs) < 3 or node.inputs[2] is None:
            continue
        if node.inputs[2].dtype not in (ir.DataType.INT16, ir.DataType.UINT16):
            continue
        z = const_array(node.inputs[2])
        if z is not None and np.any(z != 0):
            return node.name or "", int(z.reshape(-1)[0])
    return None


@register_target
class ArmCpuTarget(Target):
    name = "arm-cpu"
    runtime = "tflite"
    activation_dtype = "int8"
    description = "ARM CPU via LiteRT/TFLite (XNNPACK): fp32, fp16 weights, or int8 / 16x8 kernels with float inputs/outputs"
    options_type = ArmCpuOptions
    precisions = {
        "fp32": None,
        "fp16": None,
        "int8": None,
        "int16x8": None,
        "w8": None,
        "w4": None,
    }

    def check(self, model: ir.Model) -> list[Problem]:
        asymmetric = _asymmetric_int16(model)
        if asymmetric is not None:
            return [Problem("error", "QuantizeLinear", asymmetric[0], ASYMMETRIC_INT16.format(*asymmetric))]
        return check_model(model, self.name, ConvertOptions(target=self.name))

    def early_refusal(self, model: ir.Model) -> str | None:
        asymmetric = _asymmetric_int16(model)
        if asymmetric is not None:
            return f"target {self.name!r} cannot take this model: {ASYMMETRIC_INT16.format(*asymmetric)}"
        return selection_refusal(model, self.name)

    def package(self, model: ir.Model, out_dir: Path, options: PackageOptions) -> Path:
        opts: ArmCpuOptions = self.target_options(options)
        precision = self.resolve_precision(model, options)
        weight_only = precision in ("w8", "w4")
        if weight_only:
            from edgekit.quantize.weight_only import as_weight_only

            model = as_weight_only(model, precision)
        convert_options = ConvertOptions(
            keep_io_layout=opts.keep_io_layout,
            io_dtype="float32",
            target=self.name,
            fp16_weights=precision == "fp16",
            weight_only="hybrid" if weight_only else "",
        )
        try:
            return package_tflite(
                self, model, out_dir, options, convert_options, opts.fp32_tolerance, precision=precision
            )
        except TargetError as exc:
            if precision == "int8" and "verification failed" in str(exc):
                raise TargetError(f"{exc}; {INT16X8_HINT}") from None
            if not weight_only or "verification failed" not in str(exc):
                raise
            # The hybrid kernels quantize each input to int8 on the fly; some models (PP-OCRv4 rec) cannot take
            # that. The int8 weights then go through DEQUANTIZE into the float kernels: the model's numerics.
            log.warning(
                "arm-cpu: hybrid kernels failed verification; int8 weights through DEQUANTIZE instead"
            )
            fallback = replace(convert_options, weight_only="dequantize")
            why = {"weight_only_kernels": "dequantize", "hybrid_kernels_refused": str(exc)}
            return package_tflite(
                self,
                model,
                out_dir,
                options,
                fallback,
                opts.fp32_tolerance,
                extra_report=why,
                precision=precision,
            )
