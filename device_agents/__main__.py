"""Command line of the agent itself (argparse only: it runs on small devices).

python3 -m edgekit.device_agents --serial /dev/ttyUSB0 --baud 921600
python3 edgekit-agent.pyz --listen 0.0.0.0:7100 --token SECRET --workdir ~/edgekit-agent
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="edgekit-agent", description="edgekit on-device agent")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--serial", metavar="DEV", help="serve this serial port (e.g. /dev/ttyUSB0)")
    where.add_argument("--listen", metavar="HOST:PORT", help="serve TCP (default host 127.0.0.1)")
    parser.add_argument("--baud", type=int, default=115200, help="serial baud rate (default 115200)")
    parser.add_argument(
        "--token", default=os.environ.get("EDGEKIT_AGENT_TOKEN"), help="shared secret for TCP"
    )
    parser.add_argument(
        "--workdir",
        default=os.environ.get("EDGEKIT_AGENT_WORKDIR", str(Path.home() / ".edgekit-agent")),
        help="where bundles are stored (default ~/.edgekit-agent)",
    )
    parser.add_argument("--quota-mb", type=int, default=2048, help="storage quota in MiB (default 2048)")
    parser.add_argument("--max-frame-mb", type=float, default=8, help="largest accepted frame payload in MiB")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from .agent import Agent, AgentOptions, main_log, serve_serial, serve_tcp
    from .errors import AgentError

    try:
        options = AgentOptions(
            workdir=Path(args.workdir).expanduser(),
            quota_bytes=args.quota_mb * 1024 * 1024,
            max_payload=max(64 * 1024, int(args.max_frame_mb * 1024 * 1024)),
            token=args.token or None,
        )
        agent = Agent(options)
        if args.serial:
            serve_serial(agent, args.serial, args.baud, log=main_log)
        else:
            host, _, port = args.listen.rpartition(":")
            if not port.isdigit():
                raise AgentError(f"--listen expects HOST:PORT, got {args.listen!r}")
            serve_tcp(agent, host.strip("[]") or "127.0.0.1", int(port), options.token, log=main_log)
    except AgentError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
