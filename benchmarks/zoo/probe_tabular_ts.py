"""Issue 12 probe round 14t: time series, tabular deep models, recommenders and graph networks, not committed.

    pip install --no-deps pytorch-tabnet==4.1.0 rtdl-revisiting-models==0.0.2 torch-geometric==2.8.1 \
        chronos-forecasting==2.3.2 && pip install xxhash pandas einops      # the probe's venv only
    python benchmarks/zoo/probe_tabular_ts.py [--only a,b] [--out benchmarks/.zoo/probe14t]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe14t/zoo.json --no-shared --workers 1 --json r.json

Small seeded models (random tiny configs, LayerNorm affine parameters spread, BatchNorm statistics from the
model's own data), exported with ``torch.onnx.export(dynamo=False)`` at opsets 13 / 17 (18 where an op needs it)
as each package's users do; every input is stored beside the model (``"arrays"`` data, ``<name>.samples.npz``):

- time series (transformers 5.x, synthetic seasonal series with trend and noise): PatchTSTForPrediction /
  ForClassification, PatchTSMixerForPrediction, InformerForPrediction (ProbSparse attention), AutoformerForPrediction
  (series decomposition: AvgPool + replicate padding, auto-correlation), TimeSeriesTransformerForPrediction
  (encoder-decoder forward with past / future values and time features, a fixed prediction length; the StudentT
  parameters as outputs), TimesFmModelForPrediction, chronos-forecasting's Chronos-Bolt (T5 on patches); N-BEATS
  (generic and interpretable stacks) written in torch as its paper does;
- tabular: pytorch-tabnet's TabNet (sparsemax and entmax masks: sort, cumsum, threshold; categorical embeddings),
  rtdl's FT-Transformer (numerical + categorical feature tokenizers, CLS token), a DLRM-style recommender
  (nn.Embedding tables, nn.EmbeddingBag sum / mean with offsets, bmm feature interactions gathered at the
  strictly lower triangle), Wide&Deep (EmbeddingBag over crossed ids + deep MLP);
- graph networks (torch_geometric 2.8): GCNConv, GATConv, SAGEConv, GINConv node classifiers on a 32-node graph
  with ``edge_index`` [2, 96] as an int64 input and as a constant, and a graph-level readout.
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
# this folder's transformers.py would shadow the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

OUT = HERE.parents[0] / ".zoo" / "probe14t"
SEED = 1414
SAMPLES = 64  # rows written per model (calibration + evaluation)


def spread(model: nn.Module) -> None:
    """LayerNorm affine parameters spread around (1, 0), as trained ones are."""
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm) and mod.weight is not None:
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


def export(
    name: str,
    model: nn.Module,
    samples: dict[str, np.ndarray],
    outs: list[str],
    opset: int,
    family: str,
    kind: str,
    *,
    note: str = "",
    batched: bool = True,
    bn_batches: int = 4,
    dynamo: bool = False,
) -> dict:
    """Export ``model`` on the first sample; ``samples`` ([count, ...] per input, in argument order) are stored as
    its data. ``batched``: the leading axis replaces the batch dim (else each sample is the whole input)."""
    OUT.mkdir(parents=True, exist_ok=True)
    names = list(samples)
    np.savez(OUT / f"{name}.samples.npz", **samples)
    if batched:
        bn_statistics(
            model,
            [
                tuple(torch.from_numpy(samples[n][i : i + 8]) for n in names)
                for i in range(0, 8 * bn_batches, 8)
            ],
        )
        args = [torch.from_numpy(samples[n][:1]) for n in names]
    else:
        bn_statistics(
            model, [tuple(torch.from_numpy(samples[n][i]) for n in names) for i in range(bn_batches)]
        )
        args = [torch.from_numpy(samples[n][0]) for n in names]
    model.eval()
    path = OUT / f"{name}.onnx"
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(
                model, tuple(args), str(path), dynamo=True, input_names=names, output_names=outs,
                opset_version=opset, external_data=False,
            )  # fmt: skip
        else:
            torch.onnx.export(
                model, tuple(args), str(path), dynamo=False, input_names=names, output_names=outs,
                opset_version=opset, do_constant_folding=True,
            )  # fmt: skip
    return {
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
        "data": {"type": "arrays", "file": f"{name}.samples.npz"},
        "size": "reduced",
        "params": int(sum(p.numel() for p in model.parameters())),
        "note": note,
        "seed": SEED,
    }


class Out(nn.Module):
    """Keyword inputs in, the named output fields (or tuple items) out."""

    def __init__(self, m: nn.Module, names: list[str], outs: list[str | int], **fixed) -> None:
        super().__init__()
        self.m, self.names, self.outs, self.fixed = m, names, outs, fixed

    def forward(self, *xs):
        r = self.m(**dict(zip(self.names, xs, strict=True)), **self.fixed)
        got = []
        for o in self.outs:
            if isinstance(o, int):
                got.append(r[o])
            else:
                v = getattr(r, o)
                got.extend(v if isinstance(v, tuple) else [v])
        return tuple(got) if len(got) > 1 else got[0]


# ------------------------------------------------------------------------------------------------ time series


def series(rng: np.random.Generator, count: int, n: int, c: int = 1, positive: bool = False) -> np.ndarray:
    """[count, n, c] seasonal series with trend, random walk and noise (a demand / sensor series)."""
    t = np.arange(n)
    out = np.zeros((count, n, c), np.float32)
    for i in range(count):
        for j in range(c):
            p = rng.choice([7, 12, 24]) * rng.uniform(0.9, 1.1)
            s = rng.uniform(0.5, 2) * np.sin(2 * np.pi * t / p + rng.uniform(0, 6)) + rng.normal(0, 1) * t / n
            s = s + np.cumsum(rng.normal(0, 0.1, n)) + rng.normal(0, 0.2, n)
            level = rng.uniform(5, 50) if positive else rng.normal(0, 3)
            out[i, :, j] = level + rng.uniform(0.5, 4) * s
    return out


def time_features(count: int, n: int, k: int, offset: int = 0) -> np.ndarray:
    """[count, n, k] GluonTS-style time features in [-0.5, 0.5] (hour of day, day of week, ...) and age."""
    out = np.zeros((count, n, k), np.float32)
    rng = np.random.default_rng(SEED + 7)
    periods = [24, 7, 30, 12][: k - 1]
    for i in range(count):
        start = int(rng.integers(0, 1000))
        t = np.arange(start + offset, start + offset + n)
        for j, p in enumerate(periods):
            out[i, :, j] = (t % p) / (p - 1) - 0.5
        out[i, :, k - 1] = np.log10(2.0 + np.arange(offset, offset + n))
    return out


def _patchtst(cls_name: str, **extra):
    import transformers as t

    cfg = dict(
        num_input_channels=3, context_length=64, patch_length=8, patch_stride=8, prediction_length=12,
        d_model=32, num_attention_heads=4, num_hidden_layers=2, ffn_dim=64, dropout=0.0, head_dropout=0.0,
    )  # fmt: skip
    cfg.update(extra)
    torch.manual_seed(SEED)
    m = getattr(t, cls_name)(
        getattr(t, "PatchTSTConfig" if "PatchTST" in cls_name else "PatchTSMixerConfig")(**cfg)
    )
    spread(m)
    return m


def patchtst_pred(opset: int, dynamo: bool = False):
    # the TorchScript exporter writes PatchTST's / PatchTSMixer's patching (Tensor.unfold on dim -2) with the
    # patches on the wrong axis: onnxruntime refuses the file ("Incompatible dimensions"); dynamo's is right
    name = f"patchtst_pred_{'dynamo' if dynamo else 'op'}{opset}"

    def build():
        m = _patchtst("PatchTSTForPrediction")
        x = series(np.random.default_rng(SEED), SAMPLES, 64, 3)
        return export(
            name, Out(m, ["past_values"], ["prediction_outputs"]), {"past_values": x},
            ["prediction"], opset, "PatchTST (transformers) prediction", "encoder",
            note="context 64, patches 8, 3 channels, horizon 12, std scaling", dynamo=dynamo,
        )  # fmt: skip

    build.__name__ = name
    return build


def patchtst_cls():
    m = _patchtst("PatchTSTForClassification", num_targets=4, use_cls_token=True)
    x = series(np.random.default_rng(SEED + 1), SAMPLES, 64, 3)
    return export(
        "patchtst_cls_op14", Out(m, ["past_values"], ["prediction_logits"]), {"past_values": x}, ["logits"], 14,
        "PatchTST (transformers) classification", "classifier", note="CLS token, 4 classes",
    )  # fmt: skip


def patchtsmixer_pred(dynamo: bool = False):
    m = _patchtst(
        "PatchTSMixerForPrediction", d_model=32, num_layers=3, expansion_factor=2, self_attn=True,
        self_attn_heads=2, mode="mix_channel", gated_attn=True,
    )  # fmt: skip
    x = series(np.random.default_rng(SEED + 2), SAMPLES, 64, 3)
    return export(
        "patchtsmixer_pred_dynamo18" if dynamo else "patchtsmixer_pred_op17",
        Out(m, ["past_values"], ["prediction_outputs"]), {"past_values": x},
        ["prediction"], 18 if dynamo else 17, "PatchTSMixer (transformers) prediction", "encoder",
        note="mix_channel, gated attention, self-attention, 3 layers", dynamo=dynamo,
    )  # fmt: skip


def patchtsmixer_dynamo():
    return patchtsmixer_pred(dynamo=True)


TS_CONTEXT, TS_HORIZON, TS_LAGS, TS_TIME_FEATS = 32, 8, [1, 2, 3, 4, 5, 6, 7], 3


def _seq2seq(name: str, cls_name: str, cfg_name: str, opset: int, note: str, dynamo: bool = False, **extra):
    import transformers as t

    cfg = dict(
        prediction_length=TS_HORIZON, context_length=TS_CONTEXT, lags_sequence=TS_LAGS,
        num_time_features=TS_TIME_FEATS, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0, scaling="mean",
    )  # fmt: skip
    cfg.update(extra)
    torch.manual_seed(SEED)
    m = getattr(t, cls_name)(getattr(t, cfg_name)(**cfg))
    spread(m)
    past = TS_CONTEXT + max(TS_LAGS)
    rng = np.random.default_rng(SEED + 3)
    full = series(rng, SAMPLES, past + TS_HORIZON, positive=True)[..., 0]
    mask = (rng.random((SAMPLES, past)) > 0.05).astype(np.float32)
    samples = {
        "past_values": full[:, :past],
        "past_time_features": time_features(SAMPLES, past, TS_TIME_FEATS),
        "past_observed_mask": mask,
        "future_values": full[:, past:],
        "future_time_features": time_features(SAMPLES, TS_HORIZON, TS_TIME_FEATS, offset=past),
    }
    wrapped = Out(m, list(samples), ["params", "loc", "scale"])
    return export(
        name, wrapped, samples, ["df", "mu", "sigma", "loc", "scale"], opset, cls_name.replace("ForPrediction", ""),
        "encoder", note=note, dynamo=dynamo,
    )  # fmt: skip


def tst():
    return _seq2seq(
        "tst_op13", "TimeSeriesTransformerForPrediction", "TimeSeriesTransformerConfig", 13,
        "vanilla encoder-decoder, teacher-forced forward, StudentT head, lags 1-7",
    )  # fmt: skip


def informer():
    # both exporters fail, though the eager forward runs: TorchScript at 17 (distil on or off) "ONNX Expand input
    # shape constraint not satisfied" (an internal assert); torch.export with distil=True "Attention mask should be
    # of size (1, 1, 16, 16), but is torch.Size([1, 1, 32, 32])", without it a failure too
    return _seq2seq(
        "informer_dynamo18", "InformerForPrediction", "InformerConfig", 18,
        "ProbSparse attention (sampling factor 5: torch.randint key samples, TopK of the sparsity measure)",
        dynamo=True, attention_type="prob", sampling_factor=5, distil=False,
    )  # fmt: skip


def autoformer():
    # aten::fft_rfft has no TorchScript-exporter symbolic at any opset: torch's dynamo exporter (ONNX DFT)
    return _seq2seq(
        "autoformer_dynamo18", "AutoformerForPrediction", "AutoformerConfig", 18, dynamo=True,
        note="series decomposition (AvgPool, replicate padding), auto-correlation (rfft/irfft), top-k delays",
        moving_average=25, autocorrelation_factor=3, label_length=16,
    )  # fmt: skip


def timesfm():
    import transformers as t

    torch.manual_seed(SEED)
    cfg = t.TimesFmConfig(
        patch_length=16, context_length=64, horizon_length=16, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=2, head_dim=16, quantiles=[0.1, 0.5, 0.9],
    )  # fmt: skip
    m = t.TimesFmModelForPrediction(cfg)
    spread(m)

    class W(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, x):
            r = self.m(past_values=[x[0]], freq=[0], return_dict=True)
            return r.mean_predictions, r.full_predictions

    x = series(np.random.default_rng(SEED + 4), SAMPLES, 64)[..., 0]
    return export(
        "timesfm_op17", W(), {"past_values": x}, ["mean", "quantiles"], 17, "TimesFM (transformers)", "encoder",
        note="patch 16, context 64, horizon 16, 2 layers",
    )  # fmt: skip


def chronos_bolt():
    import transformers as t
    from chronos.chronos_bolt import ChronosBoltModelForForecasting

    torch.manual_seed(SEED)
    cfg = t.T5Config(
        d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2, d_kv=16, vocab_size=2,
        dense_act_fn="relu", feed_forward_proj="relu", dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    cfg.chronos_config = {
        "context_length": 64, "prediction_length": 16, "input_patch_size": 16, "input_patch_stride": 16,
        "quantiles": [0.1, 0.5, 0.9], "use_reg_token": True,
    }  # fmt: skip
    m = ChronosBoltModelForForecasting(cfg)
    spread(m)
    x = series(np.random.default_rng(SEED + 5), SAMPLES, 64, positive=True)[..., 0]
    return export(
        "chronos_bolt_dynamo18", Out(m, ["context"], ["quantile_preds"]), {"context": x}, ["quantiles"], 18,
        "Chronos-Bolt (chronos-forecasting)", "encoder",
        note="T5 encoder-decoder on 16-step patches, instance norm, NaN mask, 3 quantiles x 16", dynamo=True,
    )  # fmt: skip


class NBeatsBlock(nn.Module):
    def __init__(self, backcast: int, forecast: int, width: int, basis: str, theta: int) -> None:
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(backcast, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        )  # fmt: skip
        self.basis = basis
        if basis == "generic":
            self.theta = nn.Linear(width, theta)
            self.back, self.fore = nn.Linear(theta, backcast), nn.Linear(theta, forecast)
        else:
            tb = np.arange(backcast) / backcast
            tf = np.arange(backcast, backcast + forecast) / backcast
            if basis == "trend":
                bb = np.stack([tb**i for i in range(theta)])
                bf = np.stack([tf**i for i in range(theta)])
            else:  # seasonality: Fourier terms
                h = theta // 2
                bb = np.concatenate(
                    [
                        np.cos(2 * np.pi * np.outer(np.arange(h), tb)),
                        np.sin(2 * np.pi * np.outer(np.arange(h), tb)),
                    ]
                )
                bf = np.concatenate(
                    [
                        np.cos(2 * np.pi * np.outer(np.arange(h), tf)),
                        np.sin(2 * np.pi * np.outer(np.arange(h), tf)),
                    ]
                )
            self.theta_b = nn.Linear(width, theta, bias=False)
            self.theta_f = nn.Linear(width, theta, bias=False)
            self.register_buffer("bb", torch.tensor(bb, dtype=torch.float32))
            self.register_buffer("bf", torch.tensor(bf, dtype=torch.float32))

    def forward(self, x):
        h = self.fc(x)
        if self.basis == "generic":
            t = self.theta(h)
            return self.back(t), self.fore(t)
        return self.theta_b(h) @ self.bb, self.theta_f(h) @ self.bf


class NBeats(nn.Module):
    """N-BEATS (Oreshkin et al.): doubly residual stacks of FC blocks; interpretable = trend (polynomial) +
    seasonality (Fourier) stacks with fixed bases; the input divided by its last-window max (as M4 users do)."""

    def __init__(self, backcast: int = 48, forecast: int = 12, interpretable: bool = False) -> None:
        super().__init__()
        if interpretable:
            blocks = [NBeatsBlock(backcast, forecast, 64, "trend", 3) for _ in range(3)]
            blocks += [NBeatsBlock(backcast, forecast, 64, "seasonality", 12) for _ in range(3)]
        else:
            blocks = [NBeatsBlock(backcast, forecast, 64, "generic", 16) for _ in range(6)]
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        level = x.abs().amax(dim=1, keepdim=True) + 1e-6
        res = x / level
        out = 0.0
        for b in self.blocks:
            back, fore = b(res)
            res = res - back
            out = out + fore
        return out * level


def nbeats(interpretable: bool):
    def build():
        torch.manual_seed(SEED)
        name = "nbeats_interpretable_op13" if interpretable else "nbeats_generic_op17"
        x = series(np.random.default_rng(SEED + 6), SAMPLES, 48, positive=True)[..., 0]
        return export(
            name, NBeats(interpretable=interpretable), {"x": x}, ["forecast"], 13 if interpretable else 17,
            "N-BEATS (torch)", "encoder", note="backcast 48, horizon 12",
        )  # fmt: skip

    build.__name__ = "nbeats_interpretable" if interpretable else "nbeats_generic"
    return build


# ------------------------------------------------------------------------------------------------ tabular


def table(
    rng: np.random.Generator, count: int, n_num: int, cards: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Numerical columns of mixed scales (standardised as the packages' users do) and categorical ids."""
    num = rng.normal(0, 1, (count, n_num)).astype(np.float32)
    num[:, ::3] = np.abs(num[:, ::3]) ** 1.5  # skewed columns
    cat = np.stack([rng.zipf(1.5, count) % c for c in cards], 1).astype(np.int64)
    return num, cat


def tabnet(mask_type: str, opset: int):
    def build():
        from pytorch_tabnet.tab_network import TabNet
        from pytorch_tabnet.utils import create_group_matrix

        torch.manual_seed(SEED)
        n_num, cards = 10, [7, 12, 5]
        num, cat = table(np.random.default_rng(SEED + 8), SAMPLES, n_num, cards)
        x = np.concatenate([num, cat.astype(np.float32)], 1)  # TabNet takes one float matrix, ids as floats
        m = TabNet(
            n_num + len(cards), 4, n_d=8, n_a=8, n_steps=3, cat_idxs=list(range(n_num, n_num + len(cards))),
            cat_dims=cards, cat_emb_dim=[3] * len(cards), mask_type=mask_type, virtual_batch_size=8,
            group_attention_matrix=create_group_matrix([], n_num + len(cards)),
        )  # fmt: skip
        name = f"tabnet_{mask_type}_op{opset}"
        return export(
            name, Out(m, ["x"], [0]), {"x": x}, ["logits"], opset, f"TabNet (pytorch-tabnet, {mask_type})",
            "classifier", note="3 steps, n_d = n_a = 8, 3 categorical columns embedded (dim 3), ghost BN",
        )  # fmt: skip

    build.__name__ = f"tabnet_{mask_type}_op{opset}"
    return build


def ft_transformer():
    from rtdl_revisiting_models import FTTransformer

    torch.manual_seed(SEED)
    n_num, cards = 8, [5, 11, 3]
    num, cat = table(np.random.default_rng(SEED + 9), SAMPLES, n_num, cards)
    kw = FTTransformer.get_default_kwargs(n_blocks=2)
    kw.update(d_block=32, attention_n_heads=4, attention_dropout=0.0, ffn_dropout=0.0)
    m = FTTransformer(n_cont_features=n_num, cat_cardinalities=cards, d_out=3, **kw)
    spread(m)
    return export(
        "ft_transformer_op17", FTWrap(m),
        {"x_cont": num, "x_cat": cat}, ["logits"], 17, "FT-Transformer (rtdl-revisiting-models)", "classifier",
        note="8 numerical + 3 categorical features, d 32, 2 blocks, ReGLU, CLS token",
    )  # fmt: skip


class FTWrap(nn.Module):
    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, x_cont, x_cat):
        return self.m(x_cont, x_cat)


class DLRM(nn.Module):
    """DLRM (Naumov et al.) at a small size: a bottom MLP on 13 dense features, one nn.Embedding per single-valued
    sparse feature, one nn.EmbeddingBag (sum or mean) over a multi-hot feature read with offsets, pairwise dot
    products (bmm) gathered at the strictly lower triangle, top MLP -> click logit."""

    def __init__(self, cards: list[int], bag_card: int, d: int = 16, mode: str = "sum") -> None:
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, d), nn.ReLU())
        self.emb = nn.ModuleList([nn.Embedding(c, d) for c in cards])
        self.bag = nn.EmbeddingBag(bag_card, d, mode=mode)
        n = len(cards) + 2
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top = nn.Sequential(nn.Linear(d + n * (n - 1) // 2, 32), nn.ReLU(), nn.Linear(32, 1))
        for e in self.emb:
            nn.init.uniform_(e.weight, -0.5, 0.5)

    def forward(self, dense, sparse, bag_ids, bag_offsets):
        x = self.bottom(dense)
        ly = [e(sparse[:, i]) for i, e in enumerate(self.emb)] + [self.bag(bag_ids, bag_offsets)]
        t = torch.stack([x] + ly, 1)  # [B, n, d]
        z = torch.bmm(t, t.transpose(1, 2))
        flat = z[:, self.li, self.lj]
        return torch.sigmoid(self.top(torch.cat([x, flat], 1)))


def dlrm(mode: str, opset: int):
    def build():
        torch.manual_seed(SEED)
        cards, bag_card, hot = [100, 40, 7, 500], 300, 6
        rng = np.random.default_rng(SEED + 10)
        dense = np.log1p(rng.exponential(3.0, (SAMPLES, 13))).astype(np.float32)  # Criteo: log(1 + count)
        _, sparse = table(rng, SAMPLES, 1, cards)
        bag = (rng.zipf(1.3, (SAMPLES, hot)) % bag_card).astype(np.int64)
        samples = {
            "dense": dense,
            "sparse": sparse,
            "bag_ids": bag,
            "bag_offsets": np.zeros((SAMPLES, 1), np.int64),
        }
        m = DLRM(cards, bag_card, mode=mode)

        class Flat(nn.Module):  # one sample: bag ids flat [hot], offsets [1] as EmbeddingBag users pass them
            def __init__(self) -> None:
                super().__init__()
                self.m = m

            def forward(self, dense, sparse, bag_ids, bag_offsets):
                return self.m(dense, sparse, bag_ids.reshape(-1), bag_offsets.reshape(-1))

        name = f"dlrm_bag{mode}_op{opset}"
        e = export(
            name,
            Flat(),
            samples,
            ["click"],
            opset,
            f"DLRM-style recommender (EmbeddingBag {mode})",
            "encoder",
            note="bottom MLP, 4 embedding tables + EmbeddingBag(offsets) of 6 ids, bmm interactions at the "
            "strictly lower triangle (Gather), top MLP, Sigmoid",
        )
        return e

    build.__name__ = f"dlrm_{mode}_op{opset}"
    return build


class WideDeep(nn.Module):
    """Wide & Deep (Cheng et al.): the wide part a linear model over crossed-feature ids (EmbeddingBag sum of
    1-dim weights: a sparse linear layer), the deep part embeddings of each categorical column concatenated with
    the numerical columns through an MLP; logits added, Sigmoid."""

    def __init__(self, cards: list[int], n_num: int, cross_card: int = 1000) -> None:
        super().__init__()
        self.wide = nn.EmbeddingBag(cross_card, 1, mode="sum")
        self.wide_bias = nn.Parameter(torch.zeros(1))
        self.emb = nn.ModuleList([nn.Embedding(c, 8) for c in cards])
        self.deep = nn.Sequential(
            nn.Linear(8 * len(cards) + n_num, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
            nn.Linear(32, 1),
        )  # fmt: skip
        nn.init.normal_(self.wide.weight, 0, 0.3)

    def forward(self, num, cat, crossed):
        wide = self.wide(crossed) + self.wide_bias  # crossed [B, k]: fixed-size bags, no offsets
        deep = torch.cat([e(cat[:, i]) for i, e in enumerate(self.emb)] + [num], 1)
        return torch.sigmoid(wide + self.deep(deep))


def wide_deep():
    torch.manual_seed(SEED)
    cards = [9, 16, 7, 42]
    rng = np.random.default_rng(SEED + 11)
    num, cat = table(rng, SAMPLES, 5, cards)
    crossed = ((cat[:, [0, 0, 1]] * np.array([16, 7, 42]) + cat[:, [1, 2, 3]]) % 1000).astype(np.int64)
    return export(
        "wide_deep_op13", WideDeep(cards, 5), {"num": num, "cat": cat, "crossed": crossed}, ["prob"], 13,
        "Wide & Deep (torch)", "encoder",
        note="wide: EmbeddingBag(sum, 2-D fixed bags) over 3 crossed ids; deep: 4 embeddings + 5 numerical, BN MLP",
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------ graphs

N_NODES, N_EDGES, N_FEATS = 32, 96, 16


def graphs(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Node features [count, N, F] and edge_index [count, 2, E] of random undirected graphs (E/2 edges each way;
    community structure: features correlate with the node's block)."""
    xs = np.zeros((count, N_NODES, N_FEATS), np.float32)
    es = np.zeros((count, 2, N_EDGES), np.int64)
    for i in range(count):
        block = np.arange(N_NODES) % 4
        centres = rng.normal(0, 1, (4, N_FEATS))
        xs[i] = centres[block] + rng.normal(0, 0.7, (N_NODES, N_FEATS))
        pairs = set()
        while len(pairs) < N_EDGES // 2:
            a = int(rng.integers(N_NODES))
            same = rng.random() < 0.8
            b = int(rng.choice(np.flatnonzero(block == block[a]) if same else np.arange(N_NODES)))
            if a != b:
                pairs.add((min(a, b), max(a, b)))
        p = np.array(sorted(pairs)).T
        es[i] = np.concatenate([p, p[::-1]], 1)
    return xs, es


class GNN(nn.Module):
    def __init__(self, conv: str, classes: int = 4, readout: bool = False) -> None:
        super().__init__()
        import torch_geometric.nn as gnn

        def make(i, o):
            if conv == "gcn":
                return gnn.GCNConv(i, o)
            if conv == "gat":
                return gnn.GATConv(i, o // 4, heads=4)
            if conv == "sage":
                return gnn.SAGEConv(i, o)
            mlp = nn.Sequential(nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU(), nn.Linear(o, o))
            return gnn.GINConv(mlp, train_eps=True)

        self.c1, self.c2 = make(N_FEATS, 32), make(32, 32)
        self.head = nn.Linear(32, classes)
        self.readout = readout

    def forward(self, x, edge_index):
        h = torch.relu(self.c1(x, edge_index))
        h = torch.relu(self.c2(h, edge_index))
        if self.readout:
            h = torch.cat([h.mean(0, keepdim=True), h.amax(0, keepdim=True)], 1)[:, :32]
        return self.head(h)


class FixedGraph(nn.Module):
    def __init__(self, m: nn.Module, edge_index: np.ndarray) -> None:
        super().__init__()
        self.m = m
        self.register_buffer("edge_index", torch.from_numpy(edge_index))

    def forward(self, x):
        return self.m(x, self.edge_index)


def gnn(conv: str, opset: int, constant: bool = False, readout: bool = False):
    def build():
        torch.manual_seed(SEED)
        xs, es = graphs(np.random.default_rng(SEED + 12), SAMPLES)
        m = GNN(conv, readout=readout)
        kind = "classifier" if readout else "sequence"
        name = f"pyg_{conv}{'_const' if constant else ''}{'_readout' if readout else ''}_op{opset}"
        if constant:
            es = np.broadcast_to(es[:1], es.shape).copy()
            model, samples = FixedGraph(m, es[0]), {"x": xs}
        else:
            model, samples = m, {"x": xs, "edge_index": es}
        return export(
            name, model, samples, ["logits"], opset, f"torch_geometric {conv.upper()}Conv", kind, batched=False,
            note=f"2 layers on a {N_NODES}-node graph, {N_EDGES} directed edges "
            + ("(a constant)" if constant else "(int64 input, a new graph per sample)"),
        )  # fmt: skip

    build.__name__ = f"pyg_{conv}{'_const' if constant else ''}{'_readout' if readout else ''}_op{opset}"
    return build


ALL = [
    patchtst_pred(14), patchtst_pred(17), patchtst_pred(18, dynamo=True), patchtst_cls, patchtsmixer_pred,
    patchtsmixer_dynamo, tst, informer, autoformer, timesfm,
    chronos_bolt, nbeats(False), nbeats(True),
    tabnet("sparsemax", 13), tabnet("entmax", 17), ft_transformer, dlrm("sum", 13), dlrm("mean", 17), wide_deep,
    gnn("gcn", 17), gnn("gcn", 17, constant=True), gnn("gat", 17), gnn("gat", 18, constant=True), gnn("sage", 13),
    gnn("sage", 17, constant=True), gnn("gin", 17), gnn("gin", 13, constant=True, readout=True),
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
    import onnx

    for f in ALL:
        if only and f.__name__ not in only:
            continue
        try:
            e = f()
        except Exception as ex:  # a model that does not export is a finding, not the end of the run
            print("EXPORT FAILED", f.__name__, type(ex).__name__, str(ex)[:400], flush=True)
            continue
        proto = onnx.load(str(OUT / e["file"]))
        e["ops"] = sorted({(n.domain + "." if n.domain else "") + n.op_type for n in proto.graph.node})
        models = [m for m in models if m["name"] != e["name"]] + [e]
        print(f"OK {e['name']:28s} {(OUT / e['file']).stat().st_size / 1e6:6.2f} MB {e['ops']}", flush=True)
    models.sort(key=lambda m: m["name"])
    man.write_text(json.dumps({"format": 1, "models": models}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
