"""Write the seed corpus of fuzz_manifest (tests/c/corpus/manifest/).

Each seed is what an artifact's manifest drives into C, in the layout
fuzz_manifest.c reads: flags, six limit selectors, the weight files (MIL path
selector + BLOBFILE bytes) and the MIL text. The seeds are the MIL corpus of
fuzz_mil (with the BLOBFILE corpus where a program reads weights) and small
programs compiled by anec (plain, packed weights, weights as inputs).

    PYTHONPATH=. python tests/c/manifest_seeds.py     # rewrites the seeds
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "corpus" / "manifest"

# the PATHS table of fuzz_manifest.c (selector -> MIL path)
PATHS = ["@model_path/weights/w.bin", "@model_path/weights/w1.bin", "@model_path/weights/weight.bin"]
CUSTOM = 0xFF

LIMITS = 1
CALL = 2
RELOAD = 4


def encode(mil: bytes, blobs: dict[str, bytes], flags: int = LIMITS | CALL | RELOAD,
           selectors: bytes = bytes(6)) -> bytes:
    out = bytearray([flags]) + selectors + bytes([len(blobs)])
    for path, data in blobs.items():
        if path in PATHS:
            out.append(PATHS.index(path))
        else:
            raw = path.encode()
            out += bytes([CUSTOM, len(raw)]) + raw
        out += struct.pack("<H", len(data)) + data
    return bytes(out + mil)


def compiled_seeds() -> dict[str, bytes]:
    """Small programs compiled by anec, with their weight files as the runtime passes them."""
    sys.path.insert(0, str(HERE.parent.parent))
    from anec.mil.artifact import Artifact
    from anec.mil.emitter import emit_mil
    from anec.targets import get_target
    from anec.ir.weight_binding import random_weights
    from tests.mil.graphs import small_mlp, two_io

    seeds = {}
    m4 = get_target("m4")
    for name, graph, pack in [("mlp", small_mlp(channels=4, hidden=8, seq=4), False),
                              ("mlp_packed", small_mlp(channels=4, hidden=8, seq=4), True),
                              ("two_io", two_io(), False)]:
        art = Artifact.build(graph, emit_mil(graph, m4, pack_weights=pack), m4, random_weights(graph, 0))
        paths = {w.file: w.mil_path for w in art.manifest.weights}
        blobs = {paths[rel]: data for rel, data in art.blobs.items() if rel in paths}
        seeds[name] = encode(art.mil_text.encode(), blobs)
    return seeds


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    seeds = {}
    blob = (HERE / "corpus" / "blob" / "fp16.bin").read_bytes()
    for mil in sorted((HERE / "corpus" / "mil").glob("*.mil")):
        text = mil.read_bytes()
        blobs = {PATHS[0]: blob} if b"BLOBFILE" in text else {}
        seeds[mil.stem] = encode(text, blobs)
        seeds[mil.stem + "_nolimits"] = encode(text, blobs, flags=CALL | RELOAD)
    seeds.update(compiled_seeds())
    for name, data in seeds.items():
        (OUT / f"{name}.bin").write_bytes(data)
    print(f"wrote {len(seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()
