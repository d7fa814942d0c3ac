"""Mutants that survive because no test can tell them from the original, and why.

A mutant belongs here only when its behaviour is the original's on every input the
code can receive (or differs only in a way nothing can observe: a message that is
never shown, a cache that is rebuilt). Anything a test could tell apart gets a test.

PY_EQUIVALENT: mutmut mutant name -> (the mutant's changed line, as mutmut's diff shows
it with a leading "+", stripped; the reason). The line is checked on every report: when
the code moves and the name now names another mutation, the entry shows as stale.
C_EQUIVALENT: c_mutants.py id -> the reason.
"""

from __future__ import annotations

_NO_PICKLE = "numpy's np.load defaults to allow_pickle=False, and None is false: object arrays are refused either way"

PY_EQUIVALENT: dict[str, tuple[str, str]] = {
    **{
        f"anec.passes.layout.x_can_slice__mutmut_{n}": (
            line,
            "_slice_attrs returns None only for the axis (no view axis, or a view cut along another one); "
            "the start and stop it is given never decide that",
        )
        for n, line in ((13, "+return const is not None and _slice_attrs(const, axis, 1, 1, rw) is not None"),
                        (14, "+return const is not None and _slice_attrs(const, axis, 0, 2, rw) is not None"))
    },
    "anec.passes.dce.x_remove_dead_nodes__mutmut_7": (
        "+if id(results[0]) in live if (len(results) == 1) and False else any(id(r) in live for r in results):",
        "for one result, any() over the results is the same test as the direct lookup (the lookup is the fast path)",
    ),
    "anec.passes.dce.x_remove_dead_nodes__mutmut_17": (
        "+for v in node.operands if (not node.optional) and False else node.inputs():",
        "Node.inputs() is the operands followed by the optional (keyword) operands: for a node without "
        "optional operands, the branch this mutant changes, it is a copy of the operands",
    ),
    **{
        f"anec.passes.weights_as_inputs.xǁWeightsAsInputsǁrun__mutmut_{n}": (
            line,
            "the weight const is renamed only to free its name for the input and is erased a few lines "
            "later: the name it is given in between is never read",
        )
        for n, line in ((46, "+graph.rename_value(r, None)  # the input takes its name"),
                        (51, '+graph.rename_value(r, graph.fresh_name(base + "XX_constXX"))  # the input takes its name'),
                        (52, '+graph.rename_value(r, graph.fresh_name(base + "_CONST"))  # the input takes its name'))
    },
    **{
        f"anec.passes.weights_as_inputs.xǁWeightsAsInputsǁrun__mutmut_{n}": (
            line, "a missing key gives None instead of [], and `or []` turns either into []",
        )
        for n, line in ((5, '+entries = list(graph.meta.get("weight_inputs", None) or [])'),
                        (7, '+entries = list(graph.meta.get("weight_inputs", ) or [])'))
    },
    **{
        f"anec.passes.manager.{fn}__mutmut_{n}": (
            line,
            "the manager drops the verifier's warnings (unused values) and raises only its errors: "
            "computing the warnings as well changes the cost, not the result",
        )
        for fn, n, line in (("x__verify_after", 8, "+verify(graph, warnings=None)"),
                            ("x__verify_after", 10, "+verify(graph, )"),
                            ("x__verify_after", 11, "+verify(graph, warnings=True)"),
                            ("x_run_pipeline", 12, "+verify(target, warnings=None)"),
                            ("x_run_pipeline", 14, "+verify(target, )"),
                            ("x_run_pipeline", 15, "+verify(target, warnings=True)"))
    },
    **{
        f"anec.passes.manager.x_run_passes__mutmut_{n}": (
            line,
            "without the change log the manager verifies the whole func, which accepts and refuses exactly "
            "what the incremental check does, with the same error (tests/passes/test_manager_verify_changes.py): "
            "only the cost differs",
        )
        for n, line in ((20, "+_verify_after(graph, ctx, f\"pass '{p.name}'\", changes=None)"),
                        (24, "+_verify_after(graph, ctx, f\"pass '{p.name}'\", )"))
    },
    "anec.passes.rewrite.x_rewrite_greedily__mutmut_4": (
        "+changed = None",
        "changed is read only by `if not changed` and is otherwise only set to True: None is false as False is",
    ),
    **{
        f"anec.passes.rewrite.xǁRewriterǁ{fn}__mutmut_{n}": (
            line,
            "_insert hands the optional operands to Graph.create_node, which stores dict(optional or {}): "
            "None and {} give the same empty dict",
        )
        for fn, n, line in (("const_value", 23, '+return self._insert("const", [], attrs, types, None, None, suffix, at)'),
                            ("const_weight", 20,
                             '+return self._insert("const", [], dict(attrs), types, None, None, suffix, at)'))
    },
    "anec.passes.annotate_sram.x_sram_report__mutmut_117": (
        "+operands = n.operands if (not n.optional) and False else n.inputs()",
        "Node.inputs() is the operands followed by the optional (keyword) operands: for a node without "
        "optional operands, the branch this mutant changes, it is a copy of the operands",
    ),
    "anec.passes.annotate_sram.x_sram_report__mutmut_120": (
        "+for v in (operands if (len(operands) < 2) and False else {id(v): v for v in operands}.values()):",
        "with fewer than two operands there is nothing to deduplicate: the id-keyed dict holds the same "
        "values in the same order (the list is the fast path)",
    ),
    "anec.passes.annotate_sram.x_sram_report__mutmut_141": (
        "+out_bytes = results[0].type.nbytes if (len(results) == 1) and False else sum(",
        "for one result, the sum over the results is that result's bytes (the direct read is the fast path)",
    ),
    "anec.passes.annotate_sram.x_sram_report__mutmut_171": (
        "+graph.annotate(n, notes, drop=SRAM_KEYS if (n.annotations) or True else ())",
        "the keys are dropped from the node's annotations before the new ones are set: dropping them from "
        "empty annotations, the branch this mutant changes, removes nothing",
    ),
    "anec.passes.annotate_sram.x_sram_report__mutmut_18": (
        "+delta = [0] * (len(steps) + 2)",
        "delta is written at indexes up to end + 1 <= len(steps) and read at indexes below len(steps): "
        "a longer list's extra slot is never written nor read",
    ),
    "anec.passes.annotate_sram.x_sram_report__mutmut_63": (
        "+break",
        "the loop is over a const's results and a const has exactly one result (the verifier refuses "
        "others: 'const has exactly one result'): break and continue both end it",
    ),
    "anec.passes.listing.x_format_passes__mutmut_68": (
        '+why = inspect.getdoc(_pipelines) or "XXXX"',
        "anec/passes/pipelines.py has a module docstring, so the fallback is never used",
    ),
    "anec.mil.manifest.x__bound__mutmut_12": (
        '+return f"2^{n.bit_length() - 1}" if n > 1 << 20 and n & (n - 2) == 0 else str(n)',
        "for n > 2: an odd n keeps bit 0 in n & (n - 2), and an even n = 2b gives 2 * (b & (b - 1)), zero only "
        "when b is a power of two; so n & (n - 2) == 0 exactly when n & (n - 1) == 0",
    ),
    "anec.mil.beneath.xǁBeneathǁ_error__mutmut_14": (
        "+k = kind_of(os.stat(name, dir_fd=dfd, follow_symlinks=None).st_mode)",
        "os.stat tests follow_symlinks for truth: None is false like False, so the link itself is stat'ed",
    ),
    "anec.mil.beneath.xǁBeneathǁkind__mutmut_7": (
        "+st = os.stat(name, dir_fd=self._fd, follow_symlinks=None)",
        "os.stat tests follow_symlinks for truth: None is false like False, so the link itself is stat'ed",
    ),
    "anec.mil.beneath.xǁBeneathǁread__mutmut_12": (
        "+dfd = self._walk(parts, rel, what, whole=None)",
        "_walk reads `whole` only as the test of `parts if whole else parts[:-1]`, where None is false like False",
    ),
    "anec.mil.beneath.xǁBeneathǁread__mutmut_33": (
        "+raise self._error(e, dfd, parts[-1], rel, rel, what, expect_dir=None) from None",
        "_error reads `expect_dir` only as the test that picks the word \"directory\" or \"regular file\", "
        "where None is false like False",
    ),
    "anec.mil.beneath.x__read_exactly__mutmut_40": (
        '+extra = ""',
        "in the loop `extra` is read only as the test of `extra if extra else os.read(...)`, where \"\" is false like None",
    ),
    "anec.ir.interp.x_load_input__mutmut_3": ("+arr = np.load(path, allow_pickle=None)", _NO_PICKLE),
    "anec.ir.interp.x_load_input__mutmut_5": ("+arr = np.load(path, )", _NO_PICKLE),
    "anec.ir.interp.x_random_inputs__mutmut_10": (
        "+arr = rng.integers(0, 2, size=t.shape).astype(None)",
        "the draws become float 0.0/1.0 instead of False/True, and the last line converts every input "
        "to its declared dtype (bool): the same array",
    ),
    "anec.ir.interp.x_random_inputs__mutmut_14": (
        "+arr = rng.integers(2, size=t.shape).astype(bool)",
        "Generator.integers(2) is integers(0, 2): the same range and the same draws",
    ),
    "anec.ir.interp.x__convert_input__mutmut_22": (
        '+ok = kind in "XXfiuXX"',
        "a dtype kind is one character and numpy has no kind 'X': the same kinds are accepted",
    ),
    "anec.ir.interp.x__convert_input__mutmut_32": (
        '+ok = kind in "XXiuXX" or kind == "b"',
        "a dtype kind is one character and numpy has no kind 'X': the same kinds are accepted",
    ),
    **{
        f"anec.passes.fuse_casts.x__kind__mutmut_{n}": (
            line,
            "_kind's names are only compared with each other and with \"int\" (in folds): renaming the float "
            "or the bool kind consistently changes no comparison",
        )
        for n, line in ((3, '+return "XXfloatXX" if d.is_float else "bool" if d == DType.bool else "int"'),
                        (4, '+return "FLOAT" if d.is_float else "bool" if d == DType.bool else "int"'),
                        (7, '+return "float" if d.is_float else "XXboolXX" if d == DType.bool else "int"'),
                        (8, '+return "float" if d.is_float else "BOOL" if d == DType.bool else "int"'))
    },
    "anec.passes.fuse_casts.x_fold_cast_into_value__mutmut_22": (
        '+converted = OPS["cast"].ref([held], None, {"dtype": _target(node)})[0]',
        "cast has no optional operands: its reference never reads the second argument",
    ),
    **{
        f"anec.passes.fuse_casts.x_fold_cast_into_value__mutmut_{n}": (
            line,
            "the new const's own name is transient: Rewriter.replace erases the dead cast and renames the "
            "const to the cast's name, so the suffix never shows",
        )
        for n, line in ((47, "+return rw.const_value(value, node.result.type, suffix=None, at=node)"),
                        (51, "+return rw.const_value(value, node.result.type, at=node)"))
    },
    **{
        f"anec.passes.fuse_casts.x_fold_cast_into_value__mutmut_{n}": (
            line,
            "at=None means the rewriter's anchor, which rewrite_greedily sets to the node the rule runs on: "
            "the same node",
        )
        for n, line in ((48, "+return rw.const_value(value, node.result.type, suffix=str(_target(node)), at=None)"),
                        (52, "+return rw.const_value(value, node.result.type, suffix=str(_target(node)), )"))
    },
    **{
        f"anec.passes.fuse_casts.x_fold_cast_into_weight__mutmut_{n}": (
            line,
            "the new const's own name is transient: Rewriter.replace erases the dead cast and renames the "
            "const to the cast's name, so the suffix never shows",
        )
        for n, line in ((28, "+return rw.const_weight(dict(const.attrs), const.result.type.with_dtype(b), suffix=None,"),
                        (32, "+return rw.const_weight(dict(const.attrs), const.result.type.with_dtype(b), at=node)"),
                        (36, "+return rw.const_weight(dict(const.attrs), const.result.type.with_dtype(b), suffix=str(None),"))
    },
    **{
        f"anec.passes.fuse_casts.x_fold_cast_into_weight__mutmut_{n}": (
            line,
            "at=None means the rewriter's anchor, which rewrite_greedily sets to the node the rule runs on: "
            "the same node",
        )
        for n, line in ((29, "+at=None)"), (33, "+)"))
    },
    "anec.passes.fuse_casts.xǁFuseCastsǁrun__mutmut_9": (
        "+rewrite_greedily(graph, CAST_RULES, Rewriter(graph, ctx, None))",
        "the rewriter's pass name appears only in the no-fixpoint error, which the cast rules cannot reach: "
        "each rule removes a cast or replaces two by one",
    ),
    **{
        f"anec.passes.dce.x_remove_dead_nodes__mutmut_{n}": (
            line,
            "live_uses is only tested for being nonzero (a value with a live user): a None default, a count "
            "that starts at 1, steps by -1 or always reads 1 is nonzero exactly when the original is",
        )
        for n, line in ((9, "+if any(live_uses.get(id(r), None) or id(r) in outputs for r in node.results):"),
                        (11, "+if any(live_uses.get(id(r), ) or id(r) in outputs for r in node.results):"),
                        (18, "+live_uses[id(v)] = live_uses.get(id(v), 0) - 1"),
                        (19, "+live_uses[id(v)] = live_uses.get(None, 0) + 1"),
                        (23, "+live_uses[id(v)] = live_uses.get(id(None), 0) + 1"),
                        (24, "+live_uses[id(v)] = live_uses.get(id(v), 1) + 1"))
    },
    **{
        f"anec.passes.fuse_casts.x__python_literal__mutmut_{n}": (
            line,
            "numpy's reshape takes any negative size as the one inferred dimension: reshape(-2) is reshape(-1)",
        )
        for n, line in ((7, "+if scalar and arr.size and np.all(arr == arr.reshape(-2)[0]):"),
                        (11, "+return arr.reshape(-2)[0].item()"))
    },
    "anec.passes.fuse_casts.x_fold_cast_into_value__mutmut_53": (
        "+return rw.const_value(value, node.result.type, suffix=str(None), at=node)",
        "the new const's own name is transient: Rewriter.replace erases the dead cast and renames the "
        "const to the cast's name, so the suffix never shows",
    ),
    "anec.passes.dce.x_remove_dead_nodes__mutmut_25": (
        "+live_uses[id(v)] = live_uses.get(id(v), 0) + 2",
        "live_uses is only tested for being nonzero: counting by 2 is nonzero exactly when counting by 1 is",
    ),
    **{
        f"anec.passes.emit_mil.xǁEmitMilǁrun__mutmut_{n}": (
            line,
            "bool(None) is False: an absent pack_weights option still means no packing",
        )
        for n, line in (
            (29, '+graph, plan, ctx.target, ctx.weights, rewrites, bool(ctx.option("pack_weights", None)))'),
            (31, '+graph, plan, ctx.target, ctx.weights, rewrites, bool(ctx.option("pack_weights", )))'),
            (44, '+program = emit_mil(graph, ctx.target, pack_weights=bool(ctx.option("pack_weights", None)))'),
            (46, '+program = emit_mil(graph, ctx.target, pack_weights=bool(ctx.option("pack_weights", )))'))
    },
    **{
        f"anec.ir.interp.x_interpret__mutmut_{n}": (
            line,
            "the cast's reference (_ref_cast in anec/ir/ops.py) already returns its target dtype, which the "
            "verifier makes the result's dtype: the interpreter's own astype after a cast changes no value",
        )
        for n, line in ((81, '+if node.op == "XXcastXX":'), (82, '+if node.op == "CAST":'),
                        (84, "+outs = [np.asarray(outs[0]).astype(None)]"))
    },
    **{
        f"anec.ir.interp.x__convert_input__mutmut_{n}": (
            f"+return exact.astype(_storage_dtype(t, mode), {arg})",
            "`exact` is a fresh array (astype copies by default): copying it again or not changes nothing",
        )
        for n, arg in ((59, "copy=None"), (61, ""), (66, "copy=True"))
    },
    **{
        f"anec.ir.interp.x__store__mutmut_{n}": (
            f"+return arr.astype(_storage_dtype(t, mode), {arg})",
            "copy= only decides whether a result already of the storage dtype is copied: the values are the "
            "same, inputs are copied on entry (_convert_input's astype), and no op reference writes into an "
            "array in place, so no later value can see the difference",
        )
        for n, arg in ((8, "copy=None"), (10, ""), (15, "copy=True"))
    },
    **{
        f"anec.passes.report.x__func_report__mutmut_{n}": (
            line,
            "the column widths are the max over the func's nodes; the default is only taken for a func "
            "without nodes, which prints no node line, so no width is ever read",
        )
        for n, line in ((144, "+default=None)"), (147, "+default=5)"),
                        (150, "+opw = max((len(n.op) for n in graph.nodes), default=None)"),
                        (153, "+opw = max((len(n.op) for n in graph.nodes), default=5)"),
                        (156, "+locw = max((len(_where(n)) for n in graph.nodes), default=None)"),
                        (159, "+locw = max((len(_where(n)) for n in graph.nodes), default=2)"))
    },
    **{
        f"anec.passes.report.x__func_report__mutmut_{n}": (
            line,
            "PREPARE is dce, fuse-casts, dce, annotate-sram: the fallback label is only made for "
            "annotate-sram, which writes graph.meta['sram'] and removes no node, so note_removed never "
            "stores it",
        )
        for n, line in ((50, "+label = _REMOVED_BY.get(p.name, None)"),
                        (52, "+label = _REMOVED_BY.get(p.name, )"))
    },
    "anec.passes.report.x__func_report__mutmut_58": (
        '+if p.name == "dce" and i > 1:',
        "PREPARE is dce, fuse-casts, dce, annotate-sram: dce runs at i = 0 and i = 2, where i > 0 and "
        "i > 1 agree",
    ),
    "anec.passes.report.x__func_report__mutmut_126": (
        '+if onode.op == "const" or onode.attrs.get("weight") in kept_keys:',
        "the two differ only for a const legalize erases whose weight key no remaining const holds (or a "
        "value const it erases); legalize erases a const only when a rule re-expresses a weight const as "
        "slice/perm views of the same key (chunk_wide_conv_output, split_wide_conv_input, "
        "split_concat_into_partial_convs, matmul_const_to_conv) or merge_duplicate_weights merges it into "
        "an equal view of the same key; no rule drops a value const or a weight operand, and dce has run "
        "before, so the key of an erased const is always kept",
    ),
    **{
        f"anec.passes.legalize.x_check_float_compute__mutmut_{n}": (
            f'+if node.op == "{op}" or not node.results or rw.settled(node):',
            "a const is skipped by the dtype test that follows as well: its op row admits every dtype "
            "(ALL_DTYPES, bool included), which is not the NUMERIC domain the check looks for",
        )
        for n, op in ((4, "XXconstXX"), (5, "CONST"))
    },
    "anec.passes.legalize.x_check_float_compute__mutmut_2": (
        '+if node.op == "const" and not node.results or rw.settled(node):',
        "a const is skipped by the dtype test that follows as well (its op row admits every dtype, bool "
        "included, which is not the NUMERIC domain the check looks for), and every node has a result "
        "(a const always has its one)",
    ),
    "anec.passes.legalize.x_check_io_dtypes__mutmut_57": (
        "+first = g.nodes[0] if (g.nodes) or True else None",
        "a func with no node cannot reach legalize: the verifier rejects a func that returns no value "
        "and one that returns its input directly, so a func always has the node of an output",
    ),
    **{
        f"anec.passes.legalize.x_check_weight_packing__mutmut_{n}": (
            line,
            "LegalizeRewriter.reject falls back to the graph's span when it is given neither a node nor a "
            "span: the error points at the func either way",
        )
        for n, line in ((12, "+span=None)"), (16, "+)"))
    },
    **{
        name: (
            line,
            "peak_bound only spares plan_partition the one-program stage it bounds from above (the SRAM "
            "report's peak counts every value a stage does, over at least the same steps): at or under "
            "the SRAM the computed stage fits too and the result is None either way, above it the stage "
            "is computed either way",
        )
        for name, line in (
            ("anec.passes.legalize.x_plan_stages__mutmut_10", "+plan = plan_partition(graph, rw.target, peak_bound=None)"),
            ("anec.passes.legalize.x_plan_stages__mutmut_13", "+plan = plan_partition(graph, rw.target, )"),
            ("anec.passes.legalize.x_legalize_graph__mutmut_38", "+plan_stages(rw, None)"),
            ("anec.passes.legalize.x_legalize_graph__mutmut_40", "+plan_stages(rw, )"),
            ("anec.passes.legalize.x_legalize_graph__mutmut_41",
             '+plan_stages(rw, report["peak_bytes"] if (report is not None) and False else None)'),
        )
    },
    "anec.passes.legalize.x_merge_duplicate_weights__mutmut_17": (
        "+if not n.result.uses or n.result not in graph.outputs:",
        "both halves are always true after Graph.replace_all_uses: it moves every use to the first "
        "const and, for a returned value, puts the first const (or an identity of it) in its place in "
        "the outputs, so `and` and `or` agree",
    ),
    **{
        f"anec.passes.legalize_rules.x_expand_gelu_tanh__mutmut_{n}": (
            f'+mode = node.attrs.get("mode", "{default}")',
            'the mode is only compared with "tanh": a gelu without one gets the exact-GELU record '
            "whatever the default string is",
        )
        for n, default in ((162, "XXexactXX"), (163, "EXACT"))
    },
    **{
        f"anec.passes.legalize_rules.x_expand_gelu_tanh__mutmut_{n}": (
            line,
            'the mode is only compared with "tanh": a gelu without one gets the exact-GELU record '
            "whatever the default is, None included",
        )
        for n, line in ((157, '+mode = node.attrs.get("mode", None)'), (159, '+mode = node.attrs.get("mode", )'))
    },
    **{
        f"anec.passes.legalize_rules.{fn}__mutmut_{n}": (
            line,
            "the suffix names the rule's last value, which replaces the node and then takes the node's "
            "name (Rewriter.replace renames a value the rule created once the old node is erased, and "
            "the old name is then free): the suffixed name exists only until then and nothing reads it",
        )
        for fn, n, line in (
            ("x_expand_gelu_tanh", 153, '+y = rw.op("mul", hx, u, suffix="XXgeluXX")'),
            ("x_expand_gelu_tanh", 154, '+y = rw.op("mul", hx, u, suffix="GELU")'),
            ("x_lower_reduce_mean", 64, '+y = rw.op("reduce_sum", scaled, suffix="XXsumXX", **attrs)'),
            ("x_lower_reduce_mean", 65, '+y = rw.op("reduce_sum", scaled, suffix="SUM", **attrs)'),
            ("x_neg_to_mul", 24, '+y = rw.op("mul", x, rw.scalar(-1.0, x.type.dtype, "m1"), suffix="XXmulXX")'),
            ("x_neg_to_mul", 25, '+y = rw.op("mul", x, rw.scalar(-1.0, x.type.dtype, "m1"), suffix="MUL")'),
            ("x_rsqrt_to_pow", 24, '+y = rw.op("pow", x, rw.scalar(-0.5, x.type.dtype, "e"), suffix="XXpowXX")'),
            ("x_rsqrt_to_pow", 25, '+y = rw.op("pow", x, rw.scalar(-0.5, x.type.dtype, "e"), suffix="POW")'),
            ("x_partial_convs", 51, '+total = rw.op("add", total, conv.optional["bias"], suffix="XXbiasXX")'),
            ("x_partial_convs", 52, '+total = rw.op("add", total, conv.optional["bias"], suffix="BIAS")'),
            ("x_split_conv_bias", 31, '+y = rw.op("add", conv, node.optional["bias"], suffix="XXbiasXX")'),
            ("x_split_conv_bias", 32, '+y = rw.op("add", conv, node.optional["bias"], suffix="BIAS")'),
            ("x_conv_dynamic_weight_to_matmul", 79,
             '+out = rw.op("add", out, node.optional["bias"], suffix="XXbiasXX")'),
            ("x_conv_dynamic_weight_to_matmul", 80,
             '+out = rw.op("add", out, node.optional["bias"], suffix="BIAS")'),
            ("x_expand_gelu_tanh", 146, '+y = rw.op("mul", hx, u, suffix=None)'),
            ("x_expand_gelu_tanh", 150, '+y = rw.op("mul", hx, u, )'),
            ("x_partial_convs", 42, '+total = rw.op("add", total, conv.optional["bias"], suffix=None)'),
            ("x_partial_convs", 46, '+total = rw.op("add", total, conv.optional["bias"], )'),
            ("x_lower_reduce_mean", 57, '+y = rw.op("reduce_sum", scaled, suffix=None, **attrs)'),
            ("x_lower_reduce_mean", 60, '+y = rw.op("reduce_sum", scaled, **attrs)'),
            ("x_split_conv_bias", 22, '+y = rw.op("add", conv, node.optional["bias"], suffix=None)'),
            ("x_split_conv_bias", 26, '+y = rw.op("add", conv, node.optional["bias"], )'),
            ("x_conv_dynamic_weight_to_matmul", 70, '+out = rw.op("add", out, node.optional["bias"], suffix=None)'),
            ("x_conv_dynamic_weight_to_matmul", 74, '+out = rw.op("add", out, node.optional["bias"], )'),
        )
    },
    **{
        f"anec.passes.legalize_rules.{fn}__mutmut_{n}": (
            line,
            "without a suffix Rewriter.op names the value after its op (name_for(suffix or opname)), and "
            "the suffix here is the op's name: the same name",
        )
        for fn, n, line in (
            ("x_expand_gelu_tanh", 99, '+t = rw.op("tanh", s, suffix=None)'),
            ("x_expand_gelu_tanh", 102, '+t = rw.op("tanh", s, )'),
            ("x_rsqrt_to_pow", 7, '+y = rw.op("pow", x, rw.scalar(-0.5, x.type.dtype, "e"), suffix=None)'),
            ("x_rsqrt_to_pow", 11, '+y = rw.op("pow", x, rw.scalar(-0.5, x.type.dtype, "e"), )'),
            ("x_neg_to_mul", 7, '+y = rw.op("mul", x, rw.scalar(-1.0, x.type.dtype, "m1"), suffix=None)'),
            ("x_neg_to_mul", 11, '+y = rw.op("mul", x, rw.scalar(-1.0, x.type.dtype, "m1"), )'),
        )
    },
    "anec.passes.legalize_rules.x_split_concat_into_partial_convs__mutmut_20": (
        '+if u.op != "conv1x1" or u.operands[0] is not out and u.operands[1] is out \\',
        "every conv the mutant lets through is refused two lines later: one that reads the concat only "
        "as its bias by the bias test, one that reads it as input and weight by can_slice, as the "
        "concat is no weight const (weight_const gives None, and can_slice(None, ...) is False)",
    ),
    **{
        f"anec.passes.legalize_rules.x_matmul_const_to_conv__mutmut_{n}": (
            line,
            "the default is only read through bool(): bool(None) is False, as bool(False) is",
        )
        for n, line in (
            (13, '+tx, ty = bool(node.attrs.get("transpose_x", False)), bool(node.attrs.get("transpose_y", None))'),
            (15, '+tx, ty = bool(node.attrs.get("transpose_x", False)), bool(node.attrs.get("transpose_y", ))'),
            (5, '+tx, ty = bool(node.attrs.get("transpose_x", None)), bool(node.attrs.get("transpose_y", False))'),
            (7, '+tx, ty = bool(node.attrs.get("transpose_x", )), bool(node.attrs.get("transpose_y", False))'),
        )
    },
    "anec.passes.legalize_rules.x_rules_for__mutmut_17": (
        "+rules[op] = rules.get(None, ()) + fns",
        "no op a target switch adds rules for (reduce_mean, softmax) has device rules or op-table rules, "
        "so rules.get(op, ()) is (), as rules.get(None, ()) is",
    ),
    **{
        f"anec.passes.legalize_rules.x_split_to_slices__mutmut_{n}": (
            line,
            "each slice ends up under its result's name: the split node is erased before the renaming "
            "loop, so the result's name is free unless the slice already took it (a returned result's "
            "name moves to its slice in replace_all_uses); the name a slice is created with is never read",
        )
        for n, line in (
            (33, '+s = rw.op("slice", x, begin=begin, end=end, name=None)'),
            (38, '+s = rw.op("slice", x, begin=begin, end=end, )'),
            (50, "+if s.name != name or not g.has_value_name(name):"),
            (53, "+if s.name != name and not g.has_value_name(None):"),
        )
    },
    "anec.passes.legalize.x_check_io_tensors__mutmut_10": (
        "+ok = None",
        "the flag is only read as a truth value (legalize_graph: `if check_io_tensors(rw):`), and None "
        "is false like False",
    ),
    "anec.passes.legalize.x_check_io_tensors__mutmut_39": (
        '+node=v.producer if (kind == "output") or True else None, span=span)',
        "an input is a func input, whose producer is None: the node passed is None either way",
    ),
    "anec.passes.legalize.x_check_weight_range__mutmut_30": (
        "+a = arr.astype(None)",
        "numpy reads dtype None as the default float64: the same conversion as astype(np.float64)",
    ),
    "anec.passes.partition.x_blob_cap_of__mutmut_2": (
        "+scalar = None",
        "the flag is only or-ed with booleans and read by target.blob_cap as a truth value, where None is"
        " false like False",
    ),
    "anec.passes.partition.x_blob_cap_of__mutmut_4": (
        "+for v in x.operands if (not x.optional) and False else x.inputs():",
        "Node.inputs() is the operands followed by the optional operands: without optional operands it is"
        " the operands",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_20": (
        "+if not over_blobs and not force and peak_bound is not None and peak_bound < target.sram_bytes:",
        "a shortcut only: at a bound equal to the SRAM the planner computes the one-program peak instead,"
        " which is at most the bound, and returns None all the same",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_30": (
        "+one = Stage(None, len(items))",
        "the stage's start only slices the items (items[None:end] is items[0:end])",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_39": (
        "+_fill(graph, items, sweep, one, None, cap)",
        "with the cap given, _fill never reads the target",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_40": (
        "+_fill(graph, items, sweep, one, target, None)",
        "without the cap, _fill computes it as blob_cap_of(items, target)[1], the very value passed",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_46": (
        "+_fill(graph, items, sweep, one, target, )",
        "without the cap, _fill computes it as blob_cap_of(items, target)[1], the very value passed",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_57": (
        "+lo = [1] * (n + 1)",
        "lo[0] is never read (the search reads lo[i] for i >= 1, each assigned before)",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_59": (
        "+lo = [0] * (n + 2)",
        "the extra element is never read",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_128": (
        "+INF = None",
        "INF is a sentinel compared by equality only with entries never assigned a cost (a reachable cost"
        " is never None)",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_129": (
        "+INF = (1 >> 62, 1 << 62)",
        "INF is a sentinel compared by equality only; a real cost (stages >= 1 past f[0] = (0, 0), bytes "
        "< 2**62) never equals it",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_130": (
        "+INF = (2 << 62, 1 << 62)",
        "INF is a sentinel compared by equality only; a real cost never equals it",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_131": (
        "+INF = (1 << 63, 1 << 62)",
        "INF is a sentinel compared by equality only; a real cost never equals it",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_132": (
        "+INF = (1 << 62, 1 >> 62)",
        "INF is a sentinel compared by equality only; a real cost (stages < 2**62) never equals it",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_133": (
        "+INF = (1 << 62, 2 << 62)",
        "INF is a sentinel compared by equality only; a real cost never equals it",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_134": (
        "+INF = (1 << 62, 1 << 63)",
        "INF is a sentinel compared by equality only; a real cost never equals it",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_138": (
        "+f: list[tuple[int, int]] = [INF] * (n + 2)",
        "the extra element is never read",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_141": (
        "+parent = [+1] * (n + 1)",
        "parent[0] is never read (the walk back stops at 0) and every other entry read is assigned first",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_142": (
        "+parent = [-2] * (n + 1)",
        "parent[0] is never read (the walk back stops at 0) and every other entry read is assigned first",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_144": (
        "+parent = [-1] * (n + 2)",
        "the extra element is never read",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_147": (
        "+f[0] = (1, 0)",
        "the same offset on every cost: the minima and the cuts chosen are the same, and costs are never "
        "shown",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_148": (
        "+f[0] = (0, 1)",
        "the same offset on every cost: the minima and the cuts chosen are the same, and costs are never "
        "shown",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_152": (
        "+return (f[j][0] + 2, f[j][1] + sweep.cross[j])",
        "costs compare lexicographically: 2 per stage orders plans as 1 per stage does (fewest stages, "
        "then bytes)",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_165": (
        "+if f[j] != INF or (j == 0 or not sweep.bad[j]):",
        "f[j] != INF only for j = 0 and allowed cuts (a forbidden cut is skipped before f is set), and an"
        " allowed j with f[j] == INF means the search already raised",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_168": (
        "+if f[j] != INF and (j != 0 or not sweep.bad[j]):",
        "bad[0] is False, and f[j] != INF already implies an allowed cut for j > 0 (a forbidden cut is "
        "skipped before f is set)",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_169": (
        "+if f[j] != INF and (j == 1 or not sweep.bad[j]):",
        "bad[0] is False, and f[1] != INF already implies that cut 1 is allowed (a forbidden cut is "
        "skipped before f is set)",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_183": (
        "+if i <= n and sweep.bad[i]:",
        "bad[n] is always False (the sweep marks only the cuts 1..n-1)",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_12": (
        "+bad = [0] * (n + 3)",
        "the extra slot is never read (cuts are 1..n-1; the sweep reads up to n)",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_18": (
        "+d = self.pos[id(v.producer)] if v.producer is not None else +1",
        "d of a func input is read only when it has no uses, where last = start = d and nothing is added",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_19": (
        "+d = self.pos[id(v.producer)] if v.producer is not None else -2",
        "d of a func input is read only when it has no uses, where last = start = d and nothing is added",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_35": (
        "+if last > start or last >= 1:",
        "last < start never happens (a value's last use is at or after its definition, an input's at or "
        "after its first use), and at last == start the range is empty: added and taken back at the same "
        "slot",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_36": (
        "+if last >= start and last >= 1:",
        "at last == start the range is empty: lo = start + 1 = hi + 1, so the bytes are added and taken "
        "back at the same slot",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_68": (
        "+out_cross = [1] * (n + 1)",
        "every slot 0..n is assigned in the loop below before it is read",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_7": (
        "+cross = [0] * (n + 3)",
        "the extra slot is never read (cuts are 1..n-1; the sweep reads up to n)",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_70": (
        "+out_cross = [0] * (n + 2)",
        "the extra slot is never read (cuts are 1..n-1; the sweep reads up to n)",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_73": (
        "+out_bad = [True] * (n + 1)",
        "every slot 0..n is assigned in the loop below before it is read",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_75": (
        "+out_bad = [False] * (n + 2)",
        "the extra slot is never read (cuts are 1..n-1; the sweep reads up to n)",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_87": (
        "+out_cross[j] = c if (0 < j < n) or True else 0",
        "at j = 0 and j = n nothing is open (ranges start at 1 and end by n), so the sum is 0 and the "
        "count 0 there anyway",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_89": (
        "+out_cross[j] = c if 0 <= j < n else 0",
        "at j = 0 and j = n nothing is open (ranges start at 1 and end by n), so the sum is 0 and the "
        "count 0 there anyway",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_90": (
        "+out_cross[j] = c if 0 < j <= n else 0",
        "at j = 0 and j = n nothing is open (ranges start at 1 and end by n), so the sum is 0 and the "
        "count 0 there anyway",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_94": (
        "+out_bad[j] = b > 0 if (0 < j < n) or True else False",
        "at j = 0 and j = n nothing is open (ranges start at 1 and end by n), so the sum is 0 and the "
        "count 0 there anyway",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_98": (
        "+out_bad[j] = b > 0 if 0 <= j < n else False",
        "at j = 0 and j = n nothing is open (ranges start at 1 and end by n), so the sum is 0 and the "
        "count 0 there anyway",
    ),
    "anec.passes.partition.xǁ_Sweepǁ_cuts__mutmut_99": (
        "+out_bad[j] = b > 0 if 0 < j <= n else False",
        "at j = 0 and j = n nothing is open (ranges start at 1 and end by n), so the sum is 0 and the "
        "count 0 there anyway",
    ),
    "anec.mil.blobfile.x_dump__mutmut_23": (
        "+a = arr.astype(None)",
        "astype(None) converts to numpy's default dtype, float64: the same array",
    ),
    "anec.mil.blobfile.xǁBlobWriterǁadd__mutmut_13": (
        "+a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder(\"<\"), copy=None))",
        "ndarray.astype's copy is a truth value here: None is False, a view when the dtype already matches",
    ),
    "anec.mil.blobfile.xǁBlobWriterǁadd__mutmut_50": (
        "+self._parts.append(memoryview(a.reshape(-2)).cast(\"B\"))",
        "numpy reads any negative size in reshape as the one inferred dimension: reshape(-2) is reshape(-1)",
    ),
    "anec.mil.blobfile.xǁBlobWriterǁadd__mutmut_52": (
        "+self._parts.append(memoryview(a.reshape(-1)).cast(\"b\"))",
        "the view is only written (file.write, bytes.join), which take any buffer's raw bytes: signed or unsigned bytes are the same bytes",
    ),
    "anec.mil.blobfile.xǁBlobWriterǁwritten__mutmut_9": (
        "+self._parts = None",
        "once _file is set nothing reads _parts again (to_bytes and write_to read the mapping, add refuses): [] and None only let go of the arrays",
    ),
    "anec.mil.blobfile.xǁBlobReaderǁ__init____mutmut_19": (
        "+self.header_count, version = _HEADER.unpack_from(self.data, )",
        "struct.unpack_from's offset defaults to 0",
    ),
    "anec.mil.pipeline.xǁPipelineArtifactǁbuild__mutmut_35": (
        "+art = Artifact.build(sg, program, target, weights, )",
        "Artifact.build's rewrites defaults to (), which it only turns into the stage manifest's "
        "list of rewrites: [] from () as from []",
    ),
    **{
        f"anec.mil.pipeline.xǁPipelineArtifactǁfiles__mutmut_{n}": (
            line,
            "Python looks codecs up by their normalized (lower-cased) name: 'UTF-8' is the utf-8 codec",
        )
        for n, line in ((9, '+out[PROGRAM_IR_FILE] = self.program_ir.encode("UTF-8")'),
                        (16, '+out[MANIFEST_FILE] = (format_json(self.manifest) + "\\n").encode("UTF-8")'))
    },
    "anec.mil.pipeline.x__load_dir__mutmut_31": (
        "+return PipelineArtifact._load(d, manifest, None)",
        "PipelineArtifact._load never reads its raw argument (the manifest was checked against the index "
        "and parsed from those bytes by _load_dir)",
    ),
    "anec.mil.emitter.x__ints__mutmut_2": (
        "+arr = np.asarray(list(values), dtype=np.int32).reshape(None)",
        "the values are a flat list (an 'ints' attribute is a list of ints, and every lowering's params "
        "build flat lists), so the array is 1-D, which reshape(None) leaves as reshape(-1) does",
    ),
    **{
        f"anec.mil.emitter.x__ints__mutmut_{n}": (
            line,
            "every int list the op table's lowerings give is within int32 (axes and perms below the rank; "
            "reshape shapes, slice bounds and strides, pad widths at most a dim, which the verifier keeps "
            "below 2**31), and each element is written as str(int(v)): an int64 (or, for an empty list, "
            "float64) array gives the same text and the same int32 tensor type",
        )
        for n, line in ((4, "+arr = np.asarray(list(values), dtype=None).reshape(-1)"),
                        (6, "+arr = np.asarray(list(values), ).reshape(-1)"))
    },
    **{
        f"anec.mil.emitter.x__sanitize__mutmut_{n}": (
            line,
            "IR value names are [A-Za-z0-9_]+ (anec/ir/lexical.py VALUE_NAME, enforced by the grammar, the "
            "Builder and the verifier, which the pass manager runs on its input): a name has no character "
            "to replace and is never empty, and one starting with '_' is a MIL identifier (every MIL word "
            "starts with a letter), so _sanitize only sees names starting with a digit or MIL words",
        )
        for n, line in ((9, '+s = re.sub(r"XX[^A-Za-z0-9_]XX", "_", name) or "v"'),
                        (10, '+s = re.sub(r"[^a-za-z0-9_]", "_", name) or "v"'),
                        (12, '+s = re.sub(r"[^A-Za-z0-9_]", "XX_XX", name) or "v"'),
                        (13, '+s = re.sub(r"[^A-Za-z0-9_]", "_", name) or "XXvXX"'),
                        (14, '+s = re.sub(r"[^A-Za-z0-9_]", "_", name) or "V"'),
                        (20, '+if not (s[0].isalpha() or s[0] == "XX_XX"):'))
    },
    "anec.mil.emitter.xǁ_Spellǁvalue__mutmut_12": (
        "+return self.scalar(str(t.dtype), self.element(t.dtype, arr.reshape(None).item()))",
        "for a rank-0 type the array is 0-d (const_literal gives the declared shape (), _scalar a 0-d "
        "array): reshape(None) keeps it 0-d, and item() of a one-element array is that element whatever "
        "its shape",
    ),
    **{
        name: (
            line,
            "numpy takes any negative size in reshape as the one unknown dimension: reshape(-2) "
            "flattens exactly as reshape(-1) does (no warning under numpy 2)",
        )
        for name, line in (
            ("anec.mil.emitter.xǁ_Spellǁvalue__mutmut_22",
             '+flat = ", ".join(self.element(t.dtype, v) for v in arr.reshape(-2).tolist())'),
            ("anec.mil.emitter.x__ints__mutmut_9",
             "+arr = np.asarray(list(values), dtype=np.int32).reshape(-2)"))
    },
    "anec.mil.emitter.xǁ_Emitterǁ_assign_names__mutmut_60": (
        "+span=v.span or (v.producer.span if (v.producer is not None) and False else None) or g.return_span or g.span,",
        "a value without a span comes from a node without one: Graph.add_op gives the results the node's "
        "span, the parser each result its own token, replace_all_uses' identity and frontends/layout.py "
        "set both, partition copies both from the source; so the producer's span is never the one used",
    ),
    "anec.mil.emitter.xǁ_Emitterǁ_assign_names__mutmut_76": (
        "+internal = [r for n in g.nodes for r in n.results if id(None) not in self.names]",
        "the list then also holds the func outputs, which are MIL identifiers (others were refused just "
        "before) already in names and taken: the first loop sets the same name again and the second "
        "skips them",
    ),
    **{
        f"anec.mil.emitter.xǁ_Binaryǁround_exact__mutmut_{n}": (
            line,
            "the test only picks the fast path (the fp64 rounding) or the exact one, and the exact path "
            "rounds the decimal itself correctly for every input (tests/mil/test_mil_literal_rounding.py); "
            "this mutant sends more decimals to the exact path (a representable value, one with more "
            "significant bits, a finite overflow), where the fast path was right: the same value",
        )
        for n, line in (
            (5, "+if r == d or math.isinf(d) and not (math.frexp(d)[0] * (1 << (self.mant + 2))).is_integer():"),
            (6, "+if r == d and math.isinf(d) or not (math.frexp(d)[0] * (1 << (self.mant + 2))).is_integer():"),
            (13, "+if r == d or math.isinf(d) or not (math.frexp(d)[0] * (1 >> (self.mant + 2))).is_integer():"),
            (14, "+if r == d or math.isinf(d) or not (math.frexp(d)[0] * (2 << (self.mant + 2))).is_integer():"),
            (16, "+if r == d or math.isinf(d) or not (math.frexp(d)[0] * (1 << (self.mant + 3))).is_integer():"))
    },
    "anec.mil.emitter.xǁ_Binaryǁround_exact__mutmut_22": (
        "+if a <= Fraction(2) ** e:",
        "the two differ only when a is exactly 2**e; the mutant then uses half the spacing (or the same, "
        "below the normal range), and a power of two is a whole multiple of both: no remainder, the same "
        "v (inf past the range either way)",
    ),
    "anec.mil.emitter.x_float_literal__mutmut_11": (
        "+return \"inf\" if v >= 0 else \"-inf\"",
        "this branch is taken only for an infinite v, which is never 0: v >= 0 and v > 0 agree",
    ),
    "anec.mil.emitter.x_float_literal__mutmut_12": (
        "+return \"inf\" if v > 1 else \"-inf\"",
        "this branch is taken only for an infinite v: +inf > 1 and -inf > 1 answer as > 0 does",
    ),
    "anec.mil.emitter.x_float_literal__mutmut_24": (
        "+return \"-0.0\" if math.copysign(2.0, v) < 0 else \"0\"",
        "copysign(2.0, v) has the sign of v as copysign(1.0, v) has: both are < 0 exactly for a negative zero",
    ),
    "anec.mil.emitter.x_float_literal__mutmut_25": (
        "+return \"-0.0\" if math.copysign(1.0, v) <= 0 else \"0\"",
        "copysign(1.0, v) is +1.0 or -1.0, never 0: <= 0 and < 0 agree",
    ),
    "anec.mil.emitter.x_float_literal__mutmut_26": (
        "+return \"-0.0\" if math.copysign(1.0, v) < 1 else \"0\"",
        "copysign(1.0, v) is +1.0 or -1.0: < 1 and < 0 are both true exactly for -1.0",
    ),
    "anec.mil.artifact.x__link_tree__mutmut_18": (
        "+os.link(name, to / name, src_dir_fd=src.fileno, follow_symlinks=None)",
        "os.link converts follow_symlinks by truth value, so None acts exactly as False.",
    ),
    "anec.mil.artifact.x__link_tree__mutmut_35": (
        "+_write_file(to / name, src.read(name, BLOB_MAX_BYTES, ))",
        "Beneath.read's default for what is \"file\", the very argument removed, so every read and message is "
        "identical.",
    ),
    "anec.mil.artifact.x__early_files__mutmut_33": (
        "+out.append((MIL_FILE, art.mil_text.encode(\"UTF-8\")))",
        "Python's codec lookup ignores case, so \"UTF-8\" is the same codec and gives the same bytes.",
    ),
    "anec.mil.artifact.x__early_files__mutmut_37": (
        "+out.append((PROGRAM_IR_FILE, art.program_ir.encode(\"UTF-8\")))",
        "Python's codec lookup ignores case, so \"UTF-8\" is the same codec and gives the same bytes.",
    ),
    "anec.mil.artifact.x_write_output__mutmut_41": (
        "+return {**rest, OUTPUT_INDEX: (format_json(marker) + \"\\n\").encode(\"UTF-8\")}",
        "Python's codec lookup ignores case, so \"UTF-8\" is the same codec and gives the same bytes.",
    ),
    "anec.mil.artifact.x__fsync_dirs__mutmut_1": (
        "+if len(dirs) <= 4:",
        "With exactly 4 directories the serial loop fsyncs the same directories in the same order and raises "
        "the same first error as the pool (errors are taken in list order), and the caller removes the "
        "temporary tree either way.",
    ),
    "anec.mil.artifact.x__fsync_dirs__mutmut_2": (
        "+if len(dirs) < 5:",
        "With exactly 4 directories the serial loop fsyncs the same directories in the same order and raises "
        "the same first error as the pool (errors are taken in list order), and the caller removes the "
        "temporary tree either way.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_5": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(None, \"O_CLOEXEC\", 0) | getattr(os, \"O_NOFOLLOW\", 0)",
        "os.open makes every descriptor non-inheritable anyway (PEP 446: Python adds O_CLOEXEC itself), so "
        "dropping the explicit flag changes nothing.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_7": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(os, \"O_CLOEXEC\", None) | getattr(os, \"O_NOFOLLOW\", 0)",
        "os has O_CLOEXEC on every POSIX platform anec runs on, so the default is never used.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_10": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(os, \"O_CLOEXEC\", ) | getattr(os, \"O_NOFOLLOW\", 0)",
        "os has O_CLOEXEC on every POSIX platform anec runs on, so the missing default is never needed.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_11": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(os, \"XXO_CLOEXECXX\", 0) | getattr(os, \"O_NOFOLLOW\", 0)",
        "os.open makes every descriptor non-inheritable anyway (PEP 446: Python adds O_CLOEXEC itself), so "
        "dropping the explicit flag changes nothing.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_12": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(os, \"o_cloexec\", 0) | getattr(os, \"O_NOFOLLOW\", 0)",
        "os.open makes every descriptor non-inheritable anyway (PEP 446: Python adds O_CLOEXEC itself), so "
        "dropping the explicit flag changes nothing.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_13": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(os, \"O_CLOEXEC\", 1) | getattr(os, \"O_NOFOLLOW\", 0)",
        "os has O_CLOEXEC on every POSIX platform anec runs on, so the default is never used.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_16": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(os, \"O_CLOEXEC\", 0) | getattr(os, \"O_NOFOLLOW\", None)",
        "os has O_NOFOLLOW on every POSIX platform anec runs on, so the default is never used.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_19": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(os, \"O_CLOEXEC\", 0) | getattr(os, \"O_NOFOLLOW\", )",
        "os has O_NOFOLLOW on every POSIX platform anec runs on, so the missing default is never needed.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_22": (
        "+flags = os.O_RDWR | os.O_CREAT | getattr(os, \"O_CLOEXEC\", 0) | getattr(os, \"O_NOFOLLOW\", 1)",
        "os has O_NOFOLLOW on every POSIX platform anec runs on, so the default is never used.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_39": (
        "+same = os.stat(self.path, follow_symlinks=None).st_ino == os.fstat(fd).st_ino",
        "os.stat converts follow_symlinks by truth value, so None acts exactly as False.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__init____mutmut_3": (
        "+self.fd = None",
        "self.fd is read only by __exit__, which runs only after __enter__ has set it to the locked "
        "descriptor.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__init____mutmut_4": (
        "+self.fd = +1",
        "self.fd is read only by __exit__, which runs only after __enter__ has set it to the locked "
        "descriptor.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__init____mutmut_5": (
        "+self.fd = -2",
        "self.fd is read only by __exit__, which runs only after __enter__ has set it to the locked "
        "descriptor.",
    ),
    "anec.mil.artifact.x__temp_dir__mutmut_10": (
        "+os.mkdir(p, )",
        "os.mkdir's default mode is 0o777, the very value removed.",
    ),
    "anec.mil.artifact.x__temp_dir__mutmut_13": (
        "+raise OSError(None, \"no free temporary name\", str(dest.parent))",
        "Its only handlers (_swap_in, and move_into_place's caller) show just e.strerror, which is unchanged;"
        " no code reads the errno.",
    ),
    "anec.mil.artifact.x__temp_dir__mutmut_15": (
        "+raise OSError(errno.EEXIST, \"no free temporary name\", None)",
        "Its only handlers (_swap_in, and move_into_place's caller) show just e.strerror, which is unchanged;"
        " no code reads the filename.",
    ),
    "anec.mil.artifact.x__temp_dir__mutmut_18": (
        "+raise OSError(errno.EEXIST, \"no free temporary name\", )",
        "Its only handlers (_swap_in, and move_into_place's caller) show just e.strerror, which is unchanged;"
        " no code reads the filename.",
    ),
    "anec.mil.artifact.x__temp_dir__mutmut_21": (
        "+raise OSError(errno.EEXIST, \"no free temporary name\", str(None))",
        "Its only handlers (_swap_in, and move_into_place's caller) show just e.strerror, which is unchanged;"
        " no code reads the filename.",
    ),
    "anec.mil.artifact.xǁ_WriteLockǁ__enter____mutmut_45": (
        "+same = None",
        "same is only tested for truth (if same:), and None is falsy like False.",
    ),
    "anec.mil.artifact.x__swap_in__mutmut_5": (
        "+old: Path | None = \"\"",
        "old is read only by discard(old) after move_into_place has assigned it; on any error the function "
        "raises before that.",
    ),
    "anec.mil.artifact.xǁArtifactǁfiles__mutmut_24": (
        "+out = {MIL_FILE: self.mil_text.encode(\"UTF-8\"), PROGRAM_IR_FILE: self.program_ir.encode(\"utf-8\")}",
        "Python's codec lookup ignores case, so \"UTF-8\" is the same codec and gives the same bytes.",
    ),
    "anec.mil.artifact.xǁArtifactǁfiles__mutmut_27": (
        "+out = {MIL_FILE: self.mil_text.encode(\"utf-8\"), PROGRAM_IR_FILE: self.program_ir.encode(\"UTF-8\")}",
        "Python's codec lookup ignores case, so \"UTF-8\" is the same codec and gives the same bytes.",
    ),
    "anec.mil.artifact.xǁArtifactǁfiles__mutmut_46": (
        "+out[MANIFEST_FILE] = (format_json(self.manifest) + \"\\n\").encode(\"UTF-8\")",
        "Python's codec lookup ignores case, so \"UTF-8\" is the same codec and gives the same bytes.",
    ),
    "anec.mil.artifact.x_load_artifact__mutmut_20": (
        "+for attempt in range(4):",
        "The loop never reaches a fourth attempt: attempt 2 either returns or raises, since only attempts "
        "below 2 continue.",
    ),
    "anec.mil.artifact.x_load_artifact__mutmut_33": (
        "+raise AssertionError(None)  # pragma: no cover",
        "Unreachable: every pass of the loop returns, continues (attempts 0 and 1 only) or raises, so the "
        "last attempt never falls through.",
    ),
    "anec.mil.artifact.x_load_artifact__mutmut_34": (
        "+raise AssertionError(\"XXunreachableXX\")  # pragma: no cover",
        "Unreachable: every pass of the loop returns, continues (attempts 0 and 1 only) or raises, so the "
        "last attempt never falls through.",
    ),
    "anec.mil.artifact.x_load_artifact__mutmut_35": (
        "+raise AssertionError(\"UNREACHABLE\")  # pragma: no cover",
        "Unreachable: every pass of the loop returns, continues (attempts 0 and 1 only) or raises, so the "
        "last attempt never falls through.",
    ),
    "anec.mil.artifact.x__utf8__mutmut_3": (
        "+return data.decode(\"UTF-8\")",
        "Python's codec lookup ignores case, so \"UTF-8\" is the same codec and decodes (and fails) "
        "identically.",
    ),
    "anec.mil.artifact.x__digest__mutmut_10": (
        "+return hashlib.sha256(memoryview(a.reshape(-1)).cast(\"b\")).hexdigest()",
        "hashlib reads the raw buffer, so a signed-byte view of the same memory hashes the same bytes.",
    ),
    "anec.mil.artifact.x__digest__mutmut_8": (
        "+return hashlib.sha256(memoryview(a.reshape(-2)).cast(\"B\")).hexdigest()",
        "numpy reads any negative size in reshape as the one inferred dimension (no warning under numpy 2), "
        "so reshape(-2) is reshape(-1).",
    ),
    "anec.mil.artifact.x__logical_outputs__mutmut_5": (
        "+for e in graph.meta.get(\"logical_outputs\", None) or []:",
        "when the key is absent, the default None becomes [] through `or []`, as [] does.",
    ),
    "anec.mil.artifact.x__logical_outputs__mutmut_7": (
        "+for e in graph.meta.get(\"logical_outputs\", ) or []:",
        "dict.get's default is None, which `or []` turns into [] as the removed [] does.",
    ),
    "anec.mil.artifact.x__logical_inputs__mutmut_6": (
        "+reshaped = {e[\"name\"]: e for e in graph.meta.get(\"logical_inputs\", None) or []}",
        "when the key is absent, the default None becomes [] through `or []`, as [] does.",
    ),
    "anec.mil.artifact.x__logical_inputs__mutmut_8": (
        "+reshaped = {e[\"name\"]: e for e in graph.meta.get(\"logical_inputs\", ) or []}",
        "dict.get's default is None, which `or []` turns into [] as the removed [] does.",
    ),
    "anec.mil.artifact.x_build_weight_inputs__mutmut_5": (
        "+for w in graph.meta.get(\"weight_inputs\", None) or []:",
        "when the key is absent, the default None becomes [] through `or []`, as [] does.",
    ),
    "anec.mil.artifact.x_build_weight_inputs__mutmut_7": (
        "+for w in graph.meta.get(\"weight_inputs\", ) or []:",
        "dict.get's default is None, which `or []` turns into [] as the removed [] does.",
    ),
    "anec.mil.artifact.x_format_json__mutmut_17": (
        "+one = json.dumps(obj, separators=None)  # what the pieces below join to, in C",
        "without indent, json.dumps's default separators are (\", \", \": \"), exactly _ONE_LINE.",
    ),
    "anec.mil.artifact.x_format_json__mutmut_19": (
        "+one = json.dumps(obj, )  # what the pieces below join to, in C",
        "without indent, json.dumps's default separators are (\", \", \": \"), exactly _ONE_LINE.",
    ),
    "anec.mil.artifact.x_format_json__mutmut_43": (
        "+return json.dumps(obj, separators=None)",
        "without indent, json.dumps's default separators are (\", \", \": \"), exactly _ONE_LINE.",
    ),
    "anec.mil.artifact.x_format_json__mutmut_45": (
        "+return json.dumps(obj, )",
        "without indent, json.dumps's default separators are (\", \", \": \"), exactly _ONE_LINE.",
    ),
    "anec.mil.artifact.x_build_blobs__mutmut_8": (
        "+arr = materialize(slot.node, store, copy=None)",
        "materialize uses copy only in astype(copy=...), where numpy reads None as \"copy only if needed\" like"
        " False, and in `if not copy:`, where None is falsy like False.",
    ),
    "anec.mil.artifact.x_sha256__mutmut_4": (
        "+data = data.encode(\"UTF-8\")",
        "Python's codec lookup ignores case, so \"UTF-8\" is the same codec and gives the same bytes.",
    ),
    "anec.mil.manifest.x_parse_json__mutmut_6": (
        "+text = data.decode(\"UTF-8\")",
        "Python's codec names ignore case, so \"UTF-8\" and \"utf-8\" are the same codec.",
    ),
    "anec.mil.manifest.x_parse_json__mutmut_22": (
        "+raise ArtifactError(f\"{where}: the {what} is not valid JSON ({str(e)[:201]})\") from None",
        "every ValueError that can reach this line is well under 200 characters (json's fixed messages with "
        "line, column and char; a duplicate key shown in at most 60 characters; a digit count; a number cut "
        "to 40 characters; a NaN/Infinity name), so cutting at 200 or 201 gives the same text.",
    ),
    "anec.mil.manifest.x__check_logical_output__mutmut_38": (
        "+raise _Bad(f\"{path}.axis\", \"an axis (the output has several pieces)\", )",
        "_Bad's got defaults to None, so leaving out the explicit None builds the same error.",
    ),
    "anec.mil.manifest.x__cross_check__mutmut_77": (
        "+biggest = max((e[\"bytes\"] for e in entries), default=1)",
        "the default applies only when there are no entries, and then alloc < 0 and alloc < 1 are both false "
        "because the schema already requires *_alloc_bytes >= 1.",
    ),
    "anec.mil.manifest.x__schema__mutmut_71": (
        "+\"XXsramXX\": any_json,",
        "any_json accepts every value and unknown fields are ignored, so checking sram or skipping it accepts"
        " and refuses the same manifests.",
    ),
    "anec.mil.manifest.x__schema__mutmut_72": (
        "+\"SRAM\": any_json,",
        "any_json accepts every value and unknown fields are ignored, so checking sram or skipping it accepts"
        " and refuses the same manifests.",
    ),
    "anec.mil.manifest.x_validate_manifest__mutmut_4": (
        "+raise _Bad(None, \"a JSON object\", manifest)",
        "the path is only tested for truth (the message says \"the manifest\" when it is false), and None is "
        "false like \"\".",
    ),
    "anec.mil.manifest.x_validate_manifest__mutmut_23": (
        "+raise _Bad(\"format\", f\"{json.dumps(FORMAT)} (the field is missing)\", show_got=None)",
        "show_got is only tested for truth and None is false like False.",
    ),
    "anec.mil.manifest.x_validate_manifest__mutmut_44": (
        "+_schema()(manifest, None)",
        "at the top level the path only goes to _join, which tests it for truth (None gives the bare key, as "
        "\"\" does), and obj's \"an object\" error cannot happen: the manifest was checked to be a dict just "
        "before.",
    ),
    "anec.passes.partition.x__blob_reason__mutmut_7": (
        "+while reach <= n and lo[reach + 1] <= s.start:",
        "it differs only when a stage that is not the last could reach the end (lo[n] <= s.start), and then "
        "the search would have found a plan with fewer stages, against its minimal stage count.",
    ),
    "anec.passes.partition.x__fill__mutmut_52": (
        "+s.blob_cap = blob_cap_of(run, target)[1] if (cap is None) or True else cap",
        "the only caller that passes cap passes blob_cap_of(items, target)[1] for the same run (items[0:n]), "
        "so computing it again gives the same value.",
    ),
    "anec.passes.partition.x__fill__mutmut_62": (
        "+s.peak_sram = _peak(run, s, None)",
        "_peak never reads its inside parameter.",
    ),
    "anec.passes.partition.x__fill__mutmut_8": (
        "+for v in x.operands if (not x.optional) and False else x.inputs():",
        "with no optional operands Node.inputs() returns operands[:] (the same values in the same order), so "
        "always using inputs() changes nothing.",
    ),
    "anec.passes.partition.x__peak__mutmut_39": (
        "+for v in x.operands if (not x.optional) and False else x.inputs():",
        "with no optional operands Node.inputs() returns operands[:] (the same values in the same order), so "
        "always using inputs() changes nothing.",
    ),
    "anec.passes.partition.x__peak__mutmut_6": (
        "+delta = [0] * (m + 2)",
        "writes reach at most delta[m] and the sum reads only delta[0..m-1], so the extra slot is never used.",
    ),
    "anec.passes.partition.x_extract_stage__mutmut_193": (
        "+for key in (\"XXsramXX\",):",
        "g is a freshly built Graph whose meta starts empty and only gets \"origin\" and \"const_origin\", so "
        "popping any other key does nothing.",
    ),
    "anec.passes.partition.x_extract_stage__mutmut_194": (
        "+for key in (\"SRAM\",):",
        "g is a freshly built Graph whose meta starts empty and only gets \"origin\" and \"const_origin\", so "
        "popping any other key does nothing.",
    ),
    "anec.passes.partition.x_extract_stage__mutmut_195": (
        "+g.meta.pop(None, None)",
        "g is a freshly built Graph whose meta starts empty and only gets \"origin\" and \"const_origin\", so the"
        " pop does nothing either way.",
    ),
    "anec.passes.rewrite.x__infer__mutmut_25": (
        "+return list(remembered_types(op, operands, optional, literal_key(attrs) if (attrs) or True else (),",
        "attrs is always a dict and literal_key({}) is (), the same memo key as the else branch.",
    ),
    "anec.mil.emitter.x__parses__mutmut_8": (
        "+paths = [_FP16.round(_FP32.round(f64)), _FP16.round(_FP32.round_exact(text))]",
        "for every finite non-zero fp16 value of either sign (63,486, checked exhaustively) the shortest-"
        "spelling search picks the same text with or without the dropped path; the dropped direct rounding "
        "could differ only for a decimal within an fp32 half-ulp of an fp16 midpoint, which no candidate is, "
        "and fp32 literals do not take this path.",
    ),
    "anec.passes.partition.x_plan_partition__mutmut_48": (
        "+if one.peak_sram < target.sram_bytes and not force:",
        "at a peak exactly the SRAM the mutant goes on to plan, but the stage fits, so the SRAM split makes "
        "no cut and the one-stage plan is returned as None, as the early return does.",
    ),
}

C_EQUIVALENT: dict[str, str] = {
"x-dedup-never": "the loop stops at row 8 but a match needs k == K, so for K > 8 no two columns are ever "
                 "merged and each is computed on its own: never a wrong merge, only lost speed. A column's "
                 "product depends on its own column alone and has the same bits whether computed once and "
                 "copied or computed again, whichever panel the weight is packed into (what "
                 "test_conv1x1_repeated_columns_give_the_bits_of_distinct_ones pins), so no output changes",
"s-budget-off": "the sim's own compile budget check never decides: every driver compile is reserved first "
                "by the core (rt_budget_reserve, in anec_compile and the recompile reload) against the same "
                "process budget (the compile_budget option sets both) and the same count (the core counts "
                "a reservation and releases it when the compile fails, the sim counts a compile that "
                "succeeded; anec_process_reset_budget resets both), so the core refuses at the count the "
                "sim would, before the driver is called",
"s-budget-uncounted": "as s-budget-off: the sim's count feeds only its own budget check, which the core's "
                      "reservation at the same budget and count always preempts; nothing else reads it "
                      "(anec_process_compiles reports the core's count)",
"x-mm-vec-y": "the plan builder (csrc/sim_rules.c, rule_matmul) already clears transpose_y of a rank-1 y, "
                  "so the executor never sees a vector y with transpose_y set",
}

# Survivors that are not equivalent but that no test kills yet: why, and what a test would need.
# They count as survivors in the report.
OPEN_NOTES: dict[str, str] = {
    "r-rejoin-content": "a reload that changed weights leaves the program's content unknown (forget_content), "
                        "so the entry it rejoins is marked stale and recomputed before a lookup reads the copied "
                        "content; only a reload that fails before it writes (the private copy of a shared "
                        "directory failing) while the entry has no donor would read it, which needs a "
                        "fault-injection hook in the runtime (the sim's fail=compile@N fails a compile; this "
                        "needs the private copy, a clone, to fail)",
}
