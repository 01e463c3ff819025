# Sandloom: the two commands a newcomer needs are `make run` and `make test`.
BUILD ?= build
HOST ?= 127.0.0.1
PORT ?= 8080
STATE ?= $(CURDIR)/state

.PHONY: all build deps deps-build deps-run run test unit e2e security bench sanitize clean format

all: build

deps-build:
	@scripts/install-deps.sh build

deps-run:
	@scripts/install-deps.sh run

deps:
	@scripts/install-deps.sh test

$(BUILD)/build.ninja:
	meson setup $(BUILD)

build: deps-build $(BUILD)/build.ninja
	ninja -C $(BUILD)

# Starts the service on its embedded defaults: SQLite, in-process registry,
# local workspaces, all under $(STATE).
run: deps-run build
	@mkdir -p $(STATE)
	SANDBOX_HOST=$${SANDBOX_HOST:-$(HOST)} SANDBOX_PORT=$${SANDBOX_PORT:-$(PORT)} \
	SANDBOX_ADVERTISE_HOST=$${SANDBOX_ADVERTISE_HOST:-127.0.0.1} \
	SANDBOX_LOCAL_ROOT=$${SANDBOX_LOCAL_ROOT:-$(STATE)/sandboxes} \
	SANDBOX_DATABASE_URL=$${SANDBOX_DATABASE_URL:-sqlite:///$(STATE)/sandloom.db} \
	SANDBOX_STARTUP_LOG_PATH=$${SANDBOX_STARTUP_LOG_PATH:-$(STATE)/startup.log} \
	exec $(BUILD)/sandloomd

ASAN_BUILD ?= build-asan

$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) -Db_sanitize=address,undefined -Db_lundef=false

# Every tier, on the release build and again under ASan + UBSan.
test: deps build $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)
	scripts/run-tests.sh $(BUILD) $(ASAN_BUILD)

unit: build
	meson test -C $(BUILD) --suite unit --print-errorlogs

e2e: build
	SANDLOOMD=$(CURDIR)/$(BUILD)/sandloomd /usr/bin/python3 -m pytest -q tests/e2e

security: build
	SANDLOOMD=$(CURDIR)/$(BUILD)/sandloomd /usr/bin/python3 -m pytest -q tests/security

# Speed figures beside a baseline measured in the same run (not a test).
bench: build
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; } || true
	SANDLOOM_INIT=$(BUILD)/sandloom-init $(BUILD)/exec_bench 500 1000
	bench/api_bench.sh $(BUILD)
	bench/reaper_bench.sh $(BUILD)

# Unit tests alone under ASan + UBSan (make test runs every tier there too).
sanitize: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)
	meson test -C $(ASAN_BUILD) --suite unit --print-errorlogs

format:
	clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'tests/*.c')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
