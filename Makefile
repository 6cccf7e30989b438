# sandq: `make test` brings up what it needs (scripts/setup.sh), builds the sandbox images
# (scripts/images.sh) and runs every test. Override variables on the command line or in the
# environment, e.g. `make test GO=/usr/local/go/bin/go SANDQ_CACHE=/var/cache/sandq`.

GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
DOCKER ?= docker
SANDQ_CACHE ?= $(HOME)/.cache/sandq
TEST_TIMEOUT ?= 40m
BENCHTIME ?= 1x
export GO DOCKER SANDQ_CACHE

.PHONY: all setup images demo test bench vet clean clean-images

all: vet test

setup:
	scripts/setup.sh

images: setup
	scripts/images.sh

# Runs jobs end to end on local defaults (a worker, a few jobs, their results).
demo: images
	scripts/demo.sh

# -p 1: one package at a time. The packages share one engine on a 2-core machine, and
# e2e's TestEngineStoppedMidJob stops the engine, which no other package's tests may see.
test: images
	$(GO) test -race -count=1 -p 1 -timeout $(TEST_TIMEOUT) ./...

bench: images
	$(GO) test -p 1 -run '^$$' -bench . -benchtime $(BENCHTIME) ./...

vet:
	$(GO) vet ./...
	@out=$$($(GOFMT) -l $$(git ls-files --cached --others --exclude-standard '*.go') </dev/null); \
	if [ -n "$$out" ]; then echo "gofmt: these files are not formatted:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin dist

# Removes the sandq images from the engine and the image cache: the next `make images`
# starts from debootstrap.
clean-images:
	$(DOCKER) image ls --format '{{.Repository}}:{{.Tag}}' | grep '^sandq/' | xargs -r $(DOCKER) rmi -f >/dev/null
	rm -rf $(SANDQ_CACHE)
