"""Convolutions, pooling, upsampling and batch norm imported from PyTorch.

* Small models of the families the importer serves (a ResNet basic block, a
  MobileNetV2 inverted residual, a ConvNeXt block, a Whisper-style Conv1d
  front end, a U-Net decoder step, a YOLO-style head) and a table of single
  layers across kernel, stride, padding, dilation, groups and ceil_mode agree
  with torch in fp32 through the interpreter (fp32 and fp16 modes) and on the
  sim (all but the forms the ANE does not compile: reflect/replicate/circular
  padding, dilated max pooling), where the compiled MIL must hold exactly one
  native conv / conv_transpose / max_pool / avg_pool / upsample statement per
  torch layer. Hypothesis draws further conv and pooling geometries.
* Each layer is lowered to EXACTLY its canonical core-op form (docs/torch.md,
  "Spatial layers"): the expected statements are derived here, independently,
  from the forms' definitions, and compared statement by statement.
* Derived tensors (folded batch norms, interpolation matrices, divisor maps)
  are weights of the import: a saved model reloads and interprets identically.

Comparisons with torch go through the tolerance policy (tests/tolerances.py),
check ids ``import-spatial/<family>:<backend>``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import anec
from anec.frontends.torch.imported import ImportedModel
from anec.ir.printer import format_text
from tests.frontends.conftest import reference
from tolerances import assert_close as tol_close  # noqa: E402

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

ULPS = 8
"""The interpreter and the sim against torch in fp32, in fp16 ulps (the import tests' bound)."""


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _x(seed, *shape):
    return torch.randn(*shape, generator=_g(seed))


def _randomize_norms(module, seed=0):
    """Non-trivial running statistics and affine parameters for every batch norm."""
    g = _g(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.5)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                m.weight.copy_(torch.randn(c, generator=g) * 0.3 + 1)
                m.bias.copy_(torch.randn(c, generator=g) * 0.3)
    return module.eval()


def check(module, args, family, backends=("fp32", "fp16"), im=None, native=None):
    """Import (unless given) and compare every output with torch on ``backends``
    (interpreter modes fp32/fp16, or "sim"); the ImportedModel. ``native``: on the sim,
    also assert the compiled MIL's native spatial statements counted by op are exactly these."""
    module = module.eval()
    im = im or anec.import_torch(module, args)
    ref = reference(module, args)
    for backend in backends:
        if backend == "sim":
            with im.runner(backend="sim") as run:
                outs = run(*args)
                if native is not None:
                    assert mil_native_counts(run.artifact) == native
        else:
            outs = im.runner(backend="interp", mode=backend)(*args)
        tag = "sim" if backend == "sim" else f"interp-{backend}"
        assert len(outs) == len(ref)
        for name, got, want in zip(im.output_names, outs, ref):
            tol_close(got, want, f"import-spatial/{family}:{tag}", ULPS, what=name)
    return im


NATIVE_MIL = ("conv", "conv_transpose", "max_pool", "avg_pool", "upsample_nearest_neighbor", "upsample_bilinear")
"""The MIL ops the ANE runs a spatial layer as (a Linear is a 1x1 conv: MIL conv too)."""


def mil_native_counts(artifact) -> dict:
    """How many statements of each native spatial op the artifact's MIL holds (all its
    programs)."""
    programs = getattr(artifact, "stages", None) or [artifact]
    ops = [op for a in programs for op in re.findall(r"^\s*tensor<[^>]*> \w+ = (\w+)\(", a.mil_text, re.M)]
    return {op: ops.count(op) for op in NATIVE_MIL}


def torch_native_counts(module) -> dict:
    """One native statement per torch layer, counted by the layer's type: Conv1d/2d and
    Linear -> conv, ConvTranspose -> conv_transpose, MaxPool -> max_pool (a 1x1 window is a
    strided slice), AvgPool / AdaptiveAvgPool -> avg_pool (global average: a reduction),
    Upsample -> upsample_nearest_neighbor / upsample_bilinear."""
    c = dict.fromkeys(NATIVE_MIL, 0)
    for m in module.modules():
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            c["conv"] += 1
        elif isinstance(m, (nn.ConvTranspose1d, nn.ConvTranspose2d)):
            c["conv_transpose"] += 1
        elif isinstance(m, (nn.MaxPool1d, nn.MaxPool2d)):
            c["max_pool"] += m.kernel_size not in (1, (1, 1))
        elif isinstance(m, (nn.AvgPool1d, nn.AvgPool2d)):
            c["avg_pool"] += 1
        elif isinstance(m, (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d)):
            c["avg_pool"] += m.output_size not in (1, (1, 1), (1,))
        elif isinstance(m, nn.Upsample):
            c["upsample_nearest_neighbor" if m.mode == "nearest" else "upsample_bilinear"] += 1
    return c


# ---------------------------------------------------------------------------
# model families


class BasicBlock(nn.Module):
    """ResNet: conv-bn-relu, conv-bn, a stride-2 1x1 conv-bn shortcut, add, relu."""

    def __init__(self, cin=4, cout=8, stride=2):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.down(x))


class InvertedResidual(nn.Module):
    """MobileNetV2: 1x1 expand, depthwise 3x3, 1x1 project (ReLU6, batch norms), residual."""

    def __init__(self, c=4, expand=3):
        super().__init__()
        h = c * expand
        self.block = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.block(x)


class ConvNeXtBlock(nn.Module):
    """ConvNeXt: 7x7 depthwise, channels-last LayerNorm (permute), pointwise MLP, layer scale."""

    def __init__(self, c=8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pw1 = nn.Linear(c, 4 * c)
        self.pw2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class AudioFrontEnd(nn.Module):
    """Whisper: conv1d k=3, GELU, conv1d k=3 stride 2, GELU, to [B, T, C] plus positions."""

    def __init__(self, mels=8, d=16, frames=32):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.pos = nn.Parameter(torch.randn(frames // 2, d, generator=_g(40)) * 0.1)
        self.ln = nn.LayerNorm(d)

    def forward(self, mel):
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        return self.ln(x + self.pos)


class UNetUp(nn.Module):
    """U-Net decoder step: ConvTranspose2d up, bilinear-upsampled side path, skip concat, conv."""

    def __init__(self, cin=8, cskip=4, cout=4):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, 2, stride=2)
        self.side = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.conv = nn.Sequential(nn.Conv2d(cout + cskip + cin, cout, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, x, skip):
        return self.conv(torch.cat([self.up(x), skip, self.side(x)], dim=1))


class YoloHead(nn.Module):
    """A tiny YOLO-style neck: conv, max pool (SPP-style, stride 1), nearest upsampling, concat."""

    def __init__(self, c=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), nn.BatchNorm2d(c), nn.SiLU())
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.down = nn.Conv2d(2 * c, c, 3, 2, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.head = nn.Conv2d(3 * c, 6, 1)

    def forward(self, x):
        s = self.stem(x)
        p = torch.cat([s, self.pool(s)], 1)
        return self.head(torch.cat([p, self.up(self.down(p))], 1))


def _models():
    torch.manual_seed(7)
    return {
        "resnet_block": (_randomize_norms(BasicBlock()), (_x(1, 1, 4, 16, 16),)),
        "mobilenet_block": (_randomize_norms(InvertedResidual()), (_x(2, 1, 4, 12, 12),)),
        "convnext_block": (ConvNeXtBlock().eval(), (_x(3, 1, 8, 8, 8),)),
        "audio_frontend": (AudioFrontEnd().eval(), (_x(4, 1, 8, 32),)),
        "unet_up": (_randomize_norms(UNetUp()), (_x(5, 1, 8, 4, 4), _x(6, 1, 4, 8, 8))),
        "yolo_head": (_randomize_norms(YoloHead()), (_x(7, 1, 3, 16, 16),)),
    }


MODELS = list(_models())


@pytest.fixture(scope="module")
def imported():
    cache = {}

    def get(name):
        if name not in cache:
            module, args = _models()[name]
            cache[name] = (anec.import_torch(module, args), module, args)
        return cache[name]

    return get


@pytest.mark.parametrize("name", MODELS)
def test_model_interpreter_matches_torch(imported, name):
    im, module, args = imported(name)
    check(module, args, name, ("fp32", "fp16"), im=im)


@pytest.mark.parametrize("name", MODELS)
def test_model_sim_matches_torch_with_one_native_statement_per_layer(imported, name):
    """On the sim within the tolerance policy, and the compiled MIL holds exactly one native
    conv / conv_transpose / max_pool / avg_pool / upsample statement per torch layer (a form
    the native-op selection misses leaves its core-op pieces instead, and fails the count)."""
    im, module, args = imported(name)
    check(module, args, name, ("sim",), im=im, native=torch_native_counts(module))


class PatchEmbed(nn.Module):
    """ViT-B/16's patch embedding: a 16x16 stride-16 conv, flattened to [B, tokens, D]."""

    def __init__(self, patch=16, d=8):
        super().__init__()
        self.proj = nn.Conv2d(3, d, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


@pytest.mark.parametrize("patch,size", [(16, 32), (32, 64), (8, 32)])
def test_vit_patch_embedding_runs_as_one_conv(patch, size):
    """A patch embedding beyond ANE-SPATIAL-LIMITS' stride 8 (ViT-B/16) or kernel 16 (ViT-B/32)
    compiles to one conv over the Cin*P*P patch channels (not P*P per-position convs); within
    the limits (patch 8) to one native conv. Both match torch on the sim."""
    torch.manual_seed(50 + patch)
    check(PatchEmbed(patch), (_x(51, 1, 3, size, size),), "patch_embed", ("fp32", "sim"),
          native=dict.fromkeys(NATIVE_MIL, 0) | {"conv": 1})


def test_model_layers_become_one_form_each(imported):
    """Batch norms after convs are folded away; convs keep ONE weight const per layer."""
    im, module, _ = imported("resnet_block")
    ops = [n.op for n in im.func.nodes]
    assert "mul" not in ops  # all three batch norms folded into their convs
    keys = [n.attrs["weight"] for n in im.func.nodes if n.op == "const" and "weight" in n.attrs]
    assert sorted(keys) == sorted(["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                   "down.0.weight", "down.0.bias"])
    im, _, _ = imported("mobilenet_block")
    assert "mul" in [n.op for n in im.func.nodes]  # the depthwise taps
    assert sum(1 for n in im.func.nodes if n.op == "const" and "weight" in n.attrs) == 6


def test_channels_last_layernorm_moves_no_data(imported):
    """ConvNeXt's permute -> LayerNorm -> Linear -> permute back: the layout records the
    permutes, LayerNorm reduces over the channel axis and the linears read it as it is."""
    im, _, _ = imported("convnext_block")
    assert im.stats["transposes"] == 0, im.stats


# ---------------------------------------------------------------------------
# single layers


class Layer(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _bn(m):
    return _randomize_norms(m, 3)


# id, module factory, input shape, family, compiles for the ANE (runs on the sim)
LAYERS = [
    ("conv3x3", lambda: nn.Conv2d(3, 4, 3), (1, 3, 8, 8), "conv", True),
    ("conv3x3_s2_p1", lambda: nn.Conv2d(3, 4, 3, 2, 1), (1, 3, 9, 8), "conv", True),
    ("conv5x5_d2_p3", lambda: nn.Conv2d(3, 4, 5, padding=3, dilation=2), (1, 3, 12, 11), "conv", True),
    ("conv3x1_rect_batch2", lambda: nn.Conv2d(3, 4, (3, 1), (2, 1), (1, 0)), (2, 3, 8, 8), "conv", True),
    ("conv_same_even", lambda: nn.Conv2d(3, 4, 4, padding="same"), (1, 3, 8, 8), "conv", True),
    ("conv_same_dilated", lambda: nn.Conv2d(3, 4, 3, padding="same", dilation=2), (1, 3, 8, 8), "conv", True),
    ("conv1x1_s2", lambda: nn.Conv2d(3, 4, 1, 2), (1, 3, 8, 8), "conv", True),
    ("conv1x1", lambda: nn.Conv2d(3, 4, 1), (1, 3, 8, 8), "conv", True),
    ("conv_pad_asymmetric", lambda: nn.Sequential(nn.ZeroPad2d((1, 0, 2, 1)), nn.Conv2d(3, 4, 3)),
     (1, 3, 8, 8), "conv", True),
    ("depthwise3x3", lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4), (1, 4, 8, 8), "conv", True),
    ("depthwise5x5_s2", lambda: nn.Conv2d(4, 4, 5, 2, 2, groups=4, bias=False), (1, 4, 9, 9), "conv", True),
    ("depthwise_multiplier2", lambda: nn.Conv2d(4, 8, 3, padding=1, groups=4), (1, 4, 8, 8), "conv", True),
    ("groups2", lambda: nn.Conv2d(4, 6, 3, padding=1, groups=2), (1, 4, 8, 8), "conv", True),
    ("groups2_1x1", lambda: nn.Conv2d(4, 6, 1, groups=2), (1, 4, 8, 8), "conv", True),
    ("reflect", lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), (1, 3, 8, 8), "pad", False),
    ("replicate", lambda: nn.Conv2d(3, 4, 3, padding=2, padding_mode="replicate"), (1, 3, 8, 8), "pad", False),
    ("circular", lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular"), (1, 3, 8, 8), "pad", False),
    ("conv1d_k3", lambda: nn.Conv1d(3, 4, 3), (1, 3, 16), "conv", True),
    ("conv1d_k3_s2_p1", lambda: nn.Conv1d(3, 4, 3, 2, 1), (1, 3, 16), "conv", True),
    ("conv1d_k1", lambda: nn.Conv1d(3, 4, 1), (1, 3, 16), "conv", True),
    ("conv1d_depthwise", lambda: nn.Conv1d(4, 4, 5, padding=2, groups=4), (1, 4, 16), "conv", True),
    ("conv1d_same_even", lambda: nn.Conv1d(3, 4, 4, padding="same"), (1, 3, 16), "conv", True),
    ("conv1d_reflect", lambda: nn.Conv1d(3, 4, 3, padding=1, padding_mode="reflect"), (1, 3, 16), "pad", False),
    ("convT_s2_p1_op1", lambda: nn.ConvTranspose2d(4, 3, 3, 2, 1, output_padding=1), (1, 4, 5, 5),
     "conv_transpose", True),
    ("convT_k2_s2", lambda: nn.ConvTranspose2d(4, 3, 2, 2), (1, 4, 5, 5), "conv_transpose", True),
    ("convT_s1", lambda: nn.ConvTranspose2d(4, 3, 3), (1, 4, 5, 5), "conv_transpose", True),
    ("convT_dilated", lambda: nn.ConvTranspose2d(4, 3, 3, 2, 1, dilation=2), (1, 4, 5, 5), "conv_transpose", True),
    ("convT_crop", lambda: nn.ConvTranspose2d(4, 3, 2, 2, padding=2), (1, 4, 5, 5), "conv_transpose", True),
    ("convT_crop_rect", lambda: nn.ConvTranspose2d(4, 3, (3, 2), (2, 3), padding=(3, 2), output_padding=(1, 0)),
     (1, 4, 5, 4), "conv_transpose", True),
    ("convT_groups2", lambda: nn.ConvTranspose2d(4, 6, 3, 2, 1, groups=2), (1, 4, 5, 5), "conv_transpose",
     True),
    ("convT1d", lambda: nn.ConvTranspose1d(4, 3, 4, 2, 1), (1, 4, 8), "conv_transpose", True),
    ("maxpool2", lambda: nn.MaxPool2d(2), (1, 3, 8, 8), "max_pool", True),
    ("maxpool3_s2_p1", lambda: nn.MaxPool2d(3, 2, 1), (1, 3, 9, 9), "max_pool", True),
    ("maxpool_ceil", lambda: nn.MaxPool2d(3, 2, ceil_mode=True), (1, 3, 8, 8), "max_pool", True),
    ("maxpool_ceil_p1", lambda: nn.MaxPool2d(3, 2, 1, ceil_mode=True), (1, 3, 8, 8), "max_pool", True),
    ("maxpool_dilated", lambda: nn.MaxPool2d(3, 1, 1, dilation=2), (1, 3, 8, 8), "max_pool", False),
    ("maxpool_k1_s2", lambda: nn.MaxPool2d(1, 2), (1, 3, 8, 8), "max_pool", True),
    ("maxpool1d", lambda: nn.MaxPool1d(3, 2, 1), (1, 3, 16), "max_pool", True),
    ("maxpool_unbatched", lambda: nn.MaxPool2d(2), (3, 8, 8), "max_pool", True),
    ("avgpool2", lambda: nn.AvgPool2d(2), (1, 3, 8, 8), "avg_pool", True),
    ("avgpool3_s2_p1_exclude_pad", lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), (1, 3, 8, 8),
     "avg_pool", True),
    ("avgpool3_s2_p1", lambda: nn.AvgPool2d(3, 2, 1), (1, 3, 8, 8), "avg_pool", True),
    ("avgpool_ceil", lambda: nn.AvgPool2d(3, 2, ceil_mode=True), (1, 3, 8, 8), "avg_pool", True),
    ("avgpool_ceil_p1", lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True), (1, 3, 8, 8), "avg_pool", True),
    ("avgpool_divisor", lambda: nn.AvgPool2d(3, 2, 1, divisor_override=5), (1, 3, 8, 8), "avg_pool", True),
    ("avgpool1d", lambda: nn.AvgPool1d(3, 2, 1), (1, 3, 16), "avg_pool", True),
    ("adaptive_avg_2x4", lambda: nn.AdaptiveAvgPool2d((2, 4)), (1, 3, 8, 8), "avg_pool", True),
    ("adaptive_avg_1", lambda: nn.AdaptiveAvgPool2d(1), (1, 3, 8, 8), "avg_pool", True),
    ("adaptive_avg1d", lambda: nn.AdaptiveAvgPool1d(4), (1, 3, 16), "avg_pool", True),
    ("nearest_x2", lambda: nn.Upsample(scale_factor=2), (1, 3, 4, 4), "upsample", True),
    ("nearest_size", lambda: nn.Upsample(size=(8, 12)), (1, 3, 4, 4), "upsample", True),
    ("nearest1d_x3", lambda: nn.Upsample(scale_factor=3), (1, 3, 4), "upsample", True),
    ("bilinear_x2", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), (1, 3, 4, 5), "upsample", True),
    ("bilinear_x2_corners", lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
     (1, 3, 4, 5), "upsample", True),
    ("bilinear_size", lambda: nn.Upsample(size=(7, 3), mode="bilinear"), (1, 3, 4, 5), "upsample", True),
    ("bilinear_x1_5", lambda: Fn(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear")),
     (1, 3, 4, 5), "upsample", True),
    ("linear1d_x2", lambda: nn.Upsample(scale_factor=2, mode="linear"), (1, 3, 5), "upsample", True),
    ("conv_bn", lambda: _bn(nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4))), (1, 3, 8, 8),
     "batch_norm", True),
    ("conv1d_bn1d", lambda: _bn(nn.Sequential(nn.Conv1d(3, 4, 3), nn.BatchNorm1d(4))), (1, 3, 16),
     "batch_norm", True),
    ("conv_relu_bn", lambda: _bn(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.BatchNorm2d(4))),
     (1, 3, 8, 8), "batch_norm", True),
    ("convT_groups_bn", lambda: _bn(nn.Sequential(nn.ConvTranspose2d(4, 6, 3, 2, groups=2, bias=False),
                                                  nn.BatchNorm2d(6))), (1, 4, 5, 5), "batch_norm", True),
    ("depthwise_bn", lambda: _bn(nn.Sequential(nn.Conv2d(4, 4, 3, groups=4, bias=False), nn.BatchNorm2d(4))),
     (1, 4, 8, 8), "batch_norm", True),
    ("conv1x1_bn", lambda: _bn(nn.Sequential(nn.Conv2d(4, 4, 1, bias=False), nn.BatchNorm2d(4))),
     (1, 4, 8, 8), "batch_norm", True),
    ("flatten_linear", lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 5)),
     (1, 3, 8, 8), "conv", True),
]


def _layer_case(case):
    name, make, shape, family, _ = case
    torch.manual_seed(11)
    return Layer(make()).eval(), (_x(12, *shape),), family


@pytest.mark.parametrize("case", LAYERS, ids=[c[0] for c in LAYERS])
def test_layer_interpreter_matches_torch(case):
    module, args, family = _layer_case(case)
    check(module, args, family)


SIM_LAYERS = [c for c in LAYERS if c[4]]

NOT_NATIVE = {
    # shrinks W (4x5 -> 7x3): the two matmuls by constant matrices, run as 1x1 convs
    "bilinear_size": {"upsample_bilinear": -1, "conv": 2},
    # F.interpolate(scale_factor=1.5) (not a module): 5 -> 7 columns weighted by torch's 1/1.5,
    # not by 5/7 as the native op would: the two matmuls again
    "bilinear_x1_5": {"conv": 2},
}
"""Layers the sim runs in their core-op form, not as the native op (docs/torch.md, limits):
the change from one native statement per layer."""


@pytest.mark.parametrize("case", SIM_LAYERS, ids=[c[0] for c in SIM_LAYERS])
def test_layer_sim_matches_torch(case):
    module, args, family = _layer_case(case)
    native = torch_native_counts(module)
    for op, delta in NOT_NATIVE.get(case[0], {}).items():
        native[op] += delta
    check(module, args, family, ("sim",), native=native)


@pytest.mark.parametrize("name", ["convT_crop", "convT_crop_rect"])
def test_transposed_conv_padded_beyond_its_kernel_is_one_conv_transpose_and_a_crop(name, tmp_path):
    """Padding beyond dilation * (kernel - 1): the import crops the zero-inserted input; the
    compiled MIL is the strided conv_transpose cropping what the limits allow, then one slice
    (no zero insertion left)."""
    from anec.compiler import compile_module

    module, _, _ = _layer_case(next(c for c in LAYERS if c[0] == name))
    im = _import(module.layer, next(c for c in LAYERS if c[0] == name)[2])
    art = compile_module(im.module, weights=im.weights, host_casts=True).artifacts[im.name]
    ops = [op for op in re.findall(r"^\s*tensor<[^>]*> \w+ = (\w+)\(", art.mil_text, re.M) if op != "const"]
    assert ops == ["cast", "conv_transpose", "slice_by_index", "reshape", "add", "cast"], ops
    sel = next(n for n in art.program_module().funcs[im.name].nodes if n.op == "conv_transpose")
    assert sel.attrs["strides"] == list(module.layer.stride)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 4), kw=st.integers(1, 4), s=st.integers(1, 3), p=st.integers(0, 2),
       d=st.integers(1, 2), groups=st.sampled_from([1, 2, 4]), mult=st.integers(1, 2),
       transposed=st.booleans(), bias=st.booleans(), size=st.integers(5, 9))
def test_conv_geometries_match_torch(k, kw, s, p, d, groups, mult, transposed, bias, size):
    cin, cout = 4, 4 * mult
    if transposed:
        out_pad = min(s, d) - 1
        layer = nn.ConvTranspose2d(cin, cout, (k, kw), s, p, out_pad, groups, bias, d)
    else:
        layer = nn.Conv2d(cin, cout, (k, kw), s, p, d, groups, bias)
        if size + 2 * p < d * (max(k, kw) - 1) + 1:
            return  # no output
    if transposed and (size - 1) * s - 2 * p + d * (max(k, kw) - 1) + out_pad + 1 < 1:
        return
    torch.manual_seed(k * 100 + kw * 10 + s)
    check(Layer(layer), (_x(13, 1, cin, size, size + 1),), "conv-geometry", ("fp32",))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 4), s=st.integers(1, 3), p=st.integers(0, 2), d=st.integers(1, 2),
       ceil=st.booleans(), kind=st.sampled_from(["max", "avg", "avg_exclude_pad"]), size=st.integers(5, 9))
def test_pool_geometries_match_torch(k, s, p, d, ceil, kind, size):
    if 2 * p > k or size + 2 * p < d * (k - 1) + 1:
        return  # torch rejects it
    if kind == "max":
        layer = nn.MaxPool2d(k, s, p, d, ceil_mode=ceil)
    else:
        layer = nn.AvgPool2d(k, s, p, ceil_mode=ceil, count_include_pad=kind == "avg")
    check(Layer(layer), (_x(14, 1, 3, size, size + 2),), "pool-geometry", ("fp32",))


# ---------------------------------------------------------------------------
# the canonical forms, statement by statement


class Form:
    """The expected statements of a form: ``(op, operands, attrs)`` with operands as
    indices of earlier statements (``X``: the form's input)."""

    X = "x"

    def __init__(self):
        self.stmts = []

    def __call__(self, op, *operands, **attrs):
        self.stmts.append((op, tuple(operands), attrs))
        return len(self.stmts) - 1

    def fold(self, terms):
        acc = terms[0]
        for t in terms[1:]:
            acc = self("add", acc, t)
        return acc


def actual_form(im, lead=1, trail=1):
    """The func's statements between the input cast (plus ``lead - 1`` input reshapes) and
    the output cast (plus ``trail - 1`` output reshapes), in the Form encoding; consts keep
    ``type`` (the declared shape) among their attrs."""
    nodes = list(im.func.nodes)
    first = nodes[lead - 1].results[0]
    body = nodes[lead:len(nodes) - trail]
    index = {id(first): Form.X}
    out = []
    for i, n in enumerate(body):
        ops = tuple(index[id(o)] for o in n.operands)
        attrs = dict(n.attrs)
        if n.op == "const":
            attrs["type"] = list(n.results[0].type.shape)
        out.append((n.op, ops, attrs))
        index[id(n.results[0])] = i
    return out


def _expect_slice(f, src, begin, end, stride=None):
    attrs = {"begin": list(begin), "end": list(end)}
    if stride is not None:
        attrs["stride"] = list(stride)
    return f("slice", src, **attrs)


def _window(f, xp, shape, i, j, s, d, ho, wo):
    n, c, hp, wp = shape
    begin = [0, 0, i * d[0], j * d[1]]
    end = [n, c, i * d[0] + (ho - 1) * s[0] + 1, j * d[1] + (wo - 1) * s[1] + 1]
    if begin == [0, 0, 0, 0] and end == [n, c, hp, wp] and list(s) == [1, 1]:
        return xp
    return _expect_slice(f, xp, begin, end, [1, 1, s[0], s[1]])


def expect_conv(x, cout, k, s=(1, 1), pads=(0, 0, 0, 0), d=(1, 1), key="layer", bias=True, groups=1,
                depthwise=False):
    """Forms 1 and 2 (spec text), for input shape ``x`` and pads (top, bottom, left, right)."""
    n, cin, h, w = x
    f = Form()
    pt, pb, pl, pr = pads
    xp = f("pad", Form.X, before=[0, 0, pt, pl], after=[0, 0, pb, pr], value=0.0) if any(pads) else Form.X
    hp, wp = h + pt + pb, w + pl + pr
    ho = (hp - d[0] * (k[0] - 1) - 1) // s[0] + 1
    wo = (wp - d[1] * (k[1] - 1) - 1) // s[1] + 1
    wt = f("const", weight=f"{key}.weight", type=[cout, cin // groups, k[0], k[1]])

    def form1(xin, wv, ci, co):
        terms = []
        for i in range(k[0]):
            for j in range(k[1]):
                xs = _window(f, xin, (n, ci, hp, wp), i, j, s, d, ho, wo)
                ws = _expect_slice(f, wv, [0, 0, i, j], [co, ci, i + 1, j + 1])
                terms.append(f("conv1x1", xs, ws))
        return f.fold(terms)

    if depthwise:
        terms = []
        for i in range(k[0]):
            for j in range(k[1]):
                xs = _window(f, xp, (n, cin, hp, wp), i, j, s, d, ho, wo)
                ws = _expect_slice(f, wt, [0, 0, i, j], [cin, 1, i + 1, j + 1])
                wr = f("reshape", ws, shape=[1, cin, 1, 1])
                terms.append(f("mul", xs, wr))
        y = f.fold(terms)
    elif groups == 1:
        y = form1(xp, wt, cin, cout)
    else:
        cig, cog, parts = cin // groups, cout // groups, []
        for g in range(groups):
            xk = _expect_slice(f, xp, [0, g * cig, 0, 0], [n, (g + 1) * cig, hp, wp])
            wk = _expect_slice(f, wt, [g * cog, 0, 0, 0], [(g + 1) * cog, cig, k[0], k[1]])
            parts.append(form1(xk, wk, cig, cog))
        y = f("concat", *parts, axis=1)
    if bias:
        b = f("const", weight=f"{key}.bias", type=[cout])
        b4 = f("reshape", b, shape=[1, cout, 1, 1])
        f("add", y, b4)
    return f.stmts


def _import(layer, shape):
    torch.manual_seed(21)
    return anec.import_torch(Layer(layer).eval(), (_x(22, *shape),))


FORMS = [
    ("conv3x3_p1", lambda: nn.Conv2d(3, 4, 3, padding=1), (1, 3, 6, 6),
     lambda: expect_conv((1, 3, 6, 6), 4, (3, 3), pads=(1, 1, 1, 1), key="layer")),
    ("conv3x2_s2_d2_batch2", lambda: nn.Conv2d(3, 4, (3, 2), 2, (2, 1), (2, 1), bias=False), (2, 3, 9, 7),
     lambda: expect_conv((2, 3, 9, 7), 4, (3, 2), (2, 2), (2, 2, 1, 1), (2, 1), bias=False)),
    ("conv1x1_s2", lambda: nn.Conv2d(3, 4, 1, 2), (1, 3, 6, 6),
     lambda: expect_conv((1, 3, 6, 6), 4, (1, 1), (2, 2))),
    ("conv1x1_p1", lambda: nn.Conv2d(3, 4, 1, padding=1), (1, 3, 4, 4),
     lambda: expect_conv((1, 3, 4, 4), 4, (1, 1), pads=(1, 1, 1, 1))),
    ("conv_same_even", lambda: nn.Conv2d(3, 4, 4, padding="same"), (1, 3, 6, 6),
     lambda: expect_conv((1, 3, 6, 6), 4, (4, 4), pads=(1, 2, 1, 2))),
    ("depthwise", lambda: nn.Conv2d(4, 4, 3, 2, 1, groups=4), (1, 4, 7, 7),
     lambda: expect_conv((1, 4, 7, 7), 4, (3, 3), (2, 2), (1, 1, 1, 1), depthwise=True, groups=4)),
    ("depthwise_multiplier", lambda: nn.Conv2d(2, 4, 3, padding=1, groups=2), (1, 2, 5, 5),
     lambda: expect_conv((1, 2, 5, 5), 4, (3, 3), pads=(1, 1, 1, 1), groups=2)),
    ("groups2", lambda: nn.Conv2d(4, 6, (1, 2), groups=2, bias=False), (1, 4, 3, 3),
     lambda: expect_conv((1, 4, 3, 3), 6, (1, 2), groups=2, bias=False)),
]


@pytest.mark.parametrize("case", FORMS, ids=[c[0] for c in FORMS])
def test_conv_forms_are_canonical(case):
    _, make, shape, expected = case
    assert actual_form(_import(make(), shape)) == expected()


def test_conv_1x1_stays_one_conv1x1():
    im = _import(nn.Conv2d(3, 4, 1), (1, 3, 6, 6))
    assert [n.op for n in im.func.nodes] == ["cast", "const", "const", "reshape", "conv1x1", "reshape", "cast"]


def test_conv1d_is_the_2d_form_on_a_unit_height():
    im = _import(nn.Conv1d(3, 4, 3, 2, 1), (1, 3, 10))
    nodes = list(im.func.nodes)
    assert nodes[1].op == "reshape" and list(nodes[1].attrs["shape"]) == [1, 3, 1, 10]
    assert nodes[-2].op == "reshape" and list(nodes[-2].attrs["shape"]) == [1, 4, 5]
    assert actual_form(im, lead=2, trail=2) == expect_conv((1, 3, 1, 10), 4, (1, 3), (1, 2), (0, 0, 1, 1))


def test_conv_transpose_form_is_canonical():
    """Form 3: zero insertion (reshape, pad, reshape, slice), then form 1 with the flipped,
    in/out-swapped kernel slices."""
    n, cin, h, w, cout, k, s, p, op = 1, 2, 3, 4, 3, 3, 2, 1, 1
    im = _import(nn.ConvTranspose2d(cin, cout, k, s, p, output_padding=op), (n, cin, h, w))
    f = Form()
    x6 = f("reshape", Form.X, shape=[n, cin, h, 1, w, 1])
    z6 = f("pad", x6, before=[0] * 6, after=[0, 0, 0, s - 1, 0, s - 1], value=0.0)
    z4 = f("reshape", z6, shape=[n, cin, h * s, w * s])
    zu = _expect_slice(f, z4, [0, 0, 0, 0], [n, cin, (h - 1) * s + 1, (w - 1) * s + 1])
    before, after = (k - 1) - p, (k - 1) - p + op
    xp = f("pad", zu, before=[0, 0, before, before], after=[0, 0, after, after], value=0.0)
    hp, wp = (h - 1) * s + 1 + before + after, (w - 1) * s + 1 + before + after
    ho, wo = hp - k + 1, wp - k + 1
    wt = f("const", weight="layer.weight", type=[cin, cout, k, k])
    terms = []
    for i in range(k):
        for j in range(k):
            xs = _window(f, xp, (n, cin, hp, wp), i, j, (1, 1), (1, 1), ho, wo)
            ws = _expect_slice(f, wt, [0, 0, k - 1 - i, k - 1 - j], [cin, cout, k - i, k - j])
            wtr = f("transpose", ws, perm=[1, 0, 2, 3])
            terms.append(f("conv1x1", xs, wtr))
    y = f.fold(terms)
    b = f("const", weight="layer.bias", type=[cout])
    f("add", y, f("reshape", b, shape=[1, cout, 1, 1]))
    assert actual_form(im) == f.stmts
    assert (ho, wo) == tuple(im.func.outputs[0].type.shape[2:]) == ((h - 1) * s - 2 * p + k + op,
                                                                    (w - 1) * s - 2 * p + k + op)


def _expect_pool(x, k, s, pads, ho, wo, kind, divisor=None):
    n, c, h, w = x
    f = Form()
    pt, pb, pl, pr = pads
    value = float("-inf") if kind == "max" else 0.0
    xp = f("pad", Form.X, before=[0, 0, pt, pl], after=[0, 0, pb, pr], value=value) if any(pads) else Form.X
    shape = (n, c, h + pt + pb, w + pl + pr)
    slices = []
    for i in range(k):
        for j in range(k):
            xs = _window(f, xp, shape, i, j, (s, s), (1, 1), ho, wo)
            slices.append(f("reshape", xs, shape=[n, c, 1, ho, wo]) if kind == "max" else xs)
    if kind == "max":
        f("reduce_max", f("concat", *slices, axis=2), axes=[2], keep_dims=False)
    else:
        f("mul", f.fold(slices), f("const", **divisor))
    return f.stmts


def test_max_pool_form_is_canonical_with_ceil_mode():
    """Form 4: -inf padding, extended at the end so ceil_mode's last window fits."""
    im = _import(nn.MaxPool2d(3, 2, 1, ceil_mode=True), (1, 2, 6, 6))
    # torch: Ho = ceil((6 + 2 - 3) / 2) + 1 = 4; the last window starts at 6 - 1 = 5 < 6 + 1
    assert actual_form(im) == _expect_pool((1, 2, 6, 6), 3, 2, (1, 2, 1, 2), 4, 4, "max")


def test_avg_pool_forms_are_canonical():
    """Form 5: a scalar 1/(k*k) where every window is whole, else a [1, 1, Ho, Wo] map of
    1/count stored as a weight of the import."""
    im = _import(nn.AvgPool2d(2), (1, 2, 6, 6))
    assert actual_form(im) == _expect_pool((1, 2, 6, 6), 2, 2, (0, 0, 0, 0), 3, 3, "avg",
                                           {"value": 0.25, "type": []})
    im = _import(nn.AvgPool2d(3, 2, 1, count_include_pad=False), (1, 2, 6, 6))
    assert actual_form(im) == _expect_pool((1, 2, 6, 6), 3, 2, (1, 1, 1, 1), 3, 3, "avg",
                                           {"weight": "layer.avg_pool_divisor", "type": [1, 1, 3, 3]})
    counts = np.array([2, 3, 3])  # rows (and columns) 0-1, 1-3, 3-5 of the input
    np.testing.assert_allclose(im.weights["layer.avg_pool_divisor"][0, 0], 1 / np.outer(counts, counts))


def test_upsample_forms_are_canonical():
    im = _import(nn.Upsample(scale_factor=(2, 3)), (1, 2, 3, 4))
    f = Form()
    x6 = f("reshape", Form.X, shape=[1, 2, 3, 1, 4, 1])
    m6 = f("mul", x6, f("const", value=1.0, type=[1, 1, 1, 2, 1, 3]))
    f("reshape", m6, shape=[1, 2, 6, 12])
    assert actual_form(im) == f.stmts

    im = _import(nn.Upsample(size=(5, 7), mode="bilinear", align_corners=True), (1, 2, 3, 4))
    f = Form()
    ah = f("const", weight="layer.interp_h", type=[5, 3])
    aw = f("const", weight="layer.interp_w", type=[4, 7])
    f("matmul", f("matmul", ah, Form.X), aw)
    assert actual_form(im) == f.stmts
    ah, aw = im.weights["layer.interp_h"], im.weights["layer.interp_w"]
    np.testing.assert_allclose(ah.sum(1), 1.0, atol=1e-6)
    np.testing.assert_allclose(aw.sum(0), 1.0, atol=1e-6)
    # align_corners: the corners map onto the corners
    assert ah[0, 0] == ah[-1, -1] == aw[0, 0] == aw[-1, -1] == 1.0


def test_reflect_padding_is_slices_and_concats():
    im = _import(nn.ReflectionPad2d((2, 1, 1, 0)), (1, 2, 4, 5))
    f = Form()
    top = _expect_slice(f, Form.X, [0, 0, 1, 0], [1, 2, 2, 5])
    xh = f("concat", top, Form.X, axis=2)  # H first: one mirrored row on top
    left = [_expect_slice(f, xh, [0, 0, 0, c], [1, 2, 5, c + 1]) for c in (2, 1)]
    right = _expect_slice(f, xh, [0, 0, 0, 3], [1, 2, 5, 4])
    f("concat", *left, xh, right, axis=3)
    assert actual_form(im) == f.stmts


# ---------------------------------------------------------------------------
# batch norm folding


def test_batch_norm_folds_into_the_conv_weights():
    torch.manual_seed(30)
    m = _bn(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)))
    x = _x(31, 1, 3, 6, 6)
    im = anec.import_torch(Layer(m), (x,))
    assert actual_form(im) == expect_conv((1, 3, 6, 6), 4, (3, 3), pads=(1, 1, 1, 1), key="layer.0")
    conv, bn = m[0], m[1]
    scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().double()
    want_w = conv.weight.detach().double() * scale[:, None, None, None]
    want_b = (conv.bias.detach().double() - bn.running_mean.double()) * scale + bn.bias.detach().double()
    np.testing.assert_allclose(im.weights["layer.0.weight"], want_w.numpy(), rtol=1e-6)
    np.testing.assert_allclose(im.weights["layer.0.bias"], want_b.numpy(), rtol=1e-6, atol=1e-7)


def test_batch_norm_stays_mul_add_where_it_cannot_fold():
    class TwoUsers(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y

    class SharedWeight(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(3)

        def forward(self, x):
            return self.bn(self.conv(self.conv(x)))

    for module in (_bn(TwoUsers()), _bn(SharedWeight())):
        im = check(module, (_x(32, 1, 3, 6, 6),), "batch_norm")
        muls = [n for n in im.func.nodes if n.op == "mul"]
        c = module.bn.num_features
        assert len(muls) == 1 and muls[0].operands[1].type.shape == (1, c, 1, 1)
        assert all(np.array_equal(im.weights[k], module.state_dict()[k].numpy())
                   for k in im.weights if k in module.state_dict())


# ---------------------------------------------------------------------------
# derived weights are saved with the import


def test_saved_import_with_derived_weights_reloads_and_interprets_identically(tmp_path):
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(4)
            self.pool = nn.MaxPool2d(3, 2, 1)
            self.avg = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
            self.up = nn.Upsample(scale_factor=2, mode="bilinear")

        def forward(self, x):
            y = self.pool(self.bn(self.conv(x)))
            return self.up(self.avg(y))

    torch.manual_seed(40)
    m = _bn(Mixed())
    x = _x(41, 1, 3, 8, 8)
    im = check(m, (x,), "mixed")
    for key in ("conv.weight", "conv.bias", "avg.avg_pool_divisor", "up.interp_h", "up.interp_w"):
        assert key in im.weights, sorted(im.weights)
    out = im.save(tmp_path / "mixed")
    text = (out / "model.ir").read_text()
    assert "value=-inf" in text and format_text(text, "model.ir") == text
    back = ImportedModel.load(out)
    assert back.module == im.module and set(back.weights) == set(im.weights)
    for mode in ("fp32", "fp16"):
        a = im.runner(backend="interp", mode=mode)(x)
        b = back.runner(backend="interp", mode=mode)(x)
        for got, want in zip(b, a):
            assert np.array_equal(got, want), mode  # bit-for-bit: the file holds what the IR read
