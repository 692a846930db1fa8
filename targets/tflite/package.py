"""What the two TFLite targets (``arm-cpu``, ``nnapi``) share: check, convert, verify, write the bundle."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core import isolated
from edgekit.core.errors import EdgekitError, TargetError, UnsupportedOpError
from edgekit.core.litert_run import (
    REFERENCES,
    TensorInfo,
    exact_outputs,
    host_outputs,
    reference_and_tflite,
    run_tflite_samples,
)
from edgekit.core.model import activation_types, qdq_precision
from edgekit.core.protoutil import with_outputs
from edgekit.core.shape_checks import is_data_dependent
from edgekit.device_agents.bundle import FORMAT_VERSION, Manifest, TensorSpec, write_bundle
from edgekit.targets.base import (
    PackageOptions,
    Problem,
    Target,
    complete_provenance,
    default_verify_samples,
    static_dims,
)
from edgekit.targets.runtime_versions import tflite_requirements
from edgekit.targets.selection_tail import (
    SelectionTail,
    body_model,
    onnx_tail_run,
    onnx_tail_run_float64,
    selection_tail,
    verify_with_tail,
)
from edgekit.targets.tflite.converter import ConversionResult, ConvertOptions, convert
from edgekit.targets.tflite.registry import lookup
from edgekit.targets.tflite.selection import selection_refusal
from edgekit.targets.yardstick import (
    SEEDED_STDS,
    YARDSTICKS,
    IllConditionedSamples,
    output_kinds,
    sqnr_db,
    verify_outputs,
    yardstick,
)

log = logging.getLogger("edgekit")

MODEL_FILE = "model.tflite"


def is_quantized(model: ir.Model) -> bool:
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph)


def _has_8bit_qdq(model: ir.Model) -> bool:
    """Some activation is quantized to 8 bits (a model of int8 layers, or of int8 and int16x8 ones)."""
    return bool(activation_types(model) & {ir.DataType.INT8, ir.DataType.UINT8})


def check_model(model: ir.Model, target: str, convert_options: ConvertOptions) -> list[Problem]:
    """Dynamic shapes, ops without a converter, then a trial conversion for everything else."""
    why = selection_refusal(model, target)
    problems = [Problem("error", None, None, why)] if why is not None else []
    for value in model.graph.inputs:
        if static_dims(value) is None:
            message = f"input has a dynamic shape {value.shape}; pass --input-shape {value.name}=D0,D1,..."
            problems.append(Problem("error", None, value.name, message))
    opset = model.opset_imports.get("", 0)
    constant = {v.name for v in model.graph.initializers.values()}
    for node in model.graph:
        inputs = [v.name for v in node.inputs if v is not None and v.name]
        if node.op_type in ("Constant", "Shape", "Size") or (inputs and all(n in constant for n in inputs)):
            constant.update(v.name for v in node.outputs)  # folded to a constant by the converter
            continue
        try:
            lookup(node, opset, target)
        except UnsupportedOpError:
            problems.append(
                Problem("error", node.op_type, node.name, f"no TFLite converter for {node.op_type}")
            )
    if problems:
        return problems
    try:
        result = convert(model, convert_options)
    except EdgekitError as exc:
        return [Problem("error", None, None, str(exc))]
    for note in result.notes:
        problems.append(Problem("info", None, None, note))
    if result.float_ops:
        problems.append(
            Problem("warning", None, None, f"ops left in float: {float_ops_line(result.float_ops)}")
        )
    return problems


def float_ops_line(ops: list[str], shown: int = 8) -> str:
    """``CODE (origin)`` entries grouped by the ONNX node they come from (an LSTM or a GridSample is many TFLite
    ops): ``origin (CODE, CODE x2)``, the first ``shown`` nodes, then how many more."""
    groups: dict[str, dict[str, int]] = {}
    for entry in ops:
        code, _, origin = entry.partition(" (")
        codes = groups.setdefault(origin.removesuffix(")") or code, {})
        codes[code] = codes.get(code, 0) + 1
    parts = [
        f"{origin} ({', '.join(c if n == 1 else f'{c} x{n}' for c, n in codes.items())})"
        for origin, codes in list(groups.items())[:shown]
    ]
    more = len(groups) - shown
    return ", ".join(parts) + (f" and {more} more node(s)" if more > 0 else "")


def run_tflite(
    data: bytes, result: ConversionResult, feeds: Mapping[str, np.ndarray], threads: int = 2
) -> dict[str, np.ndarray]:
    """Run the converted model on ONNX-layout float feeds; float outputs in the ONNX layout.

    In this process: a graph LiteRT aborts on takes the caller down (:func:`verify` runs it in a child).
    """
    return run_tflite_samples(data, result.inputs, result.outputs, [feeds], threads)[0]


def _reference_and_run(
    proto: bytes, result: ConversionResult, feeds: Sequence[Mapping[str, np.ndarray]], exact: bool, doing: str
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]], str]:
    """The source model (its exact QDQ semantics when ``exact``, else the host) and the .tflite on ``feeds``, in a
    child process (LiteRT aborts the process on some graphs, OpenVINO can crash compiling one)."""
    return isolated.call(
        reference_and_tflite,
        proto,
        result.data,
        result.inputs,
        result.outputs,
        feeds,
        "exact" if exact else "host",
        what="LiteRT",
        doing=doing,
    )


def int8_noise(
    model: ir.Model,
    proto: bytes,
    feeds: Sequence[Mapping[str, np.ndarray]],
    names: Sequence[str],
    reference: Sequence[Mapping[str, np.ndarray]],
    target: str,
) -> list[dict[str, np.ndarray]]:
    """The rounding noise of other implementations of the QDQ model ``proto`` on ``names``, per output the larger:
    OpenVINO's int8 kernels (uint8 activations), and the exact semantics with every value moved by float32's
    rounding error before it is quantized (``FLOAT32_JITTER``). A network that grows a one-step flip into another
    output (all-MiniLM-L6-v2: 130 dB on a sample without a flip, 20 dB with one) makes whether one runtime flips on
    three samples a draw; the jittered run flips where the model is that sensitive."""
    from edgekit.core.exact import FLOAT32_JITTER

    runs = [
        isolated.call(
            exact_outputs,
            proto,
            feeds,
            names,
            jitter=FLOAT32_JITTER,
            what="the onnx reference evaluator",
            doing="running the QDQ model's semantics under float32 rounding",
        )
    ]
    # OpenVINO's int8 kernels are a yardstick for uint8 activations only: with int8 ones they are wrong on
    # some CPUs (issue 12 item 9; intel-vpu asks for uint8). On onnxruntime's quantize_static YOLOv8n with
    # int8 activations they were 16.9 dB from the exact semantics (uint8: 43.5 dB, onnxruntime's QLinear
    # kernels 41.5 dB), and a .tflite at 15.1 dB passed as "within their noise".
    if ir.DataType.INT8 not in activation_types(model):
        try:
            runs.append(
                isolated.call(
                    host_outputs,
                    proto,
                    feeds,
                    names,
                    exact_qdq=False,
                    what="OpenVINO",
                    doing="running the QDQ model on its int8 kernels",
                )
            )
        except TargetError as exc:
            # A yardstick, not the artifact: OpenVINO crashed on onnxruntime's NanoDet-Plus.
            log.warning("%s: no OpenVINO int8 run to measure kernel noise against (%s)", target, exc)
    noisiest = {n: min(runs, key=lambda run, n=n: sqnr_db(reference, run, n)) for n in names}
    return [{n: noisiest[n][i][n] for n in names} for i in range(len(feeds))]


def verify(
    model: ir.Model,
    result: ConversionResult,
    samples: Sequence[Mapping[str, np.ndarray]],
    tolerance: float | None,
    target: str,
    precision: str | None = None,
    seeded: bool = False,
    convert_tapped: Callable[[ir.Model], ConversionResult] | None = None,
) -> dict[str, Any]:
    """Run the .tflite (LiteRT) and its reference on ``samples`` and compare: the source model on the host
    (OpenVINO f32), or an 8-bit QDQ model's exact semantics (:mod:`edgekit.core.exact`). A model with a
    data-dependent selection (a detector's NMS) is judged in two parts (:func:`_verify_with_tail`); it needs
    ``convert_tapped``, which converts the model as ``result`` was.

    ``precision``: a float model's recipe (fp16 has its own yardstick; anything else is judged as fp32 within
    ``tolerance``); a QDQ model is judged by its activations (int8, or int16x8 when every layer is 16-bit); a
    weight-only model (w8, w4) by its recipe's yardstick. ``seeded``: ``samples`` are seeded normal noise (no data
    given; :func:`edgekit.targets.yardstick.yardstick`).
    """
    # Both runtimes run in a child process: LiteRT aborts the process on some graphs, OpenVINO can crash
    # compiling one; either becomes a TargetError here.
    # (the shape-inferred copy only for a model with a selection: two more copies of BERT-base's 435 MB of weights,
    # 2.2 of its deploy's 3.6 GB peak, for every other model)
    if convert_tapped is not None and any(is_data_dependent(n) for n in model.graph):
        tail = selection_tail(onnx.shape_inference.infer_shapes(ir.to_proto(model)))
        if tail is not None:
            return _verify_with_tail(
                model, result, samples, tolerance, target, precision, seeded, tail, convert_tapped
            )
    proto = ir.to_proto(model).SerializeToString()
    feeds = [{name: np.asarray(a) for name, a in sample.items()} for sample in samples]
    from edgekit.quantize.weight_only import weight_only_precision

    weight_only = precision if precision in ("w8", "w4") else weight_only_precision(model)
    quantized = is_quantized(model) and weight_only is None
    qdq = qdq_precision(model)
    # An 8-bit QDQ model is judged against its exact semantics, which integer kernels compute: a float32 run
    # rounds values near a half step either way and a network grows those flips (edgekit.core.exact).
    exact = quantized and _has_8bit_qdq(model)
    reference, actual, used = _reference_and_run(proto, result, feeds, exact, "running the converted model")
    names = [info.name for info in result.outputs]

    def float64() -> list[dict[str, np.ndarray]]:  # the source model without float32 rounding
        return isolated.call(
            exact_outputs,
            proto,
            feeds,
            names,
            what="the onnx reference evaluator",
            doing="running the source model in float64",
        )

    def fp16_weights() -> list[dict[str, np.ndarray]]:
        """The source model with the weights the .tflite stores in float16 rounded to float16."""
        from edgekit.core.qdq_forms import float16_rounded
        from edgekit.targets.tflite.fp16 import FP16_MIN_ELEMENTS

        rounded = float16_rounded(ir.to_proto(model), FP16_MIN_ELEMENTS).SerializeToString()
        return isolated.call(
            host_outputs,
            rounded,
            feeds,
            names,
            what="OpenVINO",
            doing="running the source model with float16-rounded weights",
        )

    if weight_only:  # against the weight-only model (its integer weights dequantized)
        stick = yardstick(weight_only)
    elif quantized:
        # A mix of int8 and int16x8 layers is judged as int8, its coarser part.
        stick = yardstick(qdq if qdq == "int16x8" and not _has_8bit_qdq(model) else "int8")
    else:  # a float model: its recipe's yardstick (fp16), else fp32's within the target's tolerance
        float_recipe = precision if precision in YARDSTICKS and precision != "fp32" else "fp32"
        stick = yardstick(float_recipe, tolerance if float_recipe == "fp32" else None, seeded)
    kinds = output_kinds(model)
    figures = verify_outputs(
        reference,
        actual,
        stick,
        kinds,
        target,
        "the .tflite",
        (lambda: int8_noise(model, proto, feeds, names, reference, target))
        if quantized
        else {"fp32": float64, "fp16": fp16_weights}.get(stick.precision),
        (lambda: index_scores(model, kinds, feeds, used))  # a host run, only when an index output misses
        if stick.max_rel_error is not None and not quantized
        else None,
    )
    return {
        "reference": "source ONNX model on the host (onnxruntime: OpenVINO strips 16-bit QDQ)"
        if qdq == "int16x8" and used == "host"
        else REFERENCES[used],
        "runtime": "LiteRT interpreter (ai-edge-litert)",
        **figures,
    }


def _verify_with_tail(
    model: ir.Model,
    result: ConversionResult,
    samples: Sequence[Mapping[str, np.ndarray]],
    tolerance: float | None,
    target: str,
    precision: str | None,
    seeded: bool,
    tail: SelectionTail,
    convert_tapped: Callable[[ir.Model], ConversionResult],
) -> dict[str, Any]:
    """:func:`verify` for a model with a data-dependent selection (:mod:`edgekit.targets.selection_tail`): the
    body judged on the tensors the selection reads, read from the model converted again with them as outputs;
    the .tflite's own outputs against the source's selection run on those values. (A tapped conversion that
    computed them otherwise than the .tflite does would not give its outputs.)"""
    proto = ir.to_proto(model)
    tapped_proto = with_outputs(proto, tail.frontier)
    tapped = convert_tapped(ir.from_proto(tapped_proto))
    feeds = [{name: np.asarray(a) for name, a in sample.items()} for sample in samples]
    quantized = is_quantized(model)
    exact = quantized and _has_8bit_qdq(model)
    reference, frontier, used = _reference_and_run(
        tapped_proto.SerializeToString(),
        tapped,
        feeds,
        exact,
        "running the converted model with the tensors its selection reads as outputs",
    )
    shipped = isolated.call(
        run_tflite_samples,
        result.data,
        result.inputs,
        result.outputs,
        feeds,
        what="LiteRT",
        doing="running the converted model",
    )
    for got, ref, own in zip(frontier, reference, shipped, strict=True):
        for name in tail.frontier:  # the .tflite's int32 indices as the source's int64
            got[name] = np.asarray(got[name]).astype(np.asarray(ref[name]).dtype)
        got.update(own)

    if quantized:
        stick = yardstick("int8")
    else:
        float_recipe = precision if precision in YARDSTICKS and precision != "fp32" else "fp32"
        stick = yardstick(float_recipe, tolerance if float_recipe == "fp32" else None, seeded)

    before_tail = [o.name for o in proto.graph.output if o.name not in tail.outputs]

    @functools.cache
    def body_only() -> bytes:  # the model without its tail, serialized once, when a noise reference runs
        return body_model(proto, tail).SerializeToString()

    def float64(names: Sequence[str]) -> list[dict[str, np.ndarray]]:  # the body without float32 rounding
        return isolated.call(
            exact_outputs,
            body_only(),
            feeds,
            [*names, *before_tail],
            what="the onnx reference evaluator",
            doing="running the source model in float64",
        )

    def int8(names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        return int8_noise(model, body_only(), feeds, [*names, *before_tail], reference, target)

    noise = {"fp32": float64, "int8": int8}.get(stick.precision) if exact or not quantized else None
    figures = verify_with_tail(
        proto,
        tail,
        samples,
        lambda names: reference,
        lambda names: frontier,
        onnx_tail_run,
        stick,
        output_kinds(model),
        target,
        "the .tflite",
        noise,
        onnx_tail_run_float64,
    )
    return {"reference": REFERENCES[used], "runtime": "LiteRT interpreter (ai-edge-litert)", **figures}


def index_scores(
    model: ir.Model, kinds: Mapping[str, Any], feeds: Sequence[Mapping[str, np.ndarray]], used: str
) -> dict[str, np.ndarray] | None:
    """The scores each ArgMax/ArgMin index output of ``model`` chose from (``OutputKind.scores``), computed by the
    host reference (``used``) on ``feeds`` and stacked over them (an ArgMin's negated), or None when ``model`` has
    no such output or the reference was not the host's."""
    wanted = {name: kind for name, kind in kinds.items() if kind.scores is not None}
    if not wanted or used != "host":
        return None
    import onnx

    values = {v.name: v for node in model.graph for v in node.outputs if v.name}
    proto = ir.to_proto(model)
    known = {o.name for o in proto.graph.output}
    inferred: dict[str, int] = {}
    for kind in wanted.values():
        value = values.get(kind.scores[0])
        if value is None:
            return None
        if value.dtype is None and not inferred:  # a graph without value types: read them off shape inference
            graph = onnx.shape_inference.infer_shapes(proto).graph
            inferred = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
        elem = value.dtype.value if value.dtype is not None else inferred.get(value.name)
        if not elem:
            return None
        if value.name not in known:
            proto.graph.output.append(onnx.helper.make_tensor_value_info(value.name, elem, None))
            known.add(value.name)
    names = sorted({kind.scores[0] for kind in wanted.values()})
    runs = isolated.call(
        host_outputs,
        proto.SerializeToString(),
        feeds,
        names,
        what="OpenVINO",
        doing="running the source model for the scores of its ArgMax outputs",
    )
    return {
        name: np.stack([np.asarray(r[kind.scores[0]], np.float64) for r in runs])
        * (-1.0 if kind.selection == "ArgMin" else 1.0)
        for name, kind in wanted.items()
    }


def tensor_specs(infos: Sequence[TensorInfo]) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(
            name=i.name,
            shape=tuple(int(d) for d in i.shape),
            dtype=i.dtype,
            layout=i.layout,
            scale=i.scale if i.dtype in ("int8", "uint8") else None,
            zero_point=i.zero_point if i.dtype in ("int8", "uint8") else None,
        )
        for i in infos
    )


def _verify_on_samples(
    model: ir.Model,
    given: Sequence[Mapping[str, np.ndarray]],
    run: Callable[[Sequence[Mapping[str, np.ndarray]], bool], dict[str, Any]],
) -> dict[str, Any]:
    """``run(samples, seeded)`` on the given samples; without any, on seeded normal ones of each std of
    :data:`SEEDED_STDS` in turn while a failure is :class:`IllConditionedSamples` (the std used is recorded)."""
    if given:
        return run(tuple(given), False)
    for std in SEEDED_STDS:
        try:
            figures = run(default_verify_samples(model, std=std), True)
            break
        except IllConditionedSamples as exc:
            if std == SEEDED_STDS[-1]:
                # no seeded std lets float32 judge (ultralytics yolo12n, seeded: area attention 0.33 of the range
                # off float64 at std 1, 1.7e-3 at 0.1); on the model's own data it can (2.1e-4 on photos, passed)
                raise IllConditionedSamples(
                    f"{exc}; no seeded samples (std {', '.join(f'{s:g}' for s in SEEDED_STDS)}) let float32 "
                    "judge this network: verify on its own inputs with --calib DATA"
                ) from None
            log.info("%s; trying gentler seeded samples", exc)
    if std != SEEDED_STDS[0]:
        figures["samples_seeded_std"] = std
        figures["samples_note"] = (
            f"seeded normal samples of std {std:g}: at larger ones the artifact missed the bar on samples where "
            "the host's own float32 run is near or beyond it (ill-conditioned for float32)"
        )
    return figures


def package_tflite(
    target: Target,
    model: ir.Model,
    out_dir: Path,
    options: PackageOptions,
    convert_options: ConvertOptions,
    tolerance: float | None,
    extra_files: Mapping[str, bytes] | None = None,
    extra_report: Mapping[str, Any] | None = None,
    result: ConversionResult | None = None,
    precision: str | None = None,
    verify_precision: str | None = None,
    delegate_options: Mapping[str, Mapping[str, str]] | None = None,
) -> Path:
    """Convert (unless ``result`` is given), verify, and write the bundle atomically.

    ``precision``: the recipe recorded in the report (default: int8 for a QDQ model, else fp32);
    ``verify_precision``: the yardstick the host run is judged by (default: ``precision``'s).
    """
    for value in model.graph.inputs:
        if static_dims(value) is None:
            raise TargetError(f"input {value.name!r} has a dynamic shape {value.shape}; pass --input-shape")
    if result is None:
        result = convert(model, convert_options)
    report: dict[str, Any] = {
        "precision": precision or options.precision or qdq_precision(model) or "fp32",
        "io_dtype": convert_options.io_dtype,
        "op_counts": result.op_counts,
        "converter_notes": list(result.notes),
        "float_ops": list(result.float_ops),
        "size_bytes": len(result.data),
    }
    precision_judged = verify_precision or report["precision"]
    figures = _verify_on_samples(
        model,
        options.verify_samples,
        lambda samples, seeded: verify(
            model,
            result,
            samples,
            tolerance,
            target.name,
            precision_judged,
            seeded,
            lambda tapped: convert(tapped, convert_options),
        ),
    )
    report.update(figures)
    report.update(extra_report or {})
    manifest = Manifest(
        format_version=FORMAT_VERSION,
        target=target.name,
        runtime=target.runtime,
        model_files=(),
        requirements=tflite_requirements(result.data, importlib.metadata.version("ai-edge-litert")),
        inputs=tensor_specs(result.inputs),
        outputs=tensor_specs(result.outputs),
        preprocessing=dict(options.preprocessing),
        provenance=complete_provenance(model, options.provenance),
        verification=report,
        device_hint=target.check_device_hint(options.device_hint),
        delegate_options=dict(delegate_options or {}),
    )
    files: dict[str, bytes] = {MODEL_FILE: result.data, **(extra_files or {})}
    roles = {name: "report" for name in extra_files or {}}
    return write_bundle(out_dir, manifest, files, archive=options.archive, roles=roles)
