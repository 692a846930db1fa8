"""The verification yardstick, one for every target: each output of a model judged by what it is.

:func:`output_kinds` reads from the graph what each output is (probabilities, class scores, a selection by
TopK/ArgMax, a plain tensor); :func:`compare_outputs` measures an artifact's outputs against the source
model's (cosine, SQNR, relative error, top-1 agreement per class axis); :func:`judge_outputs` holds those figures
to the precision's :class:`Yardstick` (:data:`YARDSTICKS`); :func:`verify_outputs` raises the TargetError a
target refuses an artifact with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx_ir as ir
from edgekit.core.errors import TargetError

_log = logging.getLogger("edgekit")


@dataclass(frozen=True)
class OutputKind:
    """What a model output is, read from the graph, which decides how its error is judged.

    ``kind``: ``probabilities`` (a Softmax or Sigmoid: values in [0, 1], errors measured on that scale, not
    on the range the samples happen to reach), ``scores`` (class scores of a Gemm/MatMul head) or
    ``tensor``. ``class_axis``: the axis whose argmax is the answer (top-1 agreement is counted per
    position over the other axes, e.g. per time step of a CTC recogniser), or None.
    """

    kind: str = "tensor"
    class_axis: int | None = None
    why: str = "no classifier or probability head found"
    #: the op whose data-dependent choice (TopK/ArgMax indices) the output depends on, or None
    selection: str | None = None
    #: the op that samples data at computed positions the output depends on (GridSample), or None: float32
    #: rounding of a position moves the value by the data's gradient there (see :data:`_RESAMPLING`)
    resampling: str | None = None
    #: an ArgMax/ArgMin index output: ``(scores value name, axis, keepdims)`` of the op that chose it (judged by
    #: :func:`index_choices_allowed` on the source's scores: near-tied scores swap whole indices), or None
    scores: tuple[str, int, bool] | None = None


#: Ops that move or (de)quantize values without changing what they mean.
_MEANING_PRESERVING = frozenset(
    {
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Identity",
        "QuantizeLinear",
        "DequantizeLinear",
    }
)
_AXIS_PRESERVING = frozenset({"Identity", "QuantizeLinear", "DequantizeLinear"})


def output_kinds(model: ir.Model) -> dict[str, OutputKind]:
    """The :class:`OutputKind` of every graph output of ``model``."""
    kinds: dict[str, OutputKind] = {}
    chosen = _derived_values(model, _CHOOSING)
    resampled = _derived_values(model, _RESAMPLING)
    for out in model.graph.outputs:
        value, moved = out, False
        node = value.producer()
        while node is not None and node.op_type in _MEANING_PRESERVING and node.inputs and node.inputs[0]:
            moved = moved or node.op_type not in _AXIS_PRESERVING
            value = node.inputs[0]
            node = value.producer()
        kind = _kind_of(node, value, out, moved)
        kinds[out.name or ""] = replace(
            kind,
            selection=chosen.get(id(out)),
            resampling=resampled.get(id(out)),
            scores=_index_scores(out.producer()),
        )
    return kinds


def _index_scores(node: ir.Node | None) -> tuple[str, int, bool] | None:
    """``(scores, axis, keepdims)`` of an ArgMax/ArgMin (first index among ties) whose index map is an output
    itself (smp's ``activation="argmax2d"``: the class of every pixel), else None."""
    if node is None or node.op_type not in ("ArgMax", "ArgMin") or not node.inputs or node.inputs[0] is None:
        return None
    attrs = node.attributes
    last = attrs.get("select_last_index")
    scores = node.inputs[0]
    axis = attrs["axis"].as_int() if "axis" in attrs else 0
    if axis < 0 and scores.shape is not None:
        axis += len(scores.shape)
    if (last is not None and last.as_int()) or axis < 0 or not scores.name:
        return None
    keepdims = attrs["keepdims"].as_int() if "keepdims" in attrs else 1
    return scores.name, axis, bool(keepdims)


def index_choices_allowed(
    scores: np.ndarray, index: np.ndarray, axis: int, keepdims: bool, tie: float
) -> float:
    """The fraction of positions of ``index`` (an ArgMax's output over ``axis`` of ``scores``, one sample per row
    of both) whose chosen score is within ``tie`` of the best score there: a choice the scores allow. Of
    ArgMin's output, pass ``-scores``."""
    chosen = np.asarray(index, dtype=np.int64)
    if not keepdims:
        chosen = np.expand_dims(chosen, axis + 1)
    picked = np.take_along_axis(scores, np.clip(chosen, 0, scores.shape[axis + 1] - 1), axis + 1)
    inside = (chosen >= 0) & (chosen < scores.shape[axis + 1])
    best = scores.max(axis=axis + 1, keepdims=True)
    return float(np.mean(inside & (picked >= best - tie)))


#: Ops whose outputs are data-dependent choices: indices of the largest values (an order among near-ties).
_CHOOSING = {"TopK": 1, "ArgMax": 0, "ArgMin": 0}
#: Ops whose output samples data at positions the graph computes: a rounding of a position moves the value by the
#: data's gradient there, so on data with edges (a document's text) every float32 run is off float64 by far more
#: than its positions are. UVDoc (PaddleX 3.7, seeded, BatchNorm from rendered documents, 96 x 64): its grid is
#: 1.3e-5 to 2.3e-5 off float64 in onnxruntime's float32 run (of [-1, 1]: 4e-4 to 7e-4 of a pixel), its unwarped
#: image 2.2e-4 to 5.8e-4 of the range, on every sample.
_RESAMPLING = {"GridSample": 0}


def _derived_values(model: ir.Model, sources: Mapping[str, int]) -> dict[int, str]:
    """id of every value computed from output ``sources[op]`` of an op of ``sources`` (e.g. boxes gathered at a
    TopK's indices: a rounding that swaps two near-tied scores swaps whole rows) -> that op."""
    chosen: dict[int, str] = {}
    for node in model.graph:  # topological order
        index = sources.get(node.op_type)
        if index is not None and len(node.outputs) > index:
            chosen[id(node.outputs[index])] = node.op_type
        source = next((chosen[id(v)] for v in node.inputs if v is not None and id(v) in chosen), None)
        if source is not None:
            chosen.update((id(v), source) for v in node.outputs)
    return chosen


def _only_wide_axis(shape: Any) -> int | None:
    """The one axis of ``shape`` longer than 1 (all dims static), or None."""
    dims = list(shape)
    if not all(isinstance(d, int) for d in dims):
        return None
    wide = [i for i, d in enumerate(dims) if d > 1]
    return wide[0] if len(wide) == 1 else None


def _kind_of(node: ir.Node | None, value: ir.Value, out: ir.Value, moved: bool) -> OutputKind:
    op = node.op_type if node is not None else None
    if op == "Sigmoid":
        return OutputKind("probabilities", None, "a Sigmoid: probabilities in [0, 1]")
    rank = len(out.shape) if out.shape is not None else None
    if op in ("Softmax", "LogSoftmax"):
        attr = node.attributes.get("axis")
        in_rank = len(value.shape) if value.shape is not None else None
        axis = attr.as_int() if attr is not None else -1
        last = in_rank is not None and axis % in_rank == in_rank - 1
        out_last = out.shape[-1] if rank else None
        if not moved and rank is not None:
            class_axis: int | None = axis % rank
        elif last and out_last == (value.shape[-1] if in_rank else None):
            class_axis = rank - 1 if rank else None
        else:
            wide = _only_wide_axis(out.shape) if last and rank else None
            # one row of classes reshaped (e.g. [1, 1000] -> [1, 1000, 1, 1]): the classes are the wide axis
            class_axis = wide if wide is not None and out.shape[wide] == value.shape[-1] else None
        if op == "LogSoftmax":
            return OutputKind("scores", class_axis, "a LogSoftmax: class log-probabilities")
        return OutputKind("probabilities", class_axis, "a Softmax: class probabilities in [0, 1]")
    if rank == 2 and isinstance(out.shape[-1], int) and out.shape[-1] > 1:
        dense = op in ("Gemm", "MatMul") or (
            op == "Add"
            and any(i is not None and i.producer() and i.producer().op_type == "MatMul" for i in node.inputs)
        )
        if dense:
            return OutputKind("scores", 1, f"a {op} head of {out.shape[-1]} class scores")
    return OutputKind()


@dataclass(frozen=True)
class Yardstick:
    """How an artifact of one precision is judged against its reference, per output.

    ``max_rel_error``: when set, the only gate: the largest error relative to the output's scale (its
    range; 1 for probabilities). Otherwise an output passes when its largest error is within
    ``resolution`` of its scale (the precision's own step: rounding noise whatever the cosine), or when
    its cosine similarity and SQNR over all samples reach ``min_cosine`` / ``min_sqnr_db`` and, for
    outputs with a class axis, top-1 agreement reaches ``min_top1`` (classes whose reference scores are
    within ``resolution`` of the best are a tie). ``kernel_noise_db``: an int8 artifact whose reference is
    the QDQ model's exact semantics also passes when its SQNR is within this many dB of another integer
    runtime's on the same QDQ model (the rounding any int8 kernel adds; reported as ``kernel_noise``).
    ``float64_fallback``: an fp32 artifact beyond ``max_rel_error`` of the host's float32 run is judged against
    the source model computed in float64 (:mod:`edgekit.core.exact`, reported as ``float64_reference``): on
    inputs far from the model's data (the seeded normal samples a deploy without data verifies on), a deep
    network amplifies float32 summation order to 1e-4 of the range (YOLOv8n at 640: onnxruntime and OpenVINO
    4.8e-5 to 8.4e-5 apart), so the float32 reference itself is that far off.
    ``rounded_weights_fallback``: an fp16 artifact below the cosine/SQNR/top-1 figures against the fp32 source
    is judged against the source with its weights rounded to float16 (the recipe's own numerics, reported as
    ``fp16_weights_reference`` beside the fp32 figures, with a warning): on seeded normal samples far from a
    model's data, a sensitive network moves by the rounding of its weights alone (timm's tf_mixnet_s: the IR and
    onnxruntime on the rounded weights agree at cosine 0.99999994, both 0.9962 from fp32; 0.99998 on photos), and
    that is the precision's cost, not a conversion error; a wrong conversion still differs from both. The cost
    itself must stay within ``rounded_weights_min_cosine`` of fp32 (else the refusal names it), except on an
    output computed from a choice (:attr:`OutputKind.selection`: CenterNet's boxes at its TopK peaks, near-ties
    on seeded samples; 0.958 from fp32 on 3 samples, 0.9968 on photos), where it is reported, and except on the
    seeded normal samples of a deploy without data (``rounded_weights_min_cosine`` None: :func:`yardstick`'s
    ``seeded``), where it is reported with a warning: there it measures the network far from its data (timm's
    efficientnetv2_rw_t, seeded, BatchNorm from photos: logits spanning 700 on normal noise against 1.5 on
    photos, float16 weights cosine 0.96 there and 0.999998 on photos), not the precision's cost on the user's.
    ``answer_cosine``: an int8 class-probability output (an integer Softmax/Sigmoid head) also passes with
    top-1 agreement at ``min_top1`` and a cosine of at least this: its input's step is coarse (0.21 on
    SqueezeNet's pooled logits, a factor e^0.21 = 1.23 on a probability), so two int8 kernels that round the
    pooling one step apart move probabilities by many output steps while giving the same answers.
    """

    precision: str
    max_rel_error: float | None = None
    min_cosine: float = 0.999
    min_sqnr_db: float = 27.0  # the SQNR of a cosine of 0.999 between vectors of the same norm
    min_top1: float = 0.99
    resolution: float = 1e-3
    kernel_noise_db: float | None = None
    answer_cosine: float | None = None
    float64_fallback: bool = False
    rounded_weights_fallback: bool = False
    rounded_weights_min_cosine: float | None = 0.99


#: The yardstick of each precision (issue 12's figures): fp32 within 1e-4 of the range; fp16 and int8
#: against their reference by cosine >= 0.999 per output and top-1 agreement >= 99 %.
YARDSTICKS = {
    "fp32": Yardstick("fp32", max_rel_error=1e-4, resolution=1e-4, float64_fallback=True),
    # fp16 keeps 11 significant bits
    "fp16": Yardstick("fp16", resolution=1e-3, rounded_weights_fallback=True),
    "int8": Yardstick(
        "int8", resolution=1.0 / 255.0, kernel_noise_db=3.0, answer_cosine=0.99
    ),  # 1 of 256 steps
    # 16 of 65536 steps: TFLite's 16x8 lookup-table kernels (LOGISTIC, TANH, SOFTMAX) interpolate, up to 9 steps
    # off the exact QDQ model (tests/tflite/test_16x8_kernels.py); an int16 artifact is judged against onnxruntime.
    "int16x8": Yardstick("int16x8", resolution=16.0 / 65535.0),
    # Weight-only: against the weight-only model (its weights dequantized). LiteRT's hybrid kernels quantize
    # each input row to int8 on the fly (about 1e-3 of the range per layer); OpenVINO decompresses exactly.
    "w8": Yardstick("w8", resolution=1e-3, min_cosine=0.999, min_top1=0.99),
    "w4": Yardstick("w4", resolution=1e-3, min_cosine=0.999, min_top1=0.99),
}


def yardstick(precision: str, max_rel_error: float | None = None, seeded: bool = False) -> Yardstick:
    """The yardstick of ``precision`` (``fp32``, ``fp16``, ``int8``, ``w8``, ``w4``), with a target's fp32
    tolerance. ``seeded``: the samples are :func:`edgekit.targets.base.default_verify_samples` (no data given):
    fp16's cost is reported, not gated (see :class:`Yardstick`)."""
    stick = YARDSTICKS[precision]
    stick = replace(stick, max_rel_error=max_rel_error) if max_rel_error is not None else stick
    return replace(stick, rounded_weights_min_cosine=None) if seeded else stick


def worst_rel_error(figures: Mapping[str, Any]) -> float:
    """The largest ``max_rel_error`` over the outputs in ``figures`` (from :func:`compare_outputs`)."""
    return max((o["max_rel_error"] for o in figures["outputs"].values()), default=0.0)


def _stack(results: Sequence[Mapping[str, np.ndarray]], name: str) -> np.ndarray:
    return np.stack([np.asarray(r[name], dtype=np.float64) for r in results])


def _cosine_sqnr(ref: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    r, g = ref.ravel(), got.ravel()
    signal, noise = float(r @ r), float((r - g) @ (r - g))
    norms = np.sqrt(signal * float(g @ g))
    cosine = float(r @ g / norms) if norms > 0 else (1.0 if noise == 0 else 0.0)
    sqnr = 10 * np.log10(signal / noise) if noise > 0 and signal > 0 else (np.inf if noise == 0 else -np.inf)
    return cosine, float(min(sqnr, 999.0))


def sqnr_db(
    reference: Sequence[Mapping[str, np.ndarray]], run: Sequence[Mapping[str, np.ndarray]], name: str
) -> float:
    """SQNR (dB) of ``run``'s output ``name`` against ``reference``'s over all samples."""
    return _cosine_sqnr(_stack(reference, name), _stack(run, name))[1]


def top1_agreements(ref: np.ndarray, got: np.ndarray, axis: int, tie: float) -> tuple[float, float]:
    """Top-1 agreement per position (``axis`` of each sample is the class axis): strict, and with ties."""
    ref_c = np.moveaxis(ref, axis + 1, -1).reshape(-1, ref.shape[axis + 1])
    got_c = np.moveaxis(got, axis + 1, -1).reshape(-1, got.shape[axis + 1])
    ref_top, got_top = ref_c.argmax(1), got_c.argmax(1)
    best = ref_c[np.arange(len(ref_c)), ref_top]
    chosen = ref_c[np.arange(len(ref_c)), got_top]
    return float(np.mean(ref_top == got_top)), float(np.mean(chosen >= best - tie))


def compare_outputs(
    reference: Sequence[Mapping[str, np.ndarray]],
    actual: Sequence[Mapping[str, np.ndarray]],
    kinds: Mapping[str, OutputKind] | None = None,
) -> dict[str, Any]:
    """Verification figures of ``actual`` against ``reference`` (same samples, same output names).

    Per output, over all samples: its ``kind`` (:func:`output_kinds`; without ``kinds`` a last axis of
    more than one value counts as a class axis), max and mean absolute error, the reference's range, the
    ``error_scale`` errors are measured on (1 for probabilities, else the range), ``max_rel_error`` (max
    error / scale), ``cosine`` similarity, ``sqnr_db``, and for outputs with a class axis ``top1_agreement``
    per position (``top1_agreement_ties`` is added by :func:`judge_outputs`). A reference that is not
    finite is refused (the samples are not meaningful); non-finite artifact values count as errors.
    """
    assert len(reference) == len(actual), "one result per sample"
    outputs: dict[str, dict[str, Any]] = {}
    names = list(reference[0]) if reference else []
    for name in names:
        ref, got = _stack(reference, name), _stack(actual, name)
        if ref.shape != got.shape:
            raise TargetError(
                f"verification: output {name!r} has shape {got.shape[1:]}, expected {ref.shape[1:]}"
            )
        if not np.isfinite(ref).all():
            raise TargetError(
                f"verification: the source model gives non-finite values for output {name!r} on the "
                "verification samples; give realistic inputs (--calib)"
            )
        kind = (kinds or {}).get(name)
        if kind is None:
            kind = OutputKind("tensor", ref.ndim - 2 if ref.shape[-1] > 1 and ref.ndim > 1 else None)
        bad = ~np.isfinite(got)
        err = np.where(bad, np.inf, np.abs(ref - np.where(bad, 0.0, got)))
        value_range = float(ref.max() - ref.min()) if ref.size else 0.0
        scale = 1.0 if kind.kind == "probabilities" else value_range
        worst = float(err.max()) if err.size else 0.0
        cosine, sqnr = _cosine_sqnr(ref, np.where(bad, 0.0, got)) if not bad.any() else (0.0, -np.inf)
        entry: dict[str, Any] = {
            "kind": kind.kind,
            "kind_reason": kind.why,
            **({"selection": kind.selection} if kind.selection else {}),
            **({"resampling": kind.resampling} if kind.resampling else {}),
            **(
                {"index_of": {"scores": kind.scores[0], "axis": kind.scores[1], "keepdims": kind.scores[2]}}
                if kind.scores
                else {}
            ),
            "max_abs_error": worst,
            "mean_abs_error": float(err.mean()) if err.size else 0.0,
            "reference_range": value_range,
            "error_scale": scale,
            "max_rel_error": worst / scale if scale > 0 else (0.0 if worst == 0 else np.inf),
            "cosine": cosine,
            "sqnr_db": sqnr,
        }
        if bad.any():
            entry["non_finite"] = int(bad.sum())
        if kind.class_axis is not None and ref.ndim > kind.class_axis + 1:
            entry["class_axis"] = kind.class_axis
            entry["top1_agreement"] = top1_agreements(ref, got, kind.class_axis, 0.0)[0]
        outputs[name] = entry
    return {"samples": len(reference), "outputs": outputs}


def matched_infinities(
    reference: Sequence[Mapping[str, np.ndarray]], actual: Sequence[Mapping[str, np.ndarray]]
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]], dict[str, int]]:
    """The samples with every ±inf of a float reference output (a model's by design: Grounding DINO's logits are
    ``masked_fill(~text_mask, -inf)`` on the padding tokens) taken out of the figures: where the artifact gives
    the same infinity, both become the output's finite extreme on that side (its lowest finite value for -inf,
    its highest for +inf: no error, the range unchanged); where it does not, the artifact's value becomes NaN (a
    non-finite error). NaN in the reference, and an output with no finite value, stay as they are (refused by
    :func:`compare_outputs`). Returns the samples and, per output that had any, how many infinities."""
    ref = [dict(r) for r in reference]
    got = [dict(a) for a in actual]
    counts: dict[str, int] = {}
    for name in list(ref[0]) if ref else []:
        arrays = [np.asarray(r[name]) for r in ref]
        if arrays[0].dtype.kind != "f" or all(np.isfinite(a).all() or np.isnan(a).any() for a in arrays):
            continue
        finite = np.concatenate([a[np.isfinite(a)].ravel() for a in arrays])
        if not finite.size or any(np.isnan(a).any() for a in arrays):
            continue
        low, high = finite.min(), finite.max()
        counts[name] = 0
        for r, g in zip(ref, got, strict=True):
            want, have = np.asarray(r[name]), np.array(g[name], copy=True)
            inf = np.isinf(want)
            counts[name] += int(inf.sum())
            fill = np.where(want > 0, high, low).astype(want.dtype)
            same = inf & (have == want)
            have = have.astype(np.result_type(have.dtype, np.float32))
            have[same] = fill[same]
            have[inf & ~same] = np.nan
            r[name], g[name] = np.where(inf, fill, want), have
    return ref, got, counts


def _filled_noise(
    noise: Callable[[], Sequence[Mapping[str, np.ndarray]]],
    reference: Sequence[Mapping[str, np.ndarray]],
    infinite: Mapping[str, int],
) -> Callable[[], Sequence[Mapping[str, np.ndarray]]]:
    """``noise``'s run with its infinities matched against the raw ones as :func:`matched_infinities` does."""

    def run() -> list[dict[str, np.ndarray]]:
        runs = [dict(n) for n in noise()]
        for name in infinite:
            for r, n in zip(reference, runs, strict=True):
                value = np.asarray(n[name])
                inf = np.isinf(value)
                n[name] = np.where(inf, np.asarray(r[name]), value)
        return runs

    return run


#: An fp32 artifact on a sample where the host's float32 run is itself beyond the bar of float64 stays within this
#: factor of the host's distance, provided another sample is well-conditioned and keeps the bar (a wrong conversion
#: is off there too). Float32 runs of an ill-conditioned sample are draws of the amplified rounding noise, and they
#: scatter: YOLO12's area attention (seeded, a real photo): OpenVINO 1.46e-3 and the .tflite 1.49e-3 of the range
#: off float64; YOLO11n's C2PSA attention (seeded, sample 1 of the standard-normal verification inputs): OpenVINO
#: 1.16e-3, the onnx reference evaluator in float32 3.44e-3, onnxruntime 5.04e-3, the .tflite 1.39e-2 (12x the
#: host; fed the same float64 input, the .tflite's attention Softmax is the nearest of the three to float64).
FLOAT32_FLOOR_FACTOR = 16.0
#: A failure on a sample where the host's own float32 run is off float64 by more than this fraction of the bar is
#: one the bar cannot judge (other float32 runs scatter around the host by several times its distance: a narrow
#: EfficientNetV2 on standard-normal noise, logits spanning 76: OpenVINO 8.7e-5 of the range off float64, the .tflite
#: 1.5e-4; at std 0.5 both 5e-7): it is reported as :class:`IllConditionedSamples` (a deploy without data then
#: retries gentler seeded samples), not as a wrong conversion.
ILL_CONDITIONED_FRACTION = 0.25


def _sample_errors(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """The max abs error of each sample (axis 0)."""
    return np.abs(got - exact).reshape(len(got), -1).max(axis=1)


def judge_outputs(
    figures: dict[str, Any],
    stick: Yardstick,
    reference: Sequence[Mapping[str, np.ndarray]],
    actual: Sequence[Mapping[str, np.ndarray]],
    noise: Callable[[], Sequence[Mapping[str, np.ndarray]]] | None = None,
    scores: Callable[[], Mapping[str, np.ndarray] | None] | None = None,
) -> list[str]:
    """Judge every output of ``figures`` (from :func:`compare_outputs` on ``reference``/``actual``) by
    ``stick``; records per output ``checks`` (``metric``, ``value``, ``threshold``, ``passed``), ``passed``
    and ``yardstick`` (why). ``noise``: runs another runtime on the same samples (int8: another integer runtime
    on the QDQ model; fp32: the source model in float64; called only when an output needs it). ``scores``: gives,
    per ArgMax/ArgMin index output (``index_of`` in its entry), the reference's scores it was chosen from (stacked
    over the samples; an ArgMin's negated); called once, only when an index output misses its bar. Returns one
    line per failed output."""
    failures = []
    noise_results: list[Sequence[Mapping[str, np.ndarray]]] = []

    def noise_run() -> Sequence[Mapping[str, np.ndarray]]:  # run once, when the first output needs it
        if not noise_results:
            noise_results.append(noise())
        return noise_results[0]

    score_results: list[Mapping[str, np.ndarray]] = []

    def scores_run() -> Mapping[str, np.ndarray]:  # run once, when the first index output needs it
        if not score_results:
            score_results.append((scores() if scores is not None else None) or {})
        return score_results[0]

    for name, entry in figures["outputs"].items():
        checks: list[dict[str, Any]] = []

        def check(
            metric: str, value: float, threshold: float, at_most: bool = False, checks: list = checks
        ) -> bool:
            ok = bool(value <= threshold) if at_most else bool(value >= threshold)
            checks.append({"metric": metric, "value": value, "threshold": threshold, "passed": ok})
            return ok

        if stick.max_rel_error is not None:
            passed = check("max_rel_error", entry["max_rel_error"], stick.max_rel_error, at_most=True)
            why = f"{stick.precision}: max error within {stick.max_rel_error:g} of the output's scale"
            index_of = entry.get("index_of")
            if not passed and index_of is not None and name in scores_run():
                # An index map is a choice: a position whose best two scores are within float32 rounding swaps
                # its whole index (smp's Unet with activation="argmax2d", seeded, 256x256: 1-5 of 65,536 pixels
                # a sample between the .tflite and the host, every one at a margin under 2.3e-5 of the scores'
                # range). It is judged on the scores: every index must be one whose source score is within twice
                # the bar of the best (both runs within the bar of the truth); a wrong axis or layout is not.
                ref_scores = scores_run()[name]
                tie = 2 * stick.max_rel_error * float(ref_scores.max() - ref_scores.min())
                allowed = index_choices_allowed(
                    ref_scores, _stack(actual, name), index_of["axis"], index_of["keepdims"], tie
                )
                checks.pop()  # judged on the scores instead (the error is kept in the figures)
                passed = check("index_choices_allowed", allowed, 1.0)
                why += (
                    f"; an index map judged on its {entry.get('selection', 'ArgMax')}'s scores: every index within "
                    f"{2 * stick.max_rel_error:g} of the scores' range of the best"
                )
            elif not passed and noise is not None and stick.float64_fallback:
                exact = _stack(noise_run(), name)
                scale = entry["error_scale"] if entry["error_scale"] > 0 else 1.0
                per_sample = _sample_errors(_stack(actual, name), exact) / scale
                host = _sample_errors(_stack(reference, name), exact) / scale
                error = float(per_sample.max())
                entry["float64_reference"] = {
                    "reference": "the source model in float64 (onnx reference evaluator)",
                    "max_rel_error": error,
                    "host_max_rel_error": float(host.max()),
                }
                passed = check("max_rel_error_vs_float64", error, stick.max_rel_error, at_most=True)
                why += "; above that against the source model in float64 (the float32 host run is off itself)"
                # A sample on which the host's own float32 run is beyond the bar of float64 is ill-conditioned
                # for float32 (the network amplifies rounding there: seeded attention logits spanning
                # hundreds): no float32 artifact can be nearer than float32 itself, so the artifact is held
                # to FLOAT32_FLOOR_FACTOR times the host's distance there; the other samples keep the bar. When
                # every sample is ill-conditioned, nothing tells rounding from a wrong conversion: refused, as
                # IllConditionedSamples when the host is near the bar (ILL_CONDITIONED_FRACTION) on a failing
                # sample (a deploy without data retries gentler seeded samples).
                ill = host > stick.max_rel_error
                near = host > ILL_CONDITIONED_FRACTION * stick.max_rel_error  # ill, or too near to judge by
                if not passed and near.any():
                    entry["float64_reference"]["ill_conditioned_samples"] = int(near.sum())
                # An output resampled at computed positions (_RESAMPLING) is ill-conditioned by construction, not
                # by its samples: every sample near the bar is held to the host's own distance, none needs to be
                # well-conditioned (a wrong conversion moves the positions themselves: far beyond 16x rounding).
                resampling = entry.get("resampling")
                floored = near if resampling else ill
                if not passed and floored.any() and (resampling or not floored.all()):
                    bound = np.where(
                        floored,
                        np.maximum(FLOAT32_FLOOR_FACTOR * host, stick.max_rel_error),
                        stick.max_rel_error,
                    )
                    worst = float((per_sample / bound).max())
                    checks.pop()  # judged per sample instead (the line above is kept in the figures)
                    passed = check("max_rel_error_vs_float64_per_sample_bound", worst, 1.0, at_most=True)
                    why += (
                        f"; on {int(floored.sum())} sample(s) where float32 itself is off float64, within "
                        f"{FLOAT32_FLOOR_FACTOR:g}x the host's own error"
                        + (f" (a {resampling} output: positions rounded in float32)" if resampling else "")
                    )
        elif check("max_rel_error", entry["max_rel_error"], stick.resolution, at_most=True):
            passed, why = True, f"{stick.precision}: every error within the precision's step of the scale"
        else:
            tie = stick.resolution * entry["error_scale"]  # classes this close to the best agree
            close = check("cosine", entry["cosine"], stick.min_cosine)
            close = check("sqnr_db", entry["sqnr_db"], stick.min_sqnr_db) and close
            if "class_axis" in entry:
                ref, got = _stack(reference, name), _stack(actual, name)
                entry["top1_agreement_ties"] = top1_agreements(ref, got, entry["class_axis"], tie)[1]
                close = check("top1_agreement_ties", entry["top1_agreement_ties"], stick.min_top1) and close
            passed, why = (
                close,
                f"{stick.precision}: cosine and SQNR per output"
                + (", top-1 agreement per position" if "class_axis" in entry else ""),
            )
            if not passed and noise is not None and stick.kernel_noise_db is not None:
                floor = sqnr_db(reference, noise_run(), name)
                entry["kernel_noise"] = {
                    "reference": "the QDQ model on OpenVINO's int8 kernels (uint8 activations), or its exact semantics under "
                    "float32 rounding (the noisier)",
                    "sqnr_db": floor,
                }
                passed = check("sqnr_db_vs_kernel_noise", entry["sqnr_db"], floor - stick.kernel_noise_db)
                why += "; below that, within the rounding noise of another int8 runtime"
            if not passed and noise is not None and stick.rounded_weights_fallback:
                rounded, got = _stack(noise_run(), name), _stack(actual, name)
                cosine, sqnr = _cosine_sqnr(rounded, got)
                entry["fp16_weights_reference"] = {
                    "reference": "the source model with its weights rounded to float16 (the recipe's numerics)",
                    "cosine": cosine,
                    "sqnr_db": sqnr,
                }
                # a choice among near-ties flips under any rounding, and seeded samples are not the model's data:
                # the cost is reported, not gated
                gated = "selection" not in entry and stick.rounded_weights_min_cosine is not None
                entry["fp16_weights_reference"]["cost_gated"] = gated
                close = not gated or check(
                    "cosine_fp16_cost", entry["cosine"], stick.rounded_weights_min_cosine
                )
                close = check("cosine_vs_fp16_weights", cosine, stick.min_cosine) and close
                close = check("sqnr_db_vs_fp16_weights", sqnr, stick.min_sqnr_db) and close
                if "class_axis" in entry:
                    agree = top1_agreements(rounded, got, entry["class_axis"], tie)[1]
                    entry["fp16_weights_reference"]["top1_agreement_ties"] = agree
                    close = check("top1_agreement_ties_vs_fp16_weights", agree, stick.min_top1) and close
                passed = close
                why += "; below that against fp32, equal to the source with float16-rounded weights (fp16's own cost)"
                if "selection" in entry:
                    why += f", a {entry['selection']} choice that rounding reorders among near-ties"
            probabilities = entry["kind"] == "probabilities" and "class_axis" in entry
            if not passed and probabilities and stick.answer_cosine is not None:
                same = entry["top1_agreement_ties"] >= stick.min_top1
                passed = check("cosine_same_answers", entry["cosine"], stick.answer_cosine) and same
                why += "; below that, an integer probability head giving the same answers"
        entry.update(
            checks=checks, passed=passed, yardstick=f"{entry['kind']} ({entry['kind_reason']}); {why}"
        )
        if not passed:
            failed = [c for c in checks if not c["passed"]]
            shown = ", ".join(
                f"{c['metric']} {c['value']:.4g} ({'max' if c['metric'].startswith('max_rel_error') else 'min'} "
                f"{c['threshold']:.4g})"
                for c in failed
            )
            # rows ordered by a TopK/ArgMax choice: scores one rounding apart swap whole rows (yolo26n's end-to-end
            # head on the seeded normal samples: every class score saturated to 1.0, a choice among exact ties)
            hint = (
                f" (computed from a {entry['selection']} choice: near-tied scores swap whole rows on inputs unlike "
                "the model's data; verify on real inputs with --calib DATA)"
                if "selection" in entry
                else ""
            )
            failures.append(f"output {name!r} ({entry['kind']}): {shown}{hint}")
    return failures


class IllConditionedSamples(TargetError):
    """A float artifact missed the bar on samples among which the host's own float32 run misses it too: samples
    that drive the network where float32 rounding is amplified (seeded noise far from the model's data), on which
    the bar cannot tell rounding from a wrong conversion (see :data:`SEEDED_STDS`)."""


#: The standard deviations of the seeded normal verification samples of a deploy without data, tried in turn
#: while a failure comes with ill-conditioned samples (timm's efficientnetv2_rw_t, seeded, BatchNorm statistics from
#: photos: at std 1 its logits span 700 and OpenVINO's float32 run is 3e-4 to 1.5e-3 of that from float64 on each
#: sample, onnxruntime's up to 3.3e-3, the .tflite's up to 2.8e-3; at std 0.5 they span 1.5 and every float32 run
#: is within 1.4e-6). Each retry is still held to the bar itself (1e-4), and ill-conditioning rules there as above.
SEEDED_STDS = (1.0, 0.5, 0.25)


def verify_outputs(
    reference: Sequence[Mapping[str, np.ndarray]],
    actual: Sequence[Mapping[str, np.ndarray]],
    stick: Yardstick,
    kinds: Mapping[str, OutputKind] | None,
    target: str,
    artifact: str,
    noise: Callable[[], Sequence[Mapping[str, np.ndarray]]] | None = None,
    scores: Callable[[], Mapping[str, np.ndarray] | None] | None = None,
) -> dict[str, Any]:
    """:func:`compare_outputs` judged by :func:`judge_outputs`; a TargetError naming each failed output when
    one fails (the artifact is then not written), else the figures with ``passed`` and ``max_rel_error``.
    Infinities the source model gives by design are matched first (:func:`matched_infinities`)."""
    reference, actual, infinite = matched_infinities(reference, actual)
    if noise is not None and infinite:
        noise = _filled_noise(noise, reference, infinite)
    figures = compare_outputs(reference, actual, kinds)
    for name, count in infinite.items():
        figures["outputs"][name]["infinite_in_reference"] = count
    failures = judge_outputs(figures, stick, reference, actual, noise, scores)
    failed = [e for e in figures["outputs"].values() if not e["passed"]]
    if failures and any(e.get("float64_reference", {}).get("ill_conditioned_samples") for e in failed):
        raise IllConditionedSamples(
            f"{target}: verification failed: {artifact} differs from the source model on {len(reference)} "
            "sample(s), on some of which the host's own float32 run is near or beyond the bar off float64 (the "
            f"samples drive the network where float32 rounding is amplified): {'; '.join(failures)}"
        )
    if failures:
        raise TargetError(
            f"{target}: verification failed: {artifact} differs from the source model on {len(reference)} "
            f"sample(s): {'; '.join(failures)}"
        )
    for name, entry in figures["outputs"].items():
        if "fp16_weights_reference" in entry:
            seeded = "selection" not in entry and not entry["fp16_weights_reference"]["cost_gated"]
            _log.warning(
                "%s: output %r of %s is cosine %.5f from the fp32 model on the verification samples%s: the cost of "
                "float16 weights%s (against the source with float16-rounded weights: cosine %.8f)%s",
                target, name, artifact, entry["cosine"],
                " (seeded normal noise: no data given)" if seeded else "",
                f" reordering its {entry['selection']} choice" if "selection" in entry else "",
                entry["fp16_weights_reference"]["cosine"],
                f"; pass --calib to hold it to cosine {YARDSTICKS['fp16'].rounded_weights_min_cosine} on your data"
                if seeded else "",
            )  # fmt: skip
    return {
        "yardstick": stick.precision,
        "max_rel_error": worst_rel_error(figures),
        "passed": True,
        **figures,
    }
