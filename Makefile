# Targets a newcomer can guess. Everything runs from the project's own venv.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install up test lint typecheck check bench-admission bench-fair-sharing bench-victims bench-ageing bench-starvation \
	bench-kueue-baseline bench-kueue-large bench-kueue-yielding bench-kueue-deadlines \
	bench-console-paint bench-failover bench-kube-status console clean

$(PY):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]'

install: $(PY)

up: install            ## start Berth on this machine (Ctrl-C stops it)
	$(VENV)/bin/berth up

test: install          ## the whole suite, as CI runs it
	$(PY) -m pytest -q

lint: install
	$(PY) -m ruff check .

typecheck: install
	$(PY) -m mypy

check: lint typecheck test

bench-admission: install   ## decisions/s and bytes per pending workload of the admission core
	$(PY) bench/admission_core.py

bench-fair-sharing: install  ## the admission core's pass with fair sharing off and on
	$(PY) bench/fair_sharing.py 1000 10 100000

bench-victims: install     ## victim search time with 10,000 admitted workloads in one cohort
	$(PY) bench/victim_search.py

bench-ageing: install      ## waits and preemptions per admission, with and without ageing (live stack)
	$(PY) bench/ageing.py

bench-starvation: install  ## the starvation bound against an adversary: 100,000 jobs on the decision cores
	$(PY) bench/starvation.py

bench-kueue-baseline: install   ## Kueue's scheduler perf scenario on the live stack (15,000 workloads)
	$(PY) bench/kueue_scheduler.py --config baseline

bench-kueue-large: install      ## the same, large-scale (50,000 workloads, 1,000 ClusterQueues)
	$(PY) bench/kueue_scheduler.py --config large-scale

.PHONY: bench-kueue-client-limit bench-scaling bench-throughput bench-million bench-preemption-holds
bench-kueue-client-limit: install  ## baseline at 0.2 scale with Kueue's client limit, 50 creations/s (like for like with its 351 s)
	$(PY) bench/kueue_scheduler.py --config baseline --scale 0.2 --creations-per-s 50

bench-scaling: install  ## large-scale at 4 sizes: wall, CPU and bus messages per workload, CPU ratio at 4x (SIZES=0.5,1,2,4 for the full run)
	$(PY) bench/scaling.py $(if $(SIZES),--sizes $(SIZES),)

bench-throughput: install  ## highest arrival rate held with p99 submit-to-admit < 500 ms (DURATION=60 for the full run)
	$(PY) bench/throughput.py $(if $(DURATION),--duration $(DURATION),)

bench-million: install  ## 1,000,000 pending in 10,000 ClusterQueues through the admission service's fold and decision step
	$(PY) bench/million_pending.py

bench-preemption-holds: install  ## preemption's search and fold with 200 preemptions in flight
	$(PY) bench/preemption_holds.py

bench-kueue-yielding: install   ## baseline without preemption, borrowing yields to waiting priorities
	$(PY) bench/kueue_scheduler.py --config baseline --no-preemption --borrowing-yields

bench-kueue-deadlines: install  ## the same, ordered by deadline: the per-class goals as wait targets
	$(PY) bench/kueue_scheduler.py --config baseline --no-preemption --borrowing-yields \
		--strict-fifo --wait-targets 200=2s,100=21s,25s

.PHONY: bench-kueue-console
bench-kueue-console: install    ## baseline at 0.75 scale, with the console and one live overview client
	$(PY) bench/kueue_scheduler.py --config baseline --scale 0.75 --console

bench-console-paint: install  ## the web console's first paint with 10,000 workloads in 100 ClusterQueues
	$(PY) bench/console_paint.py

bench-kube-status: install  ## Kueue status on the Kubernetes backend (kmock): requests/workload, lag at 20/s and 200/s
	$(PY) bench/kube_status.py

bench-failover: install  ## kill -9 each role's active replica, then a NATS node, under load: takeover times and the event-log audit
	$(PY) bench/failover.py

console: install        ## the web console (docs/console.md) for the stack BERTH_NATS_URL names
	$(PY) -m berth_console

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
