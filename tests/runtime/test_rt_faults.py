"""The runtime's error paths under faults the sim injects (device switch ``fail=compile@N``:
the Nth compile of a runtime is refused by the device's compiler, the others succeed)."""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import RuntimeFailure
from anec.runtime import Runtime, native
from tests.runtime.test_rt_reload import X, load, weights


def test_the_nth_compile_fails_and_the_others_succeed(tmp_path):
    with Runtime("sim", temp_root=tmp_path, sim_device="fail=compile@2") as rt:
        load(rt, weights(0))
        with pytest.raises(RuntimeFailure, match=r"injected fault \(device switch fail=compile@2\)") as ei:
            load(rt, weights(1))
        assert ei.value.code == native.lib.ANEC_ECOMPILE
        load(rt, weights(2))
        assert rt.stats["compiles"] == 2


def test_a_recompile_the_device_refuses_gives_its_compile_back_and_keeps_the_old_weights(tmp_path):
    """A reload by recompile reserves one compile of the process budget before it compiles;
    when the compile fails, the reservation is returned: the process count, the budget left
    and the outputs are those of before the reload."""
    with Runtime("sim", temp_root=tmp_path, sim_device="fail=compile@2") as rt:
        p = load(rt, weights(0), "files")
        assert p.reload_info["strategy"] == "recompile"
        y0 = p(x=X)["y"]
        before = rt.stats
        with pytest.raises(RuntimeFailure, match="old weights stay in use"):
            p.reload_weights(weights(1))
        after = rt.stats
        assert after["process_compiles"] == before["process_compiles"]
        assert after["compile_budget_left"] == before["compile_budget_left"]
        assert after["compiles"] == before["compiles"] and after["reloads"] == before["reloads"]
        np.testing.assert_array_equal(p(x=X)["y"], y0)
        p.reload_weights(weights(1))  # compile 3: accepted
        assert rt.stats["process_compiles"] == before["process_compiles"] + 1
        with Runtime("sim", temp_root=tmp_path / "fresh") as fresh:
            np.testing.assert_array_equal(p(x=X)["y"], load(fresh, weights(1), "files")(x=X)["y"])


@pytest.mark.parametrize("spec", ["fail=compile@0", "fail=compile@x", "fail=compile@", "fail=load@1"])
def test_a_malformed_fault_switch_is_refused(tmp_path, spec):
    with pytest.raises(RuntimeFailure, match="fail=compile@N"):
        Runtime("sim", temp_root=tmp_path, sim_device=spec)
