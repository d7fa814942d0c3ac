# mk/mutate.mk - mutation testing, run by hand (not part of `make test` or CI).
#
#   make mutate       both runs below, then tests/mutation/REPORT.md
#   make mutate-py    mutmut over anec/ir/interp.py, anec/passes/, anec/mil/
#   make mutate-c     the scripted C mutations (tests/mutation/c_mutants.py) over
#                     csrc/sim_kernels.c, csrc/sim_exec.c, csrc/rt_reload.c
#   make mutate-report  REPORT.md from the last results (build/mutate/)
#
# Scoped runs while iterating:
#   make mutate-py MUTANTS='anec.ir.interp.*'     mutmut's mutant-name globs
#   make mutate-c  C_MUTANTS=x-sub,r-duplicate    mutant ids
#
# mutmut (pinned below, installed into the venv on first use) runs in a copy of
# the project (build/mutate/py, configured by tests/mutation/mutmut.cfg) and
# keeps its results there: a second run only tests mutants of changed functions.
# Each mutant runs only the tests that called the mutated function in mutmut's
# instrumented run. MUTATE_JOBS workers (default 2: the machine is shared).
# Included from the top Makefile (it provides $(VENV), $(PY), $(PIP)).

MUTMUT       ?= mutmut==3.8.1
MUTATE_DIR   ?= build/mutate
MUTATE_JOBS  ?= 2
MUTANTS      ?=
C_MUTANTS    ?=

.PHONY: mutate mutate-py mutate-c mutate-report

$(VENV)/.mutmut: $(VENV)/.test
	$(PIP) install -q "$(MUTMUT)"
	@touch $@

mutate: mutate-py mutate-c mutate-report

# The copy keeps file times: mutmut regenerates the mutants of files that changed.
mutate-py: $(VENV)/.mutmut
	$(PY) tests/mutation/stage.py $(MUTATE_DIR)/py
	@date +%s > $(MUTATE_DIR)/py-start
	cd $(MUTATE_DIR)/py && OMP_NUM_THREADS=1 $(abspath $(VENV))/bin/mutmut run --max-children $(MUTATE_JOBS) $(MUTANTS)
	@echo $$(( $$(date +%s) - $$(cat $(MUTATE_DIR)/py-start) )) > $(MUTATE_DIR)/py-seconds

mutate-c: $(VENV)/.test
	$(PY) tests/mutation/cmutate.py --out $(MUTATE_DIR)/c-results.json $(if $(C_MUTANTS),--only $(C_MUTANTS))

mutate-report: $(VENV)/.test
	$(PY) tests/mutation/report.py --py $(MUTATE_DIR)/py --c $(MUTATE_DIR)/c-results.json -o tests/mutation/REPORT.md
