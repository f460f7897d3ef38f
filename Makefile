# POS Lambda pipeline. `make help` lists the targets; configuration: POS_* env vars
# (see README, Configuration).
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: upgrade-test help setup jars up down status test-cluster chaos-cluster cluster-up cluster-down schema topics airflow airflow-down spark spark-down speed speed-once speed-status batch alerts alerts-sink receipts test test-unit test-pure test-integration test-speed test-batch test-serving test-processors check demo chaos chaos-seeds audit bench screenshots screenshots-dashboard docs lock clean image deploy-test

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The `dev` workflow: the product with its dev and airflow extras, then the development
# package dev/ (pos-lambda-dev: pos-infra, pos-demo, pos-chaos), both editable.
$(INSTALLED): pyproject.toml dev/pyproject.toml constraints.txt
	@bash infra/system-deps.sh docker-compose  # + Compose, to validate compose.yaml (tests/unit/deploy)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,airflow]'
	$(PY) -m pip install --quiet -c constraints.txt -e ./dev
	@touch $@

setup: $(INSTALLED) jars ## install the product and the development package (dev/) into .venv, fetch the jars (once)

jars: $(INSTALLED) ## fetch Kafka, Cassandra and Spark jars from Maven Central (once)
	$(VENV)/bin/pos-infra jars

up: setup ## start Kafka and Cassandra on 127.0.0.1, apply schema, create topics
	$(VENV)/bin/pos-infra up

down: $(INSTALLED) ## stop Kafka, Cassandra and Airflow (the local one, and any a killed test run left)
	$(VENV)/bin/pos-infra down

status: $(INSTALLED) ## show whether Kafka and Cassandra are ready
	$(VENV)/bin/pos-infra status

schema: $(INSTALLED) ## (re)apply the Cassandra schema
	$(VENV)/bin/pos-infra schema

topics: $(INSTALLED) ## create the Kafka topics
	$(VENV)/bin/pos-infra topics

airflow: setup ## start the local Airflow 3 (not part of `up`); prints its URL and login
	$(VENV)/bin/pos-infra airflow up

airflow-down: $(INSTALLED) ## stop the local Airflow, and any a killed test run left
	$(VENV)/bin/pos-infra airflow down

spark: setup ## start a Spark standalone master + worker on 127.0.0.1 (jobs use it with POS_SPARK_MASTER=spark://127.0.0.1:7077)
	$(VENV)/bin/pos-infra spark up

spark-down: $(INSTALLED) ## stop the local Spark standalone master and worker
	$(VENV)/bin/pos-infra spark down

speed: up ## run the speed layer continuously (Ctrl-C stops it gracefully)
	$(VENV)/bin/pos-speed run

speed-once: up ## run the speed layer over everything in Kafka now, then exit
	$(VENV)/bin/pos-speed run --available-now

speed-status: $(INSTALLED) ## show the speed layer's last micro-batches
	$(VENV)/bin/pos-speed status

alerts: up ## run one alerts processor (exactly once; POS_ALERTS_* settings; Ctrl-C stops it)
	$(VENV)/bin/pos-alerts run

alerts-sink: up ## copy committed alerts from Kafka into the Cassandra table `alerts`
	$(VENV)/bin/pos-alerts sink

receipts: up ## run the deduplicated topic's processor: pos.transactions -> pos.receipts, one record per receipt, exactly once (POS_RECEIPTS_*)
	$(VENV)/bin/pos-receipts run

# The last complete UTC hour by default; any [START, END) on 15-minute boundaries.
START ?= $(shell date -u -d '1 hour ago' +%Y-%m-%dT%H:00:00Z)
END ?= $(shell date -u +%Y-%m-%dT%H:00:00Z)
batch: up ## recompute the batch views of [START, END) (default: the last hour), then compare with speed
	$(VENV)/bin/pos-batch run --start $(START) --end $(END)
	$(VENV)/bin/pos-batch quality --start $(START) --end $(END)

# The default selection (unit + integration, pyproject's marker expression) in three
# parts: the unit tests, then the integration tests, each on two workers side by side
# (most integration tests wait on a service's cadence, not on a core; each file stays on
# one worker), then one at a time the tests marked `serial` (they restart a shared
# service, or their items share a node id, which pytest-xdist cannot tell apart).
# Unit and integration tests never share a worker: a worker's Spark session is the first
# one built, and the unit tests' has none of the connectors' jars. Two workers for both:
# a third integration worker made the tests 1.5 times slower on two cores (issue 76,
# docs/testing.md), which undid what the third ran beside them. Files are dealt out longest first
# (LONGEST_FIRST in tests/conftest.py; --no-loadscope-reorder keeps that order), so that
# no worker is left running a long file alone at the end. Each part prints its ten
# slowest tests.
TEST_WORKERS ?= 2
INTEGRATION_WORKERS ?= 2
XDIST := --dist loadfile --no-loadscope-reorder
test: setup ## run the tests: unit + integration (starts the services it needs), two workers side by side; CI adds deploy, upgrade, chaos and cluster chaos
	$(VENV)/bin/pos-infra up
	$(PY) -m pytest -n $(TEST_WORKERS) $(XDIST) --durations=10 tests/unit $(PYTEST_ARGS)
	$(PY) -m pytest -n $(INTEGRATION_WORKERS) $(XDIST) --durations=10 --serial=exclude tests/integration $(PYTEST_ARGS)
	$(PY) -m pytest --serial=only --durations=10 tests/integration $(PYTEST_ARGS)

test-unit: $(INSTALLED) ## run the unit tests: pure logic and local Spark (JDK 17), no services
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-pure: $(INSTALLED) ## run the pure unit tests only (no Spark, no services), two workers side by side
	$(PY) -m pytest -n $(TEST_WORKERS) $(XDIST) tests/unit -m "not spark" $(PYTEST_ARGS)

# The developer loop: the tests of one layer (LAYERS in tests/conftest.py maps each test
# file to its layers by path), in `make test`'s three parts. A part with nothing to run
# (pytest's exit status 5: a layer without serial tests) is no failure. SERIAL=no leaves
# the serial part out (test-processors': broker restarts, on a machine others share).
SERIAL ?= yes
define layer_tests
	$(VENV)/bin/pos-infra up
	$(PY) -m pytest -n $(TEST_WORKERS) $(XDIST) --layer $(1) tests/unit $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -n $(INTEGRATION_WORKERS) $(XDIST) --serial=exclude --layer $(1) tests/integration $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(if $(filter no,$(SERIAL)),@echo "serial tests of $(1) left out (SERIAL=no)",$(PY) -m pytest --serial=only --layer $(1) tests/integration $(PYTEST_ARGS) || [ $$? -eq 5 ])
endef

test-speed: setup ## the speed layer's unit + integration tests (and the shared core's), as `make test` runs them
	$(call layer_tests,speed)

test-batch: setup ## the batch layer's unit + integration tests (and the shared core's, the DAG's), as `make test` runs them
	$(call layer_tests,batch)

test-serving: setup ## the serving layer's unit + integration tests (and the stores'), as `make test` runs them
	$(call layer_tests,serving)

test-processors: setup ## the transactional processors' (alerts, pos.receipts) unit + integration tests, as `make test` runs them
	$(call layer_tests,processors)

test-integration: setup ## run the integration tests only
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

test-faults: setup ## single faults that `make chaos` also strikes mid-stream (a Cassandra or broker restart, a kill -9 of pos-speed): one at a time, ~5 min
	$(PY) -m pytest -m chaos_also tests/integration $(PYTEST_ARGS)

test-cluster: setup ## the replicated-cluster tests: starts 3 Kafka + 3 Cassandra nodes on 127.0.0.1-3
	$(PY) -m pytest -m "cluster and not e2e" tests/cluster $(PYTEST_ARGS)

CLUSTER_CHAOS_ARGS ?=
chaos-cluster: setup ## chaos on the replicated cluster: a node of each kind killed or frozen under load, audit at ALL (docs/chaos-cluster.md)
	$(PY) -m pytest -m cluster tests/cluster/test_chaos_cluster.py -s --cluster-chaos-args='$(CLUSTER_CHAOS_ARGS)' $(PYTEST_ARGS)

cluster-up: setup ## start a replicated cluster: 3 KRaft brokers + 3 Cassandra nodes (docs/cluster.md)
	$(VENV)/bin/pos-infra cluster up

cluster-down: ## stop the replicated cluster
	$(VENV)/bin/pos-infra cluster down

check: $(INSTALLED) ## lint (ruff) and type-check (mypy)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

DEMO_COUNT ?= 5000
DEMO_ARGS ?=
demo: up ## end to end: faulty stream -> speed + alerts -> batch via Airflow -> serving -> audit; prints the story (logs: .state/demo/)
	$(VENV)/bin/pos-demo --count $(DEMO_COUNT) $(DEMO_ARGS)

CHAOS_COUNT ?= 100000
CHAOS_SEED ?= 13
CHAOS_ARGS ?=
chaos: up ## the e2e test tests/e2e/test_chaos.py: kill -9s and restarts while 100k receipts flow, then catch up, batch DAG, audit; figures in docs/chaos.md
	$(PY) -m pytest -m e2e tests/e2e/test_chaos.py -s --count $(CHAOS_COUNT) --seed $(CHAOS_SEED) --chaos-args='$(CHAOS_ARGS)' $(PYTEST_ARGS)

UPGRADE_COUNT ?= 12000
UPGRADE_RATE ?= 20
upgrade-test: up ## the previous release (releases.json) under a faulty stream, upgraded layer by layer to this checkout mid-stream, then the audit; figures in docs/upgrade.md
	bash dev/upgrade/install-previous.sh
	$(PY) -m pytest -m e2e tests/e2e/test_upgrade.py -s --upgrade-count $(UPGRADE_COUNT) --upgrade-rate $(UPGRADE_RATE) $(PYTEST_ARGS)

chaos-seeds: up ## short chaos runs under several seeds, one with every fault in the stream's first 15% (tests/e2e/test_chaos_seeds.py)
	$(PY) -m pytest -m e2e tests/e2e/test_chaos_seeds.py -s $(PYTEST_ARGS)

# The pipeline image. PYTHON_IMAGE is its base (a Python 3.11 Debian image); where no
# registry is reachable, infra/docker/local-base.sh makes one from Debian's packages.
PYTHON_IMAGE ?= python:3.11.14-slim-bookworm
IMAGE_TAG ?= local
# `host`: RUN steps use the host's network, which works without a bridge network too.
DOCKER_BUILD_NETWORK ?= host
image: ## build the pipeline image pos-lambda:IMAGE_TAG (local) on PYTHON_IMAGE; BuildKit or the legacy builder
	docker build --network $(DOCKER_BUILD_NETWORK) --build-arg PYTHON_IMAGE=$(PYTHON_IMAGE) -t pos-lambda:$(IMAGE_TAG) .
	@docker image inspect --format 'pos-lambda:$(IMAGE_TAG): {{.Size}} bytes' pos-lambda:$(IMAGE_TAG)

DEPLOY_PYTHON_IMAGE ?= pos-python:3.11-bookworm
deploy-test: up ## the deploy on a real Docker engine: local engine + base, image, compose up, demo stream, restart, audit (~10 min; not in `make test`)
	infra/docker/engine.sh up
	@engine_started=$$(test -f .state/docker/dockerd.pid && echo yes); \
	infra/docker/local-base.sh $(DEPLOY_PYTHON_IMAGE) \
	  && PYTHON_IMAGE=$(DEPLOY_PYTHON_IMAGE) $(PY) -m pytest -m deploy tests/deploy -s $(PYTEST_ARGS); \
	status=$$?; [ -z "$$engine_started" ] || infra/docker/engine.sh down; exit $$status

LEDGER ?= .state/demo-ledger
audit: $(INSTALLED) ## compare every view with a producer ledger (LEDGER, default the demo's); exit 1 on a discrepancy
	$(VENV)/bin/pos-audit --ledger $(LEDGER) --json $(LEDGER)/audit.json

bench: up ## every benchmark (side-by-side ratios), then the report in docs/bench/ (JSON, tables, charts)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(PY) -m bench.producer_idempotence
	$(PY) -m bench.producer_clients  # confluent-kafka vs kafka-python, idempotent, same messages
	$(PY) -m bench.speed_designs
	$(PY) -m bench.batch_recompute --seconds 21600  # 6 h of 1 s micro-batch files (a whole day: --seconds 86400, ~4x longer)
	$(PY) -m bench.batch_dag  # a pos_batch DAG run through Airflow (started if not running) vs `pos-batch run --quality` as one process, one hour of 5,000 receipts, ledger-checked: Airflow's and spark-submit's fixed costs (goal <= 1.5)
	$(PY) -m bench.batch_history  # one hourly run (10,000 new receipts) on 1M, 10M and 50M records of generated, folded history; rows written per new receipt (with/without late data); non-write time vs delta-rs + polars
	$(PY) -m bench.speed_backlog --vs 587bde6  # speed views before/after the hostile-input hardening
	$(PY) -m bench.speed_vs_plain  # speed layer (views query; both queries; one-shot cold and running warm after a 200k-message warm-up) vs a plain Python consumer, same topic (250k, faults), ledger-checked
	$(PY) -m bench.speed_latency --vary POS_SPEED_DRIVERS=per-query,shared --warmup 210 --max-warmup 420  # produce-to-visible p50/p99 of `pos-speed run` (1 s trigger) at 10 and 1,000 events/s, a driver per query (shipped) vs both in one driver; micro-batch cost. at least 210 s of warm-up, and until the archiver has drained the cold start's backlog (at 1,000 events/s ~3-4 min), at most 420 s
	$(PY) -m bench.speed_cold_start  # from a cold start with the shipped defaults: p99 in the first 120 s at 10/s (20 stores, a new store per receipt, warm-up off), time to ready; first 100-row micro-batch vs warm; one-shot 50k (cold JVM) vs the plain consumer
	$(PY) -m bench.speed_micro_batch  # a small views micro-batch's fixed cost, stage by stage; the project vs PySpark's own Python worker daemon (--baseline REV: vs an earlier revision)
	$(PY) -m bench.speed_constant_cost  # the same 1,000-message micro-batch on 1M stored receipts vs empty tables (constant per-batch cost)
	$(PY) -m bench.alerts_eos  # alerts: exactly once vs at least once, 10 ms / 100 ms / 1 s
	@bash infra/system-deps.sh wrk  # the HTTP load tool (Debian's)
	$(PY) -m bench.serving_latency
	$(PY) -m bench.report  # docs/bench/README.md + PNG charts from docs/bench/*.json

docs: $(INSTALLED) ## regenerate docs/configuration.md's settings table and docs/bench/README.md (+ charts) from their sources
	$(PY) docs/settings_table.py
	$(PY) -m bench.report

screenshots: setup ## log in to the running Airflow UI in headless Chromium, trigger pos_batch, keep screenshots in docs/
	@bash infra/system-deps.sh chromium
	$(PY) -m pip install --quiet -c constraints.txt -e '.[docs]'
	$(PY) docs/capture_airflow.py --out docs

screenshots-dashboard: up ## seed 11 days of 7 stores through the real layers (own keyspace), check the dashboard (local day, heatmap, UTC toggle) in headless Chromium, keep docs/dashboard.png and docs/screenshots/
	@bash infra/system-deps.sh chromium
	$(PY) -m pip install --quiet -c constraints.txt -e '.[docs]'
	$(PY) docs/capture_dashboard.py --seed --out docs/dashboard.png

.PHONY: serve
serve: setup ## start the HTTP API and dashboard on 127.0.0.1 (POS_SERVE_PORT, 8000); prints its address
	$(VENV)/bin/pos-serve http

lock: $(INSTALLED) ## re-pin constraints.txt from the current environment
	@{ sed -n '1,2p' constraints.txt; $(PY) -m pip freeze --exclude-editable; } > constraints.tmp
	@mv constraints.tmp constraints.txt

clean: down ## stop services and delete all local state (data, logs, checkpoints)
	rm -rf .state

.PHONY: screenshots-prometheus
screenshots-prometheus: up ## stop the speed layer under a real Prometheus (Debian's) and keep docs/prometheus-alerts.png of PosSpeedLayerDown firing (own keyspace and topic)
	@bash infra/system-deps.sh chromium prometheus
	$(PY) -m pip install --quiet -c constraints.txt -e '.[docs]'
	$(PY) docs/capture_prometheus.py --out docs/prometheus-alerts.png
