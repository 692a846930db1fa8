"""Issue 12 probe round 19m: families not probed before (``--out benchmarks/.zoo/probe19m``, not committed; needs
``monai`` 1.6.1 and ``yolov5`` 7.0.14 (+ ``pandas``, ``seaborn``) installed ``--no-deps`` in the probe's venv, and
torchreid 0.2.5's sdist unpacked for its OSNet files: ``pip download --no-deps torchreid``, ``--torchreid DIR``).

Small seeded models as their users build and export them (BatchNorm statistics from the photos or volumes),
``torch.onnx.export`` at opset 17 unless said:

- MONAI 3-D medical networks on volumes (``arrays``: 3-D grey volumes made of shifted photo crops, normalised per
  volume as MONAI's ``NormalizeIntensity``): BasicUNet, UNet (residual units, PReLU, InstanceNorm), SegResNet
  (GroupNorm, trilinear upsampling), DynUNet (nnU-Net: InstanceNorm, LeakyReLU, ConvTranspose3d), AttentionUnet,
  UNETR (ViT on 16^3 patches, ConvTranspose3d decoder), SwinUNETR (3-D shifted windows), DenseNet121
  (spatial_dims=3, 3-D pools), and a 2-D MONAI UNet on photos. MONAI's VNet is left out: its widths are fixed
  (16..256 with 5^3 kernels, 45 M parameters at any input size).
- The ``yolov5`` wheel's ``Model`` from ``yolov5n.yaml`` (Detect with grid and anchors, ``export=True`` as its
  ``export.py`` sets, BatchNorm folded as ``attempt_load(fuse=True)``), static at opsets 12 and 17 and
  ``--dynamic`` at 12; YOLOX-nano style with its runtime grids (round 4's builder) at opset 17 (the ``yolox``
  sdist does not build offline).
- Anomaly detection as anomalib 2.x's torch models compute it (anomalib itself needs lightning; the graphs are
  written here after its ``torch_model.py`` / ``anomaly_map.py``): PaDiM (timm resnet18 layers 1-3, a channel
  subset, Mahalanobis distance with one inverse covariance per position, bilinear upsampling, Gaussian blur),
  PatchCore (layers 2-3 with 3x3 neighbourhood averaging, distances to a 2000-patch memory bank, min / TopK, the
  re-weighted image score with Gathers), EfficientAD-S style (PDN teacher / student, autoencoder with
  interpolations, quantile-normalised maps), STFPM (teacher / student feature cosine maps multiplied).
- Re-identification: torchreid's OSNet x0.25 and OSNet-AIN x0.25 (omni-scale blocks, channel gates,
  InstanceNorm), exported with the L2-normalised embedding users match on, and a ResNet-18 + GeM + BNNeck
  metric-learning head.

    python benchmarks/zoo/probe_families19.py --torchreid /tmp/torchreid-0.2.5 [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe19m/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import timm
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402
import zoo_data  # noqa: E402
from probe_hardops import _photos, bn_statistics, photos_at  # noqa: E402
from probe_vision_hf import IMG, SAMPLES, Probe, photo_pixels  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe19m"
SEED = 19300
GRAY = {"type": "image", "color": "GRAY", "scale": 1 / 255, "mean": [0.0], "std": [1.0]}
UNIT_RGB = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": [0.0] * 3, "std": [1.0] * 3}
TORCHREID: Path | None = None


# ------------------------------------------------------------------------------------------------ volumes


def volumes(count: int, seed: int, size: int) -> np.ndarray:
    """[count, 1, D, H, W] grey volumes: slice z is the photo's crop shifted by (z // 2, z // 3) pixels and
    faded along depth, normalised per volume (MONAI ``NormalizeIntensity``)."""
    pad = size // 2 + 1
    g = photo_pixels(GRAY, [1, 1, size + pad, size + pad], count, seed, _photos())[:, 0]
    z = np.arange(size)
    fade = (0.6 + 0.4 * np.cos(np.pi * (z / size - 0.5))).astype(np.float32)
    vols = np.stack([np.stack([g[:, k // 2 : k // 2 + size, k // 3 : k // 3 + size] for k in z], 1)], 1)
    vols = vols * fade[None, None, :, None, None]
    mean = vols.mean(axis=(1, 2, 3, 4), keepdims=True)
    std = vols.std(axis=(1, 2, 3, 4), keepdims=True) + 1e-6
    return ((vols - mean) / std).astype(np.float32)


def volume_arrays(size: int):
    return lambda count, seed: {"input": volumes(count, seed, size)}


def monai_net(name: str, **kw):
    def build() -> nn.Module:
        from monai.networks import nets

        return getattr(nets, name)(**kw)

    return build


# ------------------------------------------------------------------------------------------------ YOLOv5 / YOLOX


class Yolov5(nn.Module):
    def __init__(self, yaml: str = "yolov5n.yaml", classes: int = 80) -> None:
        super().__init__()
        import yolov5
        from yolov5.models.yolo import Model

        cfg = Path(yolov5.__file__).parent / "models" / yaml
        self.model = Model(str(cfg), ch=3, nc=classes)

    def forward(self, x):
        return self.model(x)


def yolov5_ready(m: Yolov5, dynamic: bool) -> nn.Module:
    """What yolov5's export.py does after loading: BatchNorm folded (fuse=True), Detect in export mode."""
    from yolov5.models.yolo import Detect

    model = m.model.fuse().eval()
    for mod in model.modules():
        if isinstance(mod, Detect):
            mod.inplace, mod.dynamic, mod.export = True, dynamic, True
    return model


def yolox_dynamic() -> nn.Module:
    import probe_detectors

    return probe_detectors.YOLOXDynamic(size=YOLO_SIZE)


YOLO_SIZE = 192


# ------------------------------------------------------------------------------------------------ anomaly detection

ANOM = 128


def gaussian_kernel(sigma: float = 4.0) -> torch.Tensor:
    k = 2 * int(4.0 * sigma + 0.5) + 1
    x = torch.arange(k, dtype=torch.float32) - k // 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    return (g[:, None] * g[None, :])[None, None]


class Blur(nn.Module):
    """anomalib's GaussianBlur2d: reflect padding, one 2-D kernel."""

    def __init__(self, sigma: float = 4.0) -> None:
        super().__init__()
        self.register_buffer("kernel", gaussian_kernel(sigma))
        self.pad = self.kernel.shape[-1] // 2

    def forward(self, x):
        x = F.pad(x, (self.pad,) * 4, mode="reflect")
        return F.conv2d(x, self.kernel)


def resnet_features(indices: tuple[int, ...], seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return timm.create_model("resnet18", pretrained=False, features_only=True, out_indices=indices)


def fit_backbone(m: nn.Module, seed: int) -> nn.Module:
    x = photos_at(ANOM, 64, seed)
    bn_statistics(m, [(x[i : i + 16],) for i in range(0, 64, 16)])
    return m


class Padim(nn.Module):
    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.fe = fit_backbone(resnet_features((1, 2, 3), SEED), 1)
        gen = torch.Generator().manual_seed(SEED)
        self.register_buffer("idx", torch.randperm(64 + 128 + 256, generator=gen)[:channels])
        emb = torch.cat([self.embed(photos_at(ANOM, 16, 2 + i)) for i in range(4)])  # [N, C, H, W]
        n, c, h, w = emb.shape
        e = emb.reshape(n, c, h * w)
        mean = e.mean(0)  # [C, HW]
        d = (e - mean).permute(2, 0, 1)  # [HW, N, C]
        cov = d.transpose(1, 2) @ d / (n - 1) + 0.01 * torch.eye(c)
        self.register_buffer("mean", mean)
        self.register_buffer("inv_covariance", torch.linalg.inv(cov))  # [HW, C, C]
        self.blur = Blur()

    def embed(self, x):
        with torch.no_grad():
            f1, f2, f3 = self.fe(x)
        f = torch.cat([f1, F.interpolate(f2, size=f1.shape[-2:]), F.interpolate(f3, size=f1.shape[-2:])], 1)
        return torch.index_select(f, 1, self.idx)

    def forward(self, x):
        emb = self.embed(x)
        b, c, h, w = emb.shape
        delta = (emb.reshape(b, c, h * w) - self.mean).permute(2, 0, 1)  # [HW, B, C]
        dist = (torch.matmul(delta, self.inv_covariance) * delta).sum(2).permute(1, 0)
        dist = dist.reshape(b, 1, h, w).clamp(0).sqrt()
        amap = self.blur(F.interpolate(dist, size=x.shape[-2:], mode="bilinear", align_corners=False))
        return amap, torch.amax(amap, dim=(-2, -1))


def euclidean(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x_norm = x.pow(2).sum(dim=-1, keepdim=True)
    y_norm = y.pow(2).sum(dim=-1, keepdim=True)
    return (x_norm - 2 * torch.matmul(x, y.transpose(-2, -1)) + y_norm.transpose(-2, -1)).clamp_min(0).sqrt()


class PatchCore(nn.Module):
    def __init__(self, bank: int = 2000, neighbours: int = 9) -> None:
        super().__init__()
        self.fe = fit_backbone(resnet_features((2, 3), SEED + 1), 3)
        self.pool = nn.AvgPool2d(3, 1, 1)
        self.neighbours = neighbours
        feats = torch.cat([self.embed(photos_at(ANOM, 16, 4 + i)) for i in range(4)])
        gen = torch.Generator().manual_seed(SEED + 1)
        pick = torch.randperm(feats.shape[0], generator=gen)[:bank]  # a coreset's size, not its greedy choice
        self.register_buffer("memory_bank", feats[pick].contiguous())
        self.blur = Blur()

    def embed(self, x):
        with torch.no_grad():
            f2, f3 = self.fe(x)
        f2, f3 = self.pool(f2), self.pool(f3)
        f = torch.cat([f2, F.interpolate(f3, size=f2.shape[-2:], mode="bilinear")], 1)
        return f.permute(0, 2, 3, 1).reshape(-1, f.shape[1])

    def forward(self, x):
        f2, _ = self.fe(x)
        b, h, w = x.shape[0], f2.shape[-2], f2.shape[-1]
        emb = self.embed(x)
        scores, locations = euclidean(emb, self.memory_bank).min(1)  # n_neighbors=1
        scores, locations = scores.reshape(b, -1), locations.reshape(b, -1)
        # anomalib's compute_anomaly_score: re-weight the worst patch by its neighbours in the bank
        max_patches = torch.argmax(scores, dim=1)
        emb_b = emb.reshape(b, h * w, -1)
        max_feats = emb_b[torch.arange(b), max_patches]
        score = scores[torch.arange(b), max_patches]
        nn_index = locations[torch.arange(b), max_patches]
        nn_sample = self.memory_bank[nn_index, :]
        _, support = euclidean(nn_sample, self.memory_bank).topk(self.neighbours, largest=False, dim=1)
        dist = euclidean(max_feats.unsqueeze(1), self.memory_bank[support]).squeeze(1)
        weights = (1 - F.softmax(dist, 1))[..., 0]
        amap = scores.reshape(b, 1, h, w)
        amap = self.blur(F.interpolate(amap, size=x.shape[-2:], mode="bilinear"))
        return amap, (weights * score)[:, None]


def pdn_small(out: int, c: int = 32) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, c, 4, padding=3), nn.ReLU(), nn.AvgPool2d(2, 2, padding=1),
        nn.Conv2d(c, 2 * c, 4, padding=3), nn.ReLU(), nn.AvgPool2d(2, 2, padding=1),
        nn.Conv2d(2 * c, 2 * c, 3, padding=1), nn.ReLU(), nn.Conv2d(2 * c, out, 4),
    )  # fmt: skip


class AutoEncoder(nn.Module):
    def __init__(self, out: int, size: int, final: int, c: int = 16) -> None:
        super().__init__()
        self.enc = nn.Sequential(
            *(m for i, o in ((3, c), (c, c), (c, 2 * c), (2 * c, 2 * c), (2 * c, 2 * c)) for m in
              (nn.Conv2d(i, o, 4, 2, 1), nn.ReLU())),
            nn.Conv2d(2 * c, 2 * c, size // 32),  # 8 at 256: down to 1 x 1
        )  # fmt: skip
        self.dec = nn.ModuleList(nn.Conv2d(2 * c, 2 * c, 4, 1, 2) for _ in range(7))
        self.last = nn.Sequential(nn.Conv2d(2 * c, 2 * c, 3, 1, 1), nn.ReLU(), nn.Conv2d(2 * c, out, 3, 1, 1))
        self.size, self.final = size, final

    def forward(self, x):
        z = self.enc(x)
        s = self.size
        sizes = [s // 64 - 1, s // 32, s // 16 - 1, s // 8, s // 4 - 1, s // 2 - 1, s // 2 - 1]
        for conv, n in zip(self.dec, sizes, strict=True):
            z = F.relu(conv(F.interpolate(z, size=n, mode="bilinear")))
        z = F.interpolate(
            z, size=self.final, mode="bilinear"
        )  # the PDN's output size (56 at 256 in anomalib)
        return self.last(z)


class EfficientAd(nn.Module):
    def __init__(self, out: int = 64) -> None:
        super().__init__()
        torch.manual_seed(SEED + 2)
        self.teacher, self.student = pdn_small(out), pdn_small(2 * out)
        with torch.no_grad():
            final = self.teacher(torch.zeros(1, 3, ANOM, ANOM)).shape[-1]
        self.ae = AutoEncoder(out, ANOM, final)
        self.out = out
        x = photos_at(ANOM, 32, 5, UNIT_RGB)
        with torch.no_grad():
            t = self.teacher(x)
            self.register_buffer("t_mean", t.mean((0, 2, 3), keepdim=True))
            self.register_buffer("t_std", t.std((0, 2, 3), keepdim=True))
            st, ae = self.maps(x)
            q = torch.tensor([0.9, 0.995])
            self.register_buffer("q_st", torch.quantile(st.flatten(), q))
            self.register_buffer("q_ae", torch.quantile(ae.flatten(), q))

    def maps(self, x):
        t = (self.teacher(x) - self.t_mean) / self.t_std
        s = self.student(x)
        a = self.ae(x)
        map_st = torch.mean((t - s[:, : self.out]) ** 2, dim=1, keepdim=True)
        map_ae = torch.mean((a - s[:, self.out :]) ** 2, dim=1, keepdim=True)
        map_st = F.interpolate(F.pad(map_st, (4, 4, 4, 4)), size=x.shape[-2:], mode="bilinear")
        map_ae = F.interpolate(F.pad(map_ae, (4, 4, 4, 4)), size=x.shape[-2:], mode="bilinear")
        return map_st, map_ae

    def forward(self, x):
        map_st, map_ae = self.maps(x)
        map_st = 0.1 * (map_st - self.q_st[0]) / (self.q_st[1] - self.q_st[0])
        map_ae = 0.1 * (map_ae - self.q_ae[0]) / (self.q_ae[1] - self.q_ae[0])
        amap = 0.5 * map_st + 0.5 * map_ae
        return amap, torch.amax(amap, dim=(-2, -1))


class Stfpm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.teacher = fit_backbone(resnet_features((1, 2, 3), SEED + 3), 6)
        self.student = fit_backbone(resnet_features((1, 2, 3), SEED + 4), 7)

    def forward(self, x):
        amap = torch.ones(x.shape[0], 1, *x.shape[-2:])
        for t, s in zip(self.teacher(x), self.student(x), strict=True):
            d = 0.5 * torch.norm(F.normalize(t) - F.normalize(s), p=2, dim=-3, keepdim=True) ** 2
            amap = amap * F.interpolate(d, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return amap


# ------------------------------------------------------------------------------------------------ re-identification

REID_HW = (128, 64)


def _torchreid_module(name: str):
    if TORCHREID is None:
        raise RuntimeError("--torchreid DIR (torchreid 0.2.5's sdist unpacked) is needed for OSNet")
    path = TORCHREID / "torchreid" / "reid" / "models" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"torchreid_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class L2Embedding(nn.Module):
    """What a re-id user exports: the eval-mode feature, L2-normalised for cosine matching."""

    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, x):
        return F.normalize(self.m(x), p=2, dim=1)


def osnet(fn: str, module: str = "osnet"):
    def build() -> nn.Module:
        return L2Embedding(getattr(_torchreid_module(module), fn)(num_classes=751, pretrained=False))

    return build


class GeM(nn.Module):
    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.p, self.eps = nn.Parameter(torch.tensor([p])), eps

    def forward(self, x):
        return F.avg_pool2d(x.clamp(min=self.eps).pow(self.p), x.shape[-2:]).pow(1.0 / self.p)


class BnNeckEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = timm.create_model("resnet18", pretrained=False, num_classes=0, global_pool="")
        self.pool = GeM()
        self.neck = nn.BatchNorm1d(512)
        self.neck.bias.requires_grad_(False)

    def forward(self, x):
        f = self.pool(self.body(x)).flatten(1)
        return F.normalize(self.neck(f), dim=1)


# ------------------------------------------------------------------------------------------------ the probes


def arrays_entry(name: str) -> dict[str, Any]:
    return {"type": "arrays", "file": f"{name}.samples.npz"}


def vol(size: int) -> list[tuple[str, list[int], str]]:
    return [("input", [1, 1, size, size, size], "float32")]


def m3(name: str, note: str, size: int, build, kind: str = "segmenter", outs=("output",)) -> Probe:
    return Probe(
        name, note, kind, 17, build, vol(size), list(outs), arrays_entry(name), arrays=volume_arrays(size)
    )


def probes() -> list[Probe]:
    img = IMG
    yolo_in = [("images", [1, 3, YOLO_SIZE, YOLO_SIZE], "float32")]
    anom_in = [("input", [1, 3, ANOM, ANOM], "float32")]
    reid_in = [("input", [1, 3, *REID_HW], "float32")]
    return [
        m3("m3_basicunet", "MONAI BasicUNet 3-D (MaxPool3d, ConvTranspose3d, InstanceNorm, LeakyReLU), 32^3", 32,
           monai_net("BasicUNet", spatial_dims=3, in_channels=1, out_channels=2, features=(8, 8, 16, 32, 64, 8))),
        m3("m3_unet", "MONAI UNet 3-D (strided Conv3d residual units, PReLU, InstanceNorm, ConvTranspose3d), 64^3",
           64, monai_net("UNet", spatial_dims=3, in_channels=1, out_channels=2, channels=(8, 16, 32, 64),
                         strides=(2, 2, 2), num_res_units=2)),
        m3("m3_segresnet", "MONAI SegResNet (GroupNorm, trilinear upsampling), 32^3", 32,
           monai_net("SegResNet", spatial_dims=3, init_filters=8, in_channels=1, out_channels=2)),
        m3("m3_dynunet", "MONAI DynUNet / nnU-Net (InstanceNorm, LeakyReLU, ConvTranspose3d), 32^3", 32,
           monai_net("DynUNet", spatial_dims=3, in_channels=1, out_channels=2, kernel_size=[3, 3, 3, 3],
                     strides=[1, 2, 2, 2], upsample_kernel_size=[2, 2, 2], filters=[8, 16, 32, 64])),
        m3("m3_attunet", "MONAI AttentionUnet 3-D (attention gates: Sigmoid x skip), 32^3", 32,
           monai_net("AttentionUnet", spatial_dims=3, in_channels=1, out_channels=2, channels=(8, 16, 32, 64),
                     strides=(2, 2, 2))),
        m3("m3_unetr", "MONAI UNETR (ViT on 16^3 patches, ConvTranspose3d decoder), 48^3", 48,
           monai_net("UNETR", in_channels=1, out_channels=2, img_size=48, feature_size=8, hidden_size=96,
                     mlp_dim=192, num_heads=4)),
        m3("m3_swinunetr", "MONAI SwinUNETR (3-D shifted windows, patch merging), 64^3", 64,
           monai_net("SwinUNETR", in_channels=1, out_channels=2, feature_size=12, spatial_dims=3)),
        m3("m3_densenet121", "MONAI DenseNet121 spatial_dims=3 (init 16, growth 8), 32^3", 32,
           monai_net("DenseNet121", spatial_dims=3, in_channels=1, out_channels=2, init_features=16,
                     growth_rate=8), kind="classifier", outs=("logits",)),
        Probe("m2_unet", "MONAI UNet 2-D on photos (PReLU, InstanceNorm, ConvTranspose2d), 128", "segmenter", 17,
              monai_net("UNet", spatial_dims=2, in_channels=3, out_channels=2, channels=(16, 32, 64, 128),
                        strides=(2, 2, 2), num_res_units=2),
              [("input", [1, 3, 128, 128], "float32")], ["output"], img),
        Probe("y_yolov5n_op12", "yolov5 wheel 7.0.14 yolov5n.yaml, export.py form (Detect grid/anchors), opset 12",
              "detector", 12, Yolov5, yolo_in, ["output0"], UNIT_RGB),
        Probe("y_yolov5n_op17", "yolov5n, export.py form, opset 17", "detector", 17, Yolov5, yolo_in, ["output0"],
              UNIT_RGB),
        Probe("y_yolov5n_dynamic_op12", "yolov5n, export.py --dynamic (batch, H, W), opset 12", "detector", 12,
              Yolov5, yolo_in, ["output0"], UNIT_RGB,
              dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}, "output0": {0: "batch", 1: "anchors"}}),
        Probe("y_yolox_dyngrid_op17", "YOLOX-nano style, decode with runtime grids (Range/meshgrid), exp", "detector",
              17, yolox_dynamic, yolo_in, ["output"], img,
              dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}}),
        Probe("a_padim", "anomalib PaDiM: resnet18 l1-3, Mahalanobis per position ([HW,C,C] MatMul), blur",
              "segmenter", 17, Padim, anom_in, ["anomaly_map", "pred_score"], img),
        Probe("a_patchcore", "anomalib PatchCore: distances to a 2000 x 384 memory bank, min, TopK, Gather",
              "segmenter", 17, PatchCore, anom_in, ["anomaly_map", "pred_score"], img),
        Probe("a_efficientad", "anomalib EfficientAD-S style: PDN teacher/student, autoencoder, quantile maps",
              "segmenter", 17, EfficientAd, anom_in, ["anomaly_map", "pred_score"], UNIT_RGB),
        Probe("a_stfpm", "anomalib STFPM: teacher/student resnet18, normalised feature distance maps multiplied",
              "segmenter", 17, Stfpm, anom_in, ["anomaly_map"], img),
        Probe("r_osnet_x0_25", "torchreid OSNet x0.25 (omni-scale, channel gates), L2-normalised embedding",
              "encoder", 17, osnet("osnet_x0_25"), reid_in, ["embedding"], img),
        Probe("r_osnet_ain_x0_25", "torchreid OSNet-AIN x0.25 (InstanceNorm + BatchNorm), L2 embedding", "encoder",
              17, osnet("osnet_ain_x0_25", "osnet_ain"), reid_in, ["embedding"], img),
        Probe("r_resnet18_gem_bnneck", "ResNet-18 + GeM pooling + BNNeck + L2 normalise (metric learning)",
              "encoder", 17, BnNeckEmbedding, reid_in, ["embedding"], img),
    ]  # fmt: skip


#: models whose statistics are set inside their builder (fitted backbones / stored statistics)
FITTED = {"a_padim", "a_patchcore", "a_efficientad", "a_stfpm"}


def build(p: Probe, out_dir: Path, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = p.build()
    inputs = [{"name": n, "shape": s, "dtype": d} for n, s, d in p.inputs]
    names = [i["name"] for i in inputs]
    if p.arrays is not None:
        stored = p.arrays(SAMPLES, seed)
        np.savez(out_dir / p.data["file"], **stored)
        example = tuple(torch.from_numpy(stored[n][:1]) for n in names)
        rows = [tuple(torch.from_numpy(stored[n][i : i + 8]) for n in names) for i in range(0, 32, 8)]
    else:
        x = zoo_data.make_arrays({"name": p.name, "data": p.data, "inputs": inputs}, 33, 7, _photos())
        example = tuple(torch.from_numpy(x[n][:1]) for n in names)
        rows = [tuple(torch.from_numpy(x[n][1 + i : 17 + i]) for n in names) for i in (0, 16)]
    if p.name not in FITTED:
        bn_statistics(model, rows)
    model = model.eval()
    if isinstance(model, Yolov5):
        model = yolov5_ready(model, p.dynamic_axes is not None)
        with torch.no_grad():
            for _ in range(2):
                model(*example)
    path = out_dir / f"{p.name}.onnx"
    with torch.no_grad():
        torch.onnx.export(model, example, str(path), input_names=names, output_names=p.outputs,
                          opset_version=p.opset, dynamo=False, do_constant_folding=True,
                          dynamic_axes=p.dynamic_axes)  # fmt: skip
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    entry = {"name": p.name, "file": path.name, "family": p.note.split(" (")[0].split(":")[0], "kind": p.kind,
             "opset": p.opset, "inputs": inputs, "outputs": [o.name for o in proto.graph.output], "data": p.data,
             "size": "reduced", "params": int(sum(q.numel() for q in model.parameters())),
             "ops": sorted({n.op_type for n in proto.graph.node}), "note": p.note, "seed": seed}  # fmt: skip
    if p.dynamic_axes:
        entry["extra_args"] = [
            a for n, s, _ in p.inputs for a in ("--input-shape", f"{n}={','.join(map(str, s))}")
        ]
    return entry


def main(argv: list[str] | None = None) -> int:
    global TORCHREID
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--torchreid", type=Path, help="torchreid 0.2.5's sdist, unpacked")
    args = ap.parse_args(argv)
    TORCHREID = args.torchreid
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    export.export_probes(probes(), lambda i, p: build(p, args.out, SEED + 10 * i), args.out, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
