# mk/mutate.mk - mutation testing, run by hand (not part of `make test` or CI).
#
#   make mutate          every scope below, the C mutants, then tools/mutation/REPORT.md
#   make mutate-py SCOPE=interp   mutmut over one scope: interp (anec/ir/interp.py),
#                        passes (anec/passes/), mil (anec/mil/); each mutant meets
#                        the scope's covering tests (SCOPES in tools/mutation/stage.py)
#   make mutate-c        the scripted C mutations (tools/mutation/c_mutants.py) over the
#                        sim (kernels, executor, rules, plan, driver), the runtime core,
#                        reload and pipelines, and the ane driver (csrc/driver_ane.c, run
#                        against the fake of the Apple side as mk/ane.mk builds it)
#   make mutate-report   REPORT.md from the kept results (tools/mutation/results.json)
#                        merged with the runs in build/mutate/ (results.json is rewritten)
#
# Narrower runs while iterating:
#   make mutate-py SCOPE=interp MUTANTS='anec.ir.interp.x_random_inputs*'   mutant-name globs
#   make mutate-c  C_MUTANTS=x-sub,r-duplicate                               mutant ids
#
# mutmut (pinned below, installed into the venv on first use) runs in a copy of
# the project per scope (build/mutate/py-<scope>) and keeps its results there: a
# second run only tests mutants of changed functions. MUTATE_JOBS workers
# (default 2: the machine is shared). Each run's wall time is appended to
# build/mutate/py-runs for the report.
# Included from the top Makefile (it provides $(VENV), $(PY), $(PIP)).

MUTMUT       ?= mutmut==3.8.1
MUTATE_DIR   ?= build/mutate
MUTATE_JOBS  ?= 2
SCOPE        ?= interp
MUTANTS      ?=
C_MUTANTS    ?=

.PHONY: mutate mutate-py mutate-c mutate-report

$(VENV)/.mutmut: $(VENV)/.test
	$(PIP) install -q "$(MUTMUT)"
	@touch $@

mutate:
	$(MAKE) mutate-py SCOPE=interp
	$(MAKE) mutate-py SCOPE=passes
	$(MAKE) mutate-py SCOPE=mil
	$(MAKE) mutate-c
	$(MAKE) mutate-report

# The copy keeps file times: mutmut regenerates the mutants of files that changed.
mutate-py: $(VENV)/.mutmut
	$(PIP) install -q --no-deps -e .
	$(PY) tools/mutation/stage.py $(SCOPE) $(MUTATE_DIR)/py-$(SCOPE)
	@date +%s > $(MUTATE_DIR)/py-$(SCOPE)-start
	cd $(MUTATE_DIR)/py-$(SCOPE) && OMP_NUM_THREADS=1 $(abspath $(VENV))/bin/mutmut run --max-children $(MUTATE_JOBS) $(MUTANTS)
	@echo "$(SCOPE):$$(echo '$(or $(if $(word 5,$(MUTANTS)),$(words $(MUTANTS))-named-mutants,$(MUTANTS)),all)' | tr ' ' ',') $$(( $$(date +%s) - $$(cat $(MUTATE_DIR)/py-$(SCOPE)-start) )) $(MUTATE_JOBS)" >> $(MUTATE_DIR)/py-runs

mutate-c: $(VENV)/.test
	$(PY) tools/mutation/cmutate.py --out $(MUTATE_DIR)/c-results.json $(if $(C_MUTANTS),--only $(C_MUTANTS))

mutate-report: $(VENV)/.test
	$(PY) tools/mutation/report.py --py $(MUTATE_DIR) --c $(MUTATE_DIR)/c-results.json -o tools/mutation/REPORT.md
