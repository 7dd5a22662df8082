# metalheal — self-healing for bare-metal and user-provisioned Kubernetes clusters.
# `make` (or `make help`) lists every target.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

IMG ?= ghcr.io/metalheal/metalheal:dev
BIN := $(CURDIR)/bin
GO ?= go

## Pinned tool versions (tools land in ./bin).
CONTROLLER_TOOLS_VERSION ?= v0.21.0
KUSTOMIZE_VERSION ?= v5.8.0
KUBE_VERSION ?= v1.36.3
ETCD_VERSION ?= v3.6.8
HELM_VERSION ?= v3.19.0
# The peers test/e2e-interop runs metalheal with (hack/build-peers.sh).
CAPI_VERSION ?= v1.14.2
NHC_VERSION ?= v0.12.0

CONTROLLER_GEN := $(BIN)/controller-gen
KUSTOMIZE := $(BIN)/kustomize
HELM := $(BIN)/helm
export KUBEBUILDER_ASSETS := $(BIN)

FUZZTIME ?= 10s
TEST_FLAGS ?= -race -count=1

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC into config/, and copy them and the alert rules into the Helm chart.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:allowDangerousTypes=false paths="./api/..." paths="./controllers/..." paths="./cmd/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	rm -f charts/metalheal/crds/*.yaml
	cp config/crd/bases/*.yaml charts/metalheal/crds/
	cp config/rbac/role.yaml charts/metalheal/files/manager-role.yaml
	cp config/prometheus/rules.yaml charts/metalheal/files/prometheus-rules.yaml

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code for the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: vet ## Check formatting, import boundaries (STYLE.md) and vet.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	hack/check-imports.sh

.PHONY: verify-gen
verify-gen: generate manifests ## Regenerate everything and fail if the committed files differ.
	@if [ -n "$$(git status --porcelain -- api config charts)" ]; then \
		echo "generated files are out of date; run 'make generate manifests' and commit:"; \
		git status --porcelain -- api config charts; git diff --stat -- api config charts; exit 1; fi

.PHONY: test
test: test-deps envtest-bins tools ## Run all tests against a real local apiserver (installs what it needs).
	$(GO) test $(TEST_FLAGS) ./...
	$(GO) test -run='^$$' -fuzz=FuzzParseAddress -fuzztime=$(FUZZTIME) ./pkg/bmc

.PHONY: test-e2e
test-e2e: test-deps envtest-bins tools ## Run the end-to-end suite: the real manager as its own process in a local world, under faults.
	$(GO) test -tags e2e -count=1 -timeout 20m -v ./test/e2e/ -ginkgo.v

.PHONY: test-e2e-interop
test-e2e-interop: test-deps envtest-bins tools build-peers ## Run the interop suite: Cluster API's and medik8s' real managers drive metalheal, and metalheal's checks drive their remediators' kinds.
	$(GO) test -tags interop -count=1 -timeout 15m -v ./test/e2e-interop/ -ginkgo.v

.PHONY: build-peers
build-peers: $(KUSTOMIZE) ## Build Cluster API's and medik8s' managers into ./bin and render their config/default (once; cached).
	CAPI_VERSION=$(CAPI_VERSION) NHC_VERSION=$(NHC_VERSION) KUSTOMIZE=$(KUSTOMIZE) hack/build-peers.sh $(BIN)

.PHONY: test-deps
test-deps: ## Install the system packages tests drive (ipmitool, ipmi_sim, Redfish clients) when missing.
	hack/install-test-deps.sh

.PHONY: envtest-bins
envtest-bins: ## Build etcd, kube-apiserver and kube-controller-manager into ./bin (once; cached).
	KUBE_VERSION=$(KUBE_VERSION) ETCD_VERSION=$(ETCD_VERSION) hack/build-control-plane.sh $(BIN)

.PHONY: demo
demo: envtest-bins $(KUSTOMIZE) ## Watch a node die and metalheal bring it back, on a local control plane (ARGS=--keep leaves it running).
	$(GO) run ./test/demo $(ARGS)

##@ Build

.PHONY: build
build: ## Build the manager binary into ./bin/manager.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/manager ./cmd

.PHONY: plugin
plugin: ## Build the kubectl plugin into ./bin/kubectl-metalheal (put it on the PATH: `kubectl metalheal`).
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/kubectl-metalheal ./cmd/kubectl-metalheal

.PHONY: run
run: ## Run the manager against the cluster in $$KUBECONFIG.
	$(GO) run ./cmd $(ARGS)

.PHONY: docker-build
docker-build: ## Build the container image (never runs tests).
	docker build -t $(IMG) .

##@ Benchmarks

.PHONY: bench
bench: envtest-bins $(KUSTOMIZE) ## Measure the 5,000-node world: cost targets, the wave guard, detection reported (BENCHMARKS.md); ARGS="--help" lists the knobs.
	$(GO) run ./test/bench $(ARGS)

.PHONY: bench-small
bench-small: envtest-bins $(KUSTOMIZE) ## Measure the 1,000-node world: the detection latency targets (BENCHMARKS.md).
	$(GO) run ./test/bench --nodes=1000 --out=bin/bench-small.json $(ARGS)

.PHONY: bench-fleet
bench-fleet: envtest-bins $(KUSTOMIZE) ## The fleet world: 4 workload clusters x 50 nodes (at 8 the two cores saturate), each its own API server, one MachineHealthCheck each: the manager's cost per cluster connected, detection across clusters (BENCHMARKS.md).
	$(GO) run ./test/bench --world=fleet --clusters=4 --nodes-per-cluster=50 --failures=40 --steady=60s --out=bin/bench-fleet.json $(ARGS)

.PHONY: bench-peers
bench-peers: envtest-bins $(KUSTOMIZE) build-peers ## The checkers side by side, interleaved: metalheal's and medik8s' NodeHealthCheck, metalheal's and Cluster API's MachineHealthCheck, 1,000 nodes, 3 runs each (ARGS="--nodes=100 --runs=1" for a smoke test).
	$(GO) run ./test/bench peers $(ARGS)

##@ Deployment

.PHONY: install
install: $(KUSTOMIZE) ## Install the CRDs into the cluster in $$KUBECONFIG.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: uninstall
uninstall: $(KUSTOMIZE) ## Remove the CRDs (and every object of their kinds) from the cluster.
	$(KUSTOMIZE) build config/crd | kubectl delete --ignore-not-found -f -

.PHONY: deploy
deploy: $(KUSTOMIZE) ## Deploy metalheal (namespace, CRDs, RBAC, manager) into the cluster in $$KUBECONFIG.
	cd config/manager && $(KUSTOMIZE) edit set image manager=$(IMG)
	$(KUSTOMIZE) build config/default | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) ## Remove metalheal from the cluster.
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -f -

##@ Tools

$(CONTROLLER_GEN):
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

$(KUSTOMIZE):
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

# Built from the Go module proxy like the other tools; test/chart runs `helm lint` and `helm template`.
$(HELM):
	GOBIN=$(BIN) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: tools
tools: $(CONTROLLER_GEN) $(KUSTOMIZE) $(HELM) ## Install pinned controller-gen, kustomize and helm into ./bin.
