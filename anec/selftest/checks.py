"""The checks of ``python -m anec.selftest``: each one runs programs on the backend and
records what it found.

A check is a function ``(CheckEnv, Check) -> None`` that sets ``Check.passed`` and
appends its findings (with numbers) to ``Check.lines`` and ``Check.data``; :data:`CHECKS`
lists them in the order they run. :class:`CheckEnv` builds and runs programs on the
chosen backend and target; outputs are compared with the reference interpreter within
:data:`RTOL`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from anec.compiler import compile_module
from anec.diagnostics import AnecError, RuntimeFailure
from anec.ir.interp import interpret
from anec.ir.ops import SPATIAL_LIMITS
from anec.ir.parser import parse
from anec.mil.artifact import artifact_weights
from anec.runtime import Runtime, backend_available
from anec.runtime.weights import patched_blobs
from anec.selftest.programs import (BINDING_IR, COMPRESSED_IR, COMPRESSED_PROBES, CONCAT_IR, DENSE_IR,
                                    INT8_ROUND_IR, INT8_ROUND_X, LEGALIZED_IR, NORMS_IR, ONE_IR, ROUND_SCALE,
                                    SMALL_IR, STATE_IR, STATE_T, TRIVIAL_MIL, UNLEGALIZED_OPS, W8A8_IR, N,
                                    raw_max_pool, raw_mil, spatial_ir)
from anec.targets import get_target
from anec.ir.weight_binding import random_weights

RTOL = 0.02
"""Outputs must match the fp32 reference within RTOL * max(1, max |reference|):
fp16 storage with fp32 accumulation stays far below it, a wrong binding or
stale weights are far above it."""


@dataclass
class Check:
    """The outcome of one check."""

    id: str
    title: str
    passed: bool = False
    lines: list[str] = field(default_factory=list)
    """Human-readable findings, with numbers."""
    data: dict[str, Any] = field(default_factory=dict)
    """The same numbers for --json."""

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"


class CheckEnv:
    """What every check needs: the backend, the target and a seed."""

    def __init__(self, backend: str, target: str, seed: int) -> None:
        self.backend = backend
        self.tgt = get_target(target)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.driver = "sim" if backend == "sim" else ("ane" if native_ane() else "sim")
        self.verdict: list[str] | None = None
        """Reload strategies the reload check verified (None: not run; the runtime's default)."""

    def limits(self) -> dict[str, Any]:
        """The target's limits as the runtime takes them (for raw MIL)."""
        return self.tgt.runtime_limits()

    def runtime(self, reload_verified: list[str] | None = None):
        """A runtime on the backend; ``reload_verified`` overrides the verdict
        (the probes use [] so that nothing cached steers them)."""
        return Runtime(backend=self.backend, reload_verified=reload_verified)

    def build(self, text: str, name: str, seed_offset: int = 0, pack_weights: bool = False,
              concat: str = "rewrite", target_forms: bool = False, compress: str | None = None,
              compress_form: str | None = None, weights: Any = None, calibration: Any = None):
        """(module, graph, weights, artifact) for IR `text`, random weights (or ``weights``);
        concat is rewritten unless ``concat="native"`` (no cached verdict steers a probe);
        ``target_forms`` reads the target-level ops (conv, max_pool, ...) the spatial probe
        writes directly; ``calibration`` compiles every activation it can as int8 (no gate:
        a probe tests the device, not the accuracy)."""
        module = parse(text, f"<selftest:{name}>", target_forms=target_forms)
        func = next(iter(module.funcs))
        store = random_weights(module, self.seed + seed_offset) if weights is None else weights
        # targets without fp32 I/O (m1, m2) take and return fp16; the runtime converts
        result = compile_module(module, weights=store, target=self.tgt, host_casts=not self.tgt.fp32_io,
                                pack_weights=pack_weights and not self.tgt.one_file_per_weight, concat=concat,
                                compress=compress, compress_form=compress_form,
                                activations="int8" if calibration is not None else None, calibration=calibration,
                                activations_min_cosine=-1.0)
        return module, module.funcs[func], store, result.artifacts[func], result

    def normal(self, shape: list[int] | tuple[int, ...]) -> np.ndarray:
        return self.rng.standard_normal(tuple(shape)).astype(np.float32)


def _compare(got: np.ndarray, ref: np.ndarray) -> tuple[bool, float, float, float]:
    """(within tolerance, max |err|, tolerance, max |ref|)."""
    err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
    scale = float(np.max(np.abs(ref)))
    tol = RTOL * max(1.0, scale)
    return bool(np.all(np.isfinite(got)) and err <= tol), err, tol, scale


def _reference(graph, inputs: dict[str, np.ndarray], store) -> dict[str, np.ndarray]:
    return interpret(graph, inputs, store, mode="fp32")


def _np_dtype(name: str) -> type:
    return {"fp16": np.float16, "fp32": np.float32}[name]


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def check_legalized(env: CheckEnv, c: Check) -> None:
    module, graph, store, art, result = env.build(LEGALIZED_IR, "legalized")
    rules = sorted({r["rule"] for r in result.rewrites})
    x = env.normal(graph.inputs[0].type.shape)
    with env.runtime() as rt:
        y = rt.load(art)(x=x)["y"]
    ref = _reference(graph, {"x": x}, store)["y"]
    ok, err, tol, scale = _compare(y, ref)
    c.passed = ok
    c.lines.append(f"{len(result.rewrites)} rewrites ({', '.join(rules)})")
    c.lines.append(f"max |err| {_fmt(err)} vs the fp32 interpreter (tolerance {_fmt(tol)}, max |ref| {_fmt(scale)})")
    c.data.update(rewrites=len(result.rewrites), rules=rules, max_abs_err=err, tolerance=tol, max_abs_ref=scale)


def check_unlegalized(env: CheckEnv, c: Check) -> None:
    results: dict[str, dict[str, Any]] = {}
    dialect = env.tgt.mil_dialect
    with env.runtime() as rt:
        for op in (*UNLEGALIZED_OPS, "relu"):
            try:
                prog = rt.compile(raw_mil(op, dialect), limits=env.limits())
            except RuntimeFailure as e:
                first = str(e.message).splitlines()[0]
                results[op] = {"rejected": True, "code": e.code, "message": first}
                continue
            # compiled: run it once so "accepted" means usable
            x = env.normal((1, 64, 1, 384)).astype(np.float16)
            out = prog({i["name"]: x for i in prog.inputs})
            results[op] = {"rejected": False, "ran": bool(all(np.all(np.isfinite(v)) for v in out.values()))}
            prog.close()
    rejected = [op for op in UNLEGALIZED_OPS if results[op]["rejected"]]
    control_ok = not results["relu"]["rejected"] and results["relu"].get("ran", False)
    c.passed = len(rejected) == len(UNLEGALIZED_OPS) and control_ok
    for op in UNLEGALIZED_OPS:
        r = results[op]
        if r["rejected"]:
            c.lines.append(f"{op}: rejected at compile ({r['message']})")
        else:
            c.lines.append(f"{op}: ACCEPTED by the device compiler: the catalog claim does not hold here "
                           "(anec still legalizes it away; please report)")
    if control_ok:
        c.lines.append("control (relu, same shapes): compiled and ran")
    else:
        c.lines.append(f"control (relu, same shapes) FAILED: {results['relu'].get('message', 'wrong output')}; "
                       "the rejections above may have another cause")
    c.data.update(results=results, dialect=dialect)


def _joined(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What a channel concat of a and b must give (the reference of the concat check)."""
    return np.concatenate([a, b], axis=1)


def _declared_concat() -> str:
    """What the sim's device switches declare concat to be (the last concat= switch wins)."""
    items = [i.strip() for i in os.environ.get("ANEC_SIM_DEVICE", "").split(",")]
    accept = [i == "concat=accept" for i in items if i.startswith("concat=")]
    return "accepted" if accept and accept[-1] else "rejected"


def check_concat(env: CheckEnv, c: Check) -> None:
    dialect = env.tgt.mil_dialect
    a = env.normal((1, 64, 1, 384)).astype(np.float16)
    b = env.normal((1, 64, 1, 384)).astype(np.float16)
    raw: dict[str, Any] = {}
    with env.runtime(reload_verified=[]) as rt:
        try:
            prog = rt.compile(raw_mil("concat", dialect), limits=env.limits())
        except RuntimeFailure as e:
            raw = {"rejected": True, "code": e.code, "message": str(e.message).splitlines()[0]}
        else:
            got = prog(a=a, b=b)["c"]
            prog.close()
            raw = {"rejected": False, "exact": bool(np.array_equal(got, _joined(a, b)))}
    program: dict[str, Any] | None = None
    if raw["rejected"]:
        verdict = "rejected"
        c.lines.append(f"raw MIL concat: rejected at compile ({raw['message']})")
    elif not raw["exact"]:
        verdict = "accepted but wrong"
        c.lines.append("raw MIL concat: compiled, but its output is NOT the inputs joined")
    else:
        c.lines.append("raw MIL concat: compiled and ran; output equal to the inputs joined (bit for bit)")
        _, graph, store, art, _ = env.build(CONCAT_IR, "concat", concat="native")
        xa, xb = env.normal(graph.inputs[0].type.shape), env.normal(graph.inputs[1].type.shape)
        with env.runtime(reload_verified=[]) as rt:
            y = rt.load(art)(a=xa, b=xb)["y"]
        ok, err, tol, scale = _compare(y, _reference(graph, {"a": xa, "b": xb}, store)["y"])
        program = {"max_abs_err": err, "tolerance": tol, "right": ok}
        verdict = "accepted" if ok else "accepted but wrong"
        c.lines.append(f"anec program with a native concat (--concat native): max |err| {_fmt(err)} vs the fp32 "
                       f"interpreter (tolerance {_fmt(tol)})" + ("" if ok else ": WRONG"))
    c.lines.append({"accepted": "verdict: accepted: anec compile keeps concat as MIL for this Mac's target",
                    "rejected": "verdict: rejected: anec rewrites concat (partial convs) or reports it",
                    "accepted but wrong": "verdict: accepted but wrong: anec rewrites concat (partial convs) "
                                          "or reports it; please report this Mac"}[verdict])
    c.data.update(raw=raw, program=program, verdict=verdict, dialect=dialect)
    c.passed = True  # every verdict is a finding anec acts on; only a disagreement with the sim's model fails
    if env.driver == "sim":
        c.data["declared"] = declared = _declared_concat()
        if declared != verdict:
            c.passed = False
            c.lines.append(f"the sim declares concat {declared} but the probe found {verdict}")


def check_binding(env: CheckEnv, c: Check) -> None:
    module, graph, store, art, _ = env.build(BINDING_IR, "binding")
    shape = graph.inputs[0].type.shape
    zeta, alpha = env.normal(shape), env.normal(shape)
    ref = _reference(graph, {"zeta": zeta, "alpha": alpha}, store)
    with env.runtime() as rt:
        prog = rt.load(art)
        by_name = prog(zeta=zeta, alpha=alpha)
        order_in = [i["name"] for i in prog.inputs]
        order_out = [o["name"] for o in prog.outputs]
        # device level: buffers in alphabetical order of MIL names, each of the
        # uniform allocation size, tensors packed at byte 0 in the device dtype
        alloc_in, alloc_out = prog.manifest.input_alloc_bytes, prog.manifest.output_alloc_bytes
        ins = []
        for a, spec in zip((alpha, zeta), prog.inputs):
            buf = np.zeros(alloc_in, np.uint8)
            packed = np.ascontiguousarray(a, dtype=_np_dtype(spec["dtype"])).view(np.uint8).reshape(-1)
            buf[: packed.size] = packed
            ins.append(buf)
        outs = [np.zeros(alloc_out, np.uint8) for _ in prog.outputs]
        prog.evaluate_raw(ins, outs)
        raw = {spec["name"]: buf[: spec["bytes"]].view(_np_dtype(spec["dtype"])).reshape(spec["shape"])
               for buf, spec in zip(outs, prog.outputs)}
    errs = {}
    ok = order_in == ["alpha", "zeta"] and order_out == ["ahalf", "zdiff"]
    for how, res in (("by name", by_name), ("device level", raw)):
        for name in ("zdiff", "ahalf"):
            good, err, tol, _ = _compare(res[name], ref[name])
            errs[f"{how}:{name}"] = err
            ok = ok and good
    c.passed = ok
    c.lines.append(f"binding order: inputs {order_in}, outputs {order_out} (declared zeta, alpha -> zdiff, ahalf)")
    c.lines.append("max |err| by name: zdiff " + _fmt(errs["by name:zdiff"]) + ", ahalf " + _fmt(errs["by name:ahalf"]))
    c.lines.append("max |err| with buffers [alpha, zeta] -> [ahalf, zdiff]: zdiff "
                   + _fmt(errs["device level:zdiff"]) + ", ahalf " + _fmt(errs["device level:ahalf"]))
    c.data.update(inputs=order_in, outputs=order_out, max_abs_err=errs)


def check_min_surface(env: CheckEnv, c: Check) -> None:
    module, graph, store, art, _ = env.build(SMALL_IR, "min-surface")
    x = env.normal(graph.inputs[0].type.shape)
    ref = _reference(graph, {"x": x}, store)["y"]
    with env.runtime() as rt:
        prog = rt.load(art)
        alloc_in = prog.manifest.input_alloc_bytes
        padded = prog(x=x)["y"]
        xd = np.ascontiguousarray(x, dtype=_np_dtype(prog.inputs[0]["dtype"]))
        exact = np.zeros(tuple(prog.outputs[0]["shape"]), _np_dtype(prog.outputs[0]["dtype"]))
        try:
            prog.evaluate_raw([xd], [exact])
            raw: dict[str, Any] = {"failed": False}
        except RuntimeFailure as e:
            raw = {"failed": True, "code": e.code, "message": str(e.message).splitlines()[0]}
    ok_pad, err_pad, tol, _ = _compare(padded, ref)
    c.lines.append(f"tensors of {xd.nbytes} bytes; the runtime pads surfaces to {alloc_in} bytes: "
                   f"max |err| {_fmt(err_pad)} (tolerance {_fmt(tol)})")
    if raw["failed"]:
        c.lines.append(f"exact {xd.nbytes}-byte buffers: fail at evaluate, as the catalog says ({raw['message']})")
        ok_raw = True
    else:
        ok_raw, err_raw, _, _ = _compare(exact, ref)
        raw["max_abs_err"] = err_raw
        c.lines.append(f"exact {xd.nbytes}-byte buffers: ACCEPTED by this device, "
                       + ("results right: the minimum does not apply here (please report)" if ok_raw
                          else f"results WRONG (max |err| {_fmt(err_raw)}): small surfaces fail silently"))
    c.passed = ok_pad and ok_raw
    c.data.update(tensor_bytes=int(xd.nbytes), padded_alloc_bytes=alloc_in, padded_max_abs_err=err_pad,
                  exact_size=raw)


def _blob_update(art, store2) -> dict[str, bytes]:
    """The artifact's BLOBFILEs with the weights of store2 (MIL path -> bytes)."""
    current = {w.mil_path: art.blobs[w.file] for w in art.manifest.weights}
    return patched_blobs(art.manifest, current, {w.key: store2[w.key] for w in art.manifest.weights})


PROBED = ("data-patch", "new-object")
"""The no-compile reload strategies the reload check probes, in the runtime's order of preference."""


def _probe_data_patch(env: CheckEnv, text: str, name: str, pack: bool, strategy: str = "data-patch") -> dict[str, Any]:
    """Force one no-compile reload strategy on one program ("data-patch": the same
    model object, unloaded, its data rewritten, loaded again; "new-object": a new,
    never-compiled object loading the new data) and compare with a fresh compile
    of the new weights: verified when the outputs changed, equal the fresh
    compile bit for bit, and nothing was compiled."""
    module, graph, store1, art, _ = env.build(text, name, pack_weights=pack)
    store2 = random_weights(module, env.seed + 1000)
    _, _, _, art2, _ = env.build(text, name, seed_offset=1000, pack_weights=pack)
    x = env.normal(graph.inputs[0].type.shape)
    with env.runtime(reload_verified=[]) as rt:
        prog = rt.load(art)
        info = prog.reload_info
        res: dict[str, Any] = {"files": len(art.manifest.weights) and len({w.file for w in art.manifest.weights}),
                               "data_patchable": info["data_patchable"]}
        if not info["data_patchable"]:
            res["verified"] = None  # nothing to probe: the compiled data is not the BLOBFILE here
            return res
        y1 = prog(x=x)["y"]
        before = rt.stats["compiles"]
        prog.reload_blobs(_blob_update(art, store2), strategy=strategy)
        y2 = prog(x=x)["y"]
        res["compiles"] = rt.stats["compiles"] - before
    with env.runtime(reload_verified=[]) as rt2:
        yf = rt2.load(art2)(x=x)["y"]
    changed = not np.array_equal(y2, y1, equal_nan=True)
    res["change"] = _max_diff(y2, y1) if changed else 0.0
    res["vs_fresh"] = _max_diff(y2, yf)
    res["verified"] = bool(changed and np.array_equal(y2, yf, equal_nan=True) and res["compiles"] == 0)
    return res


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over the elements where both are finite; inf where they differ otherwise."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    both = np.isfinite(a64) & np.isfinite(b64)
    d = float(np.max(np.abs(a64[both] - b64[both]), initial=0.0))
    same_elsewhere = np.array_equal(a64[~both], b64[~both], equal_nan=True)
    return d if same_elsewhere else float("inf")


def check_reload(env: CheckEnv, c: Check) -> None:
    env.verdict = []
    # each no-compile strategy probed on its own, forced: on a one-tensor program and, where
    # the device also keeps a packed file as data, on a packed one too
    probes: dict[str, dict[str, Any]] = {}
    for strategy in PROBED:
        probes[strategy] = {
            "one": _probe_data_patch(env, ONE_IR, "reload-one", pack=False, strategy=strategy),
            "packed": _probe_data_patch(env, DENSE_IR, "reload-packed", pack=True, strategy=strategy)}
    verdict = [s for s in PROBED if bool(probes[s]["one"]["verified"]) and probes[s]["packed"]["verified"] is not False]
    env.verdict = verdict
    for strategy in PROBED:
        for label, key in (("one tensor", "one"), ("packed, two tensors", "packed")):
            r = probes[strategy][key]
            if r["verified"] is None:
                c.lines.append(f"{strategy}, {label}: not applicable (the compiled data is not the BLOBFILE)")
            elif r["verified"]:
                c.lines.append(f"{strategy}, {label}: outputs changed by up to {_fmt(r['change'])}, equal to a "
                               f"fresh compile bit for bit, {r['compiles']} compiles")
            else:
                c.lines.append(f"{strategy}, {label}: NOT effective here (changed by {_fmt(r.get('change', 0))}, "
                               f"{_fmt(r.get('vs_fresh', 0))} from a fresh compile): not used")
    # the runtime's own choice with this verdict, on a program of each kind, must equal a fresh compile
    ok = True
    auto: dict[str, Any] = {}
    for text, name in ((ONE_IR, "reload-auto-one"), (DENSE_IR, "reload-auto-dense")):
        module, graph, store1, art, _ = env.build(text, name)
        store2 = random_weights(module, env.seed + 2000)
        _, _, _, art2, _ = env.build(text, name, seed_offset=2000)
        x = env.normal(graph.inputs[0].type.shape)
        with env.runtime(reload_verified=verdict) as rt:
            prog = rt.load(art)
            y1 = prog(x=x)["y"]
            strategy = prog.reload_info["strategy"]
            before = rt.stats["compiles"]
            prog.reload_weights({w.key: store2[w.key] for w in art.manifest.weights})
            y2 = prog(x=x)["y"]
            compiles = rt.stats["compiles"] - before
        with env.runtime(reload_verified=[]) as rt2:
            yf = rt2.load(art2)(x=x)["y"]
        good = bool(np.array_equal(y2, yf, equal_nan=True)) and not np.array_equal(y2, y1, equal_nan=True)
        ok = ok and good
        auto[name] = {"strategy": strategy, "compiles": compiles, "equals_fresh": good}
        c.lines.append(f"{name.split('-')[-1]}: the runtime reloads by {strategy} ({compiles} compiles): "
                       + ("equal to a fresh compile bit for bit" if good else "DIFFERS from a fresh compile"))
    c.data.update(probes=probes, verdict=verdict, auto=auto)
    if env.driver == "sim":
        # the sim declares what its device model guarantees: the probe must agree
        with env.runtime() as rt:
            declared = [s for s in PROBED if s in rt.reload_verified]
        c.data["declared"] = declared
        if declared != verdict:
            ok = False
            c.lines.append(f"the sim declares {declared or 'nothing'} but the probe found {verdict or 'nothing'}")
    c.passed = ok
    c.lines.append(f"verdict: verified {', '.join(verdict)}; reloads use {verdict[0]} where a program allows it, "
                   "else recompile" if verdict else "verdict: reloads recompile (no reload without a compile is "
                   "verified here)")


def check_shared(env: CheckEnv, c: Check) -> None:
    for text, kind in ((ONE_IR, "one tensor"), (DENSE_IR, "two tensors")):
        module, graph, store1, art1, _ = env.build(text, f"shared-{kind}-1")
        _, _, store2, art2, _ = env.build(text, f"shared-{kind}-2", seed_offset=2000)
        x = env.normal(graph.inputs[0].type.shape)
        ref1 = _reference(graph, {"x": x}, store1)["y"]
        ref2 = _reference(graph, {"x": x}, store2)["y"]
        same_mil = art1.mil_text == art2.mil_text
        with env.runtime(reload_verified=env.verdict) as rt:
            p1 = rt.load(art1)
            p2 = rt.load(art2)
            y2 = p2(x=x)["y"]
            y1 = p1(x=x)["y"]
            p1.unload()
            p1.load()
            y1b = p1(x=x)["y"]
            st = rt.stats
        ok1, err1, tol, _ = _compare(y1, ref1)
        ok2, err2, _, _ = _compare(y2, ref2)
        ok1b = bool(np.array_equal(y1, y1b))
        passed = same_mil and ok1 and ok2 and ok1b
        c.passed = (c.passed or kind == "one tensor") and passed
        c.lines.append(f"{kind}: same MIL {same_mil}; compiles {st['compiles']}, cache hits {st['cache_hits']}; "
                       f"max |err| {_fmt(err1)} (first), {_fmt(err2)} (second), tolerance {_fmt(tol)}"
                       + ("" if ok1b else "; the first program CHANGED after the second loaded"))
        c.data[kind] = {"same_mil": same_mil, "compiles": st["compiles"], "cache_hits": st["cache_hits"],
                        "max_abs_err": [err1, err2], "first_unchanged": ok1b}


def check_state(env: CheckEnv, c: Check) -> None:
    """A cache and a mask written into one program once, then a row and a column at a time in
    place between calls that leave them out (ANE-INPUT-RESIDENT), against a second program of
    the same artifact given both whole on every call, and the fp32 reference."""
    _, graph, store, art, _ = env.build(STATE_IR, "state")
    first, steps = 8, 16
    kc = np.zeros((1, 1, STATE_T, 64), np.float16)
    kc[:, :, :first] = env.normal((1, 1, first, 64))
    mask = np.full((1, 1, 16, STATE_T), -1e4, np.float16)
    mask[..., :first] = 0
    worst, tol, same = 0.0, 0.0, 0
    ok = True
    with env.runtime() as rt:
        state, whole = rt.load(art), rt.load(art)
        state.write_input("kc", kc)
        state.write_input("mask", mask)
        for pos in range(first, first + steps):
            q = env.normal((1, 1, 16, 64)).astype(np.float16)
            got = state(q=q)["y"]
            want = whole(q=q, kc=kc, mask=mask)["y"]
            good, err, tol, _ = _compare(got, _reference(graph, {"q": q, "kc": kc, "mask": mask}, store)["y"])
            worst = max(worst, err)
            same += int(np.array_equal(got, want))
            ok = ok and good
            row = env.normal((1, 1, 1, 64)).astype(np.float16)
            state.write_input_slice("kc", row, axis=2, start=pos)
            state.write_input_slice("mask", np.zeros((1, 1, 16, 1), np.float16), axis=3, start=pos)
            kc[:, :, pos] = row[:, :, 0]
            mask[..., pos] = 0
    c.passed = ok and same == steps
    c.lines.append(f"{steps} calls with the cache written once and a row + a mask column per call: "
                   f"{same} equal to whole inputs bit for bit; max |err| {_fmt(worst)} (tolerance {_fmt(tol)})")
    c.data.update(steps=steps, equal_to_whole=same, max_abs_err=worst)


def check_dialect(env: CheckEnv, c: Check) -> None:
    accepted = []
    x = np.abs(env.normal((1, 64, 1, 384))).astype(np.float16)
    with env.runtime(reload_verified=[]) as rt:
        for dialect, text in TRIVIAL_MIL.items():
            try:
                y = rt.compile(text, limits=env.limits())(x=x)["r"]
            except RuntimeFailure as e:
                c.lines.append(f"{dialect}: rejected ({str(e.message).splitlines()[0]})")
                continue
            if np.array_equal(y, x):
                accepted.append(dialect)
                c.lines.append(f"{dialect}: compiled and ran")
            else:
                c.lines.append(f"{dialect}: compiled but computed wrong values")
    c.passed = bool(accepted)
    if "ios18" not in accepted and "ios16" in accepted:
        c.lines.append("compile with --dialect ios16 on this machine")
    c.data.update(accepted=accepted)


def check_fp16_range(env: CheckEnv, c: Check) -> None:
    _, graph, store, art, _ = env.build(NORMS_IR, "fp16-range")
    worst: dict[str, float] = {}
    ok = True
    with env.runtime() as rt:
        prog = rt.load(art)
        for scale in (1.0, 3000.0, 60000.0):
            x = env.normal(graph.inputs[0].type.shape)
            x[0, 5, 0, ::3] = 8.0  # a massive channel in a third of the positions
            x = (x / np.abs(x).max(axis=1, keepdims=True) * scale).astype(np.float16).astype(np.float32)
            out = prog(x=x)
            xd = x.astype(np.float64)
            xc = xd - xd.mean(1, keepdims=True)
            refs = {"rms": xd / np.sqrt((xd * xd).mean(1, keepdims=True) + 1e-5),
                    "lnorm": xc / np.sqrt((xc * xc).mean(1, keepdims=True) + 1e-5)}
            for name, ref in refs.items():
                good, err, tol, _ = _compare(out[name], ref)
                ok = ok and good
                worst[f"{name}@{scale:g}"] = err
                if not good:
                    c.lines.append(f"{name} at max |x| {scale:g}: max |err| {_fmt(err)} > {_fmt(tol)}")
    c.passed = ok
    c.lines.append("max |err| vs float64: " + ", ".join(f"{k} {_fmt(v)}" for k, v in worst.items()))
    c.data.update(max_abs_err=worst)


def check_spatial(env: CheckEnv, c: Check) -> None:
    _, graph, store, art, _ = env.build(spatial_ir(SPATIAL_LIMITS.kernel), "spatial", target_forms=True)
    x = env.normal(graph.inputs[0].type.shape)
    with env.runtime() as rt:
        out = rt.load(art)(x=x)
    ref = _reference(graph, {"x": x}, store)
    errs = {}
    ok = True
    for name, want in ref.items():
        good, err, tol, _ = _compare(out[name], want)
        ok = ok and good
        errs[name] = err
        if not good:
            c.lines.append(f"{name}: max |err| {_fmt(err)} > {_fmt(tol)}")
    c.passed = ok
    c.lines.append("at the limits: max |err| " + ", ".join(f"{k} {_fmt(v)}" for k, v in errs.items()))
    # one step beyond the kernel limit, as raw MIL (anec never writes it): what does this device do?
    beyond = SPATIAL_LIMITS.kernel + 1
    try:
        with env.runtime(reload_verified=[]) as rt:
            rt.compile(raw_max_pool(beyond, env.tgt.mil_dialect), limits=env.limits()).close()
        c.lines.append(f"max_pool kernel {beyond}: compiled (the limit could be raised here; please report)")
        beyond_ok = True
    except RuntimeFailure as e:
        c.lines.append(f"max_pool kernel {beyond}: rejected ({str(e.message).splitlines()[0]})")
        beyond_ok = False
    c.data.update(max_abs_err=errs, beyond_kernel=beyond, beyond_compiled=beyond_ok)


def _compressed_op(art, fmt: str) -> str:
    """The constexpr op the artifact's MIL writes for ``fmt``."""
    for op in ("constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_lut_to_dense",
               "constexpr_sparse_blockwise_shift_scale", "constexpr_lut_to_sparse", "constexpr_sparse_to_dense"):
        if f"= {op}(" in art.mil_text:
            return op
    raise AnecError(f"selftest: the {fmt} probe wrote no constexpr op (its weights fell back)")


def check_compressed(env: CheckEnv, c: Check) -> None:
    default = env.tgt.int8_form if env.tgt.mil_dialect == "ios18" else "affine"
    results: dict[str, dict[str, Any]] = {}
    ok = True
    x = {"x": env.normal((1, 64, 1, N)), "a": env.normal((1, 1, N, 64))}
    for fmt, form in COMPRESSED_PROBES:
        if env.tgt.mil_dialect != "ios18" and ((form is not None and form != "affine") or "+" in fmt):
            continue  # ios16 has only the affine op, and no sparse int8/LUT values
        # no fallback: the format itself must be written, and run
        _, _, _, art, _ = env.build(COMPRESSED_IR, "compressed", compress=f"{fmt}>fp16", compress_form=form)
        op = _compressed_op(art, fmt)
        label = f"{fmt} ({op})"
        program = art.program_module().funcs["compressed"]
        ref = interpret(program, x, artifact_weights(art), mode="fp32")
        try:
            with env.runtime() as rt:
                out = rt.load(art)(**x)
        except RuntimeFailure as e:
            results[label] = {"op": op, "verdict": "rejected"}
            c.lines.append(f"{label}: rejected ({str(e.message).splitlines()[0]})")
            if form is not None and form == default:
                ok = False
                c.lines.append(f"the target's int8 form is rejected here: compile with --compress-form "
                               f"{'blockwise' if form == 'affine' else 'affine'} or without int8")
            continue
        errs = {k: _compare(out[k], ref[k]) for k in ref}
        good = all(e[0] for e in errs.values())
        worst = max(e[1] for e in errs.values())
        results[label] = {"op": op, "verdict": "accepted" if good else "accepted but wrong", "max_abs_err": worst}
        c.lines.append(f"{label}: {'compiled and ran' if good else 'compiled but computed WRONG values'}, "
                       f"conv and matmul weights, max |err| {_fmt(worst)}")
        ok = ok and good
    c.passed = ok
    c.data.update(probes=results, int8_form=default)


ANEC_ROUNDING = "half to even, fp16 quotient"
"""How anec's interpreter and sim round ``quantize`` (coremltools' reference)."""


def int8_roundings(x: np.ndarray, scale: float) -> dict[str, np.ndarray]:
    """The int8 round trip of ``x`` (fp16 values) under each rounding a device might use:
    mode -> ``fp16(clip(round(x / scale)) * scale)``."""
    xh = np.asarray(x, np.float16)
    with np.errstate(all="ignore"):
        quotients = {"fp16 quotient": (xh / np.float16(scale)).astype(np.float64),
                     "exact quotient": xh.astype(np.float64) / float(np.float16(scale))}
    rounds = {"half to even": np.rint, "half away from zero": lambda t: np.sign(t) * np.floor(np.abs(t) + 0.5),
              "toward zero": np.trunc}
    out = {}
    for rname, rnd in rounds.items():
        for qname, t in quotients.items():
            q = np.clip(rnd(t), -128, 127)
            out[f"{rname}, {qname}"] = (q.astype(np.float32) * np.float32(np.float16(scale))).astype(np.float16)
    return out


def rounding_matches(x: np.ndarray, scale: float, y: np.ndarray) -> list[str]:
    """The roundings (:func:`int8_roundings`) whose round trip of ``x`` is ``y``, bit for bit."""
    yh = np.asarray(y).astype(np.float16)
    return [mode for mode, want in int8_roundings(x, scale).items() if np.array_equal(want, yh)]


def check_int8_activations(env: CheckEnv, c: Check) -> None:
    """A W8A8 conv chain against the interpreter, and the rounding of ``quantize`` read off an
    identity conv. A device that rejects the ops is reported (int8 activations are opt-in);
    one that runs them with other values fails."""
    if env.tgt.mil_dialect != "ios18":
        c.passed = True
        c.lines.append(f"skipped: {env.tgt.mil_dialect} has no quantize/dequantize")
        c.data.update(verdict="not in the dialect")
        return
    x = {"x": env.normal((1, 64, 1, N))}
    calibration = {"x": np.stack([env.normal((1, 64, 1, N)) for _ in range(2)])}
    _, _, _, art, _ = env.build(W8A8_IR, "int8-activations", compress="int8>fp16", calibration=calibration)
    quantized = art.manifest.activations.quantized if art.manifest.activations is not None else 0
    if quantized != 2 or "constexpr_affine_dequantize" not in art.mil_text:
        raise AnecError(f"selftest: the W8A8 probe compiled {quantized} int8 activations (2 expected)")
    eye = np.eye(64, dtype=np.float16).reshape(64, 64, 1, 1)
    _, _, _, rart, _ = env.build(INT8_ROUND_IR, "int8-round", weights={"eye": eye})
    xr = np.resize(np.asarray(INT8_ROUND_X, np.float32), (1, 64, 1, N))
    try:
        with env.runtime() as rt:
            out = rt.load(art)(**x)
            y = rt.load(rart)(x=xr)["y"]
    except RuntimeFailure as e:
        c.passed = True
        c.lines.append(f"quantize/dequantize: rejected ({str(e.message).splitlines()[0]}); do not compile "
                       "with --activations int8 on this machine")
        c.data.update(verdict="rejected")
        return
    ref = interpret(art.program_module().funcs["w8a8"], x, artifact_weights(art), mode="fp32")
    good, err, tol, _ = _compare(out["y"], ref["y"])
    modes = rounding_matches(xr, ROUND_SCALE, y)
    c.lines.append(f"W8A8 chain (int8 weights, 2 int8 activations): "
                   f"{'compiled and ran' if good else 'compiled but computed WRONG values'}, max |err| {_fmt(err)} "
                   f"(tolerance {_fmt(tol)})")
    c.lines.append(f"quantize rounds: {', '.join(modes) if modes else 'like none of ' + ', '.join(int8_roundings(xr, ROUND_SCALE))}")
    if ANEC_ROUNDING not in modes:
        c.lines.append(f"anec's interpreter and sim round {ANEC_ROUNDING}: int8 activations differ by one "
                       "step where the roundings do")
    c.passed = good and ANEC_ROUNDING in modes
    c.data.update(verdict="accepted" if c.passed else "accepted but wrong", max_abs_err=err, roundings=modes)


CHECKS: list[tuple[str, str, Callable[[CheckEnv, Check], None]]] = [
    ("legalized", "legalized program matches the reference interpreter", check_legalized),
    ("unlegalized", "unlegalized MIL (gelu, rsqrt) is rejected by the device compiler", check_unlegalized),
    ("concat", "concat: accepted and correct, rejected, or accepted but wrong", check_concat),
    ("binding", "inputs and outputs bind in alphabetical order of MIL names", check_binding),
    ("min-surface", "surfaces below the minimum size are padded or fail", check_min_surface),
    ("reload", "reload strategies that really change outputs, and the runtime's choice", check_reload),
    ("shared", "programs with the same MIL and other weights each compute with their own", check_shared),
    ("state", "inputs stay in their surfaces; rows written in place between calls are seen", check_state),
    ("dialect", "MIL dialects the device compiler accepts", check_dialect),
    ("fp16-range", "norms of activations up to 60000 are right (range-safe)", check_fp16_range),
    ("spatial", "native conv, pool and upsample ops at anec's limits are right", check_spatial),
    ("compressed", "compressed weight forms (int8 affine / blockwise, LUT, sparse) the device runs",
     check_compressed),
    ("int8-activations", "int8 activations (quantize/dequantize between convs) and how quantize rounds",
     check_int8_activations),
]


def native_ane() -> bool:
    return backend_available("ane")[0]
