"""Compressed weights: a compile decision, per weight, by glob.

``anec compile model.ir --compress 'lut4:h.*.mlp.*,int8:*'`` stores the matching
conv/matmul weights in a compressed form the device decompresses when it loads the
program (MIL ``constexpr_*`` ops over integer BLOBFILE payloads). The IR does not
change: the decision is made when the program is emitted, recorded in the manifest
(``compression``, and a ``part`` record on every BLOBFILE of a compressed weight),
and written into the MIL. Formats (docs/compression.md):

==================  =================================================================
``int8``            linear symmetric int8, one fp16 scale per output channel
                    (what coremltools' ``linear_quantize_weights`` writes for mode
                    ``linear_symmetric``, ``per_channel``: the same int8 values and scales)
``int8-affine``     int8 with a zero point per output channel (coremltools mode ``linear``)
``uint8-affine``    the same in uint8
``int4``, ``int4-affine``, ``uint4-affine``
                    4-bit linear, a scale (and zero point) per output channel; ``FORMAT/bB``
                    (any linear format): per block of B input channels as well (coremltools'
                    ``per_block``); iOS18's constexpr_blockwise_shift_scale only
``lut1`` .. ``lut8``  n-bit palettization (n in 1, 2, 4, 6, 8): one fp16 look-up table of
                    2^n entries for the whole tensor (``lutN``) or per group of G output
                    channels (``lutN/gG``); deterministic 1-D k-means, so the same tensor
                    always gives the same bytes
``sparseP``         magnitude pruning: P% of the elements zero (1..99), a uint1 mask and
                    the fp16 values kept, their number fixed by the size (a reload keeps it)
``fp16``            no compression (to exclude weights: ``fp16:*.ln_*,int8:*``)
==================  =================================================================

A SPEC is comma-separated ``FORMAT[>FALLBACK...]:GLOB`` items (a bare ``FORMAT`` means
``FORMAT:*``); the first item whose glob matches a weight's checkpoint key decides it.
Only weights a conv or matmul reads are compressed (norm gains, biases and the like stay
fp16). Every compressed tensor passes an accuracy gate (:class:`Gate`: relative L2 error,
max abs error relative to the tensor's max, the dequantized values finite in fp16);
a tensor that fails falls back along its chain (``lut4`` -> ``int8`` -> ``fp16`` by
default) and the report says which gate failed.

The package: :mod:`~anec.compress.formats` (the formats), :mod:`~anec.compress.spec`
(the SPEC and the gate), :mod:`~anec.compress.linear` and
:mod:`~anec.compress.palettize` (the quantizers), :mod:`~anec.compress.sparse`
(magnitude pruning to a count fixed by the size), :mod:`~anec.compress.tensor` (one
tensor compressed, and decompressed), :mod:`~anec.compress.decisions` (the decision
per weight const and its report). Its public names are importable from here.
"""

from __future__ import annotations

from anec.compress.decisions import Decision, decide, fallback_lines, report_summary, weight_axis
from anec.compress.formats import FORMATS, Format, format_of, get_format, input_axis, scale_shape
from anec.compress.linear import quantize_linear, quantize_linear_numpy
from anec.compress.palettize import kmeans_1d, kmeans_1d_many, quantize_lut
from anec.compress.sparse import kept_count, prune, pruned_count
from anec.compress.spec import Gate, Rule, Spec, for_target, not_streamed_warning, parse_spec, streamed
from anec.compress.tensor import Compressed, compress_tensor, compress_tensors, decompress, parts_from_blobs
from anec.mil.blobfile import pack_bits, unpack_bits

__all__ = [
    "FORMATS",
    "Compressed",
    "Decision",
    "Format",
    "Gate",
    "Rule",
    "Spec",
    "compress_tensor",
    "compress_tensors",
    "decide",
    "decompress",
    "fallback_lines",
    "for_target",
    "format_of",
    "get_format",
    "input_axis",
    "kept_count",
    "kmeans_1d",
    "kmeans_1d_many",
    "not_streamed_warning",
    "pack_bits",
    "parse_spec",
    "parts_from_blobs",
    "prune",
    "pruned_count",
    "quantize_linear",
    "quantize_linear_numpy",
    "quantize_lut",
    "report_summary",
    "scale_shape",
    "streamed",
    "unpack_bits",
    "weight_axis",
]
