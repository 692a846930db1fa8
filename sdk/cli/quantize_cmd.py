"""``edgekit quantize``: calibrated int8 post-training quantization to QDQ ONNX, or the fp16 recipe."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from edgekit.cli.common import (
    RichTrack,
    build_preprocess,
    console,
    err_console,
    parse_input_shapes,
    parse_layer_precision,
)
from rich.table import Table

INTEGER_HEAD_HELP = (
    "Quantize the output head too (a Softmax/Sigmoid model output and the global pooling before it): about 2 % "
    "faster on SqueezeNet in LiteRT, but close top scores can then tie."
)

# Options shared with `edgekit deploy` (image preprocessing for image-folder data).
Size = Annotated[
    str | None, typer.Option("--size", help="Resize images to H,W (default: the model input's).")
]
ResizeMode = Annotated[
    str, typer.Option("--resize-mode", help="resize | shorter-side-crop (shorter side, then center crop).")
]
ResizeShorter = Annotated[int | None, typer.Option("--resize-shorter", help="Shorter side before the crop.")]
Color = Annotated[str, typer.Option("--color", help="Channel order of images: RGB, BGR or GRAY.")]
Scale = Annotated[float, typer.Option("--scale", help="Multiply 0..255 pixel values by this.")]
Mean = Annotated[str | None, typer.Option("--mean", help="Per-channel mean to subtract, e.g. 104,117,123.")]
Std = Annotated[str | None, typer.Option("--std", help="Per-channel std to divide by.")]
Layout = Annotated[str, typer.Option("--layout", help="NCHW or NHWC.")]
InputShape = Annotated[
    list[str] | None, typer.Option("--input-shape", help="Fix dynamic dims: NAME=1,3,224,224 (repeatable).")
]


def register(app: typer.Typer) -> None:
    app.command("quantize")(quantize)


def quantize(
    model: Annotated[Path, typer.Argument(help="The fp32 ONNX model.")],
    calib: Annotated[
        str | None,
        typer.Option(
            "--calib",
            help="Calibration data: .npz, .npy or a folder of images (calibrated recipes; w8/w4: optional, corrects biases).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The QDQ ONNX model to write (default MODEL.int8.onnx)."),
    ] = None,
    eval_data: Annotated[
        str | None, typer.Option("--eval", help="Evaluation data: compare fp32 and int8 on the host.")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write the JSON report here.")] = None,
    method: Annotated[str, typer.Option("--method", help="minmax | percentile | entropy | mse")] = "minmax",
    samples: Annotated[int, typer.Option("--samples", help="Calibration samples to use.")] = 100,
    activations: Annotated[
        str,
        typer.Option(
            "--activations",
            help="uint8 (default: the file runs right on onnxruntime and OpenVINO) or int8 (TFLite's scheme).",
        ),
    ] = "uint8",
    percentile: Annotated[
        float, typer.Option("--percentile", help="Kept percentile (percentile method).")
    ] = 99.999,
    bias_correction: Annotated[
        bool, typer.Option("--bias-correction", help="Biases absorb the mean shift of weight rounding.")
    ] = False,
    exclude: Annotated[list[str] | None, typer.Option("--exclude", help="Keep this node in float.")] = None,
    layer_precision: Annotated[
        list[str] | None,
        typer.Option(
            "--layer-precision", help="NAME=RECIPE: this node takes int8, int16x8 or fp32 (repeatable)."
        ),
    ] = None,
    integer_head: Annotated[bool, typer.Option("--integer-head", help=INTEGER_HEAD_HELP)] = False,
    precision: Annotated[
        str,
        typer.Option(
            "--precision",
            help="int8 (8-bit activations), int16x8 (int16 activations, int8 weights), fp16 (float16 weights "
            "and compute, no calibration data), w8 / w4 (weight-only int8 / blockwise int4, float activations; "
            "--calib optional, corrects biases).",
        ),
    ] = "int8",
    max_samples: Annotated[
        int | None, typer.Option("--max-samples", help="Evaluate at most N samples.")
    ] = None,
    input_shape: InputShape = None,
    size: Size = None,
    resize_mode: ResizeMode = "resize",
    resize_shorter: ResizeShorter = None,
    color: Color = "RGB",
    scale: Scale = 1.0,
    mean: Mean = None,
    std: Std = None,
    layout: Layout = "NCHW",
    block_size: Annotated[
        int, typer.Option("--block-size", help="w4: weights per int4 scale along the input dim (32|64|128).")
    ] = 32,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Post-training quantization of an ONNX model (standard ONNX out): calibrated int8 QDQ, or weight-only."""
    from edgekit.api import quantize_model
    from edgekit.errors import DataError
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.recipes import get_recipe

    options = QuantizeOptions(
        activations=activations,
        method=method,
        samples=samples,
        percentile=percentile,
        bias_correction=bias_correction,
        float_output_heads=not integer_head,
        exclude=frozenset(exclude or ()),
        precision=precision,
        layer_precision=parse_layer_precision(layer_precision),
        block_size=block_size,
    )
    if calib is None and get_recipe(precision).calibrated:
        raise DataError(f"--precision {precision} needs calibration data: pass --calib DATA")
    preprocess = build_preprocess(size, resize_mode, resize_shorter, color, scale, mean, std, layout)
    out = (
        output
        if output is not None
        else model.with_name(model.name.removesuffix(".onnx") + f".{precision}.onnx")
    )
    messages: list[str] = []
    result = quantize_model(
        model,
        calib,
        options=options,
        eval_data=eval_data,
        output=out,
        report_path=report,
        input_shapes=parse_input_shapes(input_shape),
        preprocess=preprocess,
        eval_limit=max_samples,
        track=RichTrack(enabled=not quiet),
        messages=messages,
    )
    for message in messages:
        err_console.print(f"[yellow]note:[/] {message}")
    if precision == "fp16":
        print_fp16_summary(result.report)
    else:
        print_summary(result.report)


def _fmt(value, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "exact" if unit == " dB" else "-"
    return f"{value:.{digits}f}{unit}"


def print_fp16_summary(report: dict) -> None:
    """The fp16 model: size, the nodes kept in float32, and its verification against fp32."""
    q, v, out = report["quantization"], report["verification"], report["output"]
    worst = max((o["max_rel_error"] for o in v["outputs"].values()), default=0.0)
    console.print(
        f"fp16 model: {out['size_bytes']:,} bytes ({out['size_ratio']:.2f}x), {q['converted_weights']} weight(s) "
        f"in float16, {len(q['float32_nodes'])} node(s) kept in float32, {q['casts']} Cast(s)"
    )
    for node in q["float32_nodes"][:8]:
        console.print(f"  float32: {node['op_type']} {node['node']!r}: {node['reason']}")
    mark = "[green]✓[/]" if v["passed"] else "[yellow]![/]"
    console.print(f"{mark} vs fp32 on {v['samples']} sample(s): max error {worst:.2e} of the output range")
    evaluation = report.get("evaluation")
    if evaluation:
        agreement = evaluation.get("top1_agreement")
        if agreement is not None:
            console.print(
                f"top-1 agreement with fp32: {agreement:.2f} % on {evaluation['samples']} sample(s)"
            )
    if out["path"]:
        console.print(f"wrote {out['path']}")


def print_summary(report: dict) -> None:
    out = report["output"]
    q = report["quantization"]
    if q.get("weight_size_ratio") is not None:
        _print_weight_only(report)
        return
    name = q.get("precision", "int8")
    activations = "int16" if name == "int16x8" else q["activations"]
    console.print(
        f"[bold]wrote[/] {out['path']}  ({out['size_bytes'] / 1e6:.2f} MB, "
        f"{out['size_ratio']:.3f}x the fp32 model)  activations {activations}, method {q['method']}, "
        f"{report['calibration']['samples_used']} calibration samples"
    )
    evaluation = report.get("evaluation")
    if evaluation:
        runtime = "onnxruntime" if name == "int16x8" else "OpenVINO f32"
        table = Table(title=f"fp32 vs {name} on {evaluation['samples']} samples (host, {runtime})")
        table.add_column("metric")
        table.add_column("fp32", justify="right")
        table.add_column(name, justify="right")
        table.add_column("change", justify="right")
        acc = evaluation.get("accuracy")
        if acc:
            for k in ("top1", "top5"):
                table.add_row(
                    f"{k} accuracy %",
                    _fmt(acc[f"reference_{k}"]),
                    _fmt(acc[f"candidate_{k}"]),
                    f"{0.0 - acc[f'{k}_drop_pp'] + 0.0:+.2f} pp",
                )
        if "top1_agreement" in evaluation:
            table.add_row("top-1 agreement with fp32 %", "", _fmt(evaluation["top1_agreement"]), "")
        for name, m in evaluation["outputs"].items():
            table.add_row(f"{name}: cosine", "", _fmt(m["cosine"], 5), "")
            table.add_row(f"{name}: SQNR", "", _fmt(m["sqnr_db"], 1, " dB"), "")
            table.add_row(f"{name}: max abs error", "", _fmt(m["max_abs_error"], 4), "")
        console.print(table)
        worst = Table(title="worst layers (SQNR of each quantized activation vs fp32)")
        worst.add_column("tensor")
        worst.add_column("SQNR", justify="right")
        worst.add_column("cosine", justify="right")
        for row in report["worst_layers"]:
            worst.add_row(row["tensor"], _fmt(row["sqnr_db"], 1, " dB"), _fmt(row["cosine"], 4))
        console.print(worst)
    if q["float_ops"]:
        floats = Table(title="ops kept in float")
        floats.add_column("node")
        floats.add_column("op")
        floats.add_column("reason")
        for f in q["float_ops"]:
            floats.add_row(f["node"], f["op_type"], f["reason"])
        console.print(floats)


def _print_weight_only(report: dict) -> None:
    out, q = report["output"], report["quantization"]
    console.print(
        f"[bold]wrote[/] {out['path']}  ({out['size_bytes'] / 1e6:.2f} MB, {out['size_ratio']:.3f}x the fp32 "
        f"model)  {q['precision']}: {q['quantized_weights']} weights {q['weights']}, "
        f"{q['weight_size_ratio']:.3f}x their fp32 size; activations float"
    )
    evaluation = report.get("evaluation")
    if evaluation:
        table = Table(
            title=f"fp32 vs {q['precision']} on {evaluation['samples']} samples (host, OpenVINO f32)"
        )
        table.add_column("metric")
        table.add_column(q["precision"], justify="right")
        if "top1_agreement" in evaluation:
            table.add_row("top-1 agreement with fp32 %", _fmt(evaluation["top1_agreement"]))
        for name, m in evaluation["outputs"].items():
            table.add_row(f"{name}: cosine", _fmt(m["cosine"], 5))
            table.add_row(f"{name}: SQNR", _fmt(m["sqnr_db"], 1, " dB"))
            table.add_row(f"{name}: max abs error", _fmt(m["max_abs_error"], 4))
        console.print(table)
    if q["float_weights"]:
        floats = Table(title="weights not in the recipe")
        floats.add_column("node")
        floats.add_column("op")
        floats.add_column("reason")
        for f in q["float_weights"]:
            floats.add_row(f["node"], f["op_type"], f["reason"])
        console.print(floats)
