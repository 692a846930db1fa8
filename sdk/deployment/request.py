"""What a deploy is asked to do (:class:`DeployRequest`, :class:`DeviceRun`) and how it reports progress
(:class:`Hooks`); what it writes per target (:class:`Packaged`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.core.errors import DataError, OutputError

#: ``precision`` values: ``auto`` (int8 with calibration data, else the target's float default) and every recipe.
AUTO = "auto"
VERIFY_SAMPLES = 3
#: Evaluation samples the quantizer uses for its per-layer SQNR (the device run uses all of ``max_samples``).
LAYER_SAMPLES = 25


def precisions() -> tuple[str, ...]:
    """Every ``precision`` a deploy takes: ``auto`` and the recipes (``edgekit.quantize.recipes.RECIPES``)."""
    from edgekit.quantize.recipes import RECIPES

    return (AUTO, *RECIPES)


def _no_upload(description: str) -> contextlib.AbstractContextManager[Callable[[int, int], None] | None]:
    return contextlib.nullcontext(None)


def _quiet(line: str) -> None:
    return None


def _untracked(items: Any, description: str, total: int) -> Any:
    return items


@dataclass(frozen=True)
class Hooks:
    """How a deploy tells its caller what it is doing (the defaults say nothing).

    ``say``: one line of progress (plain text). ``warn``: a note about the model or the data (default ``say``).
    ``track(items, description, total)``: wraps each long loop (progress bars). ``upload(description)``: a
    context manager yielding a ``(done_bytes, total_bytes)`` callback or None. ``bundle``: called with each
    :class:`Packaged` as soon as it is written; ``failure``: with ``(target, message)`` for each target that
    failed to package.
    """

    say: Callable[[str], None] = _quiet
    warn: Callable[[str], None] | None = None
    track: Callable[..., Any] = _untracked
    upload: Callable[[str], contextlib.AbstractContextManager[Any]] = _no_upload
    bundle: Callable[[Packaged], None] = lambda packaged: None
    failure: Callable[[str, str], None] = lambda target, message: None

    def note(self, line: str) -> None:
        (self.warn or self.say)(line)


@dataclass(frozen=True)
class DeployRequest:
    """What a deploy was asked to do (validated by :func:`package_targets` before anything is written)."""

    model: Path
    targets: tuple[str, ...]
    out_dir: Path
    calib: Path | None = None
    #: ``auto`` or a recipe name (``edgekit.quantize.recipes.RECIPES``).
    precision: str = AUTO
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    device_hint: str | None = None
    archive: bool = False
    calib_samples: int = 100
    method: str = "minmax"
    #: Rounding of the static recipes' int8 weights (``QuantizeOptions.weight_rounding``): nearest | gptq.
    weight_rounding: str = "nearest"
    #: Quantize the output head (Softmax and the pooling before it) too, on targets with float outputs.
    integer_head: bool = False
    preprocess: Mapping[str, Any] | None = None
    eval_data: Path | None = None
    #: Target-specific settings, passed to the targets whose options have them: keep_io_layout (arm-cpu,
    #: nnapi), io_dtype, feature_level and strict_integer (nnapi).
    target_settings: Mapping[str, Any] = field(default_factory=dict)
    #: Per-layer recipes ``((node name, recipe), ...)`` for the quantizer (``QuantizeOptions.layer_precision``).
    layer_precision: tuple[tuple[str, str], ...] = ()
    #: An accuracy budget (``edgekit.quantize.accuracy.SearchOptions``): each target quantized for restores the
    #: fewest layers, in what it runs, that meet it.
    accuracy: Any = None
    #: The data the budget is measured on (default: ``eval_data``).
    accuracy_data: Path | None = None


@dataclass(frozen=True)
class Packaged:
    """One bundle a deploy wrote."""

    target: str
    path: Path
    #: The recipe the bundle was made with (``fp32``, ``int8``, ...).
    precision: str
    verification: Mapping[str, Any]
    #: The quantizer's report when this run quantized the model for the target (per-layer SQNR on the host).
    quantize_report: Mapping[str, Any] | None = None
    #: Wall time of this target's stages: quantize_s (0 when shared with an earlier target), package_s.
    timings: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceRun:
    """The device half of a deploy: where to run, what to write, when to fail."""

    url: str
    token: str | None
    report: Path | None
    fail_on_drop: float | None
    max_samples: int | None
    #: The devices the evaluation is sharded over (:class:`edgekit.fleet.Device`; by default the one ``url``).
    devices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if not self.devices:
            from edgekit.fleet import from_urls

            object.__setattr__(self, "devices", from_urls([self.url], self.token))

    @classmethod
    def from_options(
        cls,
        request: DeployRequest,
        device: str | Sequence[str] | None,
        token: str | None,
        report: Path | None,
        fail_on_drop: float | None,
        max_samples: int | None,
        fleet: str | os.PathLike[str] | None = None,
    ) -> DeviceRun | None:
        """The device run the options ask for (None without evaluation data); one-line errors for bad ones.
        ``device``: one agent URL or several (the evaluation is sharded over them), or ``fleet``: a fleet.toml."""
        urls = [device] if isinstance(device, str) else list(device or ())
        if request.eval_data is None:
            for flag, value in (("--device", urls or None), ("--devices", fleet), ("--report", report),
                                ("--fail-on-drop", fail_on_drop), ("--max-samples", max_samples)):  # fmt: skip
                if value is not None:
                    raise DataError(f"{flag} needs --eval DATA (the samples to run on the device)")
            return None
        if not request.eval_data.exists():
            raise DataError(f"evaluation data not found: {request.eval_data}")
        if max_samples is not None and max_samples < 1:
            raise DataError(f"--max-samples must be at least 1, got {max_samples}")
        if fail_on_drop is not None and fail_on_drop < 0:
            raise DataError(
                f"--fail-on-drop must be a non-negative number of percentage points, got {fail_on_drop}"
            )
        if report is not None:
            check_report_path(report)
        from edgekit.fleet import devices_from_options

        devices = devices_from_options(urls, token, fleet)
        return cls(devices[0].url, devices[0].token, report, fail_on_drop, max_samples, devices)


def check_report_path(report: Path) -> None:
    """An OutputError unless ``report`` is an ``.html`` path that can be written."""
    from edgekit.core.model import check_writable

    if report.suffix.lower() != ".html":
        raise OutputError(
            f"--report expects an .html path (report.json and report.md go beside it): {report}"
        )
    folder = report.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the report's folder is made when it is written
    check_writable(folder / report.name)
