"""``edgekit report report.json --html out.html``: re-render a deploy report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from edgekit.cli.common import console


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def report(
    source: Annotated[Path, typer.Argument(help="report.json written by `edgekit deploy --report`.")],
    html: Annotated[
        Path | None, typer.Option("--html", help="Write the self-contained HTML report here.")
    ] = None,
    markdown: Annotated[Path | None, typer.Option("--md", help="Write the Markdown report here.")] = None,
) -> None:
    """Re-render an accuracy-drop report from its JSON."""
    from edgekit.report import load_report, summary_rows, write_reports

    data = load_report(source)
    write_reports(data, None, markdown, html)
    for row in summary_rows(data):
        console.print(
            f"{row[0]}: top-1 drop {row[4]} pp, agreement {row[6]} %, p50 {row[9]} ms", soft_wrap=True
        )
    for path in (html, markdown):
        if path is not None:
            console.print(f"wrote {path}")
