"""RNN, LSTM and GRU, unrolled over the static sequence length into FULLY_CONNECTED / elementwise ops.

The input projections of all time steps are one FULLY_CONNECTED (X [seq * batch, input] by W, with the
biases folded in); each step slices its rows, adds the recurrent FULLY_CONNECTED of the previous hidden
state by R, and applies the gates with LOGISTIC / TANH / MUL / ADD / SUB. A zero initial state (absent or
an all-zero constant) skips the recurrent terms of the first step. Weights stay float constants, so in an
int8 model the RNN is a float island between DEQUANTIZE and QUANTIZE.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import Context, attr_text
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_conv import _fully_connected
from edgekit.targets.tflite.ops_elementwise import binary
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb

_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}


def _input(node: ir.Node, index: int) -> ir.Value | None:
    if index < len(node.inputs) and node.inputs[index] is not None and node.inputs[index].name:
        return node.inputs[index]
    return None


def _output(node: ir.Node, index: int) -> ir.Value | None:
    if index < len(node.outputs) and node.outputs[index].name:
        return node.outputs[index]
    return None


class _Rnn:
    """Checks the attributes and inputs shared by RNN, LSTM and GRU and holds the per-direction pieces."""

    def __init__(
        self,
        ctx: Context,
        node: ir.Node,
        gates: int,
        *,
        activations: Sequence[str] | None,
        activation_alpha: Sequence[float] | None,
        activation_beta: Sequence[float] | None,
        clip: float | None,
        direction: str,
        hidden_size: int | None,
        layout: int,
    ) -> None:
        self.ctx = ctx
        direction = attr_text(direction)
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.error(f"unknown direction {direction!r}")
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        default = _DEFAULT_ACTIVATIONS[node.op_type] * len(self.directions)
        if activations is not None and tuple(attr_text(a) for a in activations) != default:
            raise ctx.error(
                f"activations {[attr_text(a) for a in activations]} are not supported "
                f"(only the default {list(default)})"
            )
        if activation_alpha is not None or activation_beta is not None:
            raise ctx.error("activation_alpha/activation_beta are not supported (default activations only)")
        if clip is not None:
            raise ctx.error(f"clip={clip} is not supported")
        if layout not in (0, 1):
            raise ctx.error(f"layout={layout} is not supported")
        self.layout = layout
        x = ctx.tensor(node.inputs[0])
        if x.rank != 3:
            raise ctx.error(f"X must be rank 3, it is {x.shape}")
        if layout == 1:
            x = ctx.transpose(x, (1, 0, 2))
        self.seq, self.batch, self.input_size = x.shape
        w = ctx.require_const(node.inputs[1], "W").astype(np.float32)
        r = ctx.require_const(node.inputs[2], "R").astype(np.float32)
        hidden = int(r.shape[-1])
        if hidden_size is not None and hidden_size != hidden:
            raise ctx.error(f"hidden_size={hidden_size} does not match R {r.shape}")
        self.hidden = hidden
        if w.shape != (len(self.directions), gates * hidden, self.input_size):
            raise ctx.error(f"W {w.shape} does not match X {x.shape} and hidden size {hidden}")
        self.w, self.r = w, r
        b_value = _input(node, 3)
        b = ctx.require_const(b_value, "B") if b_value is not None else None
        self.b = (
            b.astype(np.float32) if b is not None else np.zeros((len(self.directions), 2 * gates * hidden))
        )
        lens_value = _input(node, 4)
        if lens_value is not None:
            lens = ctx.const(lens_value)
            if lens is None or not np.all(lens == self.seq):
                raise ctx.error(
                    "sequence_lens must be a constant with every length equal to the sequence length "
                    f"{self.seq} (shorter sequences are not supported)"
                )
        self.x_rows = ctx.reshape(x, (self.seq * self.batch, self.input_size))

    def projection(self, d: int, bias: np.ndarray) -> Tensor:
        """X @ W[d]^T + bias for every time step: [seq * batch, gates * hidden]."""
        ctx = self.ctx
        out = ctx.tmp(f"xw{d}", (self.seq * self.batch, self.w.shape[1]))
        weights = ctx.graph.const("W", self.w[d])
        _fully_connected(ctx, self.x_rows, weights, ctx.graph.const("B", bias.astype(np.float32)), out)
        return out

    def step_rows(self, xw: Tensor, t: int, begin: int, width: int) -> Tensor:
        ctx = self.ctx
        out = ctx.tmp(f"x_t{t}", (self.batch, width))
        starts = ctx.graph.const("begin", [t * self.batch, begin], np.int32)
        size = ctx.graph.const("size", out.shape, np.int32)
        ctx.op("SLICE", [xw, starts, size], [out], fb.SliceOptionsT())
        return out

    def initial(self, value: ir.Value | None, d: int) -> Tensor | None:
        """Direction ``d`` of an initial state [num_dir, batch, hidden] (None when it is all zeros)."""
        if value is None:
            return None
        ctx = self.ctx
        array = ctx.const(value)
        if array is not None:
            if self.layout == 1:
                array = np.transpose(array, (1, 0, 2))
            if not np.any(array[d]):
                return None
            return ctx.graph.const("initial", array[d].astype(np.float32))
        state = ctx.tensor(value)
        if self.layout == 1:
            state = ctx.transpose(state, (1, 0, 2))
        part = ctx.tmp("initial", (1, self.batch, self.hidden))
        starts = ctx.graph.const("begin", [d, 0, 0], np.int32)
        ctx.op(
            "SLICE",
            [state, starts, ctx.graph.const("size", part.shape, np.int32)],
            [part],
            fb.SliceOptionsT(),
        )
        return ctx.reshape(part, (self.batch, self.hidden))

    def times(self, d: int) -> list[int]:
        return list(range(self.seq)) if self.directions[d] == "forward" else list(range(self.seq - 1, -1, -1))

    def recurrent(
        self, h: Tensor, weight: Tensor, bias: Tensor | None, like: Tensor, name: str = "hr"
    ) -> Tensor:
        """``h @ weight^T (+ bias)``, one step's recurrent term, shaped like ``like`` (FULLY_CONNECTED)."""
        out = self.ctx.tmp(name, like.shape)
        _fully_connected(self.ctx, h, weight, bias, out)
        return out

    def unary(self, code: str, x: Tensor) -> Tensor:
        out = self.ctx.tmp(code.lower(), x.shape)
        self.ctx.op(code, [x], [out])
        return out

    def binary(self, code: str, a: Tensor, b: Tensor) -> Tensor:
        return binary(self.ctx, code, a, b, self.ctx.tmp(code.lower(), np.broadcast_shapes(a.shape, b.shape)))

    def split(self, x: Tensor, parts: int) -> list[Tensor]:
        ctx = self.ctx
        outs = [ctx.tmp("gate", (x.shape[0], x.shape[1] // parts)) for _ in range(parts)]
        opts = fb.SplitOptionsT()
        opts.numSplits = parts
        ctx.op("SPLIT", [ctx.graph.const("axis", np.array(1, np.int32)), x], outs, opts)
        return outs

    def emit_outputs(self, node: ir.Node, hs: list[dict[int, Tensor]], finals: list[list[Tensor]]) -> None:
        """Y [seq, num_dir, batch, hidden] (layout 1: [batch, seq, num_dir, hidden]) and the final states
        [num_dir, batch, hidden] (layout 1: [batch, num_dir, hidden])."""
        ctx = self.ctx
        nd, seq, batch, hidden = len(self.directions), self.seq, self.batch, self.hidden
        y_value = _output(node, 0)
        if y_value is not None:
            per_dir = []
            for d in range(nd):
                rows = ctx.tmp("y_rows", (seq * batch, hidden))
                opts = fb.ConcatenationOptionsT()
                opts.axis = 0
                ctx.op("CONCATENATION", [hs[d][t] for t in range(seq)], [rows], opts)
                per_dir.append(ctx.reshape(rows, (seq, 1, batch, hidden)))
            y = self._concat(per_dir, 1, (seq, nd, batch, hidden))
            if self.layout == 1:
                y = ctx.transpose(y, (2, 0, 1, 3))
            ctx.reshape(y, y.shape, out=ctx.output(y_value, y.shape))
        for index, states in enumerate(finals, start=1):
            value = _output(node, index)
            if value is None:
                continue
            parts = [ctx.reshape(s, (1, batch, hidden)) for s in states]
            state = self._concat(parts, 0, (nd, batch, hidden))
            if self.layout == 1:
                state = ctx.transpose(state, (1, 0, 2))
            ctx.reshape(state, state.shape, out=ctx.output(value, state.shape))

    def _concat(self, parts: list[Tensor], axis: int, shape: tuple[int, ...]) -> Tensor:
        if len(parts) == 1:
            return parts[0]
        out = self.ctx.tmp("concat", shape)
        opts = fb.ConcatenationOptionsT()
        opts.axis = axis
        self.ctx.op("CONCATENATION", parts, [out], opts)
        return out


@converter("LSTM", since=7)
def lstm(
    ctx: Context,
    node: ir.Node,
    *,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    input_forget: int = 0,
    layout: int = 0,
) -> None:
    if input_forget:
        raise ctx.error("input_forget=1 is not supported")
    rnn = _Rnn(
        ctx,
        node,
        4,
        activations=activations,
        activation_alpha=activation_alpha,
        activation_beta=activation_beta,
        clip=clip,
        direction=direction,
        hidden_size=hidden_size,
        layout=layout,
    )
    hidden = rnn.hidden
    p_value = _input(node, 7)
    peep = ctx.require_const(p_value, "P").astype(np.float32) if p_value is not None else None
    hs: list[dict[int, Tensor]] = []
    finals: list[list[Tensor]] = [[], []]
    for d in range(len(rnn.directions)):
        xw = rnn.projection(d, rnn.b[d, : 4 * hidden] + rnn.b[d, 4 * hidden :])
        r_t = ctx.graph.const("R", rnn.r[d])
        h = rnn.initial(_input(node, 5), d)
        c = rnn.initial(_input(node, 6), d)
        p_i, p_o, p_f = (
            [ctx.graph.const("P", peep[d, k * hidden : (k + 1) * hidden]) for k in range(3)]
            if peep is not None and np.any(peep[d])
            else (None, None, None)
        )
        outs: dict[int, Tensor] = {}
        for t in rnn.times(d):
            gates = rnn.step_rows(xw, t, 0, 4 * hidden)
            if h is not None:
                gates = rnn.binary("ADD", gates, rnn.recurrent(h, r_t, None, gates))
            g_i, g_o, g_f, g_c = rnn.split(gates, 4)  # ONNX gate order: i, o, f, c
            if p_i is not None and c is not None:
                g_i = rnn.binary("ADD", g_i, rnn.binary("MUL", c, p_i))
                g_f = rnn.binary("ADD", g_f, rnn.binary("MUL", c, p_f))
            i = rnn.unary("LOGISTIC", g_i)
            f = rnn.unary("LOGISTIC", g_f)
            cand = rnn.unary("TANH", g_c)
            new_c = rnn.binary("MUL", i, cand)
            if c is not None:
                new_c = rnn.binary("ADD", rnn.binary("MUL", f, c), new_c)
            c = new_c
            if p_o is not None:
                g_o = rnn.binary("ADD", g_o, rnn.binary("MUL", c, p_o))
            o = rnn.unary("LOGISTIC", g_o)
            h = rnn.binary("MUL", o, rnn.unary("TANH", c))
            outs[t] = h
        hs.append(outs)
        finals[0].append(h)
        finals[1].append(c)
    rnn.emit_outputs(node, hs, finals)


@converter("GRU", since=7)
def gru(
    ctx: Context,
    node: ir.Node,
    *,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    linear_before_reset: int = 0,
) -> None:
    rnn = _Rnn(
        ctx,
        node,
        3,
        activations=activations,
        activation_alpha=activation_alpha,
        activation_beta=activation_beta,
        clip=clip,
        direction=direction,
        hidden_size=hidden_size,
        layout=layout,
    )
    hidden = rnn.hidden
    hs: list[dict[int, Tensor]] = []
    finals: list[list[Tensor]] = [[]]
    for d in range(len(rnn.directions)):
        wb, rb = rnn.b[d, : 3 * hidden], rnn.b[d, 3 * hidden :].copy()
        rb_h = rb[2 * hidden :].copy()
        if linear_before_reset:  # Rbh is added before the reset gate multiplies: kept out of the projection
            rb[2 * hidden :] = 0
        xw = rnn.projection(d, wb + rb)
        r_zr = ctx.graph.const("R_zr", rnn.r[d, : 2 * hidden])
        r_h = ctx.graph.const("R_h", rnn.r[d, 2 * hidden :])
        rb_h_t = ctx.graph.const("Rb_h", rb_h.astype(np.float32)) if linear_before_reset else None
        h = rnn.initial(_input(node, 5), d)
        outs: dict[int, Tensor] = {}
        for t in rnn.times(d):
            zr = rnn.step_rows(xw, t, 0, 2 * hidden)
            x_h = rnn.step_rows(xw, t, 2 * hidden, hidden)
            if h is not None:
                zr = rnn.binary("ADD", zr, rnn.recurrent(h, r_zr, None, zr))
            g_z, g_r = rnn.split(zr, 2)  # ONNX gate order: z, r, h
            z = rnn.unary("LOGISTIC", g_z)
            r = rnn.unary("LOGISTIC", g_r)
            rec_h = None
            if linear_before_reset:  # r * (H @ Rh^T + Rbh)
                if h is not None:
                    rec_h = rnn.binary("MUL", r, rnn.recurrent(h, r_h, rb_h_t, x_h, "hr_h"))
                elif np.any(rb_h):
                    rec_h = rnn.binary("MUL", r, rb_h_t)
            elif h is not None:  # (r * H) @ Rh^T (Rbh is in the projection)
                rec_h = rnn.recurrent(rnn.binary("MUL", r, h), r_h, None, x_h, "hr_h")
            cand = rnn.unary("TANH", x_h if rec_h is None else rnn.binary("ADD", x_h, rec_h))
            # H = (1 - z) * cand + z * H = cand - z * (cand - H)
            if h is None:
                h = rnn.binary("SUB", cand, rnn.binary("MUL", z, cand))
            else:
                h = rnn.binary("SUB", cand, rnn.binary("MUL", z, rnn.binary("SUB", cand, h)))
            outs[t] = h
        hs.append(outs)
        finals[0].append(h)
    rnn.emit_outputs(node, hs, finals)


@converter("RNN", since=7)
def rnn(
    ctx: Context,
    node: ir.Node,
    *,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
) -> None:
    cell = _Rnn(
        ctx,
        node,
        1,
        activations=activations,
        activation_alpha=activation_alpha,
        activation_beta=activation_beta,
        clip=clip,
        direction=direction,
        hidden_size=hidden_size,
        layout=layout,
    )
    hidden = cell.hidden
    hs: list[dict[int, Tensor]] = []
    finals: list[list[Tensor]] = [[]]
    for d in range(len(cell.directions)):
        xw = cell.projection(d, cell.b[d, :hidden] + cell.b[d, hidden:])
        r_t = ctx.graph.const("R", cell.r[d])
        h = cell.initial(_input(node, 5), d)
        outs: dict[int, Tensor] = {}
        for t in cell.times(d):
            pre = cell.step_rows(xw, t, 0, hidden)
            if h is not None:
                pre = cell.binary("ADD", pre, cell.recurrent(h, r_t, None, pre))
            h = cell.unary("TANH", pre)
            outs[t] = h
        hs.append(outs)
        finals[0].append(h)
    cell.emit_outputs(node, hs, finals)
