"""Evidence records and scopes that several catalog entries share.

The scopes (API path, chip, OS) the public sources were seen on, and the records about
weight reload and the compiled data that more than one entry cites.
"""

from __future__ import annotations

from anec.constraints.model import DEMONSTRATED, HYPOTHESIS, REPORTED, Evidence, Scope

# ---- scopes the records share ----------------------------------------------------------
ORION = Scope("in-memory", "M4 Max (the machine Orion's results name)", "not stated")
ORION_M4 = Scope("in-memory", "M4", "not stated")
MADERIX = Scope("in-memory", "not stated", "not stated")
MADERIX_M5 = Scope("in-memory", "M5", "macOS 26.3")
MADERIX_CHIPS = Scope("in-memory", "M1 Pro, M1 Max, M3 Ultra, M4 Pro, M4 Max, M5",
                       "macOS 15.0 (M1 Pro), 15.6.1 (M1 Max), 26.3 (M5); others not stated")
SPEC = Scope("any", "any", "any")
UNTRIED = Scope("in-memory", "none tried", "none tried")

# ---- records used by several entries -------------------------------------------------------
ORION_CATALOG = "Orion paper constraint {n} and docs/ane_constraints.md"
MADERIX_RELOAD = Evidence(
    "maderix/ANE training/test_weight_reload.m (result in training/m5result.md)",
    "compile a 64x64 conv, overwrite weights/weight.bin in its directory with 3x identity, unload and "
    "load the same model object: the output is unchanged (max diff 0.0); this fits 'load reads the "
    "compiled data' and 'the framework keeps the weights in memory' equally",
    DEMONSTRATED, MADERIX_M5)
ORION_E5 = Evidence(
    "Orion experiments/spike_e5_binary.m and spike_e5_patch.m (the E5 spike)",
    "for a program with one BLOBFILE tensor, the `data` file the compiler leaves in the hexId "
    "directory is byte-identical to that BLOBFILE",
    DEMONSTRATED, ORION)
ORION_DELTA = Evidence(
    "Orion tests/test_delta_compile.m (orion_program_patch_weights)",
    "a NEW descriptor and model object from the same MIL, never compiled, whose hexId directory holds "
    "the donor's net.plist and the new weights' BLOBFILE as `data`, loads and computes like a fresh "
    "compile (768x768 linear, max diff 0.0; 10 patches in a row, no compiles)",
    DEMONSTRATED, ORION)
ORION_RELOAD = Evidence(
    "Orion paper (delta compilation) and core/ane_runtime.m orion_program_reload_weights (v2 training)",
    "unload, rewrite the weight files in the hexId directory and load the same object is said to pick "
    "up the new weights (4,200 -> 494 ms per step); no test in the repository checks that the outputs "
    "change, and the repository's own constraint 7 says the opposite",
    REPORTED, ORION)
SAME_OBJECT = Evidence(
    "no public test",
    "unload the SAME model object, write the new BLOBFILE as its `data`, load again: whether the "
    "outputs then use the new weights; python -m anec.selftest (reload) settles it per machine",
    HYPOTHESIS, UNTRIED)
PRACTICE = "every program maderix/ANE and Orion run on the device"
