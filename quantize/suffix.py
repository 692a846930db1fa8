"""Candidates of the accuracy-aware search evaluated from cached activations: only the part they change runs.

A candidate (layers restored) and the search's base int8 model are the same QDQ graph up to the first layer the
candidate changes: the quantizer names and orders nodes alike, so the two node lists share a prefix. The base
model runs once per worker on each accuracy sample a candidate asks for, keeping its values at a few *cuts*:
dequantized tensors that alone carry everything after them (the only tensor alive at that point of the
topological order) and that only weighted layers read (no elementwise pattern of the exact host runner spans the
cut). A candidate then runs the subgraph from the last cut inside the shared prefix to the outputs, fed the
cached values: same answers as the whole model (each cut is checked against the whole base model on the first
samples before it is used), at the cost of the changed suffix.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import numpy as np
import onnx

#: Cuts kept per base model (spread evenly over its nodes), and the most cached bytes.
MAX_CUTS = 8
MAX_BYTES = 512 << 20
#: Ops a cut may feed: weighted layers, whose input the exact host runner reads as a plain float tensor.
CUT_READERS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
#: Samples each cut is checked on against the whole base model.
CHECK_SAMPLES = 2
#: OpenVINO properties of the search's exact runs (its candidates, the cached base model, the suffixes): its
#: low-precision transformations off. On, they keep the int8 tensors between layers (two layout reorders a layer
#: and an unjitted int8 -> float Convert) and move each dequantization's scale past the next convolution; off, each
#: Q/DQ pair is a float FakeQuantize fused into its convolution, which computes on the dequantized values as the
#: standard defines them. MobileNetV2 (real weights, 100 photos, 1 thread): 12.5 -> 6.1 ms an inference, compile
#: 0.52 -> 0.25 s; top-1 agreement with onnxruntime (graph optimizations off) 92 -> 98 %, with the int8 .tflite in
#: LiteRT 96 -> 94 % (two photos; onnxruntime's is 96 %): float32 runs all, none decides LiteRT's near ties.
CANDIDATE_PROPERTIES = {"LP_TRANSFORMS_MODE": False}


def candidate_runner(
    proto: onnx.ModelProto, threads: int | None, extra_outputs=(), onnxruntime: bool = False
):  # noqa: ANN001, ANN201
    """The host runner of the search's exact runs (:data:`CANDIDATE_PROPERTIES`): every candidate, cached base and
    suffix compiles alike, so a suffix fed cached values gives the whole model's answers."""
    from edgekit.core.runtime import HostRunner

    return HostRunner(
        proto, extra_outputs, threads=threads, onnxruntime=onnxruntime, properties=CANDIDATE_PROPERTIES
    )


def node_signatures(proto: onnx.ModelProto) -> list[bytes]:
    """A digest per node: op, attributes, input and output names, and the contents of its constant inputs."""
    constants = {t.name: hashlib.sha1(t.SerializeToString()).digest() for t in proto.graph.initializer}
    signatures = []
    for node in proto.graph.node:
        h = hashlib.sha1()
        h.update(f"{node.domain}:{node.op_type}|{'|'.join(node.input)}>{'|'.join(node.output)}".encode())
        for attribute in node.attribute:
            h.update(attribute.SerializeToString())
        for name in node.input:
            h.update(constants.get(name, b"-"))
        signatures.append(h.digest())
    return signatures


def find_cuts(proto: onnx.ModelProto) -> list[tuple[int, str]]:
    """(node index, tensor) of every DequantizeLinear output that is the only non-constant tensor alive after
    its node, read only by weighted layers."""
    nodes = list(proto.graph.node)
    constants = {t.name for t in proto.graph.initializer}
    end = len(nodes)
    born: dict[str, int] = {i.name: -1 for i in proto.graph.input if i.name not in constants}
    last: dict[str, int] = {}
    readers: dict[str, list[str]] = {}
    for index, node in enumerate(nodes):
        for name in node.input:
            if name and name not in constants:
                last[name] = index
                readers.setdefault(name, []).append(node.op_type)
        for name in node.output:
            born[name] = index
    for output in proto.graph.output:
        last[output.name] = end
    alive = np.zeros(end + 1, np.int64)  # alive[i]: tensors born at or before node i and read after it
    for name, start in born.items():
        stop = last.get(name)
        if stop is not None and stop > start:
            alive[max(start, 0) : stop] += 1
    cuts = []
    for index, node in enumerate(nodes):
        if node.op_type != "DequantizeLinear" or alive[index] != 1:
            continue
        out = node.output[0]
        if last.get(out, end) < end and set(readers.get(out, ())) <= CUT_READERS:
            cuts.append((index, out))
    return cuts


def _spread(cuts: list[tuple[int, str]], count: int) -> list[tuple[int, str]]:
    if len(cuts) <= count:
        return cuts
    picks = {round(i * (len(cuts) - 1) / (count - 1)) for i in range(count)} if count > 1 else {len(cuts) - 1}
    return [cuts[i] for i in sorted(picks)]


def _suffix(proto: onnx.ModelProto, cut: str) -> onnx.ModelProto | None:
    """The subgraph of ``proto`` from ``cut`` to its outputs, or None when some output also depends on a tensor
    before the cut."""
    produced = {o: n for n in proto.graph.node for o in n.output}
    constants = {t.name for t in proto.graph.initializer}
    keep: list[onnx.NodeProto] = []
    seen: set[str] = set()
    todo = [o.name for o in proto.graph.output]
    while todo:
        name = todo.pop()
        if name in seen or name == cut or name in constants:
            continue
        seen.add(name)
        node = produced.get(name)
        if node is None:
            return None  # a graph input reached around the cut
        keep.append(node)
        todo.extend(i for i in node.input if i)
    wanted = {id(n) for n in keep}
    nodes = [n for n in proto.graph.node if id(n) in wanted]
    used = {i for n in nodes for i in n.input}
    types = {v.name: v for v in list(proto.graph.value_info) + list(proto.graph.input)}
    if cut not in types:
        return None
    graph = onnx.helper.make_graph(
        nodes,
        proto.graph.name,
        [types[cut]],
        list(proto.graph.output),
        [t for t in proto.graph.initializer if t.name in used],
        value_info=[v for v in proto.graph.value_info if v.name in used and v.name != cut],
    )
    model = onnx.helper.make_model(graph, opset_imports=list(proto.opset_import))
    model.ir_version = proto.ir_version
    return model


def runtime_of(proto: onnx.ModelProto) -> str:
    """Where the exact host runner runs ``proto``: ``onnxruntime`` (16-bit QDQ) or ``openvino``."""
    from edgekit.core.runtime import has_16bit_qdq

    return "onnxruntime" if has_16bit_qdq(proto) else "openvino"


class _Cached:
    """The base model's values at its cuts, in one runtime, per accuracy sample as candidates first ask for it
    (a worker that only ever runs the ranking subset never runs the base on the rest); 8-bit where the value is
    exactly its dequantized integer (4x less memory), else float. With a ``store`` (a directory the workers of one
    machine share), a sample another worker ran is read from there instead of run again."""

    def __init__(
        self, base: onnx.ModelProto, inputs, threads: int, runtime: str, shared: tuple | None = None
    ):
        self.base, self.inputs, self.threads, self.runtime = base, inputs, threads, runtime
        sizes = _sizes(base)
        cuts = [(i, c) for i, c in find_cuts(base) if c in sizes]
        budget = MAX_BYTES // max(len(inputs), 1)
        chosen: list[tuple[int, str]] = []
        for index, cut in sorted(_spread(cuts, MAX_CUTS), key=lambda c: -c[0]):  # the latest first
            if sizes[cut] <= budget:
                chosen.append((index, cut))
                budget -= sizes[cut]
        self.grids = _grids(base)
        self.values: dict[str, dict[int, tuple]] = {c: {} for _, c in chosen}
        #: The whole base model's outputs on the first samples run (what each cut is checked against).
        self.outputs: dict[int, dict[str, np.ndarray]] = {}
        self.cuts = chosen  # the latest first
        self.checked: dict[str, bool] = {}
        self._runner = None
        #: (directory, this worker's number, workers): where the workers share the samples they ran.
        self.store: str | None = None
        self.worker, self.workers = 0, 1
        if shared is not None and self.cuts:
            store, self.worker, self.workers = shared
            h = hashlib.sha1(b"".join(node_signatures(base)))
            h.update(f"{runtime}|{'|'.join(c for _, c in self.cuts)}".encode())
            self.store = os.path.join(store, h.hexdigest()[:16])

    def ensure(self, indices: Sequence[int]) -> None:
        """Run the base model on the samples of ``indices`` not cached yet (read those in the store)."""
        missing = [i for i in dict.fromkeys(indices) if self.cuts and i not in self.values[self.cuts[0][1]]]
        if self.store is None:
            for i in missing:
                self._run(i)
            return
        # Workers asking for the same samples at once start at different places (worker k of n at k/n of the list),
        # each running the samples no other worker has claimed and reading the others, then those still missing.
        at = self.worker * len(missing) // max(self.workers, 1)
        later = []
        for i in missing[at:] + missing[:at]:
            if not self._read(i):
                if self._claim(i):
                    self._run(i)
                else:
                    later.append(i)
        for i in later:
            if not self._read(i):
                self._run(i)

    def _run(self, i: int) -> None:
        """The base model on sample ``i``: its values at the cuts (and its outputs, for the first samples' check)."""
        if self._runner is None:
            self._runner = candidate_runner(
                self.base, self.threads, [c for _, c in self.cuts], self.runtime == "onnxruntime"
            )
        runner = self._runner
        keep = len(self.outputs) < CHECK_SAMPLES or self.store is not None
        result = runner.run({k: self.inputs[i][k] for k in runner.input_names}, copy=keep)
        outputs = {o.name: result[o.name] for o in self.base.graph.output}
        if len(self.outputs) < CHECK_SAMPLES:
            self.outputs[i] = outputs
        for _, cut in self.cuts:
            self.values[cut][i] = _pack(result[cut], self.grids.get(cut))
        if self.store is not None:
            self._write(i, outputs)

    def _claim(self, index: int) -> bool:
        """Sample ``index`` is this worker's to run (no other worker claimed it first)."""
        try:
            os.close(os.open(f"{self._path(index)}.claim", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return False
        return True

    def _path(self, index: int) -> str:
        assert self.store is not None
        return f"{self.store}-{index}.npz"

    def _write(self, index: int, outputs: dict[str, np.ndarray]) -> None:
        """Sample ``index``'s cut values (packed) and the base's outputs, for the other workers (written whole,
        then renamed: a reader sees all of it or nothing)."""
        arrays = {f"o{k}": v for k, v in enumerate(outputs.values())}
        for k, (_, cut) in enumerate(self.cuts):
            arrays.update({f"c{k}_{j}": a for j, a in enumerate(self.values[cut][index])})
        partial = f"{self._path(index)}.{os.getpid()}.npz"
        np.savez(partial, **arrays)
        os.replace(partial, self._path(index))

    def _read(self, index: int) -> bool:
        try:
            with np.load(self._path(index)) as f:
                arrays = {k: f[k] for k in f.files}
        except OSError:
            return False
        names = [o.name for o in self.base.graph.output]
        if len(self.outputs) < CHECK_SAMPLES:
            self.outputs[index] = {n: arrays[f"o{k}"] for k, n in enumerate(names)}
        for k, (_, cut) in enumerate(self.cuts):
            parts = sorted(
                (key for key in arrays if key.startswith(f"c{k}_")), key=lambda key: int(key.split("_")[1])
            )
            self.values[cut][index] = tuple(arrays[key] for key in parts)
        return True

    def value(self, cut: str, index: int) -> np.ndarray:
        return _unpack(self.values[cut][index])

    def usable(self, cut: str) -> bool:
        """The base model's subgraph from ``cut`` fed the cached values reproduces the whole base model (checked
        once, on the first samples cached)."""
        if cut not in self.checked:
            model = _suffix(self.base, cut)
            ok = model is not None and bool(self.outputs)
            if ok:
                runner = candidate_runner(model, self.threads, onnxruntime=self.runtime == "onnxruntime")
                ok = all(
                    all(np.array_equal(got[n], want[n]) for n in want)
                    for i, want in self.outputs.items()
                    for got in [runner.run({cut: self.value(cut, i)})]
                )
            self.checked[cut] = ok
        return self.checked[cut]


class SuffixCache:
    """Candidates of one base model run from its cached values: :meth:`run`."""

    def __init__(
        self,
        base: onnx.ModelProto,
        inputs: Sequence[dict[str, np.ndarray]],
        threads: int = 1,
        shared: tuple | None = None,
    ):
        self.base, self.inputs, self.threads, self.shared = base, inputs, threads, shared
        self.signatures = node_signatures(base)
        self._cached: dict[str, _Cached] = {}

    def cached(self, runtime: str) -> _Cached:
        if runtime not in self._cached:
            self._cached[runtime] = _Cached(self.base, self.inputs, self.threads, runtime, self.shared)
        return self._cached[runtime]

    def shared_prefix(self, proto: onnx.ModelProto) -> int:
        """How many first nodes ``proto`` shares with the base model."""
        signatures = node_signatures(proto)
        return next(
            (i for i, (a, b) in enumerate(zip(signatures, self.signatures, strict=False)) if a != b),
            min(len(signatures), len(self.signatures)),
        )

    def run(self, proto: onnx.ModelProto, indices: Sequence[int]) -> tuple[list[dict], str | None]:
        """``proto``'s outputs on the accuracy samples ``indices`` from the latest usable cut inside the prefix it
        shares with the base model, and that cut; ``([], None)`` when none fits (run the whole model)."""
        runtime = runtime_of(proto)
        shared = self.shared_prefix(proto)
        cached = self.cached(runtime)
        if any(index < shared for index, _ in cached.cuts):
            cached.ensure(indices)
        for index, cut in cached.cuts:  # the latest first
            if index >= shared or not cached.usable(cut):
                continue
            model = _suffix(proto, cut)
            if model is None:
                continue
            runner = candidate_runner(model, self.threads, onnxruntime=runtime == "onnxruntime")
            return [runner.run({cut: cached.value(cut, i)}) for i in indices], cut
        return [], None


def _grids(proto: onnx.ModelProto) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """DequantizeLinear output -> its per-tensor (scale, zero point) constants."""
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    grids = {}
    for node in proto.graph.node:
        if node.op_type == "DequantizeLinear" and len(node.input) > 2:
            scale, zero = constants.get(node.input[1]), constants.get(node.input[2])
            if scale is not None and zero is not None and scale.size == 1 and zero.size == 1:
                grids[node.output[0]] = (scale.astype(np.float32).reshape(()), zero.reshape(()))
    return grids


def _pack(x: np.ndarray, grid) -> tuple:
    """``x`` as its integers when dequantizing them gives ``x`` bit for bit, else a float copy."""
    if grid is not None and x.dtype == np.float32:
        scale, zero = grid
        info = np.iinfo(zero.dtype)
        q = np.clip(np.round(x / scale) + zero.astype(np.float32), info.min, info.max).astype(zero.dtype)
        packed = (q, scale, zero)
        if np.array_equal(_unpack(packed), x):
            return packed
    return (np.array(x, copy=True),)


def _unpack(packed: tuple) -> np.ndarray:
    if len(packed) == 1:
        return packed[0]
    q, scale, zero = packed
    return (q.astype(np.float32) - zero.astype(np.float32)) * scale


def _sizes(proto: onnx.ModelProto) -> dict[str, int]:
    """Bytes per sample of each float tensor with a known static shape."""
    sizes = {}
    for value in proto.graph.value_info:
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            sizes[value.name] = 4 * int(np.prod([d.dim_value for d in dims]))
    return sizes
