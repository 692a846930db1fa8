"""The ``intel-vpu`` target: OpenVINO IR (``model.xml`` + ``model.bin``) for Intel VPUs, NPUs and CPUs.

Float models become an IR with FP16-compressed weights (what VPUs need). QDQ models (from
``edgekit quantize``, uint8 activations) become an INT8 IR: OpenVINO's ONNX frontend turns every
activation QuantizeLinear/DequantizeLinear pair into a 256-level FakeQuantize, which this target
checks pair by pair, and the CPU plugin's runtime model must execute the convolutions in u8/i8.
Layers that stay float are reported in the manifest.

Before writing, the saved IR is compiled on the CPU (f32 inference precision), run on the verify
samples, and compared with the source ONNX model run on the host; the figures go into the manifest.
Where an NPU plugin is present the IR is also compiled for it and the blob exported into the bundle.

OpenVINO is imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import hashlib
import io
import logging
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core import isolated
from edgekit.core.errors import TargetError
from edgekit.core.model import qdq_precision
from edgekit.core.qdq_forms import dequantized_constant, for_openvino, graph_index
from edgekit.core.runtime import F32_CONFIG, preflight_ir, stable_top_k
from edgekit.device_agents.bundle import FORMAT_VERSION, Manifest, write_bundle
from edgekit.device_agents.runtimes import openvino_cpu_config
from edgekit.targets.base import (
    PackageOptions,
    Problem,
    Target,
    complete_provenance,
    default_verify_samples,
    io_specs,
    register_target,
)
from edgekit.targets.openvino_checks import (
    _activation_dtype_problems,
    _first_line,
    _openvino_problems,
    _ov,
    _static_input_problems,
    selection_output_problems,
)
from edgekit.targets.runtime_versions import openvino_requirements
from edgekit.targets.selection_tail import (
    SelectionTail,
    onnx_tail_run,
    onnx_tail_run_float64,
    selection_tail,
    verify_with_tail,
)
from edgekit.targets.yardstick import (
    compare_outputs,
    output_kinds,
    verify_outputs,
    worst_rel_error,
    yardstick,
)

log = logging.getLogger("edgekit")

#: Runtime-model layer types that do arithmetic worth reporting (not data movement or constants).
_BOOKKEEPING_LAYERS = frozenset(
    {"Input", "Output", "Const", "Reorder", "Reshape", "Transpose", "Concatenation"}
)
_COMPUTE_LAYERS = frozenset({"Convolution", "FullyConnected", "MatMul", "Deconvolution", "GroupConvolution"})
_INT_PRECISIONS = frozenset({"u8", "i8"})
_DEQUANTIZATION_OPS = frozenset({"Multiply", "Subtract", "Convert", "Reshape"})
NPU_BLOB = "model.npu.blob"


@dataclass(frozen=True)
class IntelVpuOptions:
    """Options of the ``intel-vpu`` target.

    ``compress_to_fp16``: FP16 weights for float models (else an fp32 IR, verified like fp32 TFLite), when
    ``PackageOptions.precision`` does not say (``fp16`` / ``fp32`` there decide).
    ``compile_npu``: compile and export a blob when an NPU plugin is present. How the IR is verified is
    :data:`edgekit.targets.yardstick.YARDSTICKS` (docs/bundle.md).
    """

    compress_to_fp16: bool = True
    compile_npu: bool = True


@dataclass(frozen=True)
class _Converted:
    source: Path  # the ONNX file converted
    form: onnx.ModelProto  # what it holds: the model as OpenVINO gets it (for_openvino)
    xml: Path
    bin: Path
    ov_model: Any  # openvino.Model, read back from the saved IR


@register_target
class IntelVpuTarget(Target):
    name = "intel-vpu"
    runtime = "openvino"
    activation_dtype = "uint8"
    precisions = {
        "fp32": None,
        "fp16": None,
        "int8": None,
        "int16x8": (
            "OpenVINO's CPU plugin strips 16-bit QuantizeLinear/DequantizeLinear (qdq_stripping: the activations "
            "compute in float, not int16) and fails to compile when one feeds a model output"
        ),
        "w8": None,
        "w4": None,
    }
    description = "Intel VPU/NPU (and CPU) via OpenVINO IR: FP16 weights for float models, INT8 from QDQ"
    device_hints = ("NPU", "CPU")
    retired_device_hints = {
        "MYRIAD": "OpenVINO removed the MYRIAD plugin (Movidius VPUs) in 2023.0, older than any OpenVINO these "
        "bundles run on; today's Intel VPU is the NPU plugin: use --device-hint NPU"
    }
    options_type = IntelVpuOptions
    #: the last model :meth:`check` checked (its proto's sha256, whether ``query_model`` ran) and what it found
    _checked: tuple[bytes, bool, list[Problem]] | None = None

    # ------------------------------------------------------------------------------------------ check

    def check(self, model: ir.Model) -> list[Problem]:
        """Once per model: a deploy checks its model for the report's warnings, then :meth:`package` checks the
        same model again (the check's child process runs OpenVINO's frontend). Not ``query_model``, which costs
        about what compiling does (3.2 of an int8 NanoDet-Plus deploy's 19 CPU s) and, over every probe round's
        models, never named an op the frontend converts: a failing compile is the packaging's typed error, in a
        child as the query was (:meth:`support_problems`, for ``edgekit inspect``, still asks it)."""
        return self._problems(model, query=False)

    def support_problems(self, model: ir.Model) -> list[Problem]:
        """:meth:`check` and the ops OpenVINO's CPU plugin cannot run (``query_model``)."""
        return self._problems(model, query=True)

    def _problems(self, model: ir.Model, query: bool) -> list[Problem]:
        proto = ir.to_proto(model)
        key = hashlib.sha256(proto.SerializeToString()).digest()
        if self._checked is not None and self._checked[:2] == (key, query):
            return list(self._checked[2])
        problems = _static_input_problems(model)
        form = for_openvino(proto)
        problems += _activation_dtype_problems(form)
        if qdq_precision(model) == "int16x8":
            why = self.precisions["int16x8"]
            problems.append(Problem("error", "QuantizeLinear", None, f"int16 activations: {why}"))
        if not any(p.severity == "error" for p in problems):
            with tempfile.TemporaryDirectory(prefix="edgekit-ov-") as tmp:
                problems += _openvino_problems(model, _write_form(form, Path(tmp)), query)
        self._checked = (key, query, problems)
        return list(problems)

    def early_refusal(self, model: ir.Model) -> str | None:
        """An output whose row count the selection sets (PaddleDetection's ``[N, 6]`` boxes) is refused before
        any calibration is spent on it (intel-vpu int8 calibrated for up to 97 s first)."""
        return self.refusal(selection_output_problems(model))

    # ---------------------------------------------------------------------------------------- package

    def package(self, model: ir.Model, out_dir: Path, options: PackageOptions) -> Path:
        from edgekit.core.model import is_quantized, to_proto
        from edgekit.quantize.weight_only import as_weight_only

        opts: IntelVpuOptions = self.target_options(options)
        if qdq_precision(model) == "int16x8":
            self.check_precision("int16x8")
        hint = self.check_device_hint(options.device_hint)
        if options.precision in ("w8", "w4"):  # a float model: its weight-only quantization is packaged
            model = as_weight_only(model, options.precision)
        self.raise_on_errors(self.check(model))
        # fp16 (FP16-compressed weights) is the float default unless the options ask for an fp32 IR.
        precision = self.resolve_precision(model, options, "fp16" if opts.compress_to_fp16 else "fp32")
        # A weight-only model keeps its other constants (scales, biases, norms) in f32: its recipe's numerics.
        weight_only = precision if precision in ("w8", "w4") else None
        quantized = is_quantized(model) and weight_only is None
        proto = to_proto(model)
        kept_float = _float_transposed_pointwise(proto) if weight_only else []
        samples = tuple(options.verify_samples) or default_verify_samples(model)
        ov = _ov()
        core = ov.Core()
        _warn_absent_device(core, hint)
        with tempfile.TemporaryDirectory(prefix="edgekit-ir-") as tmp:
            converted = _convert(proto, Path(tmp), compress=precision == "fp16")
            report: dict[str, Any] = {"precision": precision}
            # OpenVINO can crash compiling or running an IR or a QDQ model: do what verification does once,
            # on one sample, where a crash cannot end the CLI.
            compiled_in_child = isolated.call(
                preflight_ir,
                str(converted.xml),
                proto.SerializeToString(),
                [dict(s) for s in samples[:1]],
                (False, True) if quantized else (True,),
                what="intel-vpu: OpenVINO",
                doing="compiling the IR on the CPU",
            )
            compiled = _import_cpu(core, compiled_in_child["ir"]) or _compile_cpu(core, converted.ov_model)
            if quantized:
                # int8 activations left: the refusal suggests uint8 (_activation_dtype_problems' warning)
                signed = bool(_activation_dtype_problems(converted.form))
                report["int8"] = _check_int8(
                    converted.form, converted.source, converted.ov_model, compiled, signed
                )
            if weight_only:
                compressed = any(n.op_type == "DequantizeLinear" for n in proto.graph.node)
                report["compressed_weights"] = (
                    _check_compressed(weight_only, converted.ov_model, compiled)
                    if compressed
                    else {"weight_constants": {}}
                )
                if kept_float:
                    report["compressed_weights"]["kept_float"] = {
                        "nodes": kept_float,
                        "reason": _TRANSPOSED_1X1,
                    }
            kinds = output_kinds(model)
            stick = yardstick(report["precision"], seeded=not options.verify_samples)
            tail = selection_tail(proto)
            if tail is None:
                report.update(_verify(proto, compiled, samples, stick, kinds, compiled_in_child["hosts"]))
            else:
                report.update(_verify_with_tail(proto, tail, core, converted.ov_model, samples, stick, kinds))
            files: dict[str, bytes | Path] = {"model.xml": converted.xml, "model.bin": converted.bin}
            roles = {"model.bin": "weights"}
            report["npu"] = _npu_blob(core, converted.ov_model, opts, files, roles)
            log.info("intel-vpu: %s", report["npu"]["note"])
            inputs, outputs = io_specs(model, layout="NCHW")
            manifest = Manifest(
                format_version=FORMAT_VERSION,
                target=self.name,
                runtime=self.runtime,
                model_files=(),
                requirements=openvino_requirements(
                    converted.xml, ov.get_version(), blob=NPU_BLOB if NPU_BLOB in files else None
                ),
                inputs=inputs,
                outputs=outputs,
                preprocessing=dict(options.preprocessing),
                provenance=complete_provenance(model, options.provenance),
                verification=report,
                device_hint=hint,
            )
            return write_bundle(out_dir, manifest, files, archive=options.archive, roles=roles)


# ---------------------------------------------------------------------------------------------------
# checks


def _activation_qdq_outputs(proto: onnx.ModelProto) -> list[str]:
    """Output names of every DequantizeLinear fed by a QuantizeLinear (an activation Q/DQ pair)."""
    q_outputs = {n.output[0] for n in proto.graph.node if n.op_type == "QuantizeLinear"}
    return [
        n.output[0] for n in proto.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in q_outputs
    ]


def _pair_fake_quantizes(source: Path, pairs: Sequence[str]) -> tuple[list[str], Counter[int]]:
    """Q/DQ pairs without a FakeQuantize in OpenVINO's ONNX frontend conversion, and the levels seen."""
    frontend = _ov().frontend.FrontEndManager().load_by_framework("onnx")
    input_model = frontend.load(str(source))
    raw = frontend.convert(input_model)
    by_name: dict[str, Any] = {}
    for op in raw.get_ordered_ops():
        if op.get_output_size() and op.get_type_name() != "Result":
            for name in op.output(0).get_names():
                by_name[name] = op
    missing: list[str] = []
    levels: Counter[int] = Counter()
    for name in pairs:
        producer = by_name.get(name)
        for _ in range(6):
            if producer is None or producer.get_type_name() not in _DEQUANTIZATION_OPS:
                break
            producer = producer.input_value(0).get_node()
        if producer is None or producer.get_type_name() != "FakeQuantize":
            missing.append(name)
        else:
            levels[int(producer.get_attributes()["levels"])] += 1
    del raw, input_model
    return missing, levels


def _check_int8(
    proto: onnx.ModelProto, source: Path, ov_model: Any, compiled: Any, signed: bool = False
) -> dict[str, Any]:
    """FakeQuantize(256) where every Q/DQ pair was; u8/i8 convolutions in the CPU runtime model.

    OpenVINO's ONNX frontend turns each activation Q/DQ pair into FakeQuantize followed by its
    dequantization (Convert/Subtract/Multiply), which the IR keeps (see :func:`_convert`); the CPU plugin
    folds those and merges FakeQuantize ops that repeat the same quantization (e.g. on both sides of a
    Concat with shared scales) when it compiles. The pairs are checked on the frontend's conversion, the
    IR's count is reported. ``signed``: the activations are int8 (the refusal then suggests uint8).
    """
    pairs = _activation_qdq_outputs(proto)
    missing, levels = _pair_fake_quantizes(source, pairs)
    if missing:
        raise TargetError(
            f"intel-vpu: {len(missing)} of {len(pairs)} Q/DQ pairs did not become a FakeQuantize "
            f"(first: {missing[0]!r}); the INT8 IR would not be quantized there"
        )
    if set(levels) - {256}:
        raise TargetError(f"intel-vpu: FakeQuantize with levels {sorted(levels)}; expected 256 only")
    final = Counter(
        int(op.get_attributes()["levels"])
        for op in ov_model.get_ordered_ops()
        if op.get_type_name() == "FakeQuantize"
    )
    compute: list[dict[str, str]] = []
    float_layers: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        layer = rt["layerType"].astype(str)
        precision = rt["runtimePrecision"].astype(str)
        if layer in _COMPUTE_LAYERS:
            compute.append(
                {
                    "layer": rt["originalLayersNames"].astype(str).split(",")[0],
                    "type": layer,
                    "precision": precision,
                }
            )
        if precision not in _INT_PRECISIONS and layer not in _BOOKKEEPING_LAYERS:
            float_layers[layer] += 1
    int8_compute = [c for c in compute if c["precision"] in _INT_PRECISIONS]
    if compute and not int8_compute:
        shown = ", ".join(f"{c['layer']} {c['precision']}" for c in compute[:3]) + (
            ", ..." if len(compute) > 3 else ""
        )
        raise TargetError(
            f"intel-vpu: OpenVINO's CPU plugin runs none of the {len(compute)} convolution/matmul layer(s) in u8/i8 "
            f"({shown}); the INT8 IR is not int8" + (" (quantize with uint8 activations)" if signed else "")
        )
    return {
        "qdq_pairs": len(pairs),
        "fake_quantize": int(sum(levels.values())),
        "fake_quantize_levels": sorted(levels | final),
        "fake_quantize_in_ir": int(sum(final.values())),
        "compute_layers": len(compute),
        "int8_compute_layers": len(int8_compute),
        "float_compute_layers": [c["layer"] for c in compute if c["precision"] not in _INT_PRECISIONS],
        "float_layers": dict(sorted(float_layers.items())),
        "execution_precisions": dict(Counter(c["precision"] for c in compute)),
    }


#: The integer constant types of OpenVINO's compressed weights, per weight-only recipe (w4 has int8 weights
#: where it falls back: convolutions, embeddings, input dims that are not a multiple of the block).
_COMPRESSED_TYPES = {"w8": frozenset({"i8", "u8"}), "w4": frozenset({"i4", "u4", "i8", "u8"})}


def _check_compressed(precision: str, ov_model: Any, compiled: Any) -> dict[str, Any]:
    """The saved IR keeps the weight-only model's integer weights as integer constants (decompressed by
    Convert -> Multiply, as OpenVINO's own weight compression writes them), and the CPU plugin's dense layers
    read them compressed."""
    types = _COMPRESSED_TYPES["w4"]
    constants = Counter(
        op.get_element_type().get_type_name()
        for op in ov_model.get_ordered_ops()
        if op.get_type_name() == "Constant" and op.get_element_type().get_type_name() in types
    )
    wanted = _COMPRESSED_TYPES[precision]
    if not wanted & set(constants):
        raise TargetError(
            f"intel-vpu: the IR has no {'/'.join(sorted(wanted))} weight constants; the {precision} weights were "
            "not kept compressed"
        )
    layers = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        layer = rt["layerType"].astype(str)
        if layer in _COMPUTE_LAYERS or layer == "Gather":
            layers[f"{layer} {rt['runtimePrecision'].astype(str)}"] += 1
    return {
        "weight_constants": dict(sorted(constants.items())),
        "runtime_layers": dict(sorted(layers.items())),
    }


# ---------------------------------------------------------------------------------------------------
# conversion, compilation, verification


_TRANSPOSED_1X1 = (
    "a 1x1 Conv with compressed weights fed by a Transpose: OpenVINO's CPU plugin computes it transposed "
    "(YOLOv8n's DFL: boxes 63 px off); its weights stay float"
)


def _float_transposed_pointwise(proto: onnx.ModelProto) -> list[str]:
    """Fold, in place, the DequantizeLinear of each 1x1 Conv weight whose Conv input is a Transpose's output into
    a float constant (the same values); the Conv names. OpenVINO 2026.4's CPU plugin runs such a Conv with
    compressed (i8/i4) weights with its output's spatial axes swapped (``tests/targets/test_openvino_target.py``);
    with float weights it runs it right."""
    inits, producers, _ = graph_index(proto)
    folded, names = [], []
    for node in proto.graph.node:
        source = producers.get(node.input[0]) if node.op_type == "Conv" else None
        dq = producers.get(node.input[1]) if source is not None and source.op_type == "Transpose" else None
        if dq is None or dq.op_type != "DequantizeLinear" or not all(i in inits for i in dq.input if i):
            continue
        dims = inits[dq.input[0]].dims
        blocked = any(a.name == "block_size" and a.i for a in dq.attribute)
        if blocked or len(dims) < 3 or any(d != 1 for d in dims[2:]):
            continue
        name = f"{dq.output[0]}_float"
        if name not in inits:  # a weight two such Convs share is folded once
            inits[name] = dequantized_constant(dq, inits)  # the DequantizeLinear's own values
            inits[name].name = name
            proto.graph.initializer.append(inits[name])
        node.input[1] = name
        folded.append(dq)
        names.append(node.name)
    used = {i for n in proto.graph.node for i in n.input} | {o.name for o in proto.graph.output}
    for dq in {d.output[0]: d for d in folded}.values():
        if dq.output[0] not in used:
            proto.graph.node.remove(dq)
    return names


def _write_form(form: onnx.ModelProto, folder: Path) -> Path:
    """``form``, a model as OpenVINO gets it (:func:`edgekit.core.qdq_forms.for_openvino`), in a file."""
    path = folder / "source.onnx"
    path.write_bytes(form.SerializeToString())
    return path


def _convert(proto: onnx.ModelProto, folder: Path, compress: bool) -> _Converted:
    """The IR of ``proto``, read by OpenVINO's ONNX frontend (``Core.read_model``), saved and read back.

    Not ``ovc``/``convert_model``: its offline transformations fold each DequantizeLinear into its
    FakeQuantize's output range, which overflows float32 for wide ranges (an attention mask of
    ``finfo(float32).min`` gave a BERT-style encoder's INT8 IR 0.33 of the output range off the QDQ model,
    onnxruntime and OpenVINO running the ONNX file agreeing to 1e-3); ``read_model`` keeps the dequantization
    as separate ops, exactly as OpenVINO runs the ONNX file.

    An AveragePool counting its padding pads the integer tensor with its zero point first
    (:func:`edgekit.core.qdq_forms.pad_before_dequantize`): OpenVINO pads the dequantized tensor with the integer 0, which
    put the border values of a uint8 pool 56 steps off (``tests/targets/test_openvino_target.py``). An identity
    Q/DQ pair on a Concat's output goes (:func:`edgekit.core.qdq_forms.drop_concat_identity_qdq`: OpenVINO crashed).
    """
    ov = _ov()
    form = for_openvino(proto)  # the same values, around OpenVINO 2026.4's problems
    path = _write_form(form, folder)
    from edgekit.quantize.weight_only import weight_only_precision

    try:
        if weight_only_precision(proto) is not None:
            # Weight-only (w8, w4): no activation FakeQuantize to overflow, and ``convert_model`` folds the shape
            # arithmetic ``read_model`` leaves beside each convolution's bias (PP-OCRv4 rec: 136 ShapeOf, the XML
            # 617 KB -> 363 KB, the bundle 0.304x -> 0.282x fp32), keeping the int8/int4 constants compressed.
            ov_model = _float16_weights(ovc_transformations(ov.Core().read_model(str(path))))
        else:
            ov_model = ov.Core().read_model(str(path))
        ov_model = stable_top_k(ov_model)  # ONNX TopK: the lower index first
    except Exception as exc:
        raise TargetError(f"intel-vpu: OpenVINO cannot convert the model: {_first_line(exc)}") from None
    xml = folder / "model.xml"
    ov.save_model(ov_model, str(xml), compress_to_fp16=compress)
    try:
        written = ov.Core().read_model(str(xml))
    except (
        Exception
    ) as exc:  # an op of OpenVINO's own that its IR cannot hold (its com.microsoft GroupQueryAttention)
        raise TargetError(
            f"intel-vpu: OpenVINO cannot read back the IR it wrote: {_first_line(exc)}"
        ) from None
    return _Converted(source=path, form=form, xml=xml, bin=xml.with_suffix(".bin"), ov_model=written)


def ovc_transformations(ov_model: Any) -> Any:
    """``ov_model`` (read by ``Core.read_model``), in place, as ``ovc``'s ``convert_model`` makes it: the same
    offline transformations (``moc_emit_ir``), the same IR. Not ``convert_model`` itself: without ``CI=true`` or
    the user's opt-out it sends a usage event to Google Analytics from a child process (0.8 CPU s and ~2 s of wall
    time a call here, and a network call on the user's behalf)."""
    from openvino._offline_transformations import (
        apply_fused_names_cleanup,
        apply_moc_legacy_transformations,
        apply_moc_transformations,
        compress_quantize_weights_transformation,
    )

    apply_moc_transformations(ov_model, cf=False, smart_reshape=True)
    compress_quantize_weights_transformation(ov_model)
    apply_moc_legacy_transformations(ov_model, [])
    apply_fused_names_cleanup(ov_model)
    return ov_model


def _float16_weights(ov_model: Any) -> Any:
    """A weight-only model's float16 weights (``edgekit.quantize.weight_only.stores_float16``), which
    ``convert_model`` folds into float32 constants, as float16 constants -> Convert, as OpenVINO keeps compressed
    float16 weights: the same values, half the bytes in the ``.bin``."""
    import openvino.opset13 as ops
    from edgekit.quantize.weight_only import stores_float16

    ov = _ov()
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() != "Constant" or op.get_element_type() != ov.Type.f32:
            continue
        values = op.get_data()
        if not stores_float16(values):
            continue
        widened = ops.convert(ops.constant(values.astype(np.float16)), ov.Type.f32)
        widened.get_rt_info()["decompression"] = ""
        for target in op.output(0).get_target_inputs():
            target.replace_source_output(widened.output(0))
    ov_model.validate_nodes_and_infer_types()
    return ov_model


def _import_cpu(core: Any, blob: bytes) -> Any:
    """The IR the preflight child compiled, imported (None when this OpenVINO cannot: then it is compiled)."""
    try:
        return core.import_model(blob, "CPU", F32_CONFIG)
    except Exception as exc:  # noqa: BLE001 - any failure falls back to compiling
        log.debug("intel-vpu: importing the compiled IR failed (%s); compiling it", _first_line(exc))
        return None


def _compile_cpu(core: Any, ov_model: Any) -> Any:
    try:
        return core.compile_model(ov_model, "CPU", openvino_cpu_config(F32_CONFIG))
    except Exception as exc:
        raise TargetError(
            f"intel-vpu: the OpenVINO CPU plugin cannot compile the IR: {_first_line(exc)}"
        ) from None


def run_compiled(compiled: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a compiled OpenVINO model on one sample; outputs by tensor name."""
    request = compiled.create_infer_request()
    inputs = {}
    for port in compiled.inputs:
        name = next((n for n in port.get_names() if n in feeds), None)
        if name is None:
            raise TargetError(f"verification sample lacks input {port.get_any_name()!r}")
        inputs[port] = np.require(feeds[name], requirements="C")  # a scalar input stays a scalar
    results = request.infer(inputs)
    out: dict[str, np.ndarray] = {}
    for port in compiled.outputs:
        for name in port.get_names():
            out[name] = np.array(results[port], copy=True)
    return out


#: What the verification report says it compared: one text for both forms of :func:`_verify`.
_VERIFIED_ON = {
    "reference": "source ONNX model on the host (OpenVINO CPU, f32; a QDQ model on its int8 kernels)",
    "device": "CPU (INFERENCE_PRECISION_HINT f32)",
}


def _verify(
    proto: onnx.ModelProto,
    compiled: Any,
    samples: Sequence[Mapping[str, np.ndarray]],
    stick: Any,
    kinds: Mapping[str, Any],
    compiled_hosts: Mapping[bool, bytes | None] | None = None,
) -> dict[str, Any]:
    """``compiled_hosts``: the source model compiled by :func:`preflight_ir`, by ``exact_qdq``."""
    from edgekit.core.runtime import HostRunner

    blobs = compiled_hosts or {}

    # The reference runs the QDQ model through the same CPU int8 kernels as the IR (exact_qdq=False), so
    # the check is about the conversion; the IR against the QDQ model's exact semantics, which adds this
    # CPU's kernel rounding (and saturation on CPUs without VNNI), is reported beside it.
    quantized = any(n.op_type == "QuantizeLinear" for n in proto.graph.node)
    host = HostRunner(proto, exact_qdq=not quantized, compiled=blobs.get(not quantized))
    reference = [host.run(s) for s in samples]
    actual = []
    for sample in samples:
        got = run_compiled(compiled, sample)
        missing = [n for n in host.output_names if n not in got]
        if missing:
            raise TargetError(f"intel-vpu: the IR lost the output(s) {missing}")
        actual.append({n: got[n] for n in host.output_names})

    def fp16_weights() -> list[dict[str, np.ndarray]]:  # the source with the IR's FP16-compressed weights
        from edgekit.core.qdq_forms import float16_rounded

        rounded = HostRunner(float16_rounded(proto))
        return [rounded.run(s) for s in samples]

    report = {
        **_VERIFIED_ON,
        **verify_outputs(
            reference,
            actual,
            stick,
            kinds,
            "intel-vpu",
            "the IR",
            fp16_weights if stick.precision == "fp16" else None,
        ),
    }
    if quantized:
        exact_host = HostRunner(proto, compiled=blobs.get(True))
        exact = compare_outputs([exact_host.run(s) for s in samples], actual, kinds)
        report["max_rel_error_vs_exact_qdq"] = worst_rel_error(exact)
        report["vs_exact_qdq"] = {
            n: {k: o[k] for k in ("max_rel_error", "cosine", "sqnr_db", "top1_agreement") if k in o}
            for n, o in exact["outputs"].items()
        }
    return report


def _verify_with_tail(
    proto: onnx.ModelProto,
    tail: SelectionTail,
    core: Any,
    ov_model: Any,
    samples: Sequence[Mapping[str, np.ndarray]],
    stick: Any,
    kinds: Mapping[str, Any],
) -> dict[str, Any]:
    """:func:`_verify` for a model with a data-dependent selection (a detector's NMS): its body and its tail
    judged apart (:mod:`edgekit.targets.selection_tail`), the reference as :func:`_verify`'s."""
    from edgekit.core.runtime import HostRunner

    quantized = any(n.op_type == "QuantizeLinear" for n in proto.graph.node)

    def reference(extra: Sequence[str]) -> list[dict[str, np.ndarray]]:
        host = HostRunner(proto, list(extra), exact_qdq=not quantized)
        return [host.run(s) for s in samples]

    def artifact(extra: Sequence[str]) -> list[dict[str, np.ndarray]]:
        tapped = ov_model.clone()
        try:
            tapped.add_outputs(list(extra))
        except Exception as exc:
            raise TargetError(
                f"intel-vpu: verification cannot read the IR's tensors: {_first_line(exc)}"
            ) from None
        compiled = _compile_cpu(core, tapped)
        return [run_compiled(compiled, s) for s in samples]

    def fp16_weights(extra: Sequence[str]) -> list[dict[str, np.ndarray]]:
        from edgekit.core.qdq_forms import float16_rounded

        rounded = HostRunner(float16_rounded(proto), list(extra))
        return [rounded.run(s) for s in samples]

    return {
        **_VERIFIED_ON,
        **verify_with_tail(
            proto,
            tail,
            samples,
            reference,
            artifact,
            onnx_tail_run,
            stick,
            kinds,
            "intel-vpu",
            "the IR",
            fp16_weights if stick.precision == "fp16" else None,
            onnx_tail_run_float64,
        ),
    }


def _warn_absent_device(core: Any, hint: str | None) -> None:
    """A warning (not an error: bundles are often built on a host for another device) when the hint's device
    is not among the installed OpenVINO's available devices."""
    if hint is None:
        return
    devices = list(core.available_devices)
    if not any(d == hint or d.startswith(hint + ".") for d in devices):
        log.warning(
            "--device-hint %s: OpenVINO %s on this host has no %s device (it has: %s); the bundle is packaged "
            "for it anyway, to run where the %s plugin is",
            hint, _ov().get_version(), hint, ", ".join(devices) or "none", hint,
        )  # fmt: skip


def _npu_blob(
    core: Any, ov_model: Any, opts: IntelVpuOptions, files: dict[str, bytes | Path], roles: dict[str, str]
) -> dict[str, Any]:
    devices = list(core.available_devices)
    npu = next((d for d in devices if d.startswith("NPU")), None)
    if npu is None:
        return {
            "compiled": False,
            "note": f"no NPU plugin on this host (devices: {', '.join(devices)}); packaged the IR only",
        }
    if not opts.compile_npu:
        return {
            "compiled": False,
            "note": "NPU present; blob export disabled by options; packaged the IR only",
        }
    files[NPU_BLOB] = export_blob(core, ov_model, npu)
    roles[NPU_BLOB] = "compiled"
    return {"compiled": True, "note": f"compiled for {npu} and exported {NPU_BLOB}", "device": npu}


def export_blob(core: Any, ov_model: Any, device: str) -> bytes:
    """Compile ``ov_model`` for ``device`` and export the compiled blob (``core.import_model`` reads it)."""
    try:
        stream = io.BytesIO()
        core.compile_model(ov_model, device).export_model(stream)
        return stream.getvalue()
    except Exception as exc:
        raise TargetError(f"intel-vpu: compiling for {device} failed: {_first_line(exc)}") from None
