"""The compression recipes per model and target against fp32 and against the peers, in one run (issue 13).

    python benchmarks/compression.py [--shared ../shared] [--models rec,encoder,squeezenet,det]
                                     [--samples 50] [--runs 30] [--calib 16] [--md table.md]
                                     [--recipes fp32,w8]
    (models: rec, encoder, encoder-full, squeezenet, det)

Per model and target, every recipe of ``edgekit.quantize.recipes.RECIPES`` (a recipe the target does not run,
or that is not built yet, is a row saying so) and the peers:

- ONNX (onnxruntime CPU, default graph optimizations): ``edgekit quantize --precision R``; peer onnxruntime's
  ``quantize_dynamic`` (int8 weights, activations quantized on the fly; its defaults).
- arm-cpu (LiteRT interpreter, default XNNPACK delegate): ``arm-cpu`` bundles of each recipe; peers
  ai-edge-quantizer's weight-only (DEQUANTIZE + float kernels) and dynamic (hybrid kernels) int8 / int4
  recipes run on our fp32 .tflite (the benchmark's own ``.venv`` only: never a dependency).
- intel-vpu (OpenVINO CPU plugin, f32 inference precision): ``intel-vpu`` bundles; peers NNCF
  ``compress_weights`` INT8_SYM and INT4_SYM (group 32) on the fp32 IR.

Columns: artifact size and its ratio to the fp32 artifact of the same target; against the fp32 ONNX model
(onnxruntime) on the same inputs: the largest error over the output's range, cosine similarity (all samples
concatenated), and agreement (top-1 per image for SqueezeNet; for the PP-OCRv4 recogniser the decoded
sequence: argmax over the classes per time step, CTC collapse, blanks dropped, equal sequences); median
latency of ``--runs`` runs on one sample, 2 threads, after a warm-up. Inputs: PP-OCRv4 rec, rendered text
lines (PIL's default font, random letters and digits, seeded: the shared photos hold no text, on which the
recogniser decodes nothing); the encoder, seeded token ids and padding masks; SqueezeNet and PP-OCRv4 det,
the shared photos. Calibrated recipes (int8, int16x8) calibrate on ``--calib`` other inputs of the same kind;
the weight-only ones (``+calib``) use them to correct biases, and their ONNX rows are also given data-free.
"""

from __future__ import annotations

import argparse
import json
import statistics
import string
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from shared_data import default_shared  # noqa: E402

THREADS = 2
TARGETS = ("onnx", "arm-cpu", "intel-vpu")


@dataclass
class Case:
    name: str
    path: Path
    shapes: dict[str, tuple[int, ...]] | None
    kind: str  # "sequence" | "classifier" | "tensor"
    inputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    calib: list[dict[str, np.ndarray]] = field(default_factory=list)


def text_lines(count: int, seed: int, height: int = 48, width: int = 320) -> list[dict[str, np.ndarray]]:
    """Rendered text lines in PP-OCRv4 rec's preprocessing (BGR, /255, mean 0.5, std 0.5, NCHW)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    alphabet = list(string.ascii_letters + string.digits)
    out = []
    for _ in range(count):
        text = "".join(rng.choice(alphabet, int(rng.integers(4, 14))))
        size = int(rng.integers(22, 34))
        background = tuple(int(v) for v in rng.integers(170, 256, 3))
        ink = tuple(int(v) for v in rng.integers(0, 80, 3))
        image = Image.new("RGB", (width, height), background)
        ImageDraw.Draw(image).text(
            (int(rng.integers(2, 20)), (height - size) // 2 - 2),
            text,
            fill=ink,
            font=ImageFont.load_default(size),
        )
        bgr = np.asarray(image, np.float32)[:, :, ::-1] / 255.0
        out.append({"x": np.ascontiguousarray(((bgr - 0.5) / 0.5).transpose(2, 0, 1)[None])})
    return out


#: Words for :func:`word_lines`: common English words and what receipts and signs print.
_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not this are or from at which but have an they you were "
    "there been one all we their has would when if so no will more can said who about into than them only other new "
    "some could time these two may first then any like now over such our even most made after also did many before "
    "must through back years where much your way well down should because each just those people how little state "
    "good very make world still own see work long here between both life being under never day same another know "
    "while last might great old year off come since against right used take three invoice total price date order "
    "number street road city station open close north south east west hotel bank market coffee ticket receipt"
)
WORDS = _WORD_TEXT.split()


def word_lines(count: int, seed: int, height: int = 48, width: int = 320) -> list[dict[str, np.ndarray]]:
    """Rendered lines of one to three words (and a number on some) in matplotlib's DejaVu TrueType faces, sans,
    serif and mono: text a recogniser is sure of, unlike :func:`text_lines`' random letters (l / I / 1, O / 0), on
    which it hesitates at a few steps. PP-OCRv4 rec's preprocessing, as :func:`text_lines`."""
    import matplotlib
    from PIL import Image, ImageDraw, ImageFont

    fonts = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    faces = [fonts / f for f in ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf")]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        words = [str(rng.choice(WORDS)) for _ in range(int(rng.integers(1, 4)))]
        if rng.random() < 0.3:
            words.append(str(int(rng.integers(1, 9999))))
        size = int(rng.integers(24, 34))
        font = ImageFont.truetype(str(faces[int(rng.integers(0, len(faces)))]), size)
        text = " ".join(words)
        background = tuple(int(v) for v in rng.integers(170, 256, 3))
        ink = tuple(int(v) for v in rng.integers(0, 80, 3))
        image = Image.new("RGB", (width, height), background)
        draw = ImageDraw.Draw(image)
        if draw.textlength(text, font=font) > width - 16:
            text = words[0]
        draw.text((int(rng.integers(2, 12)), (height - size) // 2 - 2), text, fill=ink, font=font)
        bgr = np.asarray(image, np.float32)[:, :, ::-1] / 255.0
        out.append({"x": np.ascontiguousarray(((bgr - 0.5) / 0.5).transpose(2, 0, 1)[None])})
    return out


def photos(shared: Path, model, preprocess: dict, start: int, count: int) -> list[dict[str, np.ndarray]]:
    from edgekit.core.data import ImagePreprocess, input_specs, open_dataset

    pre = ImagePreprocess.from_json(preprocess)
    data = open_dataset(shared / "data" / "imagenet-sample-200", input_specs(model), pre, limit=start + count)
    return [dict(s.inputs) for i, s in enumerate(data) if i >= start]


def full_encoder(folder: Path) -> Path:
    """The zoo's BERT-style encoder at full size (vocab 30522, hidden 384, 6 layers, sequence 128), exported with
    torch (``benchmarks/zoo/transformers.py``, dev-only)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "zoo"))
    import transformers as zoo_transformers

    path = folder / "bert_full_op17.onnx"
    if not path.exists():
        zoo_transformers.export_bert(path, 17, full=True)
    return path


def cases(
    shared: Path, names: Sequence[str], samples: int, calib: int, folder: Path, rec_data: str = "words"
) -> list[Case]:
    from edgekit.core.model import load_model
    from edgekit.targets.base import default_verify_samples

    models = shared / "models"
    all_cases = {
        "rec": Case(
            "PP-OCRv4 rec", models / "ch_PP-OCRv4_rec_infer.onnx", {"x": (1, 3, 48, 320)}, "sequence"
        ),
        "encoder": Case(
            "BERT-style encoder (zoo, tiny)", ROOT / "tests/zoo/models/bert_tiny_op17.onnx", None, "tensor"
        ),
        "encoder-full": Case("BERT-style encoder (zoo, full)", Path(), None, "tensor"),
        "squeezenet": Case("SqueezeNet 1.1", models / "squeezenet1.1-fp32.onnx", None, "classifier"),
        "det": Case("PP-OCRv4 det", models / "ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, 320, 320)}, "tensor"),
    }
    out = []
    for name in names:
        case = all_cases[name]
        if name == "encoder-full":
            case.path = full_encoder(folder)
        model = load_model(case.path, case.shapes)
        if name == "rec":
            lines = word_lines if rec_data == "words" else text_lines
            case.inputs, case.calib = lines(samples, seed=0), lines(calib, seed=1)
        elif name.startswith("encoder"):
            case.inputs = list(default_verify_samples(model, samples, seed=0))
            case.calib = list(default_verify_samples(model, calib, seed=1))
        else:
            pre = (
                {"color": "BGR", "scale": 1.0, "mean": [104.0, 117.0, 123.0]}
                if name == "squeezenet"
                else {
                    "color": "BGR",
                    "scale": 1 / 255,
                    "mean": [0.485, 0.456, 0.406],
                    "std": [0.229, 0.224, 0.225],
                }
            )
            case.inputs = photos(shared, model, pre, 0, samples)
            case.calib = photos(shared, model, pre, samples, calib)
        out.append(case)
    return out


# ------------------------------------------------------------------------------------------------- metrics


def ctc_decode(probabilities: np.ndarray) -> tuple[int, ...]:
    ids = probabilities.reshape(-1, probabilities.shape[-1]).argmax(-1)
    kept, previous = [], -1
    for i in ids:
        if i != previous and i != 0:
            kept.append(int(i))
        previous = i
    return tuple(kept)


def figures(case: Case, reference: list[np.ndarray], actual: list[np.ndarray]) -> dict[str, Any]:
    ref = np.concatenate([r.ravel() for r in reference]).astype(np.float64)
    got = np.concatenate([a.ravel() for a in actual]).astype(np.float64)
    span = float(ref.max() - ref.min()) or 1.0
    out = {
        "max_rel_error": float(np.abs(ref - got).max() / span),
        "cosine": float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got))),
    }
    if case.kind == "sequence":
        out["agreement"] = float(
            np.mean([ctc_decode(r) == ctc_decode(a) for r, a in zip(reference, actual, strict=True)])
        )
    elif case.kind == "classifier":
        out["agreement"] = float(
            np.mean([r.argmax() == a.argmax() for r, a in zip(reference, actual, strict=True)])
        )
    return out


def median_ms(run: Callable[[], Any], runs: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


# ------------------------------------------------------------------------------------------------- runners


class OrtRunner:
    def __init__(self, model: onnx.ModelProto | Path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = THREADS
        data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
        self.session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        self.output = self.session.get_outputs()[0].name

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        names = {i.name for i in self.session.get_inputs()}
        return self.session.run([self.output], {k: v for k, v in feeds.items() if k in names})[0]


class LiteRtRunner:
    def __init__(self, data: bytes, manifest_inputs: list[dict] | None = None):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_content=data, num_threads=THREADS)
        self.interpreter.allocate_tensors()
        self.inputs = self.interpreter.get_input_details()
        self.output = self.interpreter.get_output_details()[0]
        self.layouts = {s["name"]: s.get("layout") for s in manifest_inputs or []}

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        for detail in self.inputs:
            name = detail["name"]
            key = next((k for k in feeds if k == name or name.endswith(k) or k in name), None)
            array = np.asarray(feeds[key])
            if array.ndim == 4 and tuple(detail["shape"]) != array.shape:
                array = array.transpose(0, 2, 3, 1)  # NHWC input
            self.interpreter.set_tensor(detail["index"], array.astype(detail["dtype"]))
        self.interpreter.invoke()
        out = self.interpreter.get_tensor(self.output["index"])
        return out

    def onnx_layout(self, out: np.ndarray, like: np.ndarray) -> np.ndarray:
        if out.shape != like.shape and out.ndim == 4:
            return out.transpose(0, 3, 1, 2)
        return out


class OpenVinoRunner:
    def __init__(self, xml: Path):
        import openvino as ov

        config = {
            "INFERENCE_NUM_THREADS": str(THREADS),
            "INFERENCE_PRECISION_HINT": "f32",
            "PERFORMANCE_HINT": "LATENCY",
        }
        self.compiled = ov.Core().compile_model(str(xml), "CPU", config)
        self.request = self.compiled.create_infer_request()

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        inputs = {}
        for port in self.compiled.inputs:
            name = next(n for n in port.get_names() if n in feeds)
            inputs[port] = feeds[name]
        return np.array(self.request.infer(inputs)[self.compiled.outputs[0]])


def _size(paths: Sequence[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


# ------------------------------------------------------------------------------------------------- artifacts


def edgekit_onnx(case: Case, recipe: str, folder: Path, calibrated: bool = True) -> Path:
    """``edgekit quantize --precision recipe`` (with ``--calib``: the calibrated recipes need it, the weight-only
    ones use it to correct biases; ``calibrated=False``: the weight-only recipes data-free)."""
    from edgekit.api import quantize_model
    from edgekit.core.model import load_model, save_model
    from edgekit.quantize.options import QuantizeOptions

    path = folder / f"{recipe}{'' if calibrated else '-datafree'}.onnx"
    if path.exists():
        return path
    if recipe == "fp32":
        import onnx_ir as ir

        save_model(ir.to_proto(load_model(case.path, case.shapes)), path)
        return path
    calib = [SimpleNamespace(inputs=s, label=None) for s in case.calib] if calibrated else None
    options = QuantizeOptions(precision=recipe, samples=len(case.calib))
    quantize_model(case.path, calib, options=options, output=path, input_shapes=case.shapes)
    return path


def bundle(case: Case, target: str, recipe: str, folder: Path) -> Path:
    """The bundle of ``recipe`` for ``target`` (the recipe's ONNX, or fp32 for fp32/fp16) through the target."""
    from edgekit.core.model import load_model
    from edgekit.targets.base import PackageOptions, get_target

    t = get_target(target)
    t.check_precision(recipe)
    source = edgekit_onnx(case, "fp32" if recipe in ("fp32", "fp16") else recipe, folder)
    model = load_model(source)
    target_options = None
    if target == "intel-vpu":
        from edgekit.targets.openvino_ir import IntelVpuOptions

        target_options = IntelVpuOptions(compress_to_fp16=recipe != "fp32", compile_npu=False)
    options = PackageOptions(
        verify_samples=tuple(case.calib[:3]), precision=recipe, target_options=target_options
    )
    return t.package(model, folder / f"{target}-{recipe}", options)


def litert_artifact(folder: Path) -> tuple[bytes, list[dict]]:
    manifest = json.loads((folder / "manifest.json").read_text())
    return (folder / "model.tflite").read_bytes(), manifest["inputs"]


def aeq(fp32_tflite: bytes, which: str) -> bytes:
    from ai_edge_quantizer import quantizer, recipe

    q = quantizer.Quantizer(bytearray(fp32_tflite))
    q.load_quantization_recipe(getattr(recipe, which)())
    return bytes(q.quantize(enable_progress_report=False).quantized_model)


def nncf_ir(fp32_xml: Path, mode: str, folder: Path) -> Path:
    import nncf
    import openvino as ov

    model = ov.Core().read_model(str(fp32_xml))
    kwargs: dict[str, Any] = {"mode": getattr(nncf.CompressWeightsMode, mode)}
    if mode.startswith("INT4"):
        kwargs.update(group_size=32, ratio=1.0)
    compressed = nncf.compress_weights(model, **kwargs)
    out = folder / f"nncf-{mode}.xml"
    ov.save_model(compressed, str(out), compress_to_fp16=False)
    return out


# ------------------------------------------------------------------------------------------------- the run


def recipe_applied(recipe: str, model: onnx.ModelProto) -> bool:
    """Whether ``edgekit quantize --precision recipe`` wrote that recipe (not yet built ones fall back)."""
    types = {t.data_type for t in model.graph.initializer}
    ops = {n.op_type for n in model.graph.node}
    wanted = {
        "fp32": "DequantizeLinear" not in ops and onnx.TensorProto.FLOAT16 not in types,
        "fp16": onnx.TensorProto.FLOAT16 in types,
        "int8": "QuantizeLinear" in ops and onnx.TensorProto.INT16 not in types,
        "int16x8": onnx.TensorProto.INT16 in types,
        "w8": "DequantizeLinear" in ops and "QuantizeLinear" not in ops,
        "w4": "DequantizeLinear" in ops and "QuantizeLinear" not in ops,
    }
    return wanted.get(recipe, True)


def measure(
    case: Case, reference, runner, size: int, base: int | None, runs: int, post=None
) -> dict[str, Any]:
    outputs = []
    for feeds, ref in zip(case.inputs, reference, strict=True):
        out = runner(feeds)
        outputs.append(post(out, ref) if post else out)
    row = {"size": size, "ratio": size / base if base else 1.0, **figures(case, reference, outputs)}
    row["latency_ms"] = median_ms(lambda: runner(case.inputs[0]), runs)
    return row


def _failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def run_case(
    case: Case, targets: Sequence[str], runs: int, folder: Path, log, recipes: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    from edgekit.quantize.recipes import RECIPES
    from edgekit.targets.base import get_target

    chosen = [r for r in RECIPES if recipes is None or r in recipes or r == "fp32"]  # fp32: the size base

    reference = [
        OrtRunner(case.path if not case.shapes else edgekit_onnx(case, "fp32", folder))(s)
        for s in case.inputs
    ]
    table: dict[str, dict[str, Any]] = {}

    def row(target: str, label: str, make: Callable[[], dict[str, Any]]) -> None:
        try:
            table[f"{target}|{label}"] = make()
        except NotBuilt as exc:
            table[f"{target}|{label}"] = {"note": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a failed row is a result
            table[f"{target}|{label}"] = {"note": f"failed: {_failure(exc)}"}
            if "--debug" in sys.argv:
                traceback.print_exc()
        log(f"  {target:9s} {label:28s} {summary(table[f'{target}|{label}'])}")

    fp32_onnx = edgekit_onnx(case, "fp32", folder)
    if "onnx" in targets:
        base = fp32_onnx.stat().st_size
        for recipe in chosen:

            def onnx_row(recipe=recipe):
                path = edgekit_onnx(case, recipe, folder)
                if not recipe_applied(recipe, onnx.load(path)):
                    raise NotBuilt("n/a (not built: `edgekit quantize --precision` ignored it)")
                return measure(case, reference, OrtRunner(path), path.stat().st_size, base, runs)

            row("onnx", f"edgekit {recipe}" + (" +calib" if recipe in ("w8", "w4") else ""), onnx_row)
            if recipe in ("w8", "w4"):

                def datafree_row(recipe=recipe):
                    path = edgekit_onnx(case, recipe, folder, calibrated=False)
                    return measure(case, reference, OrtRunner(path), path.stat().st_size, base, runs)

                row("onnx", f"edgekit {recipe} data-free", datafree_row)

        def ort_dynamic():
            from onnxruntime.quantization import QuantType, quantize_dynamic

            out = folder / "ort_dynamic.onnx"
            quantize_dynamic(str(fp32_onnx), str(out), weight_type=QuantType.QInt8)
            return measure(case, reference, OrtRunner(out), out.stat().st_size, base, runs)

        row("onnx", "peer ORT quantize_dynamic", ort_dynamic)

    if "arm-cpu" in targets:
        base_holder: dict[str, Any] = {}
        for recipe in chosen:

            def tflite_row(recipe=recipe):
                why = get_target("arm-cpu").precisions.get(recipe, "not supported")
                if why is not None:
                    raise NotBuilt(f"n/a ({why})")
                path = bundle(case, "arm-cpu", recipe, folder)
                data, inputs = litert_artifact(path)
                if recipe == "fp32":
                    base_holder["data"] = data
                runner = LiteRtRunner(data, inputs)
                base = len(base_holder["data"]) if "data" in base_holder else None
                result = measure(case, reference, runner, len(data), base, runs, runner.onnx_layout)
                if recipe in ("w8", "w4"):
                    verification = json.loads((path / "manifest.json").read_text())["verification"]
                    result["kernels"] = verification.get("weight_only_kernels", "hybrid")
                return result

            row("arm-cpu", f"edgekit {recipe}" + (" +calib" if recipe in ("w8", "w4") else ""), tflite_row)
        for which in (
            "weight_only_wi8_afp32",
            "dynamic_wi8_afp32",
            "weight_only_wi4_afp32",
            "dynamic_wi4_afp32",
        ):

            def aeq_row(which=which):
                if "data" not in base_holder:
                    raise NotBuilt("n/a (no fp32 .tflite)")
                data = aeq(base_holder["data"], which)
                runner = LiteRtRunner(data)
                return measure(
                    case, reference, runner, len(data), len(base_holder["data"]), runs, runner.onnx_layout
                )

            row("arm-cpu", f"peer AEQ {which}", aeq_row)

    if "intel-vpu" in targets:
        base_holder = {}
        for recipe in chosen:

            def ir_row(recipe=recipe):
                why = get_target("intel-vpu").precisions.get(recipe, "not supported")
                if why is not None:
                    raise NotBuilt(f"n/a ({why})")
                path = bundle(case, "intel-vpu", recipe, folder)
                xml = path / "model.xml"
                size = _size([xml, path / "model.bin"])
                if recipe == "fp32":
                    base_holder.update(xml=xml, size=size)
                return measure(case, reference, OpenVinoRunner(xml), size, base_holder.get("size"), runs)

            row("intel-vpu", f"edgekit {recipe}" + (" +calib" if recipe in ("w8", "w4") else ""), ir_row)
        for mode in ("INT8_SYM", "INT4_SYM"):

            def nncf_row(mode=mode):
                if "xml" not in base_holder:
                    raise NotBuilt("n/a (no fp32 IR)")
                xml = nncf_ir(base_holder["xml"], mode, folder)
                size = _size([xml, xml.with_suffix(".bin")])
                return measure(case, reference, OpenVinoRunner(xml), size, base_holder["size"], runs)

            row("intel-vpu", f"peer NNCF {mode}", nncf_row)
    return table


class NotBuilt(Exception):
    pass


def summary(row: dict[str, Any]) -> str:
    if "note" in row:
        return row["note"]
    agree = f"  agree {100 * row['agreement']:.1f} %" if "agreement" in row else ""
    agree += f"  ({row['kernels']} kernels)" if "kernels" in row else ""
    return (
        f"{row['size'] / 1e6:7.3f} MB ({row['ratio']:.3f}x)  max err {row['max_rel_error']:.2e}  "
        f"cos {row['cosine']:.5f}{agree}  {row['latency_ms']:.2f} ms"
    )


def weight_ratio(case: Case, precision: str, ops: tuple[str, ...]) -> float:
    """The stored size of the ``ops`` weights in the recipe's ONNX over their fp32 size (the quantize report)."""
    from edgekit.api import quantize_model
    from edgekit.quantize.options import QuantizeOptions

    report = quantize_model(
        case.path, options=QuantizeOptions(precision=precision), input_shapes=case.shapes
    ).report
    rows = [r for r in report["quantization"]["weight_rows"] if r["op_type"] in ops]
    return sum(r["bytes"] for r in rows) / sum(r["fp32_bytes"] for r in rows)


def markdown(results: dict[str, dict[str, dict[str, Any]]], header: str) -> str:
    lines = [header, ""]
    for case, table in results.items():
        lines += [
            f"**{case}**",
            "",
            "| target | recipe / peer | size | x fp32 | max err / range | cosine | agreement | p50 ms |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, row in table.items():
            target, label = key.split("|")
            if "note" in row:
                lines.append(f"| {target} | {label} | {row['note']} | | | | | |")
                continue
            agree = f"{100 * row['agreement']:.1f} %" if "agreement" in row else "-"
            if "kernels" in row:
                label += f" ({row['kernels']} kernels)"
            lines.append(
                f"| {target} | {label} | {row['size'] / 1e6:.3f} MB | {row['ratio']:.3f} | {row['max_rel_error']:.2e} "
                f"| {row['cosine']:.5f} | {agree} | {row['latency_ms']:.2f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--models", default="rec,encoder,encoder-full,squeezenet,det")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--samples", type=int, default=50, help="inputs compared per model")
    parser.add_argument("--calib", type=int, default=16, help="calibration inputs (calibrated recipes)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per artifact")
    parser.add_argument("--recipes", help="only these recipes (comma-separated; fp32 always runs)")
    parser.add_argument("--md", type=Path, help="also write the table as Markdown here")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON here")
    parser.add_argument(
        "--rec-data",
        choices=("words", "text"),
        default="words",
        help="PP-OCRv4 rec's lines: words in DejaVu faces (default) or random letters (word_lines / text_lines)",
    )
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    targets = [t for t in args.targets.split(",") if t]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    extra: list[str] = []
    with tempfile.TemporaryDirectory(prefix="edgekit-compression-") as tmp:
        for case in cases(args.shared, names, args.samples, args.calib, Path(tmp), args.rec_data):
            print(f"{case.name} ({case.path.name}, {len(case.inputs)} inputs)", flush=True)
            folder = Path(tmp) / case.name.replace(" ", "_")
            folder.mkdir()
            recipes = args.recipes.split(",") if args.recipes else None
            results[case.name] = run_case(
                case, targets, args.runs, folder, lambda s: print(s, flush=True), recipes
            )
            if case.path.name.startswith("bert"):
                dense = ("MatMul", "Gemm")
                for precision in ("w8", "w4"):
                    ratio = weight_ratio(case, precision, dense)
                    extra.append(
                        f"{case.name}: {precision} MatMul/Gemm weights {ratio:.3f}x their fp32 size (ONNX)"
                    )
                    print(f"  {extra[-1]}")
    import importlib.metadata

    import onnxruntime
    import openvino

    header = (
        f"`python benchmarks/compression.py {' '.join(sys.argv[1:])}`: onnxruntime "
        f"{onnxruntime.__version__}, ai-edge-litert {importlib.metadata.version('ai-edge-litert')}, "
        f"OpenVINO {openvino.get_version()}, {THREADS} threads."
    )
    text = markdown(results, header) + "\n" + "\n".join(f"- {e}" for e in extra) + "\n"
    if args.md:
        args.md.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
