"""``anec export-coreml``: a compiled artifact as a Core ML ML Program (``.mlpackage``).

The public Core ML API is the supported way to run the very program anec
compiled on a Mac (and Xcode's Core ML performance report the only public
view of per-op ANE placement). The package is built op for op from the
artifact -- ``program.ir`` (the compiled program in anec IR), the weights in
``weights/*.bin`` and the manifest -- with coremltools' MIL builder, so that
each ``model.mil`` statement becomes the same Core ML op with the same name,
arguments and constant values::

    anec compile model.ir -o build/
    anec export-coreml build/main -o model.mlpackage

coremltools' optimization passes are off (``PassPipeline.EMPTY``) and the
precision is left as the program says (``FLOAT32`` keeps coremltools from
inserting casts: the program already computes in fp16). The package is
written to a temporary directory, verified, then renamed into place.

The package takes and returns the model's logical shapes (the manifest's
``logical_inputs`` / ``logical_outputs``), not the device's rank-4 ones: an
input ``x`` is read by ``x_device = reshape(x)``, which the program's uses of
``x`` read instead, and an output ``y`` is the program's value (renamed
``y_device``) reshaped, or the ``concat`` of its pieces (:class:`~anec.frontends.coreml_program.IOPlan`).

Verification (:func:`~anec.frontends.coreml_verify.verify_package`, run by every export) reads the package
back with coremltools (spec + weights) and checks, on Linux:

* the function's operations equal, one to one, the I/O adapters and
  ``model.mil``'s statements after the rewrites coremltools' backend makes
  even under ``PassPipeline.EMPTY`` (:data:`~anec.frontends.coreml_fusions.FUSIONS`, e.g.
  ``mul(x, sigmoid(x))`` -> ``silu(x)``; :data:`~anec.frontends.coreml_fusions.BACKEND_PASSES`): op type, result
  names, argument names, and every constant's value (BLOBFILE constants
  compared with the artifact's ``weights/*.bin`` payloads). Any other
  difference is refused, first by op kind ("1 more 'silu'") with a hint;
* the inputs and outputs have the model's names, dtypes and logical shapes.

A pipeline artifact (a func legalize cut into stages, ``anec-pipeline/1``)
becomes ONE package whose ``main`` computes the whole func: Core ML does its
own partitioning for the ANE, so a Core ML user wants one function, not one
package per stage. The stages' ops follow each other in stage order, each
stage input bound to the value the top manifest wires it to. Names:

* a value ``v12`` (or weight ``w0``, parameter ``v12_pad``) of stage 3's
  model.mil is ``s03_v12`` (``s03_w0``, ``s03_v12_pad``);
* a stage input is not an op: its uses read the source, a func input by its
  name or an earlier stage's output by that output's package name;
* a stage output that is a func output is named as the func output
  (``logits``), so the package's I/O are the top manifest's (in their
  logical shapes, as above).

A func input or output named like a stage value (``s00_x``) is refused. Before
building, the wiring is checked against the stages' manifests (names, dtypes,
device shapes) and proved against the whole func's ``program.ir``: the stages'
``program.ir`` composed by the wiring must compute, value for value, what the
func computes (:func:`~anec.frontends.coreml_wiring.check_composition`). Verification then compares the package with
every stage's ``model.mil`` statement by statement under the renaming, every
BLOBFILE weight with ``stages/sNN/weights/*.bin``, and its I/O with the top
manifest.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, TypeVar

from anec.diagnostics import AnecError
from anec.frontends import CoreMLExportError, require
from anec.frontends.coreml_program import build_pipeline, build_program
from anec.frontends.coreml_verify import ExportReport, verify_pipeline, verify_program
from anec.frontends.coreml_wiring import check_composition, pipeline_wiring
from anec.fsutil import discard, move_into_place
from anec.mil.multi_program import PipelineArtifact

T = TypeVar("T")

# ---------------------------------------------------------------------------
# locating the artifact


def find_artifact(directory: str | os.PathLike, func: str | None = None) -> Any:
    """The artifact in ``directory`` (a func directory, or a compile output directory
    holding one func, or ``func``): an :class:`~anec.mil.artifact.Artifact` or a
    :class:`~anec.mil.multi_program.PipelineArtifact`."""
    from anec.mil.artifact import MANIFEST_FILE
    from anec.mil.multi_program import load_any

    d = Path(directory)
    if not d.is_dir():
        raise CoreMLExportError(f"'{d}' is not a directory",
                                hint="give a compiled artifact: anec compile model.ir -o build/")
    if (d / MANIFEST_FILE).is_file():
        if func is not None and d.name != func:
            art = load_any(d)
            if art.func != func:
                raise CoreMLExportError(f"'{d}' holds func '{art.func}', not '{func}'")
            return art
        return load_any(d)
    funcs = sorted(p.name for p in d.iterdir() if (p / MANIFEST_FILE).is_file())
    if not funcs:
        raise CoreMLExportError(f"'{d}' holds no compiled program ({MANIFEST_FILE} is missing)",
                                hint="compile first: anec compile model.ir -o build/")
    if func is None:
        if len(funcs) > 1:
            raise CoreMLExportError(f"'{d}' holds {len(funcs)} programs; choose one",
                                    hint=f"pass --func with one of: {', '.join(funcs)}")
        func = funcs[0]
    if func not in funcs:
        raise CoreMLExportError(f"no program '{func}' in '{d}'", hint=f"programs: {', '.join(funcs)}")
    return load_any(d / func)



def export_coreml(directory: str | os.PathLike, output: str | os.PathLike, *,
                  func: str | None = None) -> ExportReport:
    """Write the artifact in ``directory`` as the Core ML package ``output`` (verified).

    A pipeline artifact becomes one package whose ``main`` function runs every
    stage in order (see the module docstring)."""
    ct = require("coremltools", "coreml", "anec export-coreml")
    art = find_artifact(directory, func)
    out = Path(output)
    if out.suffix != ".mlpackage":
        raise CoreMLExportError(f"output '{out}' must end in .mlpackage")
    if out.exists() and not (out.is_dir() and (out / "Manifest.json").is_file()):
        raise CoreMLExportError(f"refusing to replace '{out}': it is not a Core ML package",
                                hint="choose a new path ending in .mlpackage")
    if isinstance(art, PipelineArtifact):
        wiring = pipeline_wiring(art)
        proved = check_composition(art, wiring)
        build = lambda: build_pipeline(art, wiring)  # noqa: E731
        verify = lambda path: verify_pipeline(path, art, wiring, proved)  # noqa: E731
    else:
        build = lambda: build_program(art)  # noqa: E731
        verify = lambda path: verify_program(path, art)  # noqa: E731
    try:
        prog = build()
    except AnecError:
        raise
    except Exception as e:
        raise CoreMLExportError(f"coremltools could not build the program: {type(e).__name__}: {e}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        model = quiet_stderr(lambda: ct.convert(
            prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
            pass_pipeline=ct.PassPipeline.EMPTY, compute_precision=ct.precision.FLOAT32,
            skip_model_load=True))
        staged = tmp / out.name
        model.save(str(staged))
        report = verify(staged)
        discard(move_into_place(staged, out))
    except CoreMLExportError:
        raise
    except Exception as e:
        raise CoreMLExportError(f"coremltools could not build the package: {type(e).__name__}: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.path = out
    return report


def quiet_stderr(fn: Callable[[], T]) -> T:
    """Run ``fn`` without coremltools' progress bars on stderr."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        return fn()
