"""Issue 12 probe round 12a: speech, point clouds, state-space / long-sequence and tabular models, not committed.

    python benchmarks/zoo/probe_sequences2.py [--only a,b] [--out benchmarks/.zoo/probe12a]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe12a/zoo.json --no-shared --workers 1 --json r.json

Small seeded models (random tiny configs, LayerNorm / GroupNorm affine parameters spread, BatchNorm statistics
from the model's own data), exported as users do:

- speech (transformers, raw waveform [1, 8000]): Wav2Vec2ForSequenceClassification (group-norm feature encoder,
  weight-normed grouped positional conv, mean pooling + classifier), Wav2Vec2ForCTC (dynamic batch / samples, as
  optimum exports it), HubertForCTC (layer-norm encoder, stable layer norm), WavLMForXVector (gated relative
  position bias, TDNN x-vector head), Wav2Vec2ConformerModel (rotary positions, conformer conv module);
- point clouds ([1, 3, 256] points sampled on the surfaces of seeded shapes): PointNet (shared MLP as Conv1d, 3x3
  and 64x64 T-Nets applied with bmm, max over points), DGCNN (EdgeConv: pairwise distances, TopK k = 8, Gather of
  the neighbours, max over k);
- state-space / long sequences: transformers' MambaModel (selective scan, the slow path: a Python loop over the
  sequence, unrolled by the tracer), a TCN forecaster (dilated causal Conv1d, residual) on synthetic series
  [1, 4, 128], a bidirectional LSTM and GRU token tagger (int64 ids [1, 32]), one at dynamo opset 18;
- tabular (scikit-learn 1.x through skl2onnx 1.20, onnxmltools 1.16 for LightGBM; the data: real scikit-learn
  datasets, [N, features] float32): MLPClassifier (zipmap off: pure ai.onnx), LogisticRegression (zipmap off),
  StandardScaler + PCA, RandomForestClassifier, GradientBoostingRegressor, LGBMClassifier. The ai.onnx.ml ones
  are to be refused in one typed line naming the op and its domain.

Data kinds: ``waveform`` (synthetic speech), ``tokens``, and ``arrays`` (the points, series and tabular rows are
written beside each model as ``<name>.samples.npz`` by this script).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tests" / "zoo"))
import zoo_data  # noqa: E402
from exported_as_users_do import _hf_transformers  # noqa: E402

OUT = HERE.parents[0] / ".zoo" / "probe12a"
SEED = 1212
WAVE = {"type": "waveform", "sample_rate": 16000}
SAMPLES = 64  # rows written for "arrays" models (calibration + evaluation)


def spread(model: nn.Module) -> None:
    """LayerNorm / GroupNorm affine parameters spread around (1, 0), as trained ones are."""
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm | nn.GroupNorm) and mod.weight is not None:
                mod.weight.copy_(1.0 + 0.2 * torch.randn(mod.weight.shape, generator=g))
                if mod.bias is not None:
                    mod.bias.copy_(0.2 * torch.randn(mod.bias.shape, generator=g))


def bn_statistics(model: nn.Module, batches: list[tuple[torch.Tensor, ...]]) -> None:
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    if bns:
        model.train()
        with torch.no_grad():
            for b in batches:
                model(*b)
    model.eval()


class Wrap(nn.Module):
    def __init__(self, m: nn.Module, names: list[str], out: str) -> None:
        super().__init__()
        self.m, self.names, self.out = m, names, out

    def forward(self, *xs):
        r = self.m(**dict(zip(self.names, xs, strict=True)))
        return getattr(r, self.out) if not isinstance(r, torch.Tensor) else r


def export_torch(
    name: str,
    model: nn.Module,
    args: list[torch.Tensor],
    names: list[str],
    outs: list[str],
    opset: int,
    data: dict,
    family: str,
    kind: str,
    *,
    dynamic: dict | None = None,
    dynamo: bool = False,
    note: str = "",
) -> dict:
    path = OUT / f"{name}.onnx"
    model.eval()
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(
                model, tuple(args), str(path), dynamo=True, input_names=names, output_names=outs,
                opset_version=opset, external_data=False,
            )  # fmt: skip
        else:
            torch.onnx.export(
                model, tuple(args), str(path), dynamo=False, input_names=names, output_names=outs,
                opset_version=opset, dynamic_axes=dynamic, do_constant_folding=True,
            )  # fmt: skip
    entry = {
        "name": name,
        "file": path.name,
        "family": family,
        "kind": kind,
        "opset": opset,
        "inputs": [
            {"name": n, "shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")}
            for n, a in zip(names, args, strict=True)
        ],
        "outputs": outs,
        "data": data,
        "size": "reduced",
        "params": int(sum(p.numel() for p in model.parameters())),
        "note": note,
        "seed": SEED,
    }
    if dynamic:
        entry["extra_args"] = [
            x
            for n, a in zip(names, args, strict=True)
            if n in dynamic
            for x in ("--input-shape", f"{n}=" + ",".join(map(str, a.shape)))
        ]
    return entry


# ------------------------------------------------------------------------------------------------- speech


def _speech_cfg(t, cls_name: str, **extra):
    base = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32,) * 7,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        vocab_size=32,
        num_labels=6,
        classifier_proj_size=32,
    )
    base.update(extra)
    return getattr(t, cls_name)(**base)


def _speech(name, model, out, opset, family, kind="encoder", dynamic=False, dynamo=False, samples=8000):
    spread(model)
    x = torch.from_numpy(zoo_data.waveform_array(WAVE, [1, samples], 1, 3))
    dyn = (
        {"input_values": {0: "batch_size", 1: "sequence_length"}, out: {0: "batch_size"}} if dynamic else None
    )
    return export_torch(
        name, Wrap(model, ["input_values"], out), [x], ["input_values"], [out], opset, WAVE, family, kind,
        dynamic=dyn, dynamo=dynamo,
    )  # fmt: skip


def wav2vec2_cls():
    t = _hf_transformers()
    torch.manual_seed(SEED)
    cfg = _speech_cfg(t, "Wav2Vec2Config", feat_extract_norm="group", do_stable_layer_norm=False)
    m = t.Wav2Vec2ForSequenceClassification(cfg)
    return _speech("w2v2_cls_op14", m, "logits", 14, "Wav2Vec2ForSequenceClassification", "classifier")


def wav2vec2_ctc():
    t = _hf_transformers()
    torch.manual_seed(SEED)
    cfg = _speech_cfg(t, "Wav2Vec2Config", feat_extract_norm="group", do_stable_layer_norm=False)
    m = t.Wav2Vec2ForCTC(cfg)
    return _speech(
        "w2v2_ctc_dyn17", m, "logits", 17, "Wav2Vec2ForCTC (optimum dynamic axes)", "sequence", True
    )


def hubert_ctc():
    t = _hf_transformers()
    torch.manual_seed(SEED)
    cfg = _speech_cfg(t, "HubertConfig", feat_extract_norm="layer", do_stable_layer_norm=True)
    m = t.HubertForCTC(cfg)
    return _speech("hubert_ctc_op14", m, "logits", 14, "HubertForCTC (stable layer norm)", "sequence")


def wavlm_xvector():
    t = _hf_transformers()
    torch.manual_seed(SEED)
    cfg = _speech_cfg(
        t, "WavLMConfig", feat_extract_norm="group", do_stable_layer_norm=False, num_buckets=32,
        max_bucket_distance=80, tdnn_dim=(32, 32, 32, 32, 64), tdnn_kernel=(5, 3, 3, 1, 1),
        tdnn_dilation=(1, 2, 3, 1, 1), xvector_output_dim=32,
    )  # fmt: skip
    m = t.WavLMForXVector(cfg)
    return _speech("wavlm_xvector_op17", m, "embeddings", 17, "WavLMForXVector (gated rel. position bias)")


def wavlm_model_dynamo():
    t = _hf_transformers()
    torch.manual_seed(SEED)
    cfg = _speech_cfg(t, "WavLMConfig", feat_extract_norm="group", do_stable_layer_norm=False, num_buckets=32)
    m = t.WavLMModel(cfg)
    return _speech("wavlm_dynamo18", m, "last_hidden_state", 18, "WavLMModel dynamo=True", dynamo=True)


def w2v2_conformer():
    t = _hf_transformers()
    torch.manual_seed(SEED)
    cfg = _speech_cfg(
        t, "Wav2Vec2ConformerConfig", feat_extract_norm="layer", do_stable_layer_norm=True,
        position_embeddings_type="rotary", conv_depthwise_kernel_size=7,
    )  # fmt: skip
    m = t.Wav2Vec2ConformerForCTC(cfg)
    # the conformer conv module's BatchNorm: statistics from speech
    xs = [(torch.from_numpy(zoo_data.waveform_array(WAVE, [1, 8000], 4, 100 + i)),) for i in range(4)]
    spread(m)
    bn_statistics(Wrap(m, ["input_values"], "logits"), xs)
    return _speech("w2v2_conformer_ctc_op17", m, "logits", 17, "Wav2Vec2ConformerForCTC (rotary)", "sequence")


# ------------------------------------------------------------------------------------------------- points


def shape_points(rng: np.random.Generator, count: int, n: int) -> np.ndarray:
    """[count, 3, n] points on the surfaces of random shapes (sphere, box, cylinder, torus), random scale and
    rotation, centred and scaled to the unit sphere, as ModelNet loaders normalise them."""
    out = np.zeros((count, 3, n), np.float32)
    for i in range(count):
        kind = i % 4
        u, v = rng.uniform(0, 2 * np.pi, n), rng.uniform(-1, 1, n)
        if kind == 0:
            th = np.arccos(v)
            p = np.stack([np.sin(th) * np.cos(u), np.sin(th) * np.sin(u), v], 1)
        elif kind == 1:
            p = rng.uniform(-1, 1, (n, 3))
            ax = rng.integers(0, 3, n)
            p[np.arange(n), ax] = np.sign(p[np.arange(n), ax])
        elif kind == 2:
            p = np.stack([np.cos(u), np.sin(u), v * 1.5], 1)
        else:
            w = rng.uniform(0, 2 * np.pi, n)
            p = np.stack(
                [(1 + 0.35 * np.cos(w)) * np.cos(u), (1 + 0.35 * np.cos(w)) * np.sin(u), 0.35 * np.sin(w)], 1
            )
        p = p * rng.uniform(0.5, 1.5, 3)
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        p = p @ q + rng.normal(0, 0.01, p.shape)
        p -= p.mean(0)
        p /= np.linalg.norm(p, axis=1).max()
        out[i] = p.T
    return out


class TNet(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.mlp = nn.Sequential(
            nn.Conv1d(k, 32, 1), nn.BatchNorm1d(32), nn.ReLU(), nn.Conv1d(32, 64, 1), nn.BatchNorm1d(64), nn.ReLU(),
            nn.Conv1d(64, 128, 1), nn.BatchNorm1d(128), nn.ReLU(),
        )  # fmt: skip
        self.fc = nn.Sequential(nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, k * k))

    def forward(self, x):
        h = torch.max(self.mlp(x), 2)[0]
        m = self.fc(h).view(-1, self.k, self.k)
        return m + torch.eye(self.k, dtype=x.dtype).unsqueeze(0)


class PointNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.t3, self.t64 = TNet(3), TNet(64)
        self.mlp1 = nn.Sequential(nn.Conv1d(3, 64, 1), nn.BatchNorm1d(64), nn.ReLU())
        self.mlp2 = nn.Sequential(
            nn.Conv1d(64, 64, 1), nn.BatchNorm1d(64), nn.ReLU(), nn.Conv1d(64, 256, 1), nn.BatchNorm1d(256)
        )
        self.head = nn.Sequential(
            nn.Linear(256, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, classes)
        )

    def forward(self, x):
        x = torch.bmm(self.t3(x).transpose(1, 2), x)
        x = self.mlp1(x)
        x = torch.bmm(self.t64(x).transpose(1, 2), x)
        x = torch.max(self.mlp2(x), 2)[0]
        return torch.log_softmax(self.head(x), 1)


def knn(x: torch.Tensor, k: int) -> torch.Tensor:
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x**2, dim=1, keepdim=True)
    return (-xx - inner - xx.transpose(2, 1)).topk(k=k, dim=-1)[1]


def graph_feature(x: torch.Tensor, k: int) -> torch.Tensor:
    """DGCNN's get_graph_feature: [B, C, N] -> [B, 2C, N, k] (neighbour - centre, centre)."""
    b, c, n = x.shape
    idx = knn(x, k) + torch.arange(0, b).view(-1, 1, 1) * n
    xt = x.transpose(2, 1).contiguous()
    feat = xt.view(b * n, -1)[idx.view(-1), :].view(b, n, k, c)
    xt = xt.view(b, n, 1, c).repeat(1, 1, k, 1)
    return torch.cat((feat - xt, xt), dim=3).permute(0, 3, 1, 2).contiguous()


class DGCNN(nn.Module):
    def __init__(self, k: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.k = k

        def edge(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 1, bias=False), nn.BatchNorm2d(o), nn.LeakyReLU(0.2))

        self.e1, self.e2, self.e3 = edge(6, 32), edge(64, 32), edge(64, 64)
        self.c5 = nn.Sequential(nn.Conv1d(128, 128, 1, bias=False), nn.BatchNorm1d(128), nn.LeakyReLU(0.2))
        self.head = nn.Sequential(nn.Linear(256, 64, bias=False), nn.BatchNorm1d(64), nn.LeakyReLU(0.2),
                                  nn.Linear(64, classes))  # fmt: skip

    def forward(self, x):
        x1 = self.e1(graph_feature(x, self.k)).max(dim=-1)[0]
        x2 = self.e2(graph_feature(x1, self.k)).max(dim=-1)[0]
        x3 = self.e3(graph_feature(x2, self.k)).max(dim=-1)[0]
        x = self.c5(torch.cat((x1, x2, x3), dim=1))
        x = torch.cat((x.amax(-1), x.mean(-1)), 1)
        return self.head(x)


def _arrays_model(name, model, sample, opset, family, kind, outs, note="", dynamo=False, dynamic=None):
    """Store ``sample`` ([count, ...]) as the model's data, BatchNorm statistics from its first 32 rows."""
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez(OUT / f"{name}.samples.npz", x=sample)
    bn_statistics(model, [(torch.from_numpy(sample[i : i + 8]),) for i in range(0, 32, 8)])
    data = {"type": "arrays", "file": f"{name}.samples.npz"}
    return export_torch(
        name, model, [torch.from_numpy(sample[:1])], ["x"], outs, opset, data, family, kind,
        note=note, dynamo=dynamo, dynamic=dynamic,
    )  # fmt: skip


def pointnet():
    torch.manual_seed(SEED)
    pts = shape_points(np.random.default_rng(SEED), SAMPLES, 256)
    return _arrays_model(
        "pointnet_cls_op14", PointNet(), pts, 14, "PointNet (T-Nets, bmm)", "classifier", ["logp"]
    )


def dgcnn():
    torch.manual_seed(SEED)
    pts = shape_points(np.random.default_rng(SEED + 1), SAMPLES, 256)
    return _arrays_model(
        "dgcnn_cls_op17", DGCNN(), pts, 17, "DGCNN (EdgeConv, k-NN TopK)", "classifier", ["logits"]
    )


# ------------------------------------------------------------------------------------------------- sequences


class TCNBlock(nn.Module):
    def __init__(self, c: int, d: int, k: int = 3) -> None:
        super().__init__()
        self.pad = (k - 1) * d
        self.c1 = nn.utils.parametrizations.weight_norm(nn.Conv1d(c, c, k, dilation=d))
        self.c2 = nn.utils.parametrizations.weight_norm(nn.Conv1d(c, c, k, dilation=d))

    def forward(self, x):
        h = torch.relu(self.c1(nn.functional.pad(x, (self.pad, 0))))
        h = torch.relu(self.c2(nn.functional.pad(h, (self.pad, 0))))
        return torch.relu(x + h)


class TCN(nn.Module):
    """Bai et al.'s TCN (locuslab) as a forecaster: [B, 4, T] series -> the next 12 steps of each series."""

    def __init__(self, c_in: int = 4, c: int = 32, horizon: int = 12) -> None:
        super().__init__()
        self.inp = nn.Conv1d(c_in, c, 1)
        self.blocks = nn.Sequential(*[TCNBlock(c, 2**i) for i in range(5)])
        self.out = nn.Linear(c, c_in * horizon)
        self.c_in, self.h = c_in, horizon

    def forward(self, x):
        h = self.blocks(self.inp(x))[:, :, -1]
        return self.out(h).view(-1, self.c_in, self.h)


def series(rng: np.random.Generator, count: int, c: int, n: int) -> np.ndarray:
    t = np.arange(n)
    out = np.zeros((count, c, n), np.float32)
    for i in range(count):
        for j in range(c):
            p = rng.uniform(8, 48)
            s = rng.uniform(0.5, 2) * np.sin(2 * np.pi * t / p + rng.uniform(0, 6)) + rng.normal(0, 1) * t / n
            s = s + np.cumsum(rng.normal(0, 0.1, n)) + rng.normal(0, 0.1, n)
            out[i, j] = (s - s.mean()) / (s.std() + 1e-6)
    return out


def tcn():
    torch.manual_seed(SEED)
    return _arrays_model(
        "tcn_forecast_op17", TCN(), series(np.random.default_rng(SEED), SAMPLES, 4, 128), 17,
        "TCN forecaster (dilated causal Conv1d, weight norm)", "encoder", ["forecast"],
    )  # fmt: skip


class Tagger(nn.Module):
    def __init__(self, cell: str, vocab: int = 1000, classes: int = 9) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, 48, padding_idx=0)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(48, 48, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(96, classes)

    def forward(self, ids):
        return self.fc(self.rnn(self.emb(ids))[0])


def _tagger(name, cell, opset, dynamo=False):
    torch.manual_seed(SEED)
    data = {"type": "tokens", "vocab_size": 1000, "roles": {"input_ids": "ids"}}
    ids = torch.from_numpy(
        zoo_data.token_arrays(data, [{"name": "input_ids", "shape": [1, 32], "dtype": "int64"}], 1, 5)[
            "input_ids"
        ]
    )
    return export_torch(
        name, Tagger(cell), [ids.long()], ["input_ids"], ["tags"], opset, data,
        f"Bi{cell.upper()} token tagger", "sequence", dynamo=dynamo,
    )  # fmt: skip


def bilstm_tagger():
    return _tagger("bilstm_tagger_op14", "lstm", 14)


def bigru_tagger():
    return _tagger("bigru_tagger_op17", "gru", 17)


def bilstm_dynamo():
    return _tagger("bilstm_tagger_dynamo18", "lstm", 18, dynamo=True)


def mamba():
    t = _hf_transformers()
    torch.manual_seed(SEED)
    cfg = t.MambaConfig(
        vocab_size=1000, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4,
        use_mambapy=False,
    )  # fmt: skip
    m = t.MambaModel(cfg)
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n and p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
    data = {"type": "tokens", "vocab_size": 1000, "roles": {"input_ids": "ids"}}
    ids = torch.from_numpy(
        zoo_data.token_arrays(data, [{"name": "input_ids", "shape": [1, 16], "dtype": "int64"}], 1, 5)[
            "input_ids"
        ]
    )
    return export_torch(
        "mamba_op17", Wrap(m, ["input_ids"], "last_hidden_state"), [ids.long()], ["input_ids"],
        ["last_hidden_state"], 17, data, "Mamba (selective scan, slow path)", "encoder",
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------- tabular


def _dataset(which: str):
    from sklearn import datasets

    if which == "cancer":
        x, y = datasets.load_breast_cancer(return_X_y=True)
    elif which == "wine":
        x, y = datasets.load_wine(return_X_y=True)
    elif which == "diabetes":
        x, y = datasets.load_diabetes(return_X_y=True)
    else:
        x, y = datasets.load_digits(return_X_y=True)
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(x))
    return x[order].astype(np.float32), y[order]


def _sk(name, estimator, which, family, kind="classifier", options=None, outs_keep=None, lgbm=False):
    x, y = _dataset(which)
    n_test = SAMPLES
    estimator.fit(x[n_test:], y[n_test:])
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez(OUT / f"{name}.samples.npz", input=x[:n_test])
    if lgbm:
        from onnxmltools import convert_lightgbm
        from onnxmltools.convert.common.data_types import FloatTensorType as FT

        onx = convert_lightgbm(estimator, initial_types=[("input", FT([None, x.shape[1]]))], target_opset=15,
                               zipmap=False)  # fmt: skip
    else:
        from skl2onnx import to_onnx

        onx = to_onnx(estimator, x[:1], options=options, target_opset={"": 15, "ai.onnx.ml": 3})
        onx.graph.input[0].name = "input" if onx.graph.input[0].name == "X" else onx.graph.input[0].name
        for node in onx.graph.node:
            node.input[:] = ["input" if i == "X" else i for i in node.input]
    path = OUT / f"{name}.onnx"
    import onnx

    onnx.save(onx, str(path))
    outs = [o.name for o in onx.graph.output]
    return {
        "name": name,
        "file": path.name,
        "family": family,
        "kind": kind,
        "opset": 15,
        "inputs": [{"name": "input", "shape": [1, x.shape[1]], "dtype": "float32"}],
        "outputs": outs,
        "data": {"type": "arrays", "file": f"{name}.samples.npz"},
        "size": "reduced",
        "note": f"scikit-learn on load_{which}: {sorted({n.domain or 'ai.onnx' for n in onx.graph.node})}",
        "seed": SEED,
        "extra_args": ["--input-shape", f"input=1,{x.shape[1]}"],
    }


def sk_mlp():
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    est = make_pipeline(StandardScaler(), MLPClassifier((32, 16), max_iter=400, random_state=SEED))
    return _sk(
        "sk_mlp_zipmap_off", est, "digits", "sklearn StandardScaler+MLPClassifier", options={"zipmap": False}
    )


def sk_mlp_plain():
    from sklearn.neural_network import MLPClassifier

    est = MLPClassifier((32,), max_iter=400, random_state=SEED)
    return _sk("sk_mlp_plain", est, "wine", "sklearn MLPClassifier (zipmap on)")


def sk_logreg():
    from sklearn.linear_model import LogisticRegression

    est = LogisticRegression(max_iter=2000)
    return _sk("sk_logreg", est, "cancer", "sklearn LogisticRegression", options={"zipmap": False})


def sk_pca():
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return _sk(
        "sk_scaler_pca",
        make_pipeline(StandardScaler(), PCA(8)),
        "wine",
        "sklearn StandardScaler+PCA",
        "encoder",
    )


def sk_rf():
    from sklearn.ensemble import RandomForestClassifier

    est = RandomForestClassifier(10, max_depth=6, random_state=SEED)
    return _sk("sk_random_forest", est, "cancer", "sklearn RandomForestClassifier", options={"zipmap": False})


def sk_gbr():
    from sklearn.ensemble import GradientBoostingRegressor

    return _sk("sk_gbr", GradientBoostingRegressor(n_estimators=20, random_state=SEED), "diabetes",
               "sklearn GradientBoostingRegressor", "encoder")  # fmt: skip


def lgbm():
    import lightgbm

    est = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=8, random_state=SEED, verbose=-1)
    return _sk("lgbm_cls", est, "wine", "LightGBM LGBMClassifier (onnxmltools)", lgbm=True)


ALL = [
    wav2vec2_cls, wav2vec2_ctc, hubert_ctc, wavlm_xvector, wavlm_model_dynamo, w2v2_conformer,
    pointnet, dgcnn, tcn, bilstm_tagger, bigru_tagger, bilstm_dynamo, mamba,
    sk_mlp, sk_mlp_plain, sk_logreg, sk_pca, sk_rf, sk_gbr, lgbm,
]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    global OUT
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--only", help="comma-separated builder names")
    args = p.parse_args(argv)
    OUT = args.out
    OUT.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    only = set(args.only.split(",")) if args.only else None
    man = OUT / "zoo.json"
    models = json.loads(man.read_text())["models"] if man.exists() else []
    for f in ALL:
        if only and f.__name__ not in only:
            continue
        try:
            e = f()
        except Exception as ex:  # a model that does not export is a finding, not the end of the run
            print("EXPORT FAILED", f.__name__, type(ex).__name__, str(ex)[:300], flush=True)
            continue
        import onnx

        proto = onnx.load(str(OUT / e["file"]))
        e["ops"] = sorted({(n.domain + "." if n.domain else "") + n.op_type for n in proto.graph.node})
        models = [m for m in models if m["name"] != e["name"]] + [e]
        print(f"OK {e['name']:28s} {(OUT / e['file']).stat().st_size / 1e6:6.2f} MB {e['ops']}", flush=True)
    models.sort(key=lambda m: m["name"])
    man.write_text(json.dumps({"format": 1, "models": models}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
