# layersched: see `make help`. Bodies stay one line; logic lives in harness/scripts/ and the CLI.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
DRIVER ?= local
export DRIVER
# RESULTS=commit: a run writes harness/results/ (to be committed, from a clean
# tree); by default it writes under runs/<UTC time>/ and leaves the clone as it was.
ifdef RESULTS
export LAYERSCHED_RESULTS := $(RESULTS)
endif

.PHONY: help venv kubernetes containerd tools images crio crio-live lint go-lint unit integration infra e2e test ci-fresh bench bench-scheduler bench-perf live-minors replay testbed testbed-down simulate figures proto clean

help: ## List the targets, what they write and how long they last took
	@python3 harness/scripts/help.py

##@ The product: build it, install it

venv: $(VENV)/.installed ## Create .venv with layersched installed editable (CLI: .venv/bin/layersched)

$(VENV)/.installed: pyproject.toml harness/pyproject.toml
	@harness/scripts/venv.sh $(VENV)

kubernetes: venv ## Build (or find cached) Kubernetes from its Go modules, the release src/kube-scheduler/go.mod pins: layersched's kube-scheduler (src/kube-scheduler), then the testbed's etcd, control plane, kubelet, kubectl and pause (harness/control-plane) (cold: minutes; cached: seconds; a changed plugin: a relink)
	@$(PY) harness/scripts/kubernetes_build.py

images: venv ## The release's images, built without Docker: layersched and layersched's kube-scheduler for 1.35, 1.36, 1.37, each for amd64 and arm64 in one multi-arch OCI index (kube-scheduler cross-compiled with CGO_ENABLED=0, cached by build ID and arch; OCI layouts and images.json under the cache; IMAGES_ARGS='--minor 37 --arch amd64' narrows it; not in CI: cold, six kube-scheduler compiles of minutes each; cached, seconds)
	@$(PY) harness/scripts/images.py $(IMAGES_ARGS)

proto: venv ## Regenerate the gRPC message code: CRI (cri/api.proto) and containerd (containerd/protos/)
	@harness/scripts/proto.sh

clean: ## Remove the venv and caches (not the testbed: use testbed-down)
	@rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache

##@ CI: what `make test` runs, and its rehearsal

lint: venv ## ruff, mypy --strict on src/ and harness/, import-linter, test modules collect, ansible-lint, and go-lint
	@harness/scripts/lint.sh

go-lint: venv ## go vet and go test -race in every Go module (the build's toolchain and caches; cold: minutes per Kubernetes release)
	@harness/scripts/go-lint.sh

unit: venv ## Unit tests (nothing outside the process)
	@harness/scripts/pytest.sh unit tests/unit

integration: venv ## Integration tests against real docker-registry / containerd processes
	@harness/scripts/pytest.sh integration tests/integration $(PYTEST_ARGS)

infra: venv ## kind/Pulumi/Ansible checks that run without a cluster (mocks, syntax-check)
	@harness/scripts/pytest.sh infra tests/infra

e2e: venv ## The seed scenario end to end on the DRIVER=local (default), kind or cloud testbed
	@harness/scripts/pytest.sh e2e tests/e2e

test: lint unit integration infra e2e ## Everything CI runs: lint, unit, integration, infra, e2e

ci-fresh: ## Rehearse CI on a fresh machine: clone HEAD, empty caches, new venv, .ci/run
	@harness/scripts/ci-fresh.sh

##@ The harness: testbeds, benchmarks, results

containerd: venv ## Download (or find cached) containerd 2.x, the testbed nodes' runtime (never installed)
	@harness/scripts/containerd.sh

tools: venv ## Build (or find cached) the Go tools the tests run, from their Go modules: helm, actionlint (harness/layersched_harness/testbed/go-tools.yml; cold: minutes; cached: seconds)
	@$(PY) harness/scripts/go_tools.py

crio: venv ## Build (or find cached) CRI-O from its Go module, cgo off (harness/layersched_harness/testbed/crio-build.yml; not in CI: the testbed's CRI-O nodes and make crio-live need it)
	@$(PY) harness/scripts/go_tools.py --crio

crio-live: crio ## The live CRI-O tests (root; not in CI): the agent on CRI-O's real storage (overlay, vfs) against the manifests, its verbose ImageStatus, the relay in front of it; with LAYERSCHED_TESTBED_RUNTIMES naming crio, the testbed's CRI-O node (its published inventory, the relay role, Guaranteed and BestEffort pods Running through the runc wrapper)
	@harness/scripts/crio-live.sh

testbed: venv ## DRIVER=local (default), kind or cloud: bring the testbed up, run the seed scenario, print the table: runs/<time>/harness/results/scenario.json, .png (RESULTS=commit: harness/results/); no tracked file changes {last: harness/results/scenario.json#make_testbed_s}
	@harness/scripts/testbed.sh up

testbed-down: venv ## DRIVER=local (default), kind or cloud: tear the testbed down (safe to run twice)
	@harness/scripts/testbed.sh down

bench: venv ## The extender's benchmarks (latency, memory, watch): runs/<time>/harness/results/extender.json (RESULTS=commit: harness/results/) {last: harness/results/extender.json#run_time_s}
	@harness/scripts/bench.sh

bench-scheduler: venv ## Real kube-scheduler: queue drain rate, latency and CPU per pod in alternating rounds (5 at 500 fake nodes, 3 at 5,000) (root; inconclusive when the load exceeds the cores): runs/<time>/harness/results/scheduler.json (RESULTS=commit: harness/results/) {last: harness/results/scheduler.json#run_time_s}
	@harness/scripts/bench-scheduler.sh

bench-perf: venv ## Upstream's scheduler_perf with LayerLocality out of tree, in process (etcd from make kubernetes), 5 rounds, 5,000 queued pods drained at 500 and 5,000 nodes beside SchedulingBasic, the default run twice (the noise floor): runs/<time>/harness/results/scheduler_perf.json (RESULTS=commit: harness/results/) {last: harness/results/scheduler_perf.json#run_time_s}
	@$(PY) harness/bench/bench_scheduler_perf.py

live-minors: venv ## The plugin live on the older minors (1.35, 1.36; not in CI): each built from its module, on a loopback control plane with fake nodes: the seed scenario and batching: runs/<time>/harness/results/live-minors.json (RESULTS=commit: harness/results/) {last: harness/results/live-minors.json#run_time_s}
	@$(PY) harness/bench/live_minors.py

replay: venv ## Replay harness/bench/replay/trace.json (50 pods, 6 nodes) and the 20-replica burst through every arm's kube-scheduler against the default profile, serial and parallel pulls, 3 alternated rounds from a clean state, resumable (root; not in CI; REPLAY_ARGS="--rounds 1"): runs/<time>/harness/results/replay.json, .png (RESULTS=commit: harness/results/) {last: harness/results/replay.json#run_time_s}
	@harness/scripts/replay.sh

simulate: venv ## Scale simulation: runs/<time>/harness/results/simulation.json and plots (RESULTS=commit: harness/results/) {last: harness/results/simulation.json#run_time_s}
	@harness/scripts/simulate.sh

figures: venv ## Rewrite every measured figure in README.md and docs/ from harness/results/ (runs nothing; the only writer of those blocks)
	@$(PY) harness/bench/figures.py
