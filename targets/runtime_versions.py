"""The oldest runtime release that can read an artifact, from the artifact itself.

A bundle's ``requirements`` used to name the host's own runtime (``openvino >= 2026.4``) or a fixed
LiteRT floor, which refused devices whose newest runtime is older (aarch64 boards whose glibc stops
at OpenVINO 2025.2) but run the model fine. Here the floor is read from what the file uses:

- OpenVINO IR: the IR version of ``<net version=...>``, the highest ``opsetN`` in the layers'
  ``version`` attributes, and element types newer than IR v10's, each mapped to the release that
  introduced it (:data:`OPENVINO_IR_RELEASES`, :data:`OPENVINO_OPSET_RELEASES`). A compiled device
  blob is only read by the release line that wrote it: its requirement is the host's line, scoped
  to that file (the agent loads the IR when the blob's requirement is not met).
- TFLite: every operator code's (builtin op, version), mapped to the first TensorFlow Lite runtime
  that has it (:data:`TFLITE_OP_RUNTIME`). The requirement names ``tflite-runtime`` (whose versions
  are TensorFlow's); the agent places ai-edge-litert on that scale (``device_agents.runtimes``).

Anything not in these tables (an opset past the last row, an unknown element type, an op version
not listed) cannot be dated: the requirement is then the host runtime's release line, as before.

Sources (the tables below hold only what these say):

- OpenVINO opsets: "Available Operation Sets", docs.openvino.ai/2024/documentation/openvino-ir-format/
  operation-sets/available-opsets.html (release -> newest opset; 2020.2 and 2020.3 both list opset2).
- IR v11: introduced by OpenVINO 2022.1 with API 2.0 (docs.openvino.ai/2022.1 "Transition to
  OpenVINO API 2.0"; Intel support article 000096498: "Starting 2022.1 releases, OpenVINO introduced
  ... the new OpenVINO IR model format: IR v11"). IR v10 and opset1 came with 2020.1 (the opset
  table's first row; the opset1 spec's examples are IR v10).
- TFLite: ``tensorflow/lite/tools/versioning/runtime_version.cc`` (``FindMinimumRuntimeVersionForOp``),
  tensorflow/tensorflow, the revision that lists SIGN version 2 (2.12.0) and TRANSPOSE_CONV version 4
  (2.13.0). Only the ops edgekit's TFLite converter emits are copied.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from edgekit.device_agents.bundle import Requirement, version_key

#: OpenVINO IR ``<net version>`` -> first release that reads it.
OPENVINO_IR_RELEASES = {10: "2020.1", 11: "2022.1"}

#: ``opsetN`` -> first OpenVINO release whose newest opset is N or higher.
OPENVINO_OPSET_RELEASES = {
    1: "2020.1",
    2: "2020.2",
    3: "2020.4",
    4: "2021.1",
    5: "2021.2",
    6: "2021.3",
    7: "2021.4",
    8: "2022.1",
    9: "2022.2",
    10: "2022.3",
    11: "2023.0",
    12: "2023.1",
    13: "2023.2",
    14: "2024.0",
    15: "2024.5",
}

#: Element types every IR v10 reader knows (attribute ``element_type`` / ``precision``, lower case).
#: Others (u4, i4, nf4, f8e4m3, string, ...) are not dated here, so they cost the host's line.
OPENVINO_BASE_ELEMENT_TYPES = frozenset(
    {"f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "boolean", "bool", "u1"}
    | {"fp16", "fp32", "fp64"}
)

#: IR attributes that hold an element type (ports' ``precision``, Const/Parameter ``element_type``,
#: Convert ``destination_type``, ShapeOf/NonZero/TopK ``output_type``/``index_element_type``).
_ELEMENT_TYPE_ATTRIBUTES = (
    "element_type",
    "precision",
    "destination_type",
    "output_type",
    "index_element_type",
)

#: (TFLite builtin op, op version) -> first TensorFlow Lite runtime with that kernel version.
TFLITE_OP_RUNTIME: dict[tuple[str, int], str] = {
    **{("ABS", v): r for v, r in ((1, "1.13.0"), (2, "2.4.0"), (3, "2.5.0"), (4, "2.6.0"), (5, "2.12.0"))},
    **{("ADD", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "2.4.0"), (4, "2.6.0"))},
    **{("ARG_MAX", v): r for v, r in ((1, "1.9.0"), (2, "1.14.0"), (3, "2.9.0"))},
    **{("ARG_MIN", v): r for v, r in ((1, "1.9.0"), (2, "1.14.0"), (3, "2.9.0"))},
    **{("AVERAGE_POOL_2D", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "2.3.0"))},
    **{("BATCH_MATMUL", v): r for v, r in ((1, "2.3.0"), (2, "2.3.0"), (3, "2.4.0"), (4, "2.5.0"))},
    **{("BROADCAST_TO", v): r for v, r in ((2, "2.5.0"), (3, "2.5.0"))},
    **{("CAST", v): r for v, r in ((1, "1.5.0"), (2, "2.7.0"), (3, "2.8.0"), (4, "2.9.0"), (5, "2.12.0"))},
    ("CEIL", 1): "1.14.0",
    **{("CONCATENATION", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "2.3.0"))},
    **{
        ("CONV_2D", v): r
        for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "1.14.0"), (4, "2.3.0"), (5, "2.4.0"), (6, "2.9.0"))
    },
    ("CONV_2D", 7): "2.11.0",
    ("COS", 1): "1.14.0",
    **{
        ("DEPTHWISE_CONV_2D", v): r
        for v, r in ((1, "1.5.0"), (2, "1.12.0"), (3, "1.14.0"), (4, "2.2.0"), (5, "2.3.0"), (6, "2.3.0"))
    },
    ("DEPTHWISE_CONV_2D", 7): "2.11.0",
    **{("DEPTH_TO_SPACE", v): r for v, r in ((1, "2.1.0"), (2, "2.5.0"))},
    **{
        ("DEQUANTIZE", v): r
        for v, r in ((1, "1.13.1"), (2, "1.14.0"), (3, "1.15.0"), (4, "2.2.0"), (5, "2.7.0"))
    },
    **{("DIV", v): r for v, r in ((1, "1.6.0"), (2, "2.3.0"))},
    ("ELU", 1): "1.14.0",
    ("EXP", 1): "1.7.0",
    ("FLOOR", 1): "1.9.0",
    **{
        ("FULLY_CONNECTED", v): r
        for v, r in (
            (1, "1.5.0"),
            (2, "1.10.0"),
            (3, "1.14.0"),
            (4, "1.14.0"),
            (5, "2.0.0"),
            (6, "2.1.0"),
            (7, "2.3.0"),
            (8, "2.3.0"),
            (9, "2.3.0"),
            (10, "2.11.0"),
        )
    },
    **{("GATHER", v): r for v, r in ((1, "1.6.0"), (2, "1.14.0"), (3, "1.15.0"), (4, "2.4.0"), (5, "2.5.0"))},
    **{("GELU", v): r for v, r in ((1, "2.9.0"), (2, "2.9.0"))},
    ("HARD_SWISH", 1): "1.15.0",
    **{("LEAKY_RELU", v): r for v, r in ((1, "1.13.1"), (2, "2.3.0"))},
    ("LOG", 1): "1.14.0",
    **{("LOGISTIC", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"), (3, "2.3.0"))},
    **{("LOG_SOFTMAX", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"))},
    **{("MAXIMUM", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"), (3, "2.3.0"), (4, "2.3.0"))},
    **{("MAX_POOL_2D", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "2.3.0"))},
    **{("MEAN", v): r for v, r in ((1, "1.6.0"), (2, "1.14.0"), (3, "2.4.0"))},
    **{("MINIMUM", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"), (3, "2.3.0"), (4, "2.3.0"))},
    **{("MIRROR_PAD", v): r for v, r in ((1, "1.13.1"), (2, "2.3.0"), (3, "2.12.0"))},
    **{
        ("MUL", v): r
        for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "1.15.0"), (4, "2.3.0"), (5, "2.6.0"), (6, "2.11.0"))
    },
    ("NEG", 1): "1.9.0",
    **{("PAD", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "2.4.0"), (4, "2.6.0"))},
    **{("PADV2", v): r for v, r in ((1, "1.9.0"), (2, "1.14.0"), (3, "2.4.0"), (4, "2.6.0"))},
    ("POW", 1): "1.10.0",
    ("PRELU", 1): "1.8.0",
    **{("QUANTIZE", v): r for v, r in ((1, "1.14.0"), (2, "1.15.0"), (3, "2.7.0"))},
    **{("REDUCE_MAX", v): r for v, r in ((1, "1.11.0"), (2, "1.14.0"), (3, "2.5.0"))},
    **{("REDUCE_MIN", v): r for v, r in ((1, "1.11.0"), (2, "1.14.0"), (3, "2.5.0"))},
    **{("REDUCE_PROD", v): r for v, r in ((1, "1.11.0"), (2, "2.6.0"))},
    **{("RELU", v): r for v, r in ((1, "1.5.0"), (2, "2.1.0"), (3, "2.5.0"))},
    **{("RELU6", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "2.5.0"))},
    ("RELU_0_TO_1", 1): "2.10.0",
    ("RELU_N1_TO_1", 1): "1.5.0",
    ("RESHAPE", 1): "1.5.0",
    ("ROUND", 1): "1.14.0",
    **{("RESIZE_BILINEAR", v): r for v, r in ((1, "1.7.0"), (2, "1.14.0"), (3, "2.2.0"), (4, "2.5.0"))},
    **{
        ("RESIZE_NEAREST_NEIGHBOR", v): r
        for v, r in ((1, "1.13.1"), (2, "1.14.0"), (3, "2.3.0"), (4, "2.4.0"))
    },
    **{("RSQRT", v): r for v, r in ((1, "1.10.0"), (2, "2.5.0"))},
    **{("SIGN", v): r for v, r in ((1, "2.11.0"), (2, "2.12.0"))},
    ("SIN", 1): "1.9.0",
    **{("SLICE", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"), (3, "1.14.0"), (4, "2.4.0"), (5, "2.5.0"))},
    **{("SOFTMAX", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "2.3.0"))},
    **{("SPACE_TO_DEPTH", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"))},
    **{("SPLIT_V", v): r for v, r in ((1, "1.13.1"), (2, "2.3.0"))},
    ("SQRT", 1): "1.10.0",
    **{("SQUEEZE", v): r for v, r in ((1, "1.6.0"), (2, "2.5.0"))},
    **{
        ("STRIDED_SLICE", v): r
        for v, r in ((1, "1.6.0"), (2, "1.14.0"), (3, "2.1.0"), (4, "2.2.0"), (5, "2.5.0"), (6, "2.6.0"))
    },
    **{("SUB", v): r for v, r in ((1, "1.6.0"), (2, "1.14.0"), (3, "2.3.0"), (4, "2.4.0"), (5, "2.4.0"))},
    **{("SUM", v): r for v, r in ((1, "1.10.0"), (2, "1.15.0"))},
    **{("TANH", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"), (3, "2.3.0"))},
    **{("TILE", v): r for v, r in ((1, "1.10.1"), (2, "2.2.0"), (3, "2.8.0"), (4, "2.12.0"))},
    **{
        ("TRANSPOSE", v): r
        for v, r in ((1, "1.6.0"), (2, "1.14.0"), (3, "1.15.0"), (4, "2.3.0"), (5, "2.4.0"), (6, "2.12.0"))
    },
    **{("TRANSPOSE_CONV", v): r for v, r in ((1, "1.9.0"), (2, "2.2.0"), (3, "2.3.0"), (4, "2.13.0"))},
    # the converter's other ops (tensorflow/lite/tools/versioning/runtime_version.cc)
    ("CUMSUM", 1): "2.4.0",
    **{("EMBEDDING_LOOKUP", v): r for v, r in ((1, "1.13.0"), (2, "1.14.0"), (3, "1.14.0"))},
    **{("EQUAL", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"), (3, "2.3.0"))},
    ("FLOOR_MOD", 1): "1.13.0",
    **{("GATHER_ND", v): r for v, r in ((1, "1.14.0"), (2, "2.3.0"), (3, "2.5.0"))},
    **{("GREATER", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"))},
    **{("LESS", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"))},
    ("LOGICAL_NOT", 1): "1.11.0",
    **{("NOT_EQUAL", v): r for v, r in ((1, "1.14.0"), (2, "1.14.0"), (3, "2.3.0"))},
    ("ONE_HOT", 1): "1.11.0",
    **{("REVERSE_V2", v): r for v, r in ((1, "1.14.0"), (2, "2.2.0"), (3, "2.5.0"))},
    ("SCATTER_ND", 1): "2.1.0",
    ("SELECT_V2", 1): "2.2.0",
    **{("SPLIT", v): r for v, r in ((1, "1.5.0"), (2, "1.14.0"), (3, "1.14.0"), (4, "2.3.0"))},
    **{("SQUARED_DIFFERENCE", v): r for v, r in ((1, "1.13.1"), (2, "2.5.0"))},
    **{("TOPK_V2", v): r for v, r in ((1, "1.7.0"), (2, "1.14.0"))},
}

#: The package a TFLite requirement names; its versions are TensorFlow's.
TFLITE_REQUIREMENT_PACKAGE = "tflite-runtime"
OPENVINO_PACKAGE = "openvino"
LITERT_PACKAGE = "ai-edge-litert"


@dataclass(frozen=True)
class MinVersion:
    """The oldest release that reads an artifact (``None``: cannot be dated) and what decided it."""

    version: str | None
    reason: str


def release_line(full: str) -> str:
    """``2026.4.1-22982-...`` -> ``2026.4``: the host runtime's release line."""
    match = re.match(r"(\d+)\.(\d+)", full)
    return f"{match.group(1)}.{match.group(2)}" if match else full


def _newest(candidates: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    best = None
    for version, why in candidates:
        if best is None or version_key(version) > version_key(best[0]):
            best = (version, why)
    return best


# ---------------------------------------------------------------------------------------------------
# OpenVINO IR


def openvino_ir_min_version(xml: str | bytes | Path) -> MinVersion:
    """The oldest OpenVINO release that reads this IR ``.xml`` (``version=None``: not datable)."""
    text = Path(xml).read_bytes() if isinstance(xml, Path) else xml
    root = ET.fromstring(text)
    found: list[tuple[str, str]] = []
    ir_version = int(root.get("version", "0") or 0)
    if ir_version not in OPENVINO_IR_RELEASES:
        return MinVersion(None, f"IR version {ir_version} is not in the table")
    found.append((OPENVINO_IR_RELEASES[ir_version], f"IR v{ir_version}"))
    opsets: dict[int, str] = {}
    for layer in root.iter("layer"):
        opset = layer.get("version", "opset1")
        match = re.fullmatch(r"opset(\d+)", opset)
        if not match or int(match.group(1)) not in OPENVINO_OPSET_RELEASES:
            return MinVersion(
                None, f"layer {layer.get('type')} is of operation set {opset!r}, not in the table"
            )
        opsets.setdefault(int(match.group(1)), str(layer.get("type")))
    for number, op in opsets.items():
        found.append((OPENVINO_OPSET_RELEASES[number], f"opset{number} ({op})"))
    for element in root.iter():
        for attr in _ELEMENT_TYPE_ATTRIBUTES:
            value = element.get(attr)
            if value is not None and value.lower() not in OPENVINO_BASE_ELEMENT_TYPES:
                return MinVersion(None, f"element type {value!r} is not in the table")
    newest = _newest(found)
    assert newest is not None  # the IR version is always there
    return MinVersion(newest[0], newest[1])


def openvino_requirements(xml: Path, host_version: str, blob: str | None = None) -> tuple[Requirement, ...]:
    """The ``openvino`` requirement of an IR (and of its compiled blob, scoped to that file)."""
    line = release_line(host_version)
    found = openvino_ir_min_version(xml)
    requirements = [Requirement(OPENVINO_PACKAGE, found.version or line)]
    if blob is not None:
        requirements.append(Requirement(OPENVINO_PACKAGE, line, file=blob))
    return tuple(requirements)


# ---------------------------------------------------------------------------------------------------
# TFLite


def tflite_op_codes(data: bytes) -> list[tuple[str, int]]:
    """(builtin op name, version) of every operator code of a ``.tflite`` flatbuffer."""
    from edgekit.targets.tflite.schema import fb

    model = fb.Model.GetRootAs(data, 0)
    names = {value: name for name, value in vars(fb.BuiltinOperator).items() if not name.startswith("_")}
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
        codes.append((names.get(builtin, f"BUILTIN_{builtin}"), int(code.Version() or 1)))
    return codes


def tflite_min_version(data: bytes) -> MinVersion:
    """The oldest TensorFlow Lite runtime (TF version) with every op version of this ``.tflite``."""
    found = []
    for op, version in tflite_op_codes(data):
        runtime = TFLITE_OP_RUNTIME.get((op, version))
        if runtime is None:
            return MinVersion(None, f"{op} version {version} is not in the table")
        found.append((runtime, f"{op} version {version}"))
    newest = _newest(found)
    if newest is None:
        return MinVersion(None, "the model has no operators")
    return MinVersion(newest[0], newest[1])


def tflite_requirements(data: bytes, host_litert_version: str) -> tuple[Requirement, ...]:
    """``tflite-runtime >= TF version`` from the ops; the host's ai-edge-litert when not datable."""
    found = tflite_min_version(data)
    if found.version is None:
        return (Requirement(LITERT_PACKAGE, release_line(host_litert_version)),)
    return (Requirement(TFLITE_REQUIREMENT_PACKAGE, found.version),)
