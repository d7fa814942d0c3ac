"""IR files as hostile input: a FIFO, a device or an oversized file is refused at once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from anec.diagnostics import AnecError
from anec.ir import parser
from anec.ir.parser import parse_file


def test_a_fifo_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "model.ir"
    os.mkfifo(fifo)
    with pytest.raises(AnecError, match=r"IR file '.*model\.ir' is a FIFO, not a regular file"):
        parse_file(fifo)


def test_a_device_is_refused():
    with pytest.raises(AnecError, match="IR file '/dev/zero' is a device"):
        parse_file("/dev/zero")


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.ir"
    with open(big, "wb") as f:
        f.truncate(4096)  # sparse: the size is what counts
    monkeypatch.setattr(parser, "IR_MAX_BYTES", 1024)
    with pytest.raises(AnecError, match="is 4096 bytes, more than the 1024 anec reads"):
        parse_file(big)


def test_the_cli_exits_1_on_a_fifo(tmp_path):
    fifo = tmp_path / "x.ir"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "anec.cli", "check", str(fifo)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "is a FIFO, not a regular file" in r.stderr and "Traceback" not in r.stderr
