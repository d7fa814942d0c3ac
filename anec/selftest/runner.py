"""Running the self-test and reporting it: ``python -m anec.selftest``.

:func:`run_selftest` runs every check of :data:`anec.selftest.checks.CHECKS` (a crash
fails only its check), caches the reload and concat verdicts on a Mac, and returns the
report as JSON-able data; :func:`render` writes it as plain text to paste into an issue;
:func:`main` is the command (exit 0 if and only if every check passes).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import asdict
from typing import Any

import click

from anec.diagnostics import AnecError
from anec.machine import detect_chip
from anec.runtime import Runtime
from anec.selftest import checks
from anec.selftest.checks import Check, CheckEnv
from anec.targets import DEFAULT_TARGET, get_target, target_for_chip
from anec.verdict import platform_info, save_verdict


def default_target() -> str:
    """The profile of this Mac's chip, else the default target."""
    return target_for_chip(detect_chip()) or DEFAULT_TARGET


def run_selftest(backend: str = "auto", target: str | None = None, seed: int = 0,
                 save: bool = True) -> dict[str, Any]:
    """Run every check; the report as JSON-able data (``passed``: all passed).
    On the ane driver the reload verdict is cached for later runtimes unless
    ``save`` is False (docs/macos.md).

    Raises AnecError when the backend cannot be opened at all."""
    tgt = get_target(target or default_target()).name
    with Runtime(backend=backend) as rt:
        driver = rt.backend
    env = CheckEnv(backend, tgt, seed)
    env.driver = driver
    done = []
    for cid, title, fn in checks.CHECKS:
        c = Check(cid, title)
        t0 = time.perf_counter()
        try:
            fn(env, c)
        except AnecError as e:
            c.passed = False
            c.lines.append("error: " + e.render().replace("\n", "\n    "))
        except Exception as e:  # noqa: BLE001 - a crash fails this check, the others still run
            c.passed = False
            c.lines.append(f"crashed: {type(e).__name__}: {e}")
            c.data["traceback"] = traceback.format_exc()
        c.data["seconds"] = time.perf_counter() - t0
        done.append(c)
    report = {
        "anec_selftest": 1,
        "platform": platform_info(),
        "backend": backend,
        "driver": driver,
        "target": tgt,
        "seed": seed,
        "checks": [asdict(c) | {"status": c.status} for c in done],
        "passed": all(c.passed for c in done),
    }
    if driver == "ane" and save:
        # every later Runtime on this Mac uses the reload strategies verified here
        path = save_verdict(report)
        report["verdict_file"] = str(path) if path else None
    return report


def render(report: dict[str, Any]) -> str:
    """The plain-text report (paste it into an issue)."""
    p = report["platform"]
    lines = [f"anec selftest {p['anec']}: driver {report['driver']} (backend {report['backend']}), "
             f"target {report['target']}, seed {report['seed']}"]
    osline = f"{p['os']} {p['release']} {p['machine']}"
    if p.get("macos"):
        osline = f"macOS {p['macos']} ({p['machine']}), chip {p.get('chip') or 'unknown'}"
    lines.append(f"{osline}; python {p['python']}, numpy {p['numpy']}")
    lines.append("")
    for c in report["checks"]:
        lines.append(f"{c['status']}  {c['id']:<13} {c['title']}")
        for line in c["lines"]:
            lines.append(f"      {line}")
    n_pass = sum(c["passed"] for c in report["checks"])
    lines.append("")
    if report.get("verdict_file"):
        lines.append(f"reload and concat verdicts cached in {report['verdict_file']} (later runtimes and "
                     "compiles on this Mac use them)")
    lines.append(f"{n_pass}/{len(report['checks'])} checks passed")
    return "\n".join(lines) + "\n"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--backend", type=click.Choice(["auto", "sim", "ane"]), default="auto", show_default=True,
              help="auto: the ANE on a Mac with Apple silicon, else the sim.")
@click.option("--target", metavar="NAME", default=None,
              help="Chip profile m1..m5 (default: this Mac's chip, else m4).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs and weights.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def main(backend: str, target: str | None, seed: int, as_json: bool) -> None:
    """Check on this machine the ANE claims anec relies on; exit 0 iff all pass."""
    try:
        report = run_selftest(backend, target, seed)
    except AnecError as e:
        click.echo(e.render(), err=True)
        sys.exit(2)
    click.echo(json.dumps(report, indent=2) if as_json else render(report), nl=as_json)
    sys.exit(0 if report["passed"] else 1)
