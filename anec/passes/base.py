"""What every pass is and what it may touch.

A pass is a frozen dataclass (its options are fields, so an instance is a
value and pipelines can be plain tuples of instances) with a class-level
``name`` (kebab-case, the id used on the command line) and one method,
``run(graph, ctx)``, that rewrites one func in place and must leave it valid:
the manager verifies the graph after every pass and names the pass that broke
it.

Everything a pass needs besides the graph comes from the :class:`PassContext`:
the target chip profile, the resolved weights, options, and the lists where
passes record what they did (``rewrites``, ``artifacts``, ``timings``).
Facts meant for later stages go in ``graph.facts`` (:class:`~anec.ir.func_facts.FuncFacts`,
typed; see docs/architecture.md).
"""

from __future__ import annotations

import abc
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from anec.targets import Target, get_target

if TYPE_CHECKING:
    from anec.ir.graph import Graph, Module
    from anec.weight_store import WeightStore


@dataclass
class PassContext:
    """Shared state of one pipeline run (one per ``anec compile``)."""

    target: Target
    """The chip profile the program is compiled for."""
    weights: "WeightStore | None" = None
    """Resolved before the pipeline runs; None when only the structure matters."""
    module: "Module | None" = None
    """The module being compiled (set by the manager)."""
    options: dict[str, Any] = field(default_factory=dict)
    """E.g. ``{"pack_weights": False, "host_casts": False}``."""
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    """Every rewrite legalize applied: rule, constraint, node, location, detail (+ func)."""
    artifacts: dict[str, Any] = field(default_factory=dict)
    """Written by emit-mil, keyed by func name."""
    timings: list[tuple[str, str, float]] = field(default_factory=list)
    """(func, pass, seconds) per pass run."""
    print_ir_after: set[str] | None = None
    """Pass names (or ``{"all"}``) after which the IR is printed into ``printed``."""
    printed: list[str] = field(default_factory=list)
    """IR dumps produced by ``print_ir_after``."""
    verify_seconds: float = 0.0
    """Time the manager spent verifying (kept out of ``timings``, which lists passes)."""
    build_stages: "Callable[..., Any] | None" = None
    """How emit-mil builds the artifact of a func cut into stages (``graph.facts.partition``):
    the compiler passes :func:`anec.multi_program_build.build_multi_program`, which runs passes
    on every stage and so sits above them. None: emit-mil refuses a cut func."""
    verify_each: bool = True
    """Verify each func after every pass (MLIR's ``verify-each``), so a broken result names
    the pass; False verifies it once, after the last pass (the output is still checked)."""

    @classmethod
    def default(cls, target: str | Target | None = None, weights: "WeightStore | None" = None,
                **options: Any) -> "PassContext":
        """A context for ``target`` (default: the default target) with ``options``; for using
        passes alone."""
        return cls(target=get_target(target), weights=weights, options=dict(options))

    def option(self, name: str, default: Any = None) -> Any:
        """``options[name]`` or ``default``."""
        return self.options.get(name, default)


@dataclass(frozen=True)
class Pass(abc.ABC):
    """A graph-to-graph transformation (or analysis) of one func, in place."""

    name: ClassVar[str]
    """Kebab-case id: ``anec compile --passes dce,fuse-casts``."""

    tracked: ClassVar[bool] = False
    """True for a pass that changes the graph only through the :class:`~anec.ir.graph.Graph`
    methods (annotations through ``Graph.annotate``/``annotate_all``): the manager then
    re-verifies only what they recorded (:func:`~anec.ir.verifier.verify_changes`). Other
    passes are verified whole."""

    @abc.abstractmethod
    def run(self, graph: "Graph", ctx: PassContext) -> None:
        """Transform ``graph`` in place; leave it valid."""

    @classmethod
    def summary(cls) -> str:
        """The first line of the docstring (``anec passes``)."""
        doc = inspect.getdoc(cls) or ""
        return doc.splitlines()[0] if doc else ""

    @classmethod
    def documentation(cls) -> str:
        """The whole docstring, dedented."""
        return inspect.getdoc(cls) or ""
