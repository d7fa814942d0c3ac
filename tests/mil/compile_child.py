"""A compile that waits for a go: the kill tests start it, let it import and parse, then
kill it at a chosen moment of the compile itself.

    python tests/mil/compile_child.py MODEL.ir OUT SEED
    (prints "ready", compiles when a line arrives on stdin, prints "done")
"""

from __future__ import annotations

import sys


def main(ir: str, out: str, seed: str) -> int:
    from anec.compiler import compile_module
    from anec.ir.parser import parse_file

    module = parse_file(ir)
    print("ready", flush=True)
    sys.stdin.readline()
    compile_module(module, random_seed=int(seed), out_dir=out)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
