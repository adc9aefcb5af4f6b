# lanced Makefile. `make test` is the README's test command; .ci/run calls it.
GO        ?= go
PROTOC    ?= protoc
PKGS      ?= ./...
FUZZTIME  ?= 10s
BENCHTIME ?= 1x

.PHONY: all build test test-short lint generate check-generate fuzz fuzz-long bench oracle e2e clean

all: build

build:
	$(GO) build -o bin/lanced ./cmd/lanced

# The full suite: unit, integration against the npm oracle, short fuzz runs.
test: oracle
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 45m $(PKGS)
	$(MAKE) fuzz FUZZTIME=5s

# Pure-Go tests only (no oracle, no long scenarios).
test-short:
	$(GO) test -short -count=1 $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Regenerate protobuf code (protoc from Debian's protobuf-compiler,
# protoc-gen-go pinned as a tool in go.mod) and the FastLanes kernels. The
# protoc version protoc-gen-go writes into each header is dropped, so the
# output does not depend on which protoc release is installed.
generate:
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(PROTOC) -I proto --plugin=protoc-gen-go=bin/protoc-gen-go \
		--go_out=. --go_opt=module=github.com/lanced-dev/lanced proto/*.proto
	sed -i 's|^// \tprotoc  *v.*$$|// \tprotoc        (unknown)|' internal/format/pb/*/*.pb.go
	$(GO) generate ./internal/format/codec

check-generate: generate
	@git diff --exit-code -- internal/format/pb internal/format/codec || (echo "generated code is out of date: run make generate"; exit 1)
	@untracked=$$(git ls-files --others --exclude-standard -- internal/format/pb internal/format/codec); if [ -n "$$untracked" ]; then echo "make generate wrote files that are not committed: $$untracked"; exit 1; fi

# Every fuzz target, FUZZTIME each (go test runs one -fuzz target at a time).
# A run that fails without writing a failing input to testdata/fuzz (go's
# coordinator sometimes reports "context deadline exceeded" at the end of
# -fuzztime) is run once more; a failing input always fails the build.
fuzz:
	@for spec in $$(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' internal cmd 2>/dev/null | sed 's/:func /:/'); do \
		file=$${spec%%:*}; name=$${spec##*:}; pkg=./$$(dirname $$file); \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		corpus=$$(dirname $$file)/testdata/fuzz/$$name; \
		before=$$(ls $$corpus 2>/dev/null | wc -l); \
		if ! $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg; then \
			if [ "$$(ls $$corpus 2>/dev/null | wc -l)" != "$$before" ]; then echo "fuzz $$name found a failing input: $$corpus"; exit 1; fi; \
			echo "fuzz $$name failed without writing a failing input (go's fuzz coordinator timed out); once more"; \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		fi; \
	done

fuzz-long:
	$(MAKE) fuzz FUZZTIME=5m

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

# Real Lance (the judge), installed from the lockfile.
oracle: testenv/oracle/node_modules/.package-lock.json

testenv/oracle/node_modules/.package-lock.json: testenv/oracle/package-lock.json
	cd testenv/oracle && npm ci --no-audit --no-fund

clean:
	rm -rf bin
