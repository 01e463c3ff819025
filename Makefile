# Sandloom: the two commands a newcomer needs are `make run` and `make test`.
BUILD ?= build
HOST ?= 127.0.0.1
PORT ?= 8080
STATE ?= $(CURDIR)/state
FLEET_STATE ?= $(CURDIR)/state-fleet
FLEET_PORT ?= 18080
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all build deps deps-build deps-run web-deps run fleet install uninstall docs test unit e2e security bench sanitize clean format

all: build

deps-build:
	@scripts/install-deps.sh build

deps-run:
	@scripts/install-deps.sh run

deps:
	@scripts/install-deps.sh test

# Swagger UI (npm swagger-ui-dist, pinned) is compiled into /docs.
web-deps:
	@scripts/install-web-deps.sh

$(BUILD)/build.ninja: | web-deps
	meson setup $(BUILD)

build: deps-build web-deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

# Starts the service on its embedded defaults: SQLite, in-process registry,
# local workspaces, all under $(STATE). The environment, then this command
# line (make run PORT=9000 STATE=/srv/sl), then .env win over these
# defaults (scripts/run.sh).
run: deps-run build
	@SL_RUN_GIVEN="$(strip $(foreach v,HOST PORT STATE,$(if $(filter command line,$(origin $(v))),$(v))))" \
	scripts/run.sh $(BUILD) "$(HOST)" "$(PORT)" "$(STATE)"

# A three-replica fleet on this machine: PostgreSQL, Redis, an S3 server and
# three replicas (two of one profile, one of another) on loopback, started
# by scripts/fleet.sh under $(FLEET_STATE); Ctrl-C stops them all.
fleet: deps build
	scripts/fleet.sh $(BUILD) "$(FLEET_STATE)" "$(FLEET_PORT)"

# Installs the programs under $(DESTDIR)$(PREFIX): sandloomd, the CLI
# sandloom and sandloom-doctor in bin/, sandloom-init (every sandbox's PID 1, not a
# command) in libexec/sandloom/, where sandloomd looks for it.
install: build
	install -d "$(DESTDIR)$(PREFIX)/bin" "$(DESTDIR)$(PREFIX)/libexec/sandloom"
	install -m 0755 $(BUILD)/sandloomd $(BUILD)/sandloom $(BUILD)/sandloom-doctor "$(DESTDIR)$(PREFIX)/bin/"
	install -m 0755 $(BUILD)/sandloom-init "$(DESTDIR)$(PREFIX)/libexec/sandloom/"
	install -d "$(DESTDIR)$(PREFIX)/share/bash-completion/completions"
	install -m 0644 contrib/bash-completion/sandloom "$(DESTDIR)$(PREFIX)/share/bash-completion/completions/sandloom"

uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/bin/sandloomd" "$(DESTDIR)$(PREFIX)/bin/sandloom" \
	      "$(DESTDIR)$(PREFIX)/bin/sandloom-doctor" \
	      "$(DESTDIR)$(PREFIX)/libexec/sandloom/sandloom-init" \
	      "$(DESTDIR)$(PREFIX)/share/bash-completion/completions/sandloom"
	-rmdir "$(DESTDIR)$(PREFIX)/libexec/sandloom" 2>/dev/null

ASAN_BUILD ?= build-asan

$(ASAN_BUILD)/build.ninja: | web-deps
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
	/usr/bin/python3 bench/startup_bench.py $(BUILD)
	bench/fleet_bench.sh $(BUILD)
	bench/private_net_bench.sh $(BUILD)
	/usr/bin/python3 bench/stream_bench.py $(BUILD)
	/usr/bin/python3 bench/ports_bench.py $(BUILD)
	/usr/bin/python3 bench/e2b_bench.py $(BUILD)
	/usr/bin/python3 bench/gvisor_bench.py $(BUILD)

# Unit tests alone under ASan + UBSan (make test runs every tier there too).
sanitize: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)
	meson test -C $(ASAN_BUILD) --suite unit --print-errorlogs

# Regenerates docs/CONFIGURATION.md from the configuration table and the
# deploy SQL from the schema.
docs: build
	$(BUILD)/config-reference > docs/CONFIGURATION.md
	mkdir -p deploy/sql
	$(BUILD)/schema-sql postgresql > deploy/sql/generic-postgresql.sql
	$(BUILD)/schema-sql mysql > deploy/sql/generic-mysql.sql

format:
	clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'tests/*.c')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
