"""The ``arm-cpu`` target: a .tflite for the LiteRT/TFLite CPU path (XNNPACK) on ARM boards and phones.

Float models become an fp32 .tflite, or with ``--precision fp16`` one whose weights are FLOAT16 buffers read
through DEQUANTIZE (TFLite's float16 quantization: half the size, float32 compute); QDQ models (from
``edgekit quantize``) become int8 kernels with the QDQ model's scales (int16 QDQ: TFLite's 16x8 kernels, int16
activations and int8 weights), with float inputs and outputs (QUANTIZE/DEQUANTIZE at the edges). The
converter is ``edgekit.targets.tflite``; every artifact is verified in LiteRT against the source model
on the host before the bundle is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx_ir as ir
from edgekit.targets.base import PackageOptions, Problem, Target, register_target
from edgekit.targets.tflite.converter import ConvertOptions
from edgekit.targets.tflite.package import check_model, package_tflite


@dataclass(frozen=True)
class ArmCpuOptions:
    """Options of the ``arm-cpu`` target.

    ``keep_io_layout``: keep ONNX's NCHW layout for image inputs/outputs (one transpose at each edge)
    instead of NHWC. ``fp32_tolerance``: the largest verification error of an fp32 .tflite against the
    source model, relative to the output's scale; an int8 .tflite is judged against its QDQ model by the
    int8 yardstick (:data:`edgekit.targets.base.YARDSTICKS`).
    """

    keep_io_layout: bool = False
    fp32_tolerance: float = 1e-4


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
        "w8": "not built yet (issue 13)",
        "w4": "not built yet (issue 13)",
    }

    def check(self, model: ir.Model) -> list[Problem]:
        return check_model(model, self.name, ConvertOptions(target=self.name))

    def package(self, model: ir.Model, out_dir: Path, options: PackageOptions) -> Path:
        opts: ArmCpuOptions = self.target_options(options)
        precision = self.resolve_precision(model, options)
        convert_options = ConvertOptions(
            keep_io_layout=opts.keep_io_layout,
            io_dtype="float32",
            target=self.name,
            fp16_weights=precision == "fp16",
        )
        return package_tflite(
            self, model, out_dir, options, convert_options, opts.fp32_tolerance, precision=precision
        )
