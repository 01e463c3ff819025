# Sandloom: the two commands a newcomer needs are `make run` and `make test`.
BUILD ?= build
HOST ?= 127.0.0.1
PORT ?= 8080
STATE ?= $(CURDIR)/state

.PHONY: all build deps deps-build run test unit e2e bench sanitize clean format

all: build

deps-build:
	@scripts/install-deps.sh build

deps:
	@scripts/install-deps.sh test

$(BUILD)/build.ninja:
	meson setup $(BUILD)

build: deps-build $(BUILD)/build.ninja
	ninja -C $(BUILD)

# Starts the service on its embedded defaults: SQLite, in-process registry,
# local workspaces, all under $(STATE).
run: build
	@mkdir -p $(STATE)
	SANDBOX_HOST=$${SANDBOX_HOST:-$(HOST)} SANDBOX_PORT=$${SANDBOX_PORT:-$(PORT)} \
	SANDBOX_ADVERTISE_HOST=$${SANDBOX_ADVERTISE_HOST:-127.0.0.1} \
	SANDBOX_LOCAL_ROOT=$${SANDBOX_LOCAL_ROOT:-$(STATE)/sandboxes} \
	SANDBOX_DATABASE_URL=$${SANDBOX_DATABASE_URL:-sqlite:///$(STATE)/sandloom.db} \
	SANDBOX_STARTUP_LOG_PATH=$${SANDBOX_STARTUP_LOG_PATH:-$(STATE)/startup.log} \
	exec $(BUILD)/sandloomd

test: deps build
	scripts/run-tests.sh $(BUILD)

unit: build
	meson test -C $(BUILD) --suite unit --print-errorlogs

e2e: build
	python3 -m pytest -q tests/e2e

# Speed figures beside a baseline measured in the same run (not a test).
bench: build
	SANDLOOM_INIT=$(BUILD)/sandloom-init $(BUILD)/exec_bench 500

# ASan + UBSan build of everything, running the unit tests.
sanitize: deps
	meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false 2>/dev/null || true
	ninja -C build-asan
	meson test -C build-asan --suite unit --print-errorlogs

format:
	clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'tests/*.c')

clean:
	rm -rf $(BUILD) build-asan
