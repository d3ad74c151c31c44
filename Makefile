# cela: the two user-facing entry points are `make serve` and `make test`.
# Everything runs as root on Debian 12; `deps` installs only what is missing.

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)

# Debian packages the build, the tests and the benchmarks need. python3-munkres lets apt
# satisfy python3-fonttools (a matplotlib dependency) without python3-scipy, which pulls
# boost 1.74, a conflict with libboost1.81-dev.
DEB_PACKAGES := build-essential cmake pkg-config \
  libboost1.81-dev libboost-json1.81-dev libseccomp-dev libssl-dev \
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libsqlite3-dev libarchive-dev zlib1g-dev \
  python3 python3-pytest python3-prometheus-client python3-websockets debootstrap bubblewrap ca-certificates \
  nodejs umoci tmux python3-munkres python3-matplotlib \
  python3-pip python3-setuptools python3-wheel python3-venv

.PHONY: deps openapi-deps e2b-deps build test unit serve install deb sdk bench bench-extra base-template code-interpreter-template format clean

# npm: Debian's package unless an npm is already there (a nodejs package that bundles
# its own npm conflicts with Debian's).
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "deps: all Debian packages present"; fi

# The OpenAPI validator of the tests (tests/openapi), exactly as the committed lockfile
# pins it; reinstalled only when the lockfile changes.
OPENAPI_DIR := tests/openapi
$(OPENAPI_DIR)/node_modules/.package-lock.json: $(OPENAPI_DIR)/package-lock.json $(OPENAPI_DIR)/package.json | deps
	npm ci --prefix $(OPENAPI_DIR) --no-audit --no-fund
openapi-deps: deps $(OPENAPI_DIR)/node_modules/.package-lock.json

# The official E2B SDKs the E2B compatibility suites drive (tests/e2b), as pinned.
E2B_DIR := tests/e2b
$(E2B_DIR)/node_modules/.package-lock.json: $(E2B_DIR)/package-lock.json $(E2B_DIR)/package.json | deps
	npm ci --prefix $(E2B_DIR) --no-audit --no-fund
e2b-deps: deps $(E2B_DIR)/node_modules/.package-lock.json

build: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The base template is cached under /var/lib/cela: built once, reused afterwards.
base-template: build
	$(BUILD_DIR)/cela template build base

# The code interpreter's template (E2B's default, also named code-interpreter-v1): base
# plus Debian's Jupyter packages and cela's kernel server, as templates/code-interpreter
# describes it. Its run step fetches through a package gateway of the build, from the
# machine's own apt sources; later runs are cache hits (`up to date`).
code-interpreter-template: base-template
	env -u CELA_URL $(BUILD_DIR)/cela template build code-interpreter -f templates/code-interpreter/template.json

test: build base-template code-interpreter-template openapi-deps e2b-deps
	cd $(BUILD_DIR) && ctest --output-on-failure -j 1

# Every test labelled `unit`: the GoogleTest cases, the OpenAPI validation and the
# layering check (tests/CMakeLists.txt).
unit: build openapi-deps
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit

serve: build base-template
	$(BUILD_DIR)/cela serve

# The binary, the systemd unit, the default config (kept when one is there) and the
# docs, under PREFIX (and DESTDIR when set). docs/operations.md "Install and run as a service".
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# A Debian package from the existing build directory (seconds, no rebuild):
# $(BUILD_DIR)/packages/cela_<version>_amd64.deb, installed under /usr with /etc/cela.
deb: build
	cd $(BUILD_DIR) && cpack -G DEB -B packages

# The Python SDK as a wheel, built offline with Debian's setuptools: $(BUILD_DIR)/sdk/dist/cela-<version>-py3-none-any.whl
sdk: build
	cmake --build $(BUILD_DIR) --target sdk

# Every performance figure in one run, beside bubblewrap and runc: bench/out/report.json, report.md and report.png
# (docs/development.md "Benchmarks"). BENCH_ARGS='--quick' or e.g. '--sessions 1000
# --runs 50' for a shorter run. bench-extra: the benchmarks of other areas.
bench: build base-template
	/usr/bin/python3 bench/report.py --cela $(BUILD_DIR)/cela $(BENCH_ARGS)

bench-extra: build base-template
	/usr/bin/python3 bench/ws.py --cela $(BUILD_DIR)/cela
	/usr/bin/python3 bench/redaction.py --bench $(BUILD_DIR)/bench/cela_redaction_bench
	/usr/bin/python3 bench/storage.py --cela $(BUILD_DIR)/cela
	/usr/bin/python3 bench/lifecycle.py --cela $(BUILD_DIR)/cela

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR)
