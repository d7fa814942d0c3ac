"""LoRA adapters as program inputs: swap adapters without compiling or reloading.

A LoRA adapter adds a low-rank update to a linear layer:
``y = W x + (alpha / r) * B (A x)`` with ``A [r, in]`` and ``B [out, r]``.
Baking ``A`` and ``B`` into the program as weights would make every adapter
change a weight reload. :func:`apply_lora` instead rewrites chosen
projections so ``A`` and ``B`` are *program inputs*; changing adapters is then
just passing different inputs to the same loaded program.

IR before (a projection whose weight key ends in a target name)::

    %q = conv1x1(%n, %q_w) : fp16[1, 768, 1, S]

after (R = the program's LoRA rank)::

    %lora_q_proj_A: fp16[1, 1, R, 768]      // new func inputs
    %lora_q_proj_B: fp16[1, 1, 768, R]
    %q = conv1x1(%n, %q_w)
    %q_lx = transpose(%n, perm=[0, 2, 3, 1])                    // [1, 1, S, 768]
    %q_la = matmul(%q_lx, %lora_q_proj_A, transpose_y=true)     // [1, 1, S, R]
    %q_lb = matmul(%q_la, %lora_q_proj_B, transpose_y=true)     // [1, 1, S, 768]
    %q_ld = transpose(%q_lb, perm=[0, 3, 1, 2])                 // [1, 768, 1, S]
    %q_lora = add(%q, %q_ld)                                    // uses of %q now use this

Both inputs are straight reshapes of the PEFT tensors (``lora_A.weight``
``[r, in]``, ``lora_B.weight`` ``[out, r]``). The host folds the scale
``alpha / r`` (``alpha / sqrt(r)`` for rsLoRA) into ``B`` and zero-pads
adapters of a smaller rank to ``R``, so adapters with any alpha and any rank
up to ``R`` swap freely. An all-zero input is the base model.

Adapters load from PEFT's format: ``adapter_config.json`` plus
``adapter_model.safetensors`` with keys like
``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from anec.ir.graph import Graph
from anec.ir.nodes import Node, Value
from anec.ir.ops import infer_types, is_weight_const
from anec.ir.types import TensorType
from anec.models.common import ModelError


class AdapterError(ModelError):
    """A LoRA adapter cannot be read or does not fit the programs."""


@dataclass(frozen=True)
class LoraSlot:
    """One projection of one program that takes an adapter through inputs."""

    module: str
    """Checkpoint module path, e.g. ``model.layers.0.self_attn.q_proj``."""
    a_input: str
    b_input: str
    cin: int
    cout: int
    rank: int


def _module_of(node: Node) -> str | None:
    """The checkpoint module whose ``.weight`` a conv1x1 multiplies by, if any."""
    w = node.operands[1].producer
    if w is None or not is_weight_const(w):
        return None
    key = w.attrs["weight"]
    return key[: -len(".weight")] if key.endswith(".weight") else None


def _input_names(graph: Graph, modules: list[str]) -> dict[str, str]:
    """Input name stem per module: ``lora_`` + the shortest suffix of its path that no
    other adapted module shares (``lora_q_proj`` in a one-layer func,
    ``lora_layers_3_self_attn_q_proj`` when every layer is in the func; a suffix
    never starts at a bare layer number) and that names no existing value."""
    taken = graph.value_names()
    used: set[str] = set()
    out: dict[str, str] = {}
    split = {m: m.split(".") for m in modules}
    for m, parts in split.items():
        for n in range(1, len(parts) + 1):
            tail = parts[-n:]
            if n < len(parts) and tail[0].isdigit():
                continue
            if any(o != m and op[-n:] == tail for o, op in split.items()):
                continue
            base = "lora_" + re.sub(r"[^A-Za-z0-9_]", "_", "_".join(tail))
            if base in used or base + "_A" in taken or base + "_B" in taken:
                continue
            out[m] = base
            used.add(base)
            break
        else:
            raise ModelError(f"cannot name LoRA inputs for {m}")
    return out


def apply_lora(graph: Graph, targets: Iterable[str], rank: int) -> list[LoraSlot]:
    """Add a LoRA path with input ``A``/``B`` to every conv1x1 whose module ends in a target.

    ``targets`` are module-name endings as in PEFT's ``target_modules``
    (``q_proj``, ``v_proj``, ``c_attn``, ``query``...). Returns the slots added
    (empty if the graph has no such projection)."""
    targets = set(targets)
    if rank < 1:
        raise ModelError(f"LoRA rank must be >= 1, got {rank}")
    found: list[tuple[Node, str]] = []
    for node in graph.nodes:
        if node.op != "conv1x1":
            continue
        module = _module_of(node)
        if module is not None and module.split(".")[-1] in targets:
            found.append((node, module))
    names = _input_names(graph, list(dict.fromkeys(m for _, m in found)))
    return [_add_path(graph, node, module, names[module], rank) for node, module in found]


def _add_path(graph: Graph, conv: Node, module: str, base: str, rank: int) -> LoraSlot:
    x = conv.operands[0]
    y = conv.result
    _, cin, _, s = x.type.shape
    cout = y.type.shape[1]
    dt = x.type.dtype
    if graph.has_value_name(base + "_A"):  # a module applied twice shares its adapter
        a, b = graph.value(base + "_A"), graph.value(base + "_B")
    else:
        a = graph.add_input(base + "_A", TensorType(dt, (1, 1, rank, cin)))
        b = graph.add_input(base + "_B", TensorType(dt, (1, 1, cout, rank)))
    idx = graph.nodes.index(conv)
    nxt = graph.nodes[idx + 1] if idx + 1 < len(graph.nodes) else None
    users = list(y.uses)

    def mk(op: str, operands: list[Value], attrs: dict, hint: str) -> Value:
        (t,) = infer_types(op, [v.type for v in operands], {}, attrs)
        return graph.create_node(op, operands, attrs, [t], names=[graph.fresh_name(hint)], before=nxt).result

    xt = mk("transpose", [x], {"perm": [0, 2, 3, 1]}, f"{y.name}_lx")
    ha = mk("matmul", [xt, a], {"transpose_y": True}, f"{y.name}_la")
    hb = mk("matmul", [ha, b], {"transpose_y": True}, f"{y.name}_lb")
    d = mk("transpose", [hb], {"perm": [0, 3, 1, 2]}, f"{y.name}_ld")
    out = mk("add", [y, d], {}, f"{y.name}_lora")
    graph.replace_uses(y, out, users)
    if y in graph.outputs:
        keep = y.name
        graph.rename_value(y, graph.fresh_name(keep + "_base"))
        graph.rename_value(out, keep)
        graph.replace_output(y, [out])
    return LoraSlot(module, a.name, b.name, cin, cout, rank)


@dataclass
class LoraAdapter:
    """A loaded adapter: per module ``A [r, in]`` and ``B [out, r]`` and its scale."""

    name: str
    modules: dict[str, tuple[np.ndarray, np.ndarray]]
    scales: dict[str, float]
    targets: set[str] = field(default_factory=set)
    source: str = ""
    """The adapter directory it was read from (for messages)."""

    @property
    def rank(self) -> int:
        return max((a.shape[0] for a, _ in self.modules.values()), default=0)

    @classmethod
    def from_arrays(cls, modules: dict[str, tuple[np.ndarray, np.ndarray]], alpha: float,
                    name: str = "adapter", rslora: bool = False) -> "LoraAdapter":
        mods: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        scales: dict[str, float] = {}
        for m, (a, bm) in modules.items():
            a = np.asarray(a, np.float32)
            bm = np.asarray(bm, np.float32)
            if a.ndim != 2 or bm.ndim != 2 or a.shape[0] != bm.shape[1]:
                raise AdapterError(f"adapter '{name}': {m} has A {list(a.shape)} and B {list(bm.shape)}",
                                   hint="A is [rank, in] and B is [out, rank]")
            r = a.shape[0]
            if r < 1:
                raise AdapterError(f"adapter '{name}': {m} has rank 0")
            mods[m] = (a, bm)
            scales[m] = alpha / (np.sqrt(r) if rslora else r)
        return cls(name, mods, scales, {m.split(".")[-1] for m in mods})

    @classmethod
    def load(cls, path: str | Path) -> "LoraAdapter":
        """Read a PEFT adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``).

        Both files are read beneath the directory (no link followed, regular files of
        bounded size; the config strict JSON). ``r`` must be a positive integer and
        the rank of every tensor pair, ``lora_alpha`` a finite number > 0,
        ``target_modules`` name the adapted modules, and every tensor is a float
        ``lora_A``/``lora_B`` matrix of finite values; AdapterError otherwise."""
        from anec.models.config import MAX_DIM, Fields
        from anec.models.hf import FLOAT_DTYPES, kind, open_dir, open_safetensors, read_json

        p = Path(path)
        d = open_dir(p, "adapter directory", error=AdapterError)
        try:
            cfg_name, st_name = "adapter_config.json", "adapter_model.safetensors"
            if kind(d, cfg_name, AdapterError) is None or kind(d, st_name, AdapterError) is None:
                raise AdapterError(f"'{path}' is not a PEFT adapter directory",
                                   hint="it needs adapter_config.json and adapter_model.safetensors")
            cfg = read_json(d, cfg_name, error=AdapterError)
            f = Fields(cfg, str(p / cfg_name), AdapterError)
            peft_type = f.str("peft_type", "LORA")
            if peft_type.upper() != "LORA":
                raise AdapterError(f"adapter type {peft_type} is not LoRA")
            if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
                raise AdapterError("adapters with per-module rank_pattern/alpha_pattern are not supported")
            if f.bool("use_dora"):
                raise AdapterError("DoRA adapters are not supported (only plain LoRA)")
            rank = f.int("r", default=8, hi=MAX_DIM)
            alpha = f.float("lora_alpha", default=float(rank), hi=1e30)
            rslora = f.bool("use_rslora")
            targets = cfg.get("target_modules")
            if targets is not None and not isinstance(targets, str) and (
                    not isinstance(targets, list) or not all(isinstance(t, str) and t for t in targets)):
                raise f.fail("target_modules", "expected a list of module names (or a pattern string)")
            st = open_safetensors(d, st_name, AdapterError)
        finally:
            d.close()
        where = p / st_name
        found: dict[str, dict[str, np.ndarray]] = {}
        pat = re.compile(r"(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.[A-Za-z0-9_]+)?\.weight\Z")
        for key in st.keys():
            m = pat.match(key)
            if not m:
                raise AdapterError(f"{where}: tensor '{key[:80]}' is not a LoRA A/B matrix of a linear layer")
            if st.dtype(key) not in FLOAT_DTYPES:
                raise AdapterError(f"{where}: tensor '{key[:80]}' is {st.dtype(key)}, not a float type")
            if m.group(2) in found.get(m.group(1), {}):
                raise AdapterError(f"{where}: module {m.group(1)[:80]} has two lora_{m.group(2)} tensors")
            arr = st.get(key)
            if arr.ndim != 2 or arr.shape[0 if m.group(2) == "A" else 1] != rank:
                raise AdapterError(f"{where}: tensor '{key[:80]}' is {list(arr.shape)}, but "
                                   f"{cfg_name}: r is {rank}",
                                   hint="lora_A is [r, in] and lora_B is [out, r]")
            if not np.isfinite(arr).all():
                raise AdapterError(f"{where}: tensor '{key[:80]}' holds NaN or infinite values")
            found.setdefault(m.group(1), {})[m.group(2)] = arr
        if not found:
            raise AdapterError(f"{where}: the adapter holds no LoRA tensors")
        modules = {}
        for mod, ab in found.items():
            if set(ab) != {"A", "B"}:
                raise AdapterError(f"{where}: adapter module {mod[:80]} lacks lora_{'B' if 'A' in ab else 'A'}")
            if isinstance(targets, list) and not any(mod == t or mod.endswith("." + t) for t in targets):
                raise AdapterError(f"{where}: module {mod[:80]} is not one of {cfg_name}: target_modules")
            modules[mod] = (ab["A"], ab["B"])
        out = cls.from_arrays(modules, alpha, name=p.name, rslora=rslora)
        out.source = str(p)
        return out

    def check_model(self, frontend: object) -> None:
        """Every module this adapter adapts is a projection of ``frontend``'s model, in a layer
        it has, of the projection's size (AdapterError naming the module otherwise)."""
        from anec.models.config import check_adapter

        check_adapter(self, frontend.tensor_spec(), frontend.linear_shape, AdapterError)  # type: ignore[attr-defined]

    def inputs_for(self, slot: LoraSlot) -> tuple[np.ndarray, np.ndarray]:
        """The ``A``/``B`` input arrays for ``slot``: scale folded into B, zero-padded to the slot rank."""
        a_in = np.zeros((1, 1, slot.rank, slot.cin), np.float16)
        b_in = np.zeros((1, 1, slot.cout, slot.rank), np.float16)
        ab = self.modules.get(slot.module)
        if ab is None:
            return a_in, b_in
        a, b = ab
        r = a.shape[0]
        if r > slot.rank:
            raise AdapterError(f"adapter '{self.name}' has rank {r} for {slot.module}, "
                               f"but the programs were built for rank {slot.rank}",
                               hint="build the model with a LoRA rank at least as large as every adapter's")
        if a.shape[1] != slot.cin or b.shape[0] != slot.cout:
            raise AdapterError(f"adapter '{self.name}': {slot.module} is {b.shape[0]}x{a.shape[1]}, "
                               f"the model's projection is {slot.cout}x{slot.cin}")
        a_in[0, 0, :r, :] = a
        b_in[0, 0, :, :r] = b * self.scales[slot.module]
        return a_in, b_in

    def check_targets(self, targets: Iterable[str], rank: int) -> None:
        """Fail early if this adapter touches projections the programs have no inputs for."""
        missing = self.targets - set(targets)
        if missing:
            raise AdapterError(f"adapter '{self.name}' adapts {', '.join(sorted(missing))}, "
                               f"but the programs take LoRA inputs only for {', '.join(sorted(targets))}",
                               hint="build the model with these LoRA targets")
        if self.rank > rank:
            raise AdapterError(f"adapter '{self.name}' has rank {self.rank} > the programs' LoRA rank {rank}")
