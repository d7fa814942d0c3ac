"""Load every case of a hostile corpus in one process (run under strace by the tests).

    python tests/runtime/load_corpus.py CASES.json RESULTS.json

CASES.json is a list of {"name", "path", "func"}; RESULTS.json gets, per case,
the error message (or null when the artifact loaded and ran) and whether
anything but an AnecError escaped.
"""

from __future__ import annotations

import json
import sys
import traceback

import numpy as np


def main(cases_file: str, results_file: str) -> int:
    from anec.diagnostics import AnecError
    from anec.runtime import Runtime

    cases = json.loads(open(cases_file).read())
    results = {}
    with Runtime("sim") as rt:
        for c in cases:
            try:
                prog = rt.load(c["path"], c["func"])
                prog(x=np.zeros((1, 8, 1, 4), np.float32))
                results[c["name"]] = {"error": None, "traceback": None}
            except AnecError as e:
                results[c["name"]] = {"error": str(e), "traceback": None}
            except Exception as e:  # noqa: BLE001 - what the test looks for
                results[c["name"]] = {"error": None, "traceback": "".join(traceback.format_exception(e))}
    with open(results_file, "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
