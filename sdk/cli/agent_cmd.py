"""``edgekit agent build|serve`` and ``edgekit devices probe``: the on-device agent from the host side."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipapp
from pathlib import Path
from typing import Annotated

import typer
from edgekit.cli.common import console
from edgekit.core.errors import OutputError
from rich.table import Table

PYZ_MAIN = '''"""edgekit-agent zipapp entry point."""
import sys

from edgekit.device_agents.__main__ import main

sys.exit(main())
'''
PYZ_PACKAGE_INIT = '"""Namespace of the edgekit-agent zipapp: only ``edgekit.device_agents`` is inside."""\n'


def register(app: typer.Typer) -> None:
    agent_app = typer.Typer(
        help="The on-device agent: build the single-file zipapp, or serve from this install.",
        no_args_is_help=True,
    )
    agent_app.command("build")(build)
    agent_app.command("serve")(serve)
    app.add_typer(agent_app, name="agent")
    devices_app = typer.Typer(help="Devices running the edgekit agent.", no_args_is_help=True)
    devices_app.command("probe")(probe)
    app.add_typer(devices_app, name="devices")


def build_zipapp(output: Path) -> Path:
    """Write a zipapp holding ``edgekit.device_agents`` (and nothing else of edgekit), atomically."""
    import edgekit.device_agents as package

    source = Path(package.__file__).parent
    output = Path(output)
    if output.is_dir():
        raise OutputError(f"{output} is a directory; give the .pyz file to write")
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"cannot write {output}: directory {parent} does not exist")
    with tempfile.TemporaryDirectory(prefix=".edgekit-agent-", dir=parent) as tmp:
        stage = Path(tmp) / "stage"
        dest = stage / "edgekit" / "device_agents"
        dest.mkdir(parents=True)
        (stage / "edgekit" / "__init__.py").write_text(PYZ_PACKAGE_INIT)
        (stage / "__main__.py").write_text(PYZ_MAIN)
        for module in sorted(source.glob("*.py")):
            shutil.copyfile(module, dest / module.name)
        partial = Path(tmp) / output.name
        try:
            zipapp.create_archive(stage, partial, interpreter="/usr/bin/env python3", compressed=True)
            os.replace(partial, output)
        except OSError as exc:
            raise OutputError(f"cannot write {output}: {exc.strerror or exc}") from None
    return output


def build(
    output: Annotated[Path, typer.Option("--output", "-o", help="The zipapp to write.")] = Path(
        "edgekit-agent.pyz"
    ),
) -> None:
    """Build edgekit-agent.pyz: run it on a device with `python3 edgekit-agent.pyz --serial DEV` or `--listen`."""
    path = build_zipapp(output)
    console.print(f"wrote {path} ({path.stat().st_size} bytes); on the device:")
    console.print(f"  python3 {path.name} --serial /dev/ttyUSB0 --baud 921600")
    console.print(f"  python3 {path.name} --listen 0.0.0.0:7100 --token SECRET")


def serve(
    serial: Annotated[str | None, typer.Option("--serial", help="Serve this serial port.")] = None,
    listen: Annotated[str | None, typer.Option("--listen", help="Serve TCP on HOST:PORT.")] = None,
    baud: Annotated[int, typer.Option("--baud", help="Serial baud rate.")] = 115200,
    token: Annotated[str | None, typer.Option("--token", help="Shared secret (needed off loopback).")] = None,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Where bundles are stored.")] = None,
    quota_mb: Annotated[int, typer.Option("--quota-mb", help="Storage quota in MiB.")] = 2048,
) -> None:
    """Run the agent from this installation (the same code as the zipapp)."""
    from edgekit.device_agents.__main__ import main as agent_main

    if (serial is None) == (listen is None):
        raise typer.BadParameter("give exactly one of --serial DEV or --listen HOST:PORT")
    argv = ["--serial", serial, "--baud", str(baud)] if serial else ["--listen", str(listen)]
    if token:
        argv += ["--token", token]
    if workdir is not None:
        argv += ["--workdir", str(workdir)]
    argv += ["--quota-mb", str(quota_mb)]
    raise typer.Exit(agent_main(argv))


def probe(
    url: Annotated[
        str | None, typer.Argument(help="local, serial:///dev/ttyUSB0?baud=921600 or tcp://host:7100")
    ] = None,
    devices: Annotated[
        Path | None, typer.Option("--devices", help="A fleet.toml: probe every device it names, one table.")
    ] = None,
    token: Annotated[
        str | None, typer.Option("--token", help="The agent's token (or ?token= in the URL).")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the agent.")] = 20.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print what an agent reports about itself: machine, OS, Python, runtimes, disk, memory, bundles. With
    --devices fleet.toml, one row per device (exit code 1 when some do not answer, 2 when none does)."""
    from edgekit.device_agents.client import connect

    if (url is None) == (devices is None):
        raise typer.BadParameter("give a device URL or --devices fleet.toml (one of them)")
    if devices is not None:
        _probe_fleet(devices, timeout, as_json)
        return
    assert url is not None
    with connect(url, timeout=timeout, token=token) as client:
        info, status = client.info, client.status()
    if as_json:
        console.print_json(json.dumps({"url": url, "info": info, "status": status}))
        return
    table = Table(title=f"edgekit agent at {url}", show_header=False)
    rows = [
        ("agent", f"{info.get('agent_version')} (protocol {info.get('protocol')})"),
        ("machine", str(info.get("machine"))),
        ("os", str(info.get("os"))),
        ("python", str(info.get("python"))),
        ("runtimes", _runtimes(info)),
        ("disk free", _size(info.get("disk_free"))),
        ("memory available", _size(info.get("memory_available"))),
        ("storage used", f"{_size(status.get('used'))} of {_size(status.get('quota'))}"),
        ("bundles", ", ".join(b["bundle_id"] for b in status.get("bundles", [])) or "none"),
        ("loaded", str(status.get("loaded") or "nothing")),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def _runtimes(info: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in info.get("runtimes", {}).items() if v) or "none found"


def _probe_fleet(path: Path, timeout: float, as_json: bool) -> None:
    """Every device of a fleet file at once (the same questions as for one device), one table."""
    from edgekit.core.errors import DeviceError
    from edgekit.fleet import load_fleet, probe

    fleet = load_fleet(path)
    results = probe(fleet, timeout=timeout)
    failed = [r for r in results if "error" in r]
    if as_json:
        rows = [{**r["device"].to_json(), **{k: v for k, v in r.items() if k != "device"}} for r in results]
        console.print_json(json.dumps(rows))
    else:
        table = Table(title=f"edgekit agents of {path}")
        for column in ("device", "url", "agent", "machine", "python", "runtimes", "memory", "targets", "tags",
                       "status"):  # fmt: skip
            table.add_column(column)
        for r in results:
            d, info = r["device"], r.get("info") or {}
            agent = f"{info.get('agent_version')} (protocol {info.get('protocol')})" if info else "-"
            status = f"error: {r['error']}" if "error" in r else "ok"
            table.add_row(d.name, d.url, agent, str(info.get("machine", "-")), str(info.get("python", "-")),
                          _runtimes(info) if info else "-", _size(info.get("memory_available")) if info else "-",
                          ", ".join(d.targets) or "any", ", ".join(d.tags) or "-", status)  # fmt: skip
        console.print(table)
    if failed and len(failed) == len(results):
        raise DeviceError(f"none of the {len(results)} devices of {path} answers")
    if failed:
        raise typer.Exit(1)


def _size(n: object) -> str:
    if not isinstance(n, int):
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{n} B"
        size /= 1024
    return f"{n} B"  # pragma: no cover
