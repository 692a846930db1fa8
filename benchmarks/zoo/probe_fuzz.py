"""Probe round 21z: every op converter fuzzed with random valid attributes and shapes (crash hunting).

``--out benchmarks/.zoo/probe21z`` (git-ignored). For each op, ``--per-op N`` seeded single-op graphs (or the op
with a small float producer / consumer: a ``Cast`` of an integer output to float, a ``Greater`` making a
condition) built with ``onnx.helper``: random VALID attribute combinations from the ONNX spec and random shapes
(ranks 1-5, negative axes, size-1 broadcast dims, keepdims 0 / 1, reductions with no axes and
``noop_with_empty_axes``, axes as attribute (opset 13) and as input (18), Slice with negative / over-large starts
and ends and negative steps, Pad modes with negative pads, Resize modes x coordinate transformations x nearest
modes x sizes / scales, Conv / ConvTranspose 1-D / 2-D / 3-D with groups, dilations, auto_pad, output_padding,
output_shape, pools with ceil_mode / count_include_pad / dilations, the three Split forms, Clip without min /
max, Gemm transA / transB / alpha / beta / C broadcast, MatMul with 1-D operands and broadcast batches, Einsum
equations, TopK, ArgMax select_last_index, CumSum exclusive / reverse, DepthToSpace DCR / CRD, Gather /
GatherElements / GatherND with negative constant indices, Where / Expand broadcasting) at opsets 11, 13, 17 and
21 where the op exists there. Every graph passes ``onnx.checker`` (full) and strict shape inference and runs in
onnxruntime (graphs onnxruntime refuses are dropped: they are invalid); indices, shapes and axes are constants,
every graph input is float. Each model's inputs (random normal, a positive range for the ops that need it) are
stored beside it as ``"arrays"`` (64 samples); ``kind`` is ``encoder`` (raw outputs compared).

    python benchmarks/zoo/probe_fuzz.py [--seed 21] [--per-op 3] [--only Conv,Resize]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe21z/zoo.json --no-shared --workers 1 --calib 8 \\
        --eval 8 --cases "arm-cpu fp32,intel-vpu fp16,quantize" --work W --json r.json
    python benchmarks/zoo/probe_fuzz.py --check W      # every passing arm-cpu fp32 / intel-vpu fp16 artifact on
                                                       # fresh random inputs against onnxruntime (LiteRT / OpenVINO)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "zoo"))
import zoo_data  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe21z"
SAMPLES = 64
OPSETS = (11, 13, 17, 21)
IR = {11: 6, 13: 7, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}
F = TensorProto.FLOAT


class G:
    """One graph under construction: float inputs, constant initializers, nodes."""

    def __init__(self, rng: np.random.Generator, opset: int) -> None:
        self.rng, self.opset = rng, opset
        self.inputs: list[tuple[str, list[int]]] = []
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.outputs: list[str] = []
        self.positive = False  # inputs drawn from a positive range (Log, Sqrt, Pow)
        self.note = ""
        self._n = 0

    def x(self, shape: list[int]) -> str:
        name = f"x{len(self.inputs)}"
        self.inputs.append((name, list(shape)))
        return name

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        self._n += 1
        name = f"c{self._n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(self, op: str, ins: list[str], n_out: int = 1, **attrs: Any) -> list[str]:
        self._n += 1
        outs = [f"t{self._n}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{self._n}", **attrs))
        return outs

    def out(self, name: str, as_float: bool = False) -> None:
        if as_float:
            name = self.node("Cast", [name], to=F)[0]
        self.outputs.append(name)

    def shape(self, rank: int | None = None, lo: int = 1, hi: int = 6, ones: float = 0.25) -> list[int]:
        rank = int(self.rng.integers(1, 6)) if rank is None else rank
        return [1 if self.rng.random() < ones else int(self.rng.integers(lo, hi + 1)) for _ in range(rank)]

    def pick(self, seq: Any) -> Any:
        return seq[int(self.rng.integers(len(seq)))]

    def coin(self, p: float = 0.5) -> bool:
        return bool(self.rng.random() < p)


# ------------------------------------------------------------------------------------------------ op generators


def axes_arg(g: G, op: str, axes: list[int] | None, attrs: dict[str, Any]) -> list[str]:
    """Axes as attribute before the opset that made them an input (Reduce*: 18, Squeeze / Unsqueeze: 13)."""
    since = 13 if op in ("Squeeze", "Unsqueeze", "ReduceSum") else 18
    if axes is None:
        return []
    if g.opset >= since:
        return [g.const(axes)]
    attrs["axes"] = axes
    return []


UNARY = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "Abs": {}, "Neg": {}, "Floor": {}, "Ceil": {}, "Round": {}, "Sign": {},
    "Erf": {}, "Sin": {}, "Cos": {}, "Softsign": {}, "Softplus": {}, "Reciprocal": {}, "Exp": {},
    "Sqrt": {"positive": True}, "Log": {"positive": True},
    "LeakyRelu": {"alpha": (0.01, 0.2, 1.5)}, "Elu": {"alpha": (0.5, 1.0, 2.0)},
    "Selu": {"alpha": (1.67, 2.0), "gamma": (1.05, 0.5)}, "Celu": {"alpha": (1.0, 0.5, 2.0)},
    "HardSigmoid": {"alpha": (0.2, 1 / 6, 0.5), "beta": (0.5, 0.3)}, "ThresholdedRelu": {"alpha": (1.0, 0.3, -0.5)},
    "HardSwish": {"since": 14}, "Mish": {"since": 18}, "Gelu": {"since": 20, "approximate": ("none", "tanh")},
}  # fmt: skip


def unary(op: str) -> Callable[[G], None]:
    spec = UNARY[op]

    def gen(g: G) -> None:
        if g.opset < spec.get("since", 1):
            g.opset = 21
        attrs = {k: g.pick(v) for k, v in spec.items() if k not in ("since", "positive")}
        g.positive = bool(spec.get("positive"))
        g.out(g.node(op, [g.x(g.shape())], **attrs)[0])

    return gen


def broadcast_pair(g: G) -> tuple[list[int], list[int]]:
    a = g.shape()
    rank_b = int(g.rng.integers(1, len(a) + 1))
    b = [1 if g.coin(0.4) else d for d in a[len(a) - rank_b :]]
    if g.coin(0.3):  # b is the bigger one
        a, b = b, a
    if g.coin(0.15):
        b = [1] * len(b)  # all-ones broadcast
    return a, b


def binary(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        a, b = broadcast_pair(g)
        attrs: dict[str, Any] = {}
        if op == "Pow":
            g.positive = True
        if op == "Mod":
            attrs["fmod"] = 1
            g.positive = True
        second = g.x(b) if g.coin(0.6) else g.const(g.rng.uniform(0.5, 2.0, b).astype(np.float32), np.float32)
        g.out(g.node(op, [g.x(a), second], **attrs)[0])

    return gen


def variadic(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        a, b = broadcast_pair(g)
        names = [g.x(a), g.x(b)]
        if g.coin():
            names.append(g.x([1] * int(g.rng.integers(1, len(a) + 1))))
        g.out(g.node(op, names)[0])

    return gen


def comparison(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        a, b = broadcast_pair(g)
        xa, xb = g.x(a), g.x(b)
        cond = g.node(op, [xa, xb])[0]
        if g.coin():
            g.out(g.node("Where", [cond, xa, xb])[0])
        else:
            g.out(cond, as_float=True)

    return gen


def gen_prelu(g: G) -> None:
    shape = g.shape(int(g.rng.integers(2, 6)))
    slope = [shape[1]] + [1] * (len(shape) - 2) if g.coin() else [1]
    g.out(g.node("PRelu", [g.x(shape), g.const(g.rng.uniform(-0.5, 0.5, slope), np.float32)])[0])


def gen_where(g: G) -> None:
    a, b = broadcast_pair(g)
    c = [1 if g.coin(0.5) else d for d in (a if len(a) >= len(b) else b)]
    xa = g.x(a)
    cond = g.node("Greater", [g.x(c), g.const(np.float32(0.0), np.float32)])[0]
    other = g.x(b) if g.coin() else g.const(np.float32(-1.0), np.float32)
    g.out(g.node("Where", [cond, xa, other] if g.coin() else [cond, other, xa])[0])


def gen_clip(g: G) -> None:
    shape = g.shape()
    x = g.x(shape)
    lo, hi = sorted(g.rng.uniform(-1.5, 1.5, 2).tolist())
    if g.opset < 11:
        g.opset = 11
    which = g.pick(("both", "min", "max", "none"))
    ins = [x, g.const(np.float32(lo), np.float32) if which in ("both", "min") else ""]
    if which in ("both", "max"):
        ins.append(g.const(np.float32(hi), np.float32))
    while ins and ins[-1] == "":
        ins.pop()
    g.note = f"Clip {which}"
    g.out(g.node("Clip", ins)[0])


def gen_softmax(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        shape = g.shape()
        axis = int(g.rng.integers(-len(shape), len(shape)))
        g.out(g.node(op, [g.x(shape)], axis=axis)[0])

    return gen


REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")  # fmt: skip


def reduce(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        shape = g.shape(hi=5)
        r = len(shape)
        attrs: dict[str, Any] = {"keepdims": int(g.coin())}
        choice = g.rng.random()
        if choice < 0.2:
            axes = None  # every axis
        else:
            k = int(g.rng.integers(1, r + 1))
            axes = sorted(int(a) for a in g.rng.choice(r, k, replace=False))
            axes = [a - r if g.coin() else a for a in axes]
        if op in ("ReduceLogSum", "ReduceProd"):
            g.positive = True
        ins = [g.x(shape), *axes_arg(g, op, axes, attrs)]
        since = 13 if op == "ReduceSum" else 18
        if axes is None and g.opset >= since and g.coin(0.3):
            attrs["noop_with_empty_axes"] = 1
            g.note = "noop_with_empty_axes"
        g.out(g.node(op, ins, **attrs)[0])

    return gen


def gen_arg(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        shape = g.shape()
        attrs = {"axis": int(g.rng.integers(-len(shape), len(shape))), "keepdims": int(g.coin())}
        if g.opset >= 12 and g.coin():
            attrs["select_last_index"] = 1
        g.out(g.node(op, [g.x(shape)], **attrs)[0], as_float=True)

    return gen


def gen_reshape(g: G) -> None:
    shape = g.shape(hi=4)
    total = int(np.prod(shape))
    # a random factorisation of total, one dim maybe -1, maybe 0 (copy) where ranks line up
    dims: list[int] = []
    rest = total
    for _ in range(int(g.rng.integers(0, 4))):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = g.pick(divs)
        dims.append(d)
        rest //= d
    dims.append(rest)
    g.rng.shuffle(dims)
    if g.coin(0.5):
        dims[int(g.rng.integers(len(dims)))] = -1
    if g.coin(0.3) and len(dims) <= len(shape) and dims[0] == shape[0]:
        dims[0] = 0
    g.out(g.node("Reshape", [g.x(shape), g.const(dims)])[0])


def gen_transpose(g: G) -> None:
    shape = g.shape(hi=5, ones=0.15)
    attrs = {"perm": [int(p) for p in g.rng.permutation(len(shape))]} if g.coin(0.85) else {}
    g.out(g.node("Transpose", [g.x(shape)], **attrs)[0])


def gen_slice(g: G) -> None:
    shape = g.shape(lo=2, hi=8, ones=0.1)
    r = len(shape)
    k = int(g.rng.integers(1, r + 1))
    axes = [int(a) for a in g.rng.choice(r, k, replace=False)]
    starts, ends, steps = [], [], []
    for a in axes:
        n = shape[a]
        step = int(g.pick((1, 1, 2, 3, -1, -2)))
        big = g.pick((2**31 - 1, 2**63 - 1, n + 5))
        if step > 0:
            s = int(g.rng.integers(-n - 2, n))
            e = big if g.coin(0.3) else int(g.rng.integers(-n, n + 3))
        else:
            s = big if g.coin(0.3) else int(g.rng.integers(-n, n + 3))
            e = g.pick((-(2**63 - 1), -n - 5)) if g.coin(0.3) else int(g.rng.integers(-n - 2, n))
        starts.append(s)
        ends.append(e)
        steps.append(step)
    axes = [a - r if g.coin() else a for a in axes]
    ins = [g.x(shape), g.const(starts), g.const(ends)]
    if g.coin(0.85) or any(s != 1 for s in steps):
        ins.append(g.const(axes))
        if g.coin(0.8) or any(s != 1 for s in steps):
            ins.append(g.const(steps))
    g.note = f"starts {starts} ends {ends} axes {axes} steps {steps}"
    g.out(g.node("Slice", ins)[0])


def gen_gather(g: G) -> None:
    shape = g.shape(lo=2, hi=6)
    axis = int(g.rng.integers(-len(shape), len(shape)))
    n = shape[axis]
    ishape = [] if g.coin(0.3) else g.shape(int(g.rng.integers(1, 3)), hi=4)
    idx = g.rng.integers(-n, n, ishape)
    g.out(g.node("Gather", [g.x(shape), g.const(idx)], axis=axis)[0])


def gen_gather_elements(g: G) -> None:
    shape = g.shape(lo=2, hi=5)
    axis = int(g.rng.integers(-len(shape), len(shape)))
    ishape = [int(g.rng.integers(1, d + 1)) for d in shape]
    ishape[axis] = int(g.rng.integers(1, 6))
    idx = g.rng.integers(-shape[axis], shape[axis], ishape)
    g.out(g.node("GatherElements", [g.x(shape), g.const(idx)], axis=axis)[0])


def gen_gather_nd(g: G) -> None:
    shape = g.shape(int(g.rng.integers(2, 5)), lo=2, hi=5)
    b = int(g.rng.integers(0, 2)) if g.opset >= 12 else 0
    b = min(b, len(shape) - 1)
    last = int(g.rng.integers(1, len(shape) - b + 1))
    ishape = shape[:b] + [int(g.rng.integers(1, 4))] + [last]
    idx = np.stack([g.rng.integers(-shape[b + j], shape[b + j], ishape[:-1]) for j in range(last)], -1)
    g.out(g.node("GatherND", [g.x(shape), g.const(idx)], batch_dims=b)[0])


def gen_split(g: G) -> None:
    shape = g.shape(lo=2, hi=8, ones=0.1)
    axis = int(g.rng.integers(-len(shape), len(shape)))
    n = shape[axis]
    form = g.pick(("equal", "sizes", "num_outputs") if g.opset >= 18 else ("equal", "sizes"))
    attrs: dict[str, Any] = {"axis": axis}
    ins = [g.x(shape)]
    if form == "sizes":
        k = int(g.rng.integers(1, min(n, 4) + 1))
        cuts = sorted(g.rng.choice(np.arange(1, n), k - 1, replace=False).tolist()) if k > 1 else []
        sizes = np.diff([0, *cuts, n]).tolist()
        if g.opset >= 13:
            ins.append(g.const(sizes))
        else:
            attrs["split"] = sizes
        outs = len(sizes)
    elif form == "num_outputs":
        outs = int(g.rng.integers(1, min(n, 4) + 1))
        attrs["num_outputs"] = outs
    else:
        divs = [d for d in range(1, min(n, 4) + 1) if n % d == 0]
        outs = g.pick(divs)
    g.note = f"Split {form}"
    for o in g.node("Split", ins, n_out=outs, **attrs):
        g.out(o)


def gen_concat(g: G) -> None:
    shape = g.shape()
    axis = int(g.rng.integers(-len(shape), len(shape)))
    names = []
    for _ in range(int(g.rng.integers(1, 4))):
        s = list(shape)
        s[axis] = int(g.rng.integers(1, 4))
        names.append(
            g.x(s) if g.coin(0.7) else g.const(g.rng.standard_normal(s).astype(np.float32), np.float32)
        )
    if all(n.startswith("c") for n in names):
        names[0] = g.x(shape)
    g.out(g.node("Concat", names, axis=axis)[0])


def gen_squeeze(g: G) -> None:
    shape = g.shape(ones=0.5)
    ones = [i for i, d in enumerate(shape) if d == 1]
    if not ones:
        shape[0] = 1
        ones = [0]
    attrs: dict[str, Any] = {}
    axes = (
        None
        if g.coin(0.3)
        else [a - len(shape) if g.coin() else a for a in ones[: int(g.rng.integers(1, 3))]]
    )
    ins = [g.x(shape), *axes_arg(g, "Squeeze", axes, attrs)]
    g.out(g.node("Squeeze", ins, **attrs)[0])


def gen_unsqueeze(g: G) -> None:
    shape = g.shape(hi=4)
    k = int(g.rng.integers(1, 3))
    out_rank = len(shape) + k
    axes = sorted(int(a) for a in g.rng.choice(out_rank, k, replace=False))
    axes = [a - out_rank if g.coin() else a for a in axes]
    attrs: dict[str, Any] = {}
    g.out(g.node("Unsqueeze", [g.x(shape), *axes_arg(g, "Unsqueeze", axes, attrs)], **attrs)[0])


def gen_expand(g: G) -> None:
    a, b = broadcast_pair(g)
    src = [1 if g.coin(0.5) else d for d in a]
    target = [d if g.coin(0.7) else 1 for d in a] if g.coin(0.3) else a
    if g.coin(0.3):
        target = [int(g.rng.integers(1, 3))] + list(target)
    g.out(g.node("Expand", [g.x(src), g.const(target)])[0])


def gen_tile(g: G) -> None:
    shape = g.shape(hi=4)
    reps = [int(g.rng.integers(1, 4)) for _ in shape]
    g.out(g.node("Tile", [g.x(shape), g.const(reps)])[0])


def gen_pad(g: G) -> None:
    shape = g.shape(lo=2, hi=6, ones=0.1)
    r = len(shape)
    mode = g.pick(("constant", "reflect", "edge") + (("wrap",) if g.opset >= 19 else ()))
    pads = []
    for d in shape * 2:
        lim = d - 1 if mode == "reflect" else 3
        p = int(g.rng.integers(0, lim + 1)) if lim > 0 else 0
        if g.coin(0.2) and d > 1:
            p = -int(g.rng.integers(1, d))  # negative pads crop
        pads.append(p)
    for i in range(r):  # a cropped dim keeps at least one element
        while shape[i] + pads[i] + pads[i + r] < 1:
            pads[i] = pads[i] + 1 if pads[i] < 0 else pads[i]
            pads[i + r] = pads[i + r] + 1 if pads[i + r] < 0 else pads[i + r]
    ins = [g.x(shape), g.const(pads)]
    if mode == "constant" and g.coin():
        ins.append(g.const(np.float32(g.rng.uniform(-2, 2)), np.float32))
    if g.opset >= 18 and g.coin(0.4):
        axes = list(range(r))
        # axes input: pads only for these
        k = int(g.rng.integers(1, r + 1))
        axes = sorted(int(a) for a in g.rng.choice(r, k, replace=False))
        pads = [pads[a] for a in axes] + [pads[a + r] for a in axes]
        ins[1] = g.const(pads)
        if len(ins) == 2:
            ins.append("")
        ins.append(g.const([a - r if g.coin() else a for a in axes]))
    g.note = f"Pad {mode} {pads}"
    g.out(g.node("Pad", ins, mode=mode)[0])


def gen_depth_space(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        bs = g.pick((2, 3))
        n, c = g.pick((1, 2)), int(g.rng.integers(1, 4))
        h, w = int(g.rng.integers(1, 4)), int(g.rng.integers(1, 4))
        attrs: dict[str, Any] = {"blocksize": bs}
        if op == "DepthToSpace":
            shape = [n, c * bs * bs, h, w]
            attrs["mode"] = g.pick(("DCR", "CRD"))
        else:
            shape = [n, c, h * bs, w * bs]
        g.out(g.node(op, [g.x(shape)], **attrs)[0])

    return gen


def gen_flatten(g: G) -> None:
    shape = g.shape()
    axis = int(g.rng.integers(-len(shape), len(shape) + 1))
    g.out(g.node("Flatten", [g.x(shape)], axis=axis)[0])


def conv_common(g: G, transpose: bool) -> None:
    nd = g.pick((1, 2, 2, 3))
    groups = g.pick((1, 1, 2, 3))
    cin = groups * int(g.rng.integers(1, 3))
    cout = groups * int(g.rng.integers(1, 3))
    spatial = [int(g.rng.integers(3, 10 if nd < 3 else 6)) for _ in range(nd)]
    k = [int(g.rng.integers(1, 4)) for _ in range(nd)]
    strides = [int(g.rng.integers(1, 3)) for _ in range(nd)]
    dil = [int(g.rng.integers(1, 3)) for _ in range(nd)]
    attrs: dict[str, Any] = {"group": groups}
    if g.coin(0.7):
        attrs["kernel_shape"] = k
    if g.coin(0.7) or any(s > 1 for s in strides):
        attrs["strides"] = strides
    if g.coin(0.5) or any(d > 1 for d in dil):
        attrs["dilations"] = dil
    pad_mode = g.pick(("explicit", "explicit", "SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"))
    if pad_mode == "explicit":
        attrs["pads"] = [int(g.rng.integers(0, kk)) if kk > 1 else 0 for kk in k * 2]
    elif pad_mode != "NOTSET":
        attrs["auto_pad"] = pad_mode
    xshape = [1 if g.coin(0.8) else 2, cin, *spatial]
    if transpose:
        wshape = [cin, cout // groups, *k]
        if g.coin(0.4):
            attrs["output_padding"] = [
                int(g.rng.integers(0, max(s, d))) for s, d in zip(strides, dil, strict=True)
            ]
        if g.coin(0.2) and "pads" not in attrs:
            attrs.pop("output_padding", None)
            attrs["output_shape"] = [
                s * st + int(g.rng.integers(0, st)) for s, st in zip(spatial, strides, strict=True)
            ]
    else:
        wshape = [cout, cin // groups, *k]
    w = g.const(g.rng.standard_normal(wshape).astype(np.float32) * 0.5, np.float32)
    ins = [g.x(xshape), w]
    if g.coin(0.7):
        ins.append(g.const(g.rng.standard_normal(cout).astype(np.float32), np.float32))
    g.note = f"{nd}-D " + ", ".join(f"{k}={v}" for k, v in attrs.items())
    g.out(g.node("ConvTranspose" if transpose else "Conv", ins, **attrs)[0])


def gen_pool(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        nd = g.pick((1, 2, 2, 3))
        spatial = [int(g.rng.integers(3, 10 if nd < 3 else 6)) for _ in range(nd)]
        k = [int(g.rng.integers(1, 4)) for _ in range(nd)]
        attrs: dict[str, Any] = {"kernel_shape": k}
        strides = [int(g.rng.integers(1, 3)) for _ in range(nd)]
        if g.coin(0.7):
            attrs["strides"] = strides
        pad_mode = g.pick(("explicit", "explicit", "SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"))
        if pad_mode == "explicit":
            attrs["pads"] = [int(g.rng.integers(0, kk)) if kk > 1 else 0 for kk in k * 2]
        elif pad_mode != "NOTSET":
            attrs["auto_pad"] = pad_mode
        if g.coin(0.3):
            attrs["ceil_mode"] = 1
        if op == "AveragePool" and g.coin():
            attrs["count_include_pad"] = 1
        if (op == "MaxPool" or g.opset >= 19) and g.coin(0.3):
            attrs["dilations"] = [int(g.rng.integers(1, 3)) for _ in range(nd)]
        if op == "LpPool":
            attrs["p"] = g.pick((1, 2, 3))
        g.note = f"{nd}-D " + ", ".join(f"{k}={v}" for k, v in attrs.items())
        g.out(g.node(op, [g.x([g.pick((1, 2)), int(g.rng.integers(1, 4)), *spatial])], **attrs)[0])

    return gen


def gen_global_pool(op: str) -> Callable[[G], None]:
    def gen(g: G) -> None:
        nd = g.pick((1, 2, 3))
        g.out(g.node(op, [g.x([g.pick((1, 2)), int(g.rng.integers(1, 5)), *g.shape(nd, lo=2, ones=0.1)])])[0])

    return gen


def gen_resize(g: G) -> None:
    nd = g.pick((1, 2, 2, 2, 3))
    mode = g.pick(("nearest", "linear", "cubic") if nd <= 2 else ("nearest", "linear"))
    spatial = [int(g.rng.integers(2, 8)) for _ in range(nd)]
    shape = [g.pick((1, 2)), int(g.rng.integers(1, 4)), *spatial]
    ctm = g.pick(("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_crop_and_resize")
                 + (("half_pixel_symmetric",) if g.opset >= 19 else ()))  # fmt: skip
    if ctm == "tf_crop_and_resize" and g.coin(0.6):
        ctm = "half_pixel"
    attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = g.pick(("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))
    if mode == "cubic" and g.coin():
        attrs["cubic_coeff_a"] = -0.5
        if g.coin():
            attrs["exclude_outside"] = 1
    roi = ""
    if ctm == "tf_crop_and_resize":
        lo = g.rng.uniform(0, 0.4, len(shape))
        hi = g.rng.uniform(0.6, 1.0, len(shape))
        lo[:2], hi[:2] = 0, 1
        roi = g.const(np.concatenate([lo, hi]).astype(np.float32), np.float32)
        attrs["extrapolation_value"] = float(g.rng.uniform(-1, 1))
    if g.coin():
        scales = [1.0, 1.0] + [float(g.pick((0.5, 2.0, 3.0, 1.5, 0.75))) for _ in range(nd)]
        ins = [g.x(shape), roi or ("" if g.opset >= 13 else g.const(np.zeros(0, np.float32), np.float32)),
               g.const(np.asarray(scales, np.float32), np.float32)]  # fmt: skip
        g.note = f"{nd}-D scales {scales}"
    else:
        sizes = shape[:2] + [max(1, int(s * g.pick((0.5, 2, 3, 1.5, 0.7)))) for s in spatial]
        empty = g.const(np.zeros(0, np.float32), np.float32)
        ins = [
            g.x(shape),
            roi or ("" if g.opset >= 13 else empty),
            "" if g.opset >= 13 else empty,
            g.const(sizes),
        ]
        g.note = f"{nd}-D sizes {sizes}"
        if g.opset >= 18 and g.coin(0.3):
            attrs["keep_aspect_ratio_policy"] = g.pick(("not_larger", "not_smaller"))
            ax = list(range(2, len(shape)))
            attrs["axes"] = ax
            ins[3] = g.const([sizes[a] for a in ax])
    if g.opset >= 18 and mode != "nearest" and g.coin(0.2):
        attrs["antialias"] = 1
    g.note = f"{mode} {ctm} {attrs.get('nearest_mode', '')} " + g.note
    g.out(g.node("Resize", ins, **attrs)[0])


def gen_batchnorm(g: G) -> None:
    shape = [g.pick((1, 2)), int(g.rng.integers(1, 5)), *g.shape(int(g.rng.integers(0, 3)), lo=2)]
    c = shape[1]
    p = [g.const(v.astype(np.float32), np.float32) for v in (
        g.rng.uniform(0.5, 1.5, c), g.rng.standard_normal(c), g.rng.standard_normal(c) * 0.1, g.rng.uniform(0.5, 2, c))]  # fmt: skip
    g.out(g.node("BatchNormalization", [g.x(shape), *p], epsilon=float(g.pick((1e-5, 1e-3))))[0])


def gen_instnorm(g: G) -> None:
    shape = [g.pick((1, 2)), int(g.rng.integers(1, 5)), *g.shape(int(g.rng.integers(1, 4)), lo=2)]
    c = shape[1]
    s, b = (
        g.const(v.astype(np.float32), np.float32)
        for v in (g.rng.uniform(0.5, 1.5, c), g.rng.standard_normal(c))
    )
    g.out(g.node("InstanceNormalization", [g.x(shape), s, b], epsilon=1e-5)[0])


def gen_layernorm(g: G) -> None:
    g.opset = max(g.opset, 17)
    shape = g.shape(lo=2)
    axis = int(g.rng.integers(-len(shape), len(shape)))
    norm = shape[axis:] if axis >= 0 else shape[len(shape) + axis :]
    if g.coin(0.3):
        norm = [1 if g.coin() else d for d in norm]  # broadcast scale
    ins = [g.x(shape), g.const(g.rng.uniform(0.5, 1.5, norm).astype(np.float32), np.float32)]
    if g.coin(0.7):
        ins.append(g.const(g.rng.standard_normal(norm).astype(np.float32), np.float32))
    g.out(g.node("LayerNormalization", ins, axis=axis, epsilon=1e-5)[0])


def gen_groupnorm(g: G) -> None:
    g.opset = g.pick((18, 21))
    groups = g.pick((1, 2, 3))
    c = groups * int(g.rng.integers(1, 3))
    shape = [g.pick((1, 2)), c, *g.shape(int(g.rng.integers(1, 3)), lo=2)]
    n = c if g.opset >= 21 else groups
    s, b = (
        g.const(v.astype(np.float32), np.float32)
        for v in (g.rng.uniform(0.5, 1.5, n), g.rng.standard_normal(n))
    )
    g.out(g.node("GroupNormalization", [g.x(shape), s, b], num_groups=groups, epsilon=1e-5)[0])


def gen_lpnorm(g: G) -> None:
    shape = g.shape(lo=2)
    g.out(g.node("LpNormalization", [g.x(shape)], axis=int(g.rng.integers(-len(shape), len(shape))),
                 p=g.pick((1, 2)))[0])  # fmt: skip


def gen_lrn(g: G) -> None:
    shape = [1, int(g.rng.integers(2, 8)), *g.shape(2, lo=2)]
    g.out(
        g.node(
            "LRN", [g.x(shape)], size=g.pick((1, 3, 5)), alpha=1e-2, beta=0.75, bias=float(g.pick((1.0, 2.0)))
        )[0]
    )


def gen_matmul(g: G) -> None:
    m, k, n = (int(g.rng.integers(1, 7)) for _ in range(3))
    batch = g.shape(int(g.rng.integers(0, 3)), hi=3, ones=0.4)
    a = [*batch, m, k] if g.coin(0.85) else [k]
    b_batch = [d if g.coin(0.6) else 1 for d in batch][: int(g.rng.integers(0, len(batch) + 1))]
    b = [*b_batch, k, n] if g.coin(0.85) else [k]
    second = g.x(b) if g.coin(0.5) else g.const(g.rng.standard_normal(b).astype(np.float32), np.float32)
    g.note = f"{a} x {b}"
    g.out(g.node("MatMul", [g.x(a), second])[0])


def gen_gemm(g: G) -> None:
    m, k, n = (int(g.rng.integers(1, 7)) for _ in range(3))
    ta, tb = int(g.coin()), int(g.coin())
    a = [k, m] if ta else [m, k]
    b = [n, k] if tb else [k, n]
    attrs: dict[str, Any] = {}
    if ta:
        attrs["transA"] = 1
    if tb:
        attrs["transB"] = 1
    if g.coin():
        attrs["alpha"] = float(g.pick((0.5, 2.0, -1.0)))
    if g.coin():
        attrs["beta"] = float(g.pick((0.5, 0.0, 3.0)))
    second = g.x(b) if g.coin(0.4) else g.const(g.rng.standard_normal(b).astype(np.float32), np.float32)
    ins = [g.x(a), second]
    if g.coin(0.7):
        c = g.pick(([m, n], [n], [1, n], [m, 1], [1], []))
        ins.append(g.const(g.rng.standard_normal(c).astype(np.float32), np.float32))
    g.note = f"transA={ta} transB={tb} {attrs} C={len(ins) > 2}"
    g.out(g.node("Gemm", ins, **attrs)[0])


EINSUM = ("ij,jk->ik", "bij,bjk->bik", "bhid,bhjd->bhij", "bhij,bhjd->bhid", "ij->ji", "ii->i", "ij->", "bij->bi",
          "i,i->", "i,j->ij", "bchw,ck->bkhw", "...ij,...jk->...ik", "nct,ncp->ntp", "ij,ij->ij", "bij,jk->bik",
          "ijk->kji", "bn,anm,bm->ba", "abc,cd->abd")  # fmt: skip


def gen_einsum(g: G) -> None:
    g.opset = max(g.opset, 12)
    eq = g.pick(EINSUM)
    sizes = {ch: int(g.rng.integers(1, 5)) for ch in "abcdhijkmnpt"}
    lhs = eq.split("->")[0].split(",")
    names = []
    for term in lhs:
        shape = [sizes[ch] for ch in term.replace("...", "")]
        if "..." in term:
            shape = [2, *shape]
        if term == "ii":
            shape = [sizes["i"], sizes["i"]]
        names.append(g.x(shape) if g.coin(0.7) or not names else g.const(
            g.rng.standard_normal(shape).astype(np.float32), np.float32))  # fmt: skip
    g.note = eq
    g.out(g.node("Einsum", names, equation=eq)[0])


def gen_topk(g: G) -> None:
    shape = g.shape(lo=2, hi=7)
    axis = int(g.rng.integers(-len(shape), len(shape)))
    k = int(g.rng.integers(1, shape[axis] + 1))
    attrs: dict[str, Any] = {"axis": axis}
    if g.coin():
        attrs["largest"] = 0
    if g.coin(0.3):
        attrs["sorted"] = 0  # order unspecified: only the values' set is defined; compare sorted values
        attrs.pop("sorted")  # (kept sorted: an unsorted TopK's order is not comparable)
    vals, idx = g.node("TopK", [g.x(shape), g.const([k])], n_out=2, **attrs)
    g.out(vals)
    if g.coin():
        g.out(idx, as_float=True)


def gen_cumsum(g: G) -> None:
    shape = g.shape()
    axis = int(g.rng.integers(-len(shape), len(shape)))
    attrs = {k: 1 for k in ("exclusive", "reverse") if g.coin()}
    g.out(
        g.node(
            "CumSum", [g.x(shape), g.const(np.int64(axis) if g.coin() else np.int32(axis), None)], **attrs
        )[0]
    )


def gen_cast(g: G) -> None:
    shape = g.shape()
    to = g.pick((TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT8,
                 TensorProto.UINT8, TensorProto.BOOL))  # fmt: skip
    x = g.x(shape)
    if to in (TensorProto.INT8, TensorProto.UINT8):  # float -> 8-bit out of range is undefined: keep in range
        x = g.node("Clip", [x, g.const(np.float32(0 if to == TensorProto.UINT8 else -100), np.float32),
                            g.const(np.float32(100), np.float32)])[0]  # fmt: skip
        x = g.node("Mul", [x, g.const(np.float32(1.0), np.float32)])[0]
    g.note = f"Cast to {TensorProto.DataType.Name(to)}"
    g.out(g.node("Cast", [x], to=to)[0], as_float=True)


def gen_trilu(g: G) -> None:
    g.opset = max(g.opset, 14)
    shape = g.shape(int(g.rng.integers(2, 5)), lo=2)
    ins = [g.x(shape)]
    if g.coin(0.6):
        ins.append(g.const(np.int64(int(g.rng.integers(-3, 4)))))
    g.out(g.node("Trilu", ins, upper=int(g.coin()))[0])


def gen_onehot_free(g: G) -> None:  # Range-free shape arithmetic: Shape -> Gather -> ConstantOfShape
    shape = g.shape()
    x = g.x(shape)
    s = g.node("Shape", [x])[0]
    cos = g.node(
        "ConstantOfShape", [s], value=helper.make_tensor("v", F, [1], [float(g.rng.uniform(-2, 2))])
    )[0]
    g.out(g.node("Add", [x, cos])[0])


def gen_mean_var(
    g: G,
) -> None:  # Sum of variadic with broadcast covered by variadic(); here Max with a constant
    variadic("Max")(g)


GENERATORS: dict[str, Callable[[G], None]] = {
    **{op: unary(op) for op in UNARY},
    **{op: binary(op) for op in ("Add", "Sub", "Mul", "Div", "Pow", "Mod")},
    **{op: variadic(op) for op in ("Max", "Min", "Mean", "Sum")},
    **{op: comparison(op) for op in ("Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual")},
    "PRelu": gen_prelu, "Where": gen_where, "Clip": gen_clip,
    **{op: gen_softmax(op) for op in ("Softmax", "LogSoftmax", "Hardmax")},
    **{op: reduce(op) for op in REDUCE},
    "ArgMax": gen_arg("ArgMax"), "ArgMin": gen_arg("ArgMin"),
    "Reshape": gen_reshape, "Transpose": gen_transpose, "Slice": gen_slice, "Gather": gen_gather,
    "GatherElements": gen_gather_elements, "GatherND": gen_gather_nd, "Split": gen_split, "Concat": gen_concat,
    "Squeeze": gen_squeeze, "Unsqueeze": gen_unsqueeze, "Expand": gen_expand, "Tile": gen_tile, "Pad": gen_pad,
    "DepthToSpace": gen_depth_space("DepthToSpace"), "SpaceToDepth": gen_depth_space("SpaceToDepth"),
    "Flatten": gen_flatten,
    "Conv": lambda g: conv_common(g, False), "ConvTranspose": lambda g: conv_common(g, True),
    "MaxPool": gen_pool("MaxPool"), "AveragePool": gen_pool("AveragePool"),
    "GlobalAveragePool": gen_global_pool("GlobalAveragePool"), "GlobalMaxPool": gen_global_pool("GlobalMaxPool"),
    "Resize": gen_resize,
    "BatchNormalization": gen_batchnorm, "InstanceNormalization": gen_instnorm, "LayerNormalization": gen_layernorm,
    "GroupNormalization": gen_groupnorm, "LpNormalization": gen_lpnorm, "LRN": gen_lrn,
    "MatMul": gen_matmul, "Gemm": gen_gemm, "Einsum": gen_einsum,
    "TopK": gen_topk, "CumSum": gen_cumsum, "Cast": gen_cast, "Trilu": gen_trilu,
    "ConstantOfShape": gen_onehot_free,
}  # fmt: skip

GROUPS = {
    "elementwise": set(UNARY) | {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Mean", "Sum", "PRelu",
                                 "Where", "Clip", "Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual",
                                 "Softmax", "LogSoftmax", "Hardmax"},
    "reductions": set(REDUCE) | {"ArgMax", "ArgMin"},
    "shape": {"Reshape", "Transpose", "Slice", "Gather", "GatherElements", "GatherND", "Split", "Concat", "Squeeze",
              "Unsqueeze", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth", "Flatten", "ConstantOfShape"},
    "conv / pool": {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"},
    "resize": {"Resize"},
    "normalization": {"BatchNormalization", "InstanceNormalization", "LayerNormalization", "GroupNormalization",
                      "LpNormalization", "LRN"},
    "matmul": {"MatMul", "Gemm", "Einsum"},
    "selection / misc": {"TopK", "CumSum", "Cast", "Trilu"},
}  # fmt: skip


#: the ops with the most attribute combinations get one graph more than ``--per-op``, each unary op one graph and
#: each binary / variadic / comparison op one fewer (the budget: about 200-300 graphs)
HEAVY = {"Conv", "ConvTranspose", "Resize", "Slice", "Pad", "MaxPool", "AveragePool", "Gemm", "MatMul", "Einsum",
         "Split", "Reshape", "Gather", "GatherElements", "GatherND", "Expand", "ReduceMean", "ReduceSum", "TopK"}  # fmt: skip


def graphs_of(op: str, per_op: int) -> int:
    if op in HEAVY:
        return per_op + 1
    if op in UNARY:
        return 1
    if op in GROUPS["elementwise"] and op not in ("Clip", "Where", "Softmax", "LogSoftmax", "Hardmax"):
        return max(1, per_op - 1)
    return per_op


def group_of(op: str) -> str:
    return next(k for k, v in GROUPS.items() if op in v)


# ------------------------------------------------------------------------------------------------ build / validate


def sample_inputs(g: G, count: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in g.inputs:
        x = rng.standard_normal((count, *shape)).astype(np.float32)
        out[name] = (np.abs(x) + 0.25).astype(np.float32) if g.positive else x
    return out


def make_model(g: G) -> onnx.ModelProto:
    graph = helper.make_graph(
        g.nodes, "fuzz",
        [helper.make_tensor_value_info(n, F, s) for n, s in g.inputs],
        [helper.make_tensor_value_info(o, 0, None) for o in g.outputs],
        initializer=g.inits,
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", g.opset)], producer_name="probe_fuzz"
    )
    model.ir_version = IR.get(g.opset, 10)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    # the outputs' types and static shapes, as an exporter writes them
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    del model.graph.output[:]
    for o in g.outputs:
        vi = known[o]
        t = vi.type.tensor_type
        if t.elem_type == 0:
            raise ValueError(f"output {o} has no type")
        model.graph.output.append(vi)
    return model


def build_one(op: str, index: int, seed: int) -> tuple[onnx.ModelProto, G] | None:
    """A valid graph of ``op`` (up to 20 tries with the seed's stream), or None."""
    rng = np.random.default_rng([seed, index, sum(map(ord, op))])
    for _ in range(20):
        g = G(rng, int(OPSETS[index % len(OPSETS)]) if index < len(OPSETS) else int(rng.choice(OPSETS)))
        try:
            GENERATORS[op](g)
            model = make_model(g)
            import onnxruntime as ort

            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            feeds = {k: v[0] for k, v in sample_inputs(g, 1, 0).items()}
            outs = sess.run(None, feeds)
            if any(o.size == 0 for o in outs):
                continue  # an empty output: nothing to compare
            for vi, o in zip(
                model.graph.output, outs, strict=True
            ):  # static output shapes, as exporters write
                vi.type.tensor_type.ClearField("shape")
                for d in o.shape:
                    vi.type.tensor_type.shape.dim.add().dim_value = int(d)
            onnx.checker.check_model(model, full_check=True)
            return model, g
        except Exception:  # noqa: BLE001 (an invalid draw: try another)
            continue
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--per-op", type=int, default=3)
    ap.add_argument("--only", help="comma-separated op types")
    ap.add_argument("--check", type=Path, help="a zoo.py --work folder: check passing artifacts yourself")
    args = ap.parse_args(argv)
    if args.check:
        from probe_fuzz_check import check_work

        return check_work(args.check, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    ops = args.only.split(",") if args.only else list(GENERATORS)
    entries, dropped = [], []
    for op in ops:
        for i in range(graphs_of(op, args.per_op)):
            built = build_one(op, i, args.seed)
            if built is None:
                dropped.append(f"{op}#{i}")
                continue
            model, g = built
            name = f"{op.lower()}_{i}_op{g.opset}"
            onnx.save(model, args.out / f"{name}.onnx")
            np.savez(args.out / f"{name}.samples.npz", **sample_inputs(g, SAMPLES, args.seed + i))
            entries.append({
                "name": name, "file": f"{name}.onnx", "family": f"fuzz {op}", "kind": "encoder", "opset": g.opset,
                "inputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in g.inputs],
                "outputs": list(g.outputs), "data": {"type": "arrays", "file": f"{name}.samples.npz"},
                "size": "reduced", "ops": sorted({n.op_type for n in model.graph.node}), "note": g.note,
                "seed": args.seed, "group": group_of(op), "op": op,
            })  # fmt: skip
    zoo_data.merge_manifest(args.out, entries)
    print(f"{len(entries)} graphs, {len(dropped)} draws dropped: {' '.join(dropped)}")
    (args.out / "dropped.json").write_text(json.dumps(dropped))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
