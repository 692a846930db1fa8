"""The ``nnapi`` target: an integer .tflite for Android's NNAPI delegate, float islands on the CPU.

Quantized (QDQ) models; or, with ``--precision fp16``, a float model the delegate may relax to float16
(``NnapiTarget._package_relaxed``). The integer body runs as int8 kernels, which the NNAPI delegate takes in
partitions; ops that cannot be integer (a detector's box decoding: EXP, DIV, ...) stay float between
DEQUANTIZE/QUANTIZE and run on the CPU. Inputs and outputs are int8 (``io_dtype="uint8"`` for older
accelerators) where the first/last op is integer, float32 where it computes in float (a note says
which). ``strict_integer`` refuses any float op instead, listing them. ``nnapi_compatibility.json``
records, for every op, whether the delegate takes it at the chosen feature level and why not, the
delegated partitions and the ops left on the CPU with the reason (``edgekit.targets.tflite.nnapi``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import onnx_ir as ir
from edgekit.core.errors import TargetError
from edgekit.core.model import qdq_precision
from edgekit.targets.base import PackageOptions, Problem, Target, register_target
from edgekit.targets.tflite.converter import ConvertOptions, convert
from edgekit.targets.tflite.package import check_model, is_quantized, package_tflite
from edgekit.targets.tflite.selection import selection_refusal

log = logging.getLogger("edgekit")
REPORT_FILE = "nnapi_compatibility.json"
#: NNAPI's FULLY_CONNECTED takes per-tensor weights only (the delegate refuses per-channel ones).
NNAPI_PER_TENSOR = frozenset({"FULLY_CONNECTED"})


@dataclass(frozen=True)
class NnapiOptions:
    """Options of the ``nnapi`` target.

    ``io_dtype``: "int8" or "uint8" model inputs/outputs (where the op next to them is integer).
    ``feature_level``: the NNAPI feature level the compatibility report is for (1..8, Android API
    27..35; default 4 = Android 11). ``keep_io_layout``: keep NCHW image inputs/outputs.
    ``strict_integer``: refuse a model with ops that stay float (fully integer or nothing).
    """

    io_dtype: Literal["int8", "uint8"] = "int8"
    feature_level: int = 4
    keep_io_layout: bool = False
    strict_integer: bool = False

    def __post_init__(self) -> None:
        if self.io_dtype not in ("int8", "uint8"):
            raise TargetError(f"nnapi --io-dtype must be int8 or uint8, got {self.io_dtype!r}")


@register_target
class NnapiTarget(Target):
    name = "nnapi"
    runtime = "tflite"
    activation_dtype = "int8"
    precisions = {
        "fp32": "NNAPI accelerators run integer or fp16-relaxed models; use --precision int8 or fp16",
        "fp16": None,
        "int8": None,
        "int16x8": "NNAPI has no 16-bit activation kernels for convolutions and most ops",
        "w8": "NNAPI has no hybrid (weight-only) kernels: its ops take integer or float tensors throughout",
        "w4": "NNAPI has no 4-bit tensor type",
    }
    description = (
        "Android NNAPI via TFLite: integer body delegated (int8 or uint8 I/O), float ops on the CPU, "
        "with a delegate report"
    )
    supports_float = False
    options_type = NnapiOptions

    def quantize_options(self, base: Any) -> Any:
        """int8 activations everywhere (integer output heads included), and one weight scale per
        FULLY_CONNECTED: NNAPI takes per-channel weights on convolutions only, and a per-channel
        FULLY_CONNECTED makes the whole delegation fail."""
        from dataclasses import replace

        return replace(base, activations="int8", dense_per_channel=False, float_output_heads=False)

    def early_refusal(self, model: ir.Model) -> str | None:
        return selection_refusal(model, self.name)

    def check(self, model: ir.Model) -> list[Problem]:
        if qdq_precision(model) == "int16x8":
            return [
                Problem("error", "QuantizeLinear", None, f"int16 activations: {self.precisions['int16x8']}")
            ]
        if not is_quantized(model):
            return check_model(model, self.name, ConvertOptions(target=self.name)) + [
                Problem(
                    "info",
                    None,
                    None,
                    "nnapi runs integer models only: quantize first (--calib DATA), or --precision fp16",
                )
            ]
        options = ConvertOptions(
            io_dtype="int8", target=self.name, per_tensor_weights=NNAPI_PER_TENSOR, strict_integer=False
        )
        return check_model(model, self.name, options)

    def package(self, model: ir.Model, out_dir: Path, options: PackageOptions) -> Path:
        from edgekit.quantize.weight_only import weight_only_precision
        from edgekit.targets.tflite.nnapi import check_nnapi, is_fully_integer

        opts: NnapiOptions = self.target_options(options)
        weight_only = options.precision if options.precision in ("w8", "w4") else weight_only_precision(model)
        if weight_only:
            self.check_precision(weight_only)  # refused, with the reason
        if qdq_precision(model) == "int16x8":
            self.check_precision("int16x8")
        if options.precision is None and not is_quantized(model):
            raise TargetError("nnapi runs integer models only; quantize first (pass --calib DATA)")
        if self.resolve_precision(model, options) == "fp16":
            return self._package_relaxed(model, out_dir, options, opts)
        convert_options = ConvertOptions(
            keep_io_layout=opts.keep_io_layout,
            io_dtype=opts.io_dtype,
            target=self.name,
            per_tensor_weights=NNAPI_PER_TENSOR,
            strict_integer=opts.strict_integer,
        )
        result = convert(model, convert_options)
        if opts.strict_integer:
            floats = is_fully_integer(result.data)
            assert not floats, f"converter left float tensors in a fully integer model: {floats}"
        report = check_nnapi(result.data, opts.feature_level, integer_accelerator=True)
        log.info("nnapi: %s", report.summary)
        extra_report = _verification(report, opts.strict_integer, report.summary)
        files = {REPORT_FILE: json.dumps(report.to_json(), indent=2).encode()}
        return package_tflite(
            self, model, out_dir, options, convert_options, None, files, extra_report, result=result
        )

    def _package_relaxed(
        self, model: ir.Model, out_dir: Path, options: PackageOptions, opts: NnapiOptions
    ) -> Path:
        """``--precision fp16``: a float .tflite (float32 weights and I/O) whose bundle lets the NNAPI delegate
        relax float32 computation to float16 (``delegate_options.nnapi.allow_fp16``: the delegate calls
        ``ANeuralNetworksModel_relaxComputationFloat32toFloat16``, NNAPI 1.1). Float32 weights, not fp16
        ones: the delegate hands constants to the driver, which stores them at the precision it computes
        in; constant fp16 DEQUANTIZE ops would go through the delegate's fp16-weights partitioning, which
        the compatibility report does not model. On the host there is no NNAPI: verification runs the
        float .tflite in LiteRT (float32); the report says which ops the delegate takes in float."""
        from edgekit.targets.tflite.nnapi import FEATURE_LEVELS, NNAPI_1_1, check_nnapi

        if opts.feature_level < NNAPI_1_1:
            api = FEATURE_LEVELS[opts.feature_level][0]
            raise TargetError(
                f"nnapi --precision fp16 needs feature level >= {NNAPI_1_1} (NNAPI 1.1, Android API 28: "
                f"relaxed float32-to-float16 computation); got level {opts.feature_level} (API {api})"
            )
        if opts.strict_integer:
            raise TargetError("nnapi --strict-integer refuses float ops; --precision fp16 runs a float model")
        convert_options = ConvertOptions(
            keep_io_layout=opts.keep_io_layout, io_dtype="float32", target=self.name
        )
        result = convert(model, convert_options)
        report = check_nnapi(result.data, opts.feature_level, integer_accelerator=False)
        log.info("nnapi: %s", report.summary)
        note = (
            f"{report.summary}; float ops judged by the delegate's rules at level {report.feature_level}, "
            "computed in float16 where the driver relaxes them (allow_fp16); the host verification ran the "
            "float .tflite in LiteRT in float32"
        )
        extra_report = _verification(report, False, note, relax_fp32_to_fp16=True)
        files = {REPORT_FILE: json.dumps(report.to_json(), indent=2).encode()}
        return package_tflite(
            self,
            model,
            out_dir,
            options,
            convert_options,
            1e-4,
            files,
            extra_report,
            result=result,
            precision="fp16",
            verify_precision="fp32",
            delegate_options={"nnapi": {"allow_fp16": "true"}},
        )


def _verification(report: Any, strict_integer: bool, note: str, **extra: Any) -> dict[str, Any]:
    """The manifest's ``verification.nnapi``: what the compatibility report found, in short."""
    return {
        "nnapi": {
            "feature_level": report.feature_level,
            "android_api": report.android_api,
            "delegated_ops": report.delegated_ops,
            "op_count": len(report.ops),
            "partitions": report.delegated_partitions,
            "cpu_ops": [op.op for op in report.cpu_ops],
            "float_io": list(report.float_io),
            "strict_integer": strict_integer,
            "fully_delegated": report.fully_delegated,
            **extra,
            "note": note,
        }
    }
