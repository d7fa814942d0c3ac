"""Options and option parsers that several ``anec`` commands share.

The concat reading (``--concat``), program sharing (``--share-programs``), weight
compression (``--compress``, ``--compress-gate``, ``--compress-form``), int8 activations
(``--activations``, ``--calibration``, ``--activations-min-cosine``), weight files
(``--weights``, ``--random-weights``), the model backends and comma-separated integer lists.
"""

from __future__ import annotations

import click

concat_option = click.option(
    "--concat", type=click.Choice(["verdict", "rewrite", "native"]), default="verdict", show_default=True,
    help="How concat is compiled (ANE-CONCAT, contested): native keeps a MIL concat, rewrite turns it into "
         "partial convs (or an error); verdict is native only for this Mac's own target where "
         "python -m anec.selftest found concat accepted and correct.")


share_option = click.option(
    "--share-programs", "share_programs", type=click.Choice(["auto", "always", "never"]), default="auto",
    show_default=True,
    help="Repeated layers of a func cut into several programs share one compiled program, their weights as "
         "its inputs (ANE-COMPILE-BUDGET): auto shares only when the programs to compile exceed the "
         "process budget.")


def compress_options(f):
    """--compress, --compress-gate and --compress-form (docs/compression.md)."""
    f = click.option(
        "--compress-form", "compress_form", type=click.Choice(["affine", "blockwise"]), metavar="affine|blockwise",
        help="The MIL op of int8/uint8 weights in the ios18 dialect: affine (constexpr_affine_dequantize, "
             "the form a published program runs on the device; the default) or blockwise "
             "(constexpr_blockwise_shift_scale); see ANE-COMPRESSED-WEIGHTS.")(f)
    f = click.option(
        "--compress-gate", "compress_gate", metavar="REL_L2[,REL_ABS]", callback=parse_gate,
        help="The accuracy gate of --compress: the largest relative L2 error (of the tensor and of "
             "each output channel) and max abs error / max|w| a compressed tensor may have "
             "(default: per format, docs/compression.md).")(f)
    return click.option(
        "--compress", "compress", metavar="SPEC",
        help="Store conv/matmul weights compressed: FORMAT[>FALLBACK..][:GLOB],... over checkpoint keys, "
             "first match wins (int8, int8-affine, uint8-affine, int4, int4-affine, uint4-affine, FORMAT/bB "
             "per block of B input channels, lut1..lut8, lutN/gG, fp16), e.g. "
             "'lut4:h.*.mlp.*,int8:*'. Each tensor must pass an accuracy gate, else falls back "
             "(lutN -> int8 -> fp16); see docs/compression.md, which measures each spec on "
             "all-MiniLM-L6-v2 (int8-affine, int8/b64: embeddings at cosine 0.999 with every weight in int8).")(f)


def activation_options(f):
    """--activations, --calibration and --activations-min-cosine (docs/compression.md, "int8 activations")."""
    f = click.option(
        "--activations-min-cosine", "activations_min_cosine", type=click.FloatRange(-1.0, 1.0), default=0.999,
        show_default=True, metavar="COS",
        help="The gate of --activations: the least cosine every output may keep against the unquantized "
             "program on each calibration sample; activations fall back to fp16 until it holds.")(f)
    f = click.option(
        "--calibration", "calibration", type=click.Path(dir_okay=False), metavar="INPUTS.npz",
        help="Calibration inputs for --activations: one array per func input by name, the input's shape "
             "or that shape with a leading axis of samples.")(f)
    return click.option(
        "--activations", "activations", type=click.Choice(["int8"]), metavar="int8",
        help="Run the activation operand of each conv/matmul that reads a weight through int8 (MIL "
             "quantize/dequantize, ios18; W8A8 with --compress int8), each tensor's scale measured on "
             "--calibration; see docs/compression.md.")(f)


def parse_gate(ctx: click.Context, param: click.Parameter, value: str | None):
    """``--compress-gate REL_L2[,REL_ABS]`` as a :class:`~anec.compress.Gate` (None if not given)."""
    if value is None:
        return None
    from anec.compress import Gate

    try:
        nums = [float(v) for v in value.split(",")]
        if not 1 <= len(nums) <= 2 or any(not v > 0 for v in nums):
            raise ValueError
    except ValueError:
        raise click.BadParameter("give REL_L2 or REL_L2,REL_ABS, positive numbers (e.g. 0.05 or 0.05,0.5)") from None
    return Gate(nums[0], nums[1] if len(nums) > 1 else None)


def weight_options(f):
    """--weights FILE and --random-weights SEED."""
    f = click.option("--random-weights", type=int, metavar="SEED",
                     help="Random tensors for every weight no file provides.")(f)
    f = click.option("--weights", "weights_path", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Weight file (.safetensors/.npz); overrides the file's weights directives.")(f)
    return f


MODEL_BACKENDS = ("auto", "sim", "ane", "interp")
"""The --backend choices of the model commands (generate, embed, train)."""


def int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    """``"1,2,3"`` -> ``[1, 2, 3]`` (a usage error otherwise)."""
    if value is None:
        return None
    try:
        out = [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a comma-separated list of integers") from None
    if not out:
        raise click.BadParameter("the list is empty")
    return out
