"""What anec cannot import is a located error, never a traceback.

Each model below has one line marked ``# <- ERR``: the error must be an
:class:`~anec.diagnostics.AnecError` naming the ATen op, pointing at that
Python line (``file:line`` with the line and a caret underneath, from the
export's stack trace) and saying what to do. Problems with the model object
or the example inputs are AnecErrors too.
"""

from __future__ import annotations

import inspect
import json
import os
import zipfile

import pytest
from click.testing import CliRunner

import anec
from anec.cli import main
from anec.diagnostics import AnecError
from anec.frontends import TorchImportError, UnsupportedOpError
from anec.frontends.torch.export import load_pt2

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn


def err_line(cls) -> int:
    lines, start = inspect.getsourcelines(cls)
    for i, text in enumerate(lines):
        if "# <- ERR" in text:
            return start + i
    raise AssertionError(f"{cls.__name__} has no # <- ERR marker")


# ---- unsupported ops and uses -----------------------------------------------------


class Log(nn.Module):
    def forward(self, x):
        return torch.log(x.abs() + 1)  # <- ERR


class Erf(nn.Module):
    def forward(self, x):
        return torch.erf(x) * 2  # <- ERR


class Cumsum(nn.Module):
    def forward(self, x):
        return x.cumsum(-1)  # <- ERR


class Sort(nn.Module):
    def forward(self, x):
        return torch.sort(x, -1).values  # <- ERR


class Sin(nn.Module):
    def forward(self, x):
        return torch.sin(x) + x  # <- ERR


class Remainder(nn.Module):
    def forward(self, x):
        return x % 2.0  # <- ERR


class FloorDiv(nn.Module):
    def forward(self, x):
        return x // 2  # <- ERR


class Flip(nn.Module):
    def forward(self, x):
        return x.flip(-1)  # <- ERR


class Conv3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x)  # <- ERR


class ConvOfActivations(nn.Module):
    def forward(self, x):
        return F.conv2d(x, x[:, :, :3, :3])  # <- ERR


class NearestFractional(nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=1.5, mode="nearest")  # <- ERR


class AdaptiveUneven(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (4, 4))  # <- ERR


class PoolIndices(nn.Module):
    def forward(self, x):
        y, i = F.max_pool2d(x, 2, return_indices=True)  # <- ERR
        return y + i.float()


class FloatCompare(nn.Module):
    def forward(self, x):
        return (x > 0).float() * x  # <- ERR


class FloatToInt(nn.Module):
    def forward(self, x):
        return x.long() + 1  # <- ERR


class Gather(nn.Module):
    def forward(self, x, idx):
        return torch.gather(x, 1, idx)  # <- ERR


class IndexComputed(nn.Module):
    def forward(self, x, idx):
        return x[:, idx] * 2  # <- ERR


class HostInside(nn.Module):
    def forward(self, x):
        i = x.argmax(-1)
        return i.float() * 2  # <- ERR


class EmbedComputed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(8, 4)

    def forward(self, x):
        return self.emb(x.argmax(-1))  # <- ERR


class Random(nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)  # <- ERR


class TrainingDropout(nn.Module):
    def forward(self, x):
        return F.dropout(x, 0.5, training=True)  # <- ERR


class BigIntConst(nn.Module):
    def forward(self, ids):
        return (ids == 5000).float()  # <- ERR


class HugeConstant(nn.Module):
    def forward(self, x):
        return x * 1.0e6  # <- ERR


class NegativeBase(nn.Module):
    def forward(self, x):
        return (-2.0) ** x  # <- ERR


class Mutation(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count += 1  # <- ERR
        return x * 2


def _x(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


LOCATED = [
    (Log, (_x(2, 8),), "aten.log.default", "host"),
    (Erf, (_x(2, 8),), "aten.erf.default", "gelu"),
    (Cumsum, (_x(2, 8),), "aten.cumsum.default", "host"),
    (Sort, (_x(2, 8),), "aten.sort", "host"),
    (Sin, (_x(2, 8),), "aten.sin.default", "host"),
    (Remainder, (_x(2, 8),), "aten.remainder", "host"),
    (FloorDiv, (_x(2, 8),), "aten.div.Tensor_mode", "host"),
    (Flip, (_x(2, 8),), "aten.flip.default", "host"),
    (Conv3d, (_x(1, 2, 4, 6, 6),), "aten.convolution.default", "2-d"),
    (ConvOfActivations, (_x(1, 3, 6, 6),), "aten.convolution.default", "parameter"),
    (NearestFractional, (_x(1, 4, 6, 6),), "aten.upsample_nearest2d", "integer"),
    (AdaptiveUneven, (_x(1, 4, 6, 6),), "aten._adaptive_avg_pool2d", "divide"),
    (PoolIndices, (_x(1, 4, 6, 6),), "aten.max_pool2d_with_indices", "return_indices"),
    (FloatCompare, (_x(2, 8),), "aten.gt.Scalar", "integer/bool"),
    (FloatToInt, (_x(2, 8),), "aten._to_copy.default", "host"),
    (Gather, (_x(2, 8), torch.zeros(2, 3, dtype=torch.long)), "aten.gather.default", "gather"),
    (IndexComputed, (_x(2, 8), torch.tensor([1, 3])), "aten.index.Tensor", "gather"),
    (HostInside, (_x(2, 8),), "aten.mul.Tensor", "argmax"),
    (EmbedComputed, (_x(2, 8),), "aten.embedding.default", "host"),
    (Random, (_x(2, 8),), "aten.rand_like.default", "deterministic"),
    (TrainingDropout, (_x(2, 8),), "dropout", "eval"),
    (BigIntConst, (torch.zeros(1, 8, dtype=torch.long),), "aten.eq.Scalar", "host"),
    (HugeConstant, (_x(2, 8),), "aten.mul.Tensor", "fp16"),
    (NegativeBase, (_x(2, 8),), "aten.pow.Scalar", "positive"),
    (Mutation, (_x(2, 8),), "count", "state"),
]


@pytest.mark.parametrize("cls,args,op,hint", LOCATED, ids=[c[0].__name__ for c in LOCATED])
def test_located_error(cls, args, op, hint):
    with pytest.raises(AnecError) as info:
        anec.import_torch(cls().eval(), args)
    e = info.value
    assert isinstance(e, TorchImportError), type(e)
    assert op in e.message, e.message
    assert e.hint and hint.lower() in (e.hint + e.message).lower(), (e.message, e.hint)
    assert e.span is not None, e.render()
    assert e.span.source.name == __file__
    assert e.span.line == err_line(cls), e.render()
    text = e.render()
    assert text.startswith(f"{__file__}:{err_line(cls)}:")
    assert "^" in text.splitlines()[2] and "# <- ERR" in text.splitlines()[1]


def test_unsupported_op_names_the_module_path():
    class Inner(nn.Module):
        def forward(self, x):
            return torch.log(x)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Linear(8, 8), Inner())

        def forward(self, x):
            return self.block(x)

    with pytest.raises(UnsupportedOpError) as info:
        anec.import_torch(Outer(), (_x(2, 8),))
    assert any("block.1" in n and "Inner" in n for n in info.value.notes), info.value.notes


# ---- bad models and inputs ------------------------------------------------------


def test_not_a_module():
    with pytest.raises(TorchImportError, match="nn.Module"):
        anec.import_torch(lambda x: x * 2, (_x(2),))


def test_example_inputs_must_be_a_tuple():
    with pytest.raises(TorchImportError, match="tuple"):
        anec.import_torch(Log(), {"x": _x(2)})


def test_export_failure_is_reported():
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(TorchImportError, match="torch.export could not capture"):
        anec.import_torch(DataDependent(), (_x(4),))


def test_complex_input():
    class C(nn.Module):
        def forward(self, x):
            return x * 2

    with pytest.raises(TorchImportError, match="complex"):
        anec.import_torch(C(), (torch.randn(4, dtype=torch.cfloat),))


def test_dynamic_shapes():
    class M(nn.Module):
        def forward(self, x):
            return x * 2

    batch = torch.export.Dim("batch", min=2, max=8)
    ep = torch.export.export(M(), (_x(4, 8),), dynamic_shapes={"x": {0: batch}})
    with pytest.raises(TorchImportError, match="dynamic dim"):
        anec.import_torch(ep)


def test_nothing_on_the_device():
    class Const(nn.Module):
        def forward(self, x):
            return torch.ones(3)

    with pytest.raises(TorchImportError, match="nothing on the device"):
        anec.import_torch(Const(), (_x(2),))


# ---- the CLI and saved programs -----------------------------------------------------


def _save(module, args, path):
    ep = torch.export.export(module, args)
    torch.export.save(ep, str(path))
    return path


def test_cli_import_of_an_unsupported_op_is_a_rendered_error(tmp_path):
    pt2 = _save(Log(), (_x(2, 8),), tmp_path / "log.pt2")
    res = CliRunner().invoke(main, ["import", str(pt2), "-o", str(tmp_path / "out")])
    assert res.exit_code == 1, res.output
    assert "aten.log.default" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def test_cli_import_needs_file_and_output(tmp_path):
    res = CliRunner().invoke(main, ["import"])
    assert res.exit_code == 2 and "FILE.pt2" in res.output


@pytest.mark.parametrize("content", [b"not a zip", b""])
def test_pt2_that_is_not_an_archive(tmp_path, content):
    p = tmp_path / "bad.pt2"
    p.write_bytes(content)
    with pytest.raises(TorchImportError, match="not a torch.export archive"):
        anec.import_torch(load_pt2(p))


def test_missing_pt2(tmp_path):
    res = CliRunner().invoke(main, ["import", str(tmp_path / "none.pt2"), "-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "no such file" in res.output


def _rewrite_archive(src, dst, edit):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = edit(item.filename, zin.read(item.filename))
            if data is not None:
                zout.writestr(item, data)


def test_pt2_with_pickled_weights_is_refused(tmp_path):
    pt2 = _save(nn.Linear(4, 3), (_x(2, 4),), tmp_path / "lin.pt2")

    def edit(name, data):
        if name.endswith("model_weights_config.json"):
            cfg = json.loads(data)
            for meta in cfg["config"].values():
                meta["use_pickle"] = True
            return json.dumps(cfg).encode()
        return data

    bad = tmp_path / "pickled.pt2"
    _rewrite_archive(pt2, bad, edit)
    with pytest.raises(TorchImportError, match="pickled"):
        load_pt2(bad)


def test_pt2_with_pickled_sample_inputs_is_refused(tmp_path):
    import io
    import pickle

    pt2 = _save(nn.Linear(4, 3), (_x(2, 4),), tmp_path / "lin.pt2")

    class Payload:
        def __reduce__(self):
            return (os.getcwd, ())

    def edit(name, data):
        if "sample_inputs" in name:
            buf = io.BytesIO()
            torch.save({"x": Payload()}, buf, pickle_protocol=pickle.DEFAULT_PROTOCOL)
            return buf.getvalue()
        return data

    bad = tmp_path / "evil.pt2"
    _rewrite_archive(pt2, bad, edit)
    with pytest.raises(TorchImportError, match="not plain tensors"):
        load_pt2(bad)


class TooManyWeights(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(9))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))  # <- ERR
        return x


def test_compiler_errors_point_at_the_model_source():
    """The IR nodes carry the Python lines: a constraint error of the compiler (here a
    target whose programs hold no BLOBFILE tensor, so the first linear layer fits no
    program; nine layers on m4 are cut into a pipeline instead) points into the model's code."""
    from anec.compiler import compile_module
    from anec.diagnostics import ConstraintError
    from anec.targets import get_target

    im = anec.import_torch(TooManyWeights().eval(), (_x(1, 4, 16),))
    assert len(compile_module(im.module, weights=im.weights).artifacts["main"].stages) == 2
    with pytest.raises(ConstraintError) as info:
        compile_module(im.module, weights=im.weights, target=get_target("m4").replace(max_blob_tensors=0))
    e = info.value
    assert e.constraint == "ANE-BLOB-BUDGET"
    assert e.span is not None and e.span.source.name == __file__ and e.span.line == err_line(TooManyWeights)
