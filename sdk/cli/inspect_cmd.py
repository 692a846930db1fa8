"""``edgekit inspect MODEL``: inputs, outputs, op inventory, parameters, per-target op support."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from edgekit.cli.common import console, parse_input_shapes
from rich.markup import escape
from rich.table import Table

OK, NO = "✓", "✗"


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)


def inspect(
    model: Path = typer.Argument(..., help="ONNX model file."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
    input_shape: list[str] = typer.Option(
        None, "--input-shape", help="Fix an input's shape: NAME=D0,D1,... (repeatable)."
    ),
    target: list[str] = typer.Option(None, "--target", "-t", help="Check only these targets (repeatable)."),
) -> None:
    """Show a model's inputs, outputs, op inventory and parameters, and which targets take each op."""
    from edgekit.inspect import inspect_model

    result = inspect_model(model, parse_input_shapes(input_shape), target or None)
    if json_output:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    _render(result)


def _shape(shape: tuple[int | str, ...] | None) -> str:
    return "?" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _render(result) -> None:
    console.print(f"[bold]{result.path}[/]  opset {result.opset}  {result.producer}".rstrip())
    console.print(
        f"parameters: {result.parameter_count:,} ({result.parameter_bytes / 1e6:.2f} MB)  "
        f"nodes: {sum(result.op_counts.values())}  quantized (QDQ): {'yes' if result.quantized else 'no'}"
    )
    io = Table(title="inputs and outputs", title_justify="left")
    for column in ("", "name", "shape", "dtype"):
        io.add_column(column)
    for kind, tensors in (("input", result.inputs), ("output", result.outputs)):
        for t in tensors:
            # Escaped: "[p2o.DynamicDimension.0, 3, ?, ?]" would otherwise be read as a rich markup tag.
            io.add_row(kind, escape(t.name), escape(_shape(t.shape)), t.dtype)
    console.print(io)

    ops = Table(title="op inventory and target support", title_justify="left")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for report in result.targets:
        ops.add_column(report.target, justify="center")
    all_ops = list(result.op_counts) + sorted(
        {o.op_type for r in result.targets for o in r.ops} - set(result.op_counts)
    )
    for op_type in all_ops:
        cells = []
        for report in result.targets:
            support = report.op(op_type)
            cells.append(
                "-" if support is None else (f"[green]{OK}[/]" if support.supported else f"[red]{NO}[/]")
            )
        ops.add_row(op_type, str(result.op_counts.get(op_type, "(prepared)")), *cells)
    console.print(ops)

    for note in result.notes:
        console.print(f"note: {note}")
    for report in result.targets:
        if report.not_checked:
            console.print(f"[red]{NO}[/] {report.target}: not checked: {report.not_checked}")
            continue
        verdict = f"[green]{OK}[/] can package" if report.ok else f"[red]{NO}[/] cannot package"
        console.print(f"{verdict} for [bold]{report.target}[/]")
        for support in report.ops:
            for reason in support.reasons if not support.supported else ():
                console.print(f"  {NO} {support.op_type}: {reason}", soft_wrap=True)
        for problem in report.other_problems:
            console.print(f"  {problem}", soft_wrap=True)
