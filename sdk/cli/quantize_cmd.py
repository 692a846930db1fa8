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
WeightRounding = Annotated[
    str,
    typer.Option(
        "--weight-rounding",
        help="int8 / int16x8 weights: nearest (default) or gptq (each Conv/MatMul/Gemm weight row rounded to "
        "minimise the layer's output error on the calibration inputs; same scales; slower calibration).",
    ),
]
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


# Accuracy budget options shared with `edgekit deploy` (issue 14).
MaxDrop = Annotated[
    float | None,
    typer.Option(
        "--max-drop", help="Restore the fewest layers so that top-1 drops at most PP points (labels)."
    ),
]
MinAgreement = Annotated[
    float | None,
    typer.Option(
        "--min-agreement",
        help="... so that the decoded argmax agrees with fp32 on at least PCT % of samples.",
    ),
]
MinCosine = Annotated[
    float | None,
    typer.Option("--min-cosine", help="... so that the outputs' mean cosine to fp32 is at least C."),
]
AccuracyData = Annotated[
    str | None,
    typer.Option("--accuracy-data", help="Data the budget is measured on (default: the --eval data)."),
]
Executor = Annotated[
    str,
    typer.Option("--executor", help="Where candidates run: process (local pool), ray, or ray://HOST:PORT."),
]
Workers = Annotated[
    int | None, typer.Option("--workers", help="Local pool size (default: the CPUs, at most 4).")
]
RankingSamples = Annotated[
    int,
    typer.Option("--ranking-samples", help="Accuracy samples the search ranks on (the whole set confirms)."),
]
AllowCpuFallback = Annotated[
    bool,
    typer.Option(
        "--allow-cpu-fallback", help="nnapi: layers int8 cannot save stay float on the CPU partition."
    ),
]


def search_options(
    max_drop: float | None,
    min_agreement: float | None,
    min_cosine: float | None,
    executor: str,
    workers: int | None,
    ranking_samples: int,
    allow_cpu_fallback: bool,
):
    """The budget and search options the flags give (None without a budget flag)."""
    from edgekit.core.errors import DataError
    from edgekit.quantize.accuracy import SearchOptions
    from edgekit.quantize.budget import budget_from_flags

    budget = budget_from_flags(max_drop, min_agreement, min_cosine)
    if budget is None:
        return None
    if ranking_samples < 1:
        raise DataError(f"--ranking-samples must be at least 1, got {ranking_samples}")
    if workers is not None and workers < 1:
        raise DataError(f"--workers must be at least 1, got {workers}")
    return SearchOptions(
        budget,
        executor=executor,
        workers=workers,
        ranking_samples=ranking_samples,
        allow_cpu_fallback=allow_cpu_fallback,
    )


def register(app: typer.Typer) -> None:
    app.command("quantize")(quantize)


def quantize(
    model: Annotated[Path, typer.Argument(help="The fp32 ONNX model.")],
    calib: Annotated[
        str | None,
        typer.Option(
            "--calib",
            help="Calibration data: .npz, .npy or a folder of images (calibrated recipes; w8/w4: optional, rounds the int8 weights by the data and corrects biases).",
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
    method: Annotated[
        str, typer.Option("--method", help="minmax | mean_minmax | percentile | entropy | mse")
    ] = "minmax",
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
    weight_rounding: WeightRounding = "nearest",
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
            "--calib optional: int8 weights rounded by the data (GPTQ), biases corrected).",
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
    max_drop: MaxDrop = None,
    min_agreement: MinAgreement = None,
    min_cosine: MinCosine = None,
    accuracy_data: AccuracyData = None,
    target: Annotated[
        str | None,
        typer.Option("--target", help="With a budget: restore only what this target runs ({targets})."),
    ] = None,
    executor: Executor = "process",
    workers: Workers = None,
    ranking_samples: RankingSamples = 50,
    allow_cpu_fallback: AllowCpuFallback = False,
    block_size: Annotated[
        int, typer.Option("--block-size", help="w4: weights per int4 scale along the input dim (32|64|128).")
    ] = 32,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Post-training quantization of an ONNX model (standard ONNX out): calibrated int8 QDQ, or weight-only."""
    from edgekit.api import quantize_model
    from edgekit.core.errors import DataError
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.recipes import get_recipe

    options = QuantizeOptions(
        activations=activations,
        method=method,
        samples=samples,
        percentile=percentile,
        bias_correction=bias_correction,
        weight_rounding=weight_rounding,
        float_output_heads=not integer_head,
        exclude=frozenset(exclude or ()),
        precision=precision,
        layer_precision=parse_layer_precision(layer_precision),
        block_size=block_size,
    )
    if calib is None and get_recipe(precision).calibrated:
        raise DataError(f"--precision {precision} needs calibration data: pass --calib DATA")
    search = search_options(
        max_drop, min_agreement, min_cosine, executor, workers, ranking_samples, allow_cpu_fallback
    )
    if search is None and (accuracy_data is not None or target is not None):
        from edgekit.core.errors import DataError

        flag = "--accuracy-data" if accuracy_data is not None else "--target"
        raise DataError(f"{flag} goes with an accuracy budget: --max-drop, --min-agreement or --min-cosine")
    if target is not None:
        from edgekit.targets.base import get_target

        get_target(target)  # an unknown name names the targets there are
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
        budget=search.budget if search is not None else None,
        accuracy_data=accuracy_data,
        search=search,
        target=target,
        say=(lambda line: console.print(line, soft_wrap=True, markup=False)) if not quiet else None,
    )
    for message in messages:
        err_console.print(f"[yellow]note:[/] {message}")
    section = result.report.get("accuracy_aware")
    if section and report is not None:
        from edgekit import accuracy_report
        from edgekit.core.model import atomic_write_bytes

        figure = accuracy_report.plot({section["target"]: section})
        png = report.with_suffix(".accuracy.png")
        import io

        buf = io.BytesIO()
        figure.savefig(buf, format="png", dpi=96, bbox_inches="tight")
        atomic_write_bytes(png, buf.getvalue())
        console.print(f"metric against layers restored: {png}", soft_wrap=True, markup=False)
    if precision == "fp16":
        print_fp16_summary(result.report)
    else:
        print_summary(result.report)
    # what onnxruntime / OpenVINO compute of the written file when not its values (quantize/recipes.FILE_RUNTIMES)
    note = result.report["runs_on"]["note"]
    if note:
        err_console.print(f"[yellow]note:[/] {note}", soft_wrap=True, highlight=False)


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
    accuracy = report.get("accuracy_aware")
    if accuracy:
        print_accuracy_summary(accuracy)
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
        # outputs whose rows the data sets (a detector's selection): rows matched with fp32's (metrics.match_rows)
        for name, m in (evaluation.get("selections") or {}).items():
            table.add_row(f"{name}: rows", str(m["reference_rows"]), str(m["candidate_rows"]), "")
            table.add_row(f"{name}: fp32 rows kept %", "", _fmt(m["recall"]), "")
            table.add_row(f"{name}: rows that are fp32's %", "", _fmt(m["precision"]), "")
        console.print(table)
        worst = Table(title="worst layers (SQNR of each quantized activation vs fp32)")
        worst.add_column("tensor")
        worst.add_column("SQNR", justify="right")
        worst.add_column("cosine", justify="right")
        for row in report["worst_layers"]:
            worst.add_row(row["tensor"], _fmt(row["sqnr_db"], 1, " dB"), _fmt(row["cosine"], 4))
        console.print(worst)
    _print_nodes("ops kept in float", q["float_ops"])


def _print_nodes(title: str, rows: list[dict]) -> None:
    """A table of nodes (node, op, reason), when there are any."""
    if not rows:
        return
    table = Table(title=title)
    for column in ("node", "op", "reason"):
        table.add_column(column)
    from edgekit.quantize.plan import SELECTION_TAIL_REASON

    tail = [f for f in rows if f["reason"].startswith(SELECTION_TAIL_REASON)]
    for f in rows:
        if f not in tail:
            table.add_row(f["node"], f["op_type"], f["reason"])
        elif f is tail[0]:  # a detector's post-processing: one row, not one per node
            ops = sorted({t["op_type"] for t in tail})
            shown = ", ".join(ops[:6]) + (f" +{len(ops) - 6}" if len(ops) > 6 else "")
            table.add_row(f"{len(tail)} nodes from {f['node']}", shown, f["reason"])
    console.print(table)


def print_accuracy_summary(section: dict) -> None:
    """The accuracy-aware search's outcome in the deploy's words (:func:`edgekit.accuracy_report.outcome_line`),
    the data it was measured on, and the metric on the accuracy set after each layer restored."""
    from edgekit.accuracy_report import STEP_HEADER, outcome_line, step_rows

    data = section["data"]
    console.print(
        f"{outcome_line(section)} (measured on {data.get('path', 'the data')}, {data['flag']}; "
        f"{section['executor']} executor)",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    if section["restored"]:
        table = Table(title="layers restored (metric on the accuracy set after each)")
        for i, title in enumerate(STEP_HEADER):
            table.add_column(title, justify="right" if i in (0, len(STEP_HEADER) - 1) else "left")
        for row in step_rows(section):
            table.add_row(*row)
        console.print(table)


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
    _print_nodes("weights not in the recipe", q["float_weights"])
