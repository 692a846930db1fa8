"""Fleets of devices: naming them (``--device URL`` repeated, or a ``fleet.toml``), probing them, and running one
bundle's evaluation sharded across every device that can run it.

A ``fleet.toml``::

    [[device]]
    name = "pi-1"                       # unique; shown in the report
    url = "tcp://192.168.1.20:7100"     # local, serial:///dev/ttyUSB0?baud=921600 or tcp://host:port
    token_env = "PI1_TOKEN"             # optional: the agent's token is read from this environment variable
    targets = ["arm-cpu", "nnapi"]      # optional: the targets it may run (default: any its runtimes take)
    tags = ["lab-a", "arm64"]           # optional, free-form

The evaluation (:func:`evaluate_bundle`) is a work queue of shards (:func:`edgekit.device_eval.shards`) and one
thread per device connection: each thread connects, uploads and loads the bundle, then pulls the earliest
unfinished shard, runs it in one INFER request and hands the outputs back. The calling thread makes the shards
(at most ``window`` alive), merges results in sample order and watches the devices: a device whose link fails
or which does not answer a shard within ``shard_timeout`` is dropped and its shard goes back to the queue for the
others; the run fails only when no device is left (or a shard was lost ``max_attempts`` times). Every wait has a
timeout: the link's own (acknowledgements, retransmissions), the shard timeout and the queue polls.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.core.errors import DeviceError
from edgekit.device_eval import DeviceFigures, Reference, Shard, TargetEvaluation, shard_size, shards

DEVICE_KEYS = ("name", "url", "token_env", "targets", "tags")
URL_SCHEMES = ("local", "serial", "tcp")


@dataclass(frozen=True)
class Device:
    """One device running the edgekit agent."""

    name: str
    url: str
    token: str | None = None
    #: the targets it may run (empty: any target its runtimes take)
    targets: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    def may_run(self, target: str) -> bool:
        return not self.targets or target in self.targets

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "targets": list(self.targets), "tags": list(self.tags)}


def _check_url(url: str, where: str) -> None:
    scheme = url.split(":", 1)[0] if ":" in url else url.split("?", 1)[0]
    if scheme not in URL_SCHEMES:
        raise DeviceError(
            f"{where}: unknown device URL {url!r}; use local, serial:///dev/ttyX?baud=N or tcp://host:port"
        )


def from_urls(urls: Sequence[str], token: str | None = None) -> tuple[Device, ...]:
    """Devices named by ``--device URL`` (repeatable), all with the same ``--token``; named after their URL
    (``local``, ``local#2`` for a repeated one)."""
    devices: list[Device] = []
    seen: dict[str, int] = {}
    for url in urls:
        _check_url(url, "--device")
        seen[url] = seen.get(url, 0) + 1
        name = url if seen[url] == 1 else f"{url}#{seen[url]}"
        devices.append(Device(name, url, token))
    return tuple(devices)


def load_fleet(path: str | os.PathLike[str], environ: dict[str, str] | None = None) -> tuple[Device, ...]:
    """The devices a ``fleet.toml`` names; any problem is one :class:`DeviceError` line naming the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise DeviceError(
            "fleet files need Python 3.11 or newer (tomllib); use --device URL instead"
        ) from None
    env = os.environ if environ is None else environ
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeviceError(f"fleet file not found: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DeviceError(f"cannot read fleet file {p}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DeviceError(f"{p} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"device"})
    if unknown:
        raise DeviceError(
            f"{p}: unknown top-level key(s) {', '.join(unknown)}; devices go in [[device]] tables"
        )
    entries = data.get("device")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise DeviceError(f"{p}: no devices; add [[device]] tables with name and url")
    devices: list[Device] = []
    for i, entry in enumerate(entries, 1):
        where = f"{p}: device {i}"
        extra = sorted(set(entry) - set(DEVICE_KEYS))
        if extra:
            raise DeviceError(f"{where}: unknown key(s) {', '.join(extra)} (known: {', '.join(DEVICE_KEYS)})")
        for key in ("name", "url"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise DeviceError(f"{where}: '{key}' must be a non-empty string")
        name, url = entry["name"], entry["url"]
        where = f"{p}: device {name!r}"
        if any(d.name == name for d in devices):
            raise DeviceError(f"{where}: the name is used twice")
        _check_url(url, where)
        lists = {}
        for key in ("targets", "tags"):
            value = entry.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise DeviceError(f"{where}: '{key}' must be a list of strings")
            lists[key] = tuple(value)
        if lists["targets"]:
            from edgekit.targets.base import target_names

            known = target_names()
            bad = [t for t in lists["targets"] if t not in known]
            if bad:
                raise DeviceError(f"{where}: unknown target(s) {', '.join(bad)}; targets: {', '.join(known)}")
        token = None
        if "token_env" in entry:
            var = entry["token_env"]
            if not isinstance(var, str) or not var:
                raise DeviceError(f"{where}: 'token_env' must name an environment variable")
            token = env.get(var)
            if not token:
                raise DeviceError(f"{where}: the environment variable {var} (its token_env) is not set")
        devices.append(Device(name, url, token, lists["targets"], lists["tags"]))
    return tuple(devices)


def devices_from_options(
    urls: Sequence[str], token: str | None, fleet: str | os.PathLike[str] | None
) -> tuple[Device, ...]:
    """The devices ``--device URL`` (repeatable, with one ``--token``) or ``--devices fleet.toml`` name; by
    default the local agent."""
    if fleet is not None and urls:
        raise DeviceError("give the devices either with --device URL or with --devices fleet.toml, not both")
    if fleet is not None and token is not None:
        raise DeviceError("--token applies to --device URLs; a fleet file names token_env for each device")
    return load_fleet(fleet) if fleet is not None else from_urls(list(urls) or ["local"], token)


def check_answers(devices: Sequence[Device], note: Callable[[str], None]) -> None:
    """Every remote device answers, or a DeviceError: in a fleet, one that does not is a warning (``note``), all
    of them an error. A local agent is started for the run, so it is not probed."""
    remote = [d for d in devices if d.url != "local"]
    failed = [r for r in probe(remote) if "error" in r] if remote else []
    if failed and len(failed) == len(devices):
        if len(failed) == 1:
            raise DeviceError(failed[0]["error"])
        raise DeviceError(
            "no device answers: " + "; ".join(f"{r['device'].name}: {r['error']}" for r in failed)
        )
    for r in failed:
        note(f"warning: device {r['device'].name} does not answer: {r['error']}")


def probe(devices: Sequence[Device], timeout: float = 20.0) -> list[dict[str, Any]]:
    """HELLO and STATUS of every device at once (one thread each, each bounded by ``timeout``): per device
    ``{"device", "info", "status"}`` or ``{"device", "error"}``, in the order given."""
    from edgekit.device_agents.client import connect
    from edgekit.device_agents.errors import AgentError

    results: list[dict[str, Any]] = [{"device": d, "error": "no answer"} for d in devices]

    def one(i: int, device: Device) -> None:
        try:
            with connect(device.url, timeout=timeout, token=device.token) as client:
                results[i] = {"device": device, "info": client.info, "status": client.status()}
        except (AgentError, OSError) as exc:
            results[i] = {"device": device, "error": str(exc)}

    threads = [threading.Thread(target=one, args=(i, d), daemon=True) for i, d in enumerate(devices)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 3 * timeout + 5  # connect, HELLO (+ AUTH), STATUS
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return results


@dataclass(frozen=True)
class FleetOptions:
    """How a bundle's evaluation is spread over the devices."""

    #: samples per shard (fewer for large inputs, see edgekit.device_eval.shard_size)
    shard_samples: int = 64
    #: seconds to connect and handshake
    connect_timeout: float = 20.0
    #: a device that has not returned a shard within this many seconds is dropped
    shard_timeout: float = 300.0
    #: a shard lost with this many devices fails the run
    max_attempts: int = 3
    #: shards alive (made, not yet merged) per working device
    window_per_device: int = 2
    #: inference threads on each device
    threads: int = 2


def runs_bundle(info: dict[str, Any], runtime: str) -> bool:
    """Whether an agent's HELLO lists a runtime of the bundle's kind (tflite, openvino)."""
    from edgekit.device_agents.runtimes import RUNTIME_MODULES

    have = info.get("runtimes") or {}
    return any(v and RUNTIME_MODULES.get(m, ("", ""))[1] == runtime for m, v in have.items())


@dataclass
class _Worker:
    device: Device
    figures: DeviceFigures
    thread: threading.Thread | None = None
    client: Any = None
    #: (shard, monotonic start) while a shard is on the device
    busy: tuple[Shard, float] | None = None
    live: bool = True


@dataclass
class _Events:
    """What the device threads tell the calling thread (one queue, polled with a timeout)."""

    q: queue.Queue = field(default_factory=queue.Queue)

    def put(self, *event: Any) -> None:
        self.q.put(event)


def evaluate_bundle(
    bundle: Path,
    devices: Sequence[Device],
    reference: Reference,
    dataset: Iterable,
    options: FleetOptions = FleetOptions(),
    track: Callable = lambda it, d, n: it,
    upload_progress: Callable[[int, int], None] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Run ``bundle`` on every device of ``devices`` that may run its target, sharded, and compare it with
    ``reference`` (``dataset`` is streamed again for the inputs). Returns the target's report entry (without the
    host-side extras): the comparison, latency, transfer, per-device figures and the failover events."""
    from edgekit.device_agents.bundle import read_bundle

    with read_bundle(bundle) as loaded:
        manifest = loaded.manifest
    target = manifest.target
    usable = [d for d in devices if d.may_run(target)]
    if not usable:
        raise DeviceError(f"no device may run {target}: the fleet names it for none of its devices")
    run = _FleetRun(bundle, manifest, usable, reference, options, upload_progress, say)
    size = shard_size(manifest, options.shard_samples)
    total = -(-reference.count // size)
    evaluation = TargetEvaluation(manifest, reference)
    start = time.perf_counter()
    try:
        for _ in track(run.merged(shards(dataset, manifest, reference, size), evaluation),
                       f"evaluating on {_devices_word(usable)} ({target})", total):  # fmt: skip
            pass
    finally:
        run.stop()
    wall = time.perf_counter() - start
    figures = [w.figures for w in run.workers]
    compute = float(sum(f.compute_s for f in figures))
    busy_wall = float(sum(f.wall_s for f in figures))
    n = max(reference.count, 1)
    first = next((f for f in figures if f.load), None)
    uploads = [f.upload_s for f in figures if f.upload_s is not None]
    return {
        "target": target,
        "bundle": str(bundle),
        "runtime": manifest.runtime,
        "size_bytes": sum(f.size for f in manifest.model_files),
        "files": [{"name": f.path, "role": f.role, "size_bytes": f.size} for f in manifest.model_files],
        "evaluation": evaluation.comparison.to_json(),
        "outputs_sha256": evaluation.digest.hexdigest(),
        "latency_ms": evaluation.latency.summary(),
        "latency_samples_ms": evaluation.latency.samples_ms(),
        "transfer": {
            "upload_s": max(uploads) if uploads else 0.0,
            "upload_bytes": sum(f.size for f in manifest.model_files),
            "infer_wall_s": wall,
            "compute_s": compute,
            "overhead_per_sample_ms": 1e3 * max(busy_wall - compute, 0.0) / n,
            # the calling thread's own work: reading and converting the inputs, merging and comparing outputs
            "host_s": run.make_s + evaluation.merge_s,
        },
        "load": {
            k: v
            for k, v in (first.load if first else {}).items()
            if k in ("runtime", "delegate", "delegated_ops", "threads")
        },  # fmt: skip
        "devices": [f.to_json() for f in figures],
        "failover": run.failover,
        "hello": {f.name: f.hello for f in figures if f.hello},
    }


def _devices_word(devices: Sequence[Device]) -> str:
    return "the device" if len(devices) == 1 else f"{len(devices)} devices"


class _FleetRun:
    """The device threads of one bundle and the calling thread's bookkeeping."""

    def __init__(
        self,
        bundle: Path,
        manifest: Any,
        devices: Sequence[Device],
        reference: Reference,
        options: FleetOptions,
        upload_progress: Callable[[int, int], None] | None,
        say: Callable[[str], None],
    ):
        self.bundle, self.manifest, self.options, self.say = bundle, manifest, options, say
        self.target = manifest.target
        self.work: queue.PriorityQueue = queue.PriorityQueue()
        self.events = _Events()
        self.halt = threading.Event()
        self.failover: list[dict[str, Any]] = []
        self.make_s = 0.0
        self.workers = [_Worker(d, DeviceFigures(d.name, d.url)) for d in devices]
        for i, w in enumerate(self.workers):
            progress = upload_progress if i == 0 else None
            w.thread = threading.Thread(target=self._serve, args=(w, progress), daemon=True,
                                        name=f"edgekit-device-{w.device.name}")  # fmt: skip
            w.thread.start()

    # -- device threads -----------------------------------------------------------------------------
    def _serve(self, w: _Worker, progress: Callable[[int, int], None] | None) -> None:
        from edgekit.device_agents.client import connect
        from edgekit.device_agents.errors import AgentError, RemoteError

        bundle_id = None
        try:
            try:
                w.client = connect(w.device.url, timeout=self.options.connect_timeout, token=w.device.token)
                w.figures.hello = _hello_summary(w.client.info)
                if not runs_bundle(w.client.info, self.manifest.runtime):
                    self.events.put("unavailable", w, f"no {self.manifest.runtime} runtime on the device")
                    return
                started = time.perf_counter()
                bundle_id = w.client.put_bundle(self.bundle, progress=progress)
                w.figures.upload_s = time.perf_counter() - started
                w.figures.load = w.client.load(bundle_id, threads=self.options.threads)
            except (AgentError, OSError) as exc:
                self.events.put("unavailable", w, str(exc))
                return
            self.events.put("ready", w, None)
            while not self.halt.is_set():
                try:
                    _, shard = self.work.get(timeout=0.2)
                except queue.Empty:
                    continue
                if not w.live:  # dropped by the calling thread while waiting: give the shard back
                    self.work.put((shard.index, shard))
                    return
                w.busy = (shard, time.monotonic())
                try:
                    started = time.perf_counter()
                    outputs, times = w.client.infer(shard.feeds)
                    w.figures.wall_s += time.perf_counter() - started
                except RemoteError as exc:  # the agent refused the request: another device would too
                    self.events.put("fatal", w, (shard, exc))
                    return
                except (AgentError, OSError, ValueError) as exc:
                    self.events.put("dropped", w, (shard, str(exc)))
                    return
                finally:
                    w.busy = None
                self.events.put("done", w, (shard, outputs, times))
        except BaseException as exc:  # a bug: handed to the calling thread
            self.events.put("crash", w, exc)
        finally:
            if w.client is not None:
                if bundle_id is not None and w.live:
                    with contextlib.suppress(Exception):
                        w.client.delete(bundle_id)
                with contextlib.suppress(Exception):
                    w.client.close()

    # -- calling thread -----------------------------------------------------------------------------
    def stop(self) -> None:
        self.halt.set()
        deadline = time.monotonic() + 10.0
        for w in self.workers:
            if w.thread is not None:
                w.thread.join(max(0.0, deadline - time.monotonic()))

    def _live(self) -> list[_Worker]:
        return [w for w in self.workers if w.live]

    def _drop(self, w: _Worker, shard: Shard | None, reason: str, status: str = "dropped") -> None:
        if not w.live:
            return
        w.live = False
        w.figures.status, w.figures.reason = status, reason
        if status == "dropped":
            event: dict[str, Any] = {
                "device": w.device.name,
                "reason": reason,
                "after_samples": w.figures.samples,
            }
            if shard is not None:
                event["moved"] = [shard.start, shard.start + shard.count - 1]
            self.failover.append(event)
            left = len(self._live())
            moved = (
                f"its shard ({shard.samples}) moves to the {left} left" if shard is not None and left else ""
            )
            self.say(f"device {w.device.name} dropped during {self.target}: {reason}"
                     + (f"; {moved}" if moved else ""))  # fmt: skip
        if shard is not None:
            shard.attempts += 1
            if shard.attempts >= self.options.max_attempts:
                raise DeviceError(
                    f"{self.target}: {shard.samples} were lost with {shard.attempts} devices; last: {reason}"
                )
            self.work.put((shard.index, shard))
        if not self._live():
            reasons = "; ".join(f"{x.device.name}: {x.figures.reason}" for x in self.workers)
            raise DeviceError(f"no device left for {self.target} ({reasons})")

    def merged(self, source: Iterable[Shard], evaluation: TargetEvaluation):
        """Feed shards to the queue (at most a window of them alive), merge results in sample order; yields
        once per merged shard."""
        made = iter(source)
        self.make_s = 0.0
        exhausted = False
        outstanding = 0
        pending: dict[int, tuple[Shard, Any, Any, _Worker]] = {}
        next_merge = 0
        while True:
            window = max(1, self.options.window_per_device * len(self._live()))
            while not exhausted and outstanding < window:
                started = time.perf_counter()
                shard = next(made, None)
                self.make_s += time.perf_counter() - started
                if shard is None:
                    exhausted = True
                    break
                self.work.put((shard.index, shard))
                outstanding += 1
            while next_merge in pending:
                shard, outputs, times, w = pending.pop(next_merge)
                evaluation.merge(shard, outputs, times, w.figures)
                outstanding -= 1
                next_merge += 1
                yield shard
            if exhausted and outstanding == 0:
                return
            self._wait_event(pending, next_merge)

    def _wait_event(self, pending: dict, next_merge: int) -> None:
        try:
            kind, w, data = self.events.q.get(timeout=0.5)
        except queue.Empty:
            kind, w, data = None, None, None
        if kind == "done":
            shard, outputs, times = data
            if shard.index >= next_merge and shard.index not in pending:
                pending[shard.index] = (shard, outputs, times, w)
        elif kind == "dropped":
            self._drop(w, data[0], data[1])
        elif kind == "unavailable":
            self._drop(w, None, data, status="unavailable")
            self.say(f"device {w.device.name} not used for {self.target}: {data}")
        elif kind == "fatal":
            shard, exc = data
            raise DeviceError(f"{self.target} on {w.device.name}, {shard.samples}: {exc}")
        elif kind == "crash":
            raise data
        now = time.monotonic()
        for x in self._live():
            busy = x.busy
            if busy is not None and now - busy[1] > self.options.shard_timeout:
                self._drop(x, busy[0], f"no answer to a shard within {self.options.shard_timeout:g} s")
                with contextlib.suppress(Exception):
                    x.client.link.close()  # unblocks its thread, which then gives up


def _hello_summary(hello: dict) -> dict:
    keep = ("machine", "os", "python", "runtimes", "free_disk", "free_memory", "protocol_version",
            "agent_version")  # fmt: skip
    return {k: hello[k] for k in keep if k in hello}


__all__ = [
    "Device",
    "FleetOptions",
    "check_answers",
    "devices_from_options",
    "evaluate_bundle",
    "from_urls",
    "load_fleet",
    "probe",
    "runs_bundle",
]
