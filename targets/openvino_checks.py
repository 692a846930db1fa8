"""What the ``intel-vpu`` target refuses before converting (:mod:`edgekit.targets.openvino_ir`): dynamic inputs,
int8 activations OpenVINO's int8 kernels misread, ops OpenVINO's ONNX frontend or CPU plugin cannot take, and
outputs whose size a data-dependent selection sets. OpenVINO is imported lazily."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import onnx
import onnx_ir as ir
from edgekit.core import isolated
from edgekit.core.shape_checks import data_dependent_tail, is_data_dependent, is_static, shape_text
from edgekit.targets.base import Problem, static_dims


def _ov():
    import openvino

    return openvino


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:  # OpenVINO puts the useful part after a "Check ... failed at" header
        if "No conversion rule" in line or "is not supported" in line:
            return line.lstrip("- ")
    return lines[-1] if lines else type(exc).__name__


def _static_input_problems(model: ir.Model) -> list[Problem]:
    problems = []
    for value in model.graph.inputs:
        if static_dims(value) is None:
            problems.append(
                Problem(
                    "error",
                    None,
                    value.name,
                    f"input has a dynamic shape {value.shape}; VPUs and NPUs need static shapes "
                    f"(pass --input-shape {value.name}=D0,D1,...)",
                )
            )
    return problems


def _activation_dtype_problems(form: onnx.ModelProto) -> list[Problem]:
    """QDQ activations left in int8 in ``form`` (the model as OpenVINO gets it, :func:`for_openvino`): OpenVINO's
    int8 path expects uint8 activations (SqueezeNet lost 12 pp). The conversion re-expresses every int8
    QuantizeLinear -> DequantizeLinear chain on uint8 (the same values, :mod:`edgekit.core.unsigned`); this names
    one whose values do more than move between the two."""
    inits = {t.name: t.data_type for t in form.graph.initializer}
    for node in form.graph.node:
        if node.op_type != "QuantizeLinear" or len(node.input) < 3 or node.input[0] in inits:
            continue
        if inits.get(node.input[2]) == onnx.TensorProto.INT8:
            return [
                Problem(
                    "warning",
                    "QuantizeLinear",
                    node.name,
                    "activations are quantized to int8 and read by more than DequantizeLinear; OpenVINO's int8 "
                    "kernels expect uint8 activations (quantize with activations=uint8 for intel-vpu)",
                )
            ]
    return []


def _openvino_problems(model: ir.Model, path: Path, query: bool = True) -> list[Problem]:
    """Ops OpenVINO's ONNX frontend cannot convert, dynamic outputs and, with ``query``, ops the CPU plugin cannot
    run (``query_model``: its transformations, about what compiling costs; ``edgekit inspect`` asks it,
    packaging compiles instead, :meth:`edgekit.targets.openvino_ir.IntelVpuTarget.check`).

    In a child process (:mod:`edgekit.core.isolated`): ``query_model`` runs the CPU plugin's transformations, which
    can crash on a model (a SIGSEGV on RetinaFace's QDQ SSH modules, before
    :func:`edgekit.core.qdq_forms.drop_concat_identity_qdq`); that must be an error line, not the end of the CLI.
    """
    problems = isolated.call(
        _frontend_problems,
        str(path),
        _onnx_node_names(model),
        query,
        what="intel-vpu: OpenVINO",
        doing="checking which ops its CPU plugin runs (query_model)"
        if query
        else "checking which ops its ONNX frontend converts",
    )
    selection = next((n for n in model.graph if is_data_dependent(n)), None)
    if selection is None:
        return problems
    return [
        replace(p, message=p.message.replace(_STATIC_ONLY, _selected_rows(selection) + _STATIC_ONLY))
        if p.message.startswith("output has a dynamic shape")
        else p
        for p in problems
    ]


#: Why intel-vpu refuses a dynamic output.
_STATIC_ONLY = "; VPUs and NPUs need static shapes"


def _selected_rows(selection: ir.Node) -> str:
    """What sets a dynamic output's row count: PaddleDetection's multiclass_nms3 gives [N, 6] boxes, as many rows
    as the selection keeps."""
    return (
        f" (its size is what {selection.op_type} {selection.name!r} selects at run time: export the selection "
        "padded to a fixed number of rows, as ultralytics' export with nms=True pads it to 300, or without NMS)"
    )


def selection_output_problems(model: ir.Model) -> list[Problem]:
    """The outputs whose row count a data-dependent selection sets (known from the graph alone, before any
    quantization: the same refusal OpenVINO's check gives after it)."""
    tail = data_dependent_tail(model.graph)
    selection = next((n for n in model.graph if n in tail), None)
    if selection is None:
        return []
    return [
        Problem(
            "error",
            None,
            out.name,
            f"output has a dynamic shape {shape_text(out.shape)}{_selected_rows(selection)}{_STATIC_ONLY}",
        )
        for out in model.graph.outputs
        if out.producer() in tail and not is_static(out.shape)
    ]


def _frontend_problems(path: str, names: Mapping[str, str], query: bool = True) -> list[Problem]:
    """(Run in a child.) :func:`_openvino_problems` of the ONNX file ``path``; ``names``: friendly -> node names."""
    frontend = _ov().frontend.FrontEndManager().load_by_framework("onnx")
    try:
        input_model = frontend.load(str(path))  # must outlive the partial model's framework nodes
        partial = frontend.convert_partially(input_model)
    except Exception as exc:
        return [Problem("error", None, None, f"OpenVINO cannot read the model: {_first_line(exc)}")]
    problems = []
    for op in partial.get_ordered_ops():
        if "FrameworkNode" not in op.get_type_name():
            continue
        attrs = op.get_attributes()
        op_type = attrs.get("ONNX_META_type", op.get_type_name())
        domain = attrs.get("ONNX_META_domain", "")
        shown = f"{domain}.{op_type}" if domain else op_type
        node = names.get(op.get_friendly_name(), op.get_friendly_name())
        problems.append(
            Problem("error", op_type, node, f"OpenVINO's ONNX frontend has no conversion for {shown}")
        )
    if problems:
        return problems
    supported = _ov().Core().query_model(partial, "CPU") if query else None
    for op in partial.get_ordered_ops() if query else ():
        if op.get_friendly_name() not in supported and op.get_type_name() not in ("Parameter", "Result"):
            node = names.get(op.get_friendly_name(), op.get_friendly_name())
            message = "the OpenVINO CPU plugin cannot execute it (query_model)"
            problems.append(Problem("error", op.get_type_name(), node, message))
    for out in partial.outputs:
        shape = out.get_partial_shape()
        if not shape.is_static:
            message = f"output has a dynamic shape {shape}{_STATIC_ONLY}"
            problems.append(Problem("error", None, out.get_any_name(), message))
    del partial, input_model
    return problems


def _onnx_node_names(model: ir.Model) -> dict[str, str]:
    """OpenVINO friendly names (ONNX node names or first output names) -> ONNX node names."""
    names: dict[str, str] = {}
    for node in model.graph:
        label = node.name or (node.outputs[0].name if node.outputs else "") or ""
        for out in node.outputs:
            if out.name:
                names[out.name] = label
        if node.name:
            names[node.name] = label
    return names
