# fenced_lock: `make run` sets up everything and leaves a demo server running;
# `make test` sets up everything and runs every suite. Both are safe to repeat.
# `make && make install PG_CONFIG=/path/to/pg_config` builds and installs for that PostgreSQL.

VERSION   := $(shell scripts/version.sh)
# The PostgreSQL major: 15 (Debian's, the default), 16 or 18 (PyPI wheels, scripts/pg-config.sh),
# or the major of the pg_config the user names (the PGXS convention). An unsupported major is
# refused here, before anything is built.
PG        := 15
ifneq ($(filter command line environment,$(origin PG_CONFIG)),)
USER_PG_CONFIG := yes
PG := $(shell scripts/pg-major.sh $(PG_CONFIG) 2>&1)
ifneq ($(filter-out 15 16 18,$(PG)),)
$(error $(PG))
endif
else
PG_CONFIG  = $(shell scripts/pg-config.sh $(PG))
endif
PG_BIN     = $(shell $(PG_CONFIG) --bindir)
# Each major's servers and build outputs are its own; 15 keeps 0.1.0's places.
RUN_DIR   := build/pg$(if $(filter 15,$(PG)),,$(PG))/run
TARGET_DIR := target$(if $(filter 15,$(PG)),,/pg$(PG))
# The demo server's TCP port on 127.0.0.1: `make run PORT=...` picks another one. Test and
# benchmark servers listen only on Unix sockets in their own directories, never on TCP.
PORT      := 54315
RUN_URL   := postgresql://postgres@127.0.0.1:$(PORT)/fenced_lock
PGRX_TEST_DIR := $(CURDIR)/build/pgrx-test
# pgrx's record of the pg_configs lives in the checkout, never in the user's ~/.pgrx.
export PGRX_HOME := $(CURDIR)/build/pgrx-home
# What `make psql` and `make stop` need to reach the server `make run` started.
MAKE_ARGS := $(if $(filter 15,$(PG)),,PG=$(PG)) $(if $(filter 54315,$(PORT)),,PORT=$(PORT))

.PHONY: all build-setup setup install run demo psql stop test check lint unit checker sql-tests faults bench \
	profile ha compare clients package dist clean

# `make` builds the release library and scripts for PG_CONFIG (or PG) without installing them:
# what `pgxn install` runs before `make install`.
all: $(if $(USER_PG_CONFIG),build-setup,setup)
	CARGO_TARGET_DIR=$(TARGET_DIR) cargo pgrx package --pg-config $(PG_CONFIG) \
	    --out-dir build/stage/pg$(PG)

# Only what building for the user's PG_CONFIG needs (no test servers, drivers or other majors).
build-setup:
	scripts/setup.sh --build $(PG_CONFIG)

setup:
	scripts/setup.sh

# Installs what `make` built, with the install scripts of 0.1.0 and 0.2.0 as shipped, so a
# database of either can be made and upgraded; safe under a running server (each file is
# renamed into place, never rewritten).
install: all
	scripts/install-staged.sh $(PG_CONFIG) build/stage/pg$(PG)

# A Debian package per major in build/packages (postgresql-15-fenced-lock_1.0.0-1_amd64.deb and
# those of 16 and 18), or for PG_CONFIG's major alone.
package: $(if $(USER_PG_CONFIG),build-setup,setup)
	scripts/package.sh $(if $(USER_PG_CONFIG),$(PG_CONFIG),$(foreach major,15 16 18,$$(scripts/pg-config.sh $(major))))

# The archive PGXN takes: the committed tree of HEAD, with META.json at its top.
dist:
	mkdir -p build/dist
	git archive --format=zip --prefix=fenced_lock-$(VERSION)/ -o build/dist/fenced_lock-$(VERSION).zip HEAD
	@echo build/dist/fenced_lock-$(VERSION).zip

run: install
	PG_BIN=$(PG_BIN) scripts/pg.sh tcp $(RUN_DIR) $(PORT) -c shared_preload_libraries=fenced_lock
	psql "postgresql://postgres@127.0.0.1:$(PORT)/postgres" -qXAt \
	    -c "SELECT 1 FROM pg_database WHERE datname = 'fenced_lock'" | grep -q 1 || \
	    psql "postgresql://postgres@127.0.0.1:$(PORT)/postgres" -qX -c "CREATE DATABASE fenced_lock"
	psql "$(RUN_URL)" -qX -c "SET client_min_messages = warning" \
	    -c "CREATE EXTENSION IF NOT EXISTS fenced_lock" -c "ALTER EXTENSION fenced_lock UPDATE" \
	    -c "SELECT register_namespace('demo', 1001, 'make run demo')" >/dev/null
	scripts/demo.sh "$(RUN_URL)"
	@echo
	@echo "The server is running. Connect with:  make psql $(MAKE_ARGS)  (or: psql $(RUN_URL))"
	@echo "Stop it with:                         make stop $(MAKE_ARGS)"

psql:
	$(PG_BIN)/psql "$(RUN_URL)"

stop:
	PG_BIN=$(PG_BIN) scripts/pg.sh stop $(RUN_DIR)

# Every suite, one summary line each, and a final "N passed, M failed" line.
# With PG=16 or PG=18: that major's release build and SQL suites only.
test:
	PG=$(PG) scripts/test.sh

# What a contributor runs while working (under 5 minutes once built): lint, the unit tests,
# the checker's, and the PostgreSQL 15 SQL suites but the driver and monitoring suites, which
# `make test` runs with everything else.
check:
	$(MAKE) -s lint
	$(MAKE) -s unit
	$(MAKE) -s checker
	$(MAKE) -s sql-tests SQL_SUITES="regress isolation collation upgrade readme standby"

lint:
	cargo fmt --check
	cargo fmt --check --manifest-path faults/Cargo.toml
	cargo clippy --all-targets --features "pg15 pg_test" -- -D warnings
	cargo clippy --all-targets --manifest-path faults/Cargo.toml --target-dir target/faults -- -D warnings
	cargo fmt --check --manifest-path examples/leader/Cargo.toml
	cargo clippy --manifest-path examples/leader/Cargo.toml --target-dir target/faults -- -D warnings
	cargo fmt --check --manifest-path pg_test/drivers/rust/Cargo.toml
	cargo clippy --manifest-path pg_test/drivers/rust/Cargo.toml --target-dir target/faults -- -D warnings
	cargo fmt --check --manifest-path checker/Cargo.toml
	cargo clippy --all-targets --manifest-path checker/Cargo.toml --target-dir target/checker -- -D warnings
	cargo fmt --check --manifest-path clients/rust/Cargo.toml
	cargo clippy --all-targets --manifest-path clients/rust/Cargo.toml --target-dir target/clients-rust -- -D warnings
	# The Rust client's test suite builds against the packaged crate (make clients); its clippy
	# runs there.
	rustfmt --check --edition 2021 clients/rust/testsuite/src/*.rs clients/rust/testsuite/src/bin/*.rs clients/rust/testsuite/tests/*.rs

# The history checker of make compare and make ha (checker/), on hand-made histories.
checker:
	cargo test --manifest-path checker/Cargo.toml --target-dir target/checker

# #[pg_test] unit tests; cargo pgrx runs its own server as `postgres`.
unit:
	mkdir -p $(PGRX_TEST_DIR) && chown postgres:postgres $(PGRX_TEST_DIR)
	cargo pgrx test pg15 --runas postgres --pgdata $(PGRX_TEST_DIR)/data

# pg_regress, isolation, collation, upgrade, driver and hot-standby suites against the
# installed release build.
sql-tests: install
	PG=$(PG) scripts/sql-tests.sh

# Fault suite: crashes, killed backends, failover, stale holders, dump/restore (faults/).
faults: install
	cargo build --manifest-path examples/leader/Cargo.toml --target-dir target/faults
	cargo test --manifest-path faults/Cargo.toml --target-dir target/faults --tests -- --test-threads=1 --nocapture

# Client libraries (clients/): each built into its package, installed from it into a scratch
# environment, and run through the conformance scenarios and fault tests against a server of its
# own, directly and through PgBouncer. CLIENTS="node rust" (say) runs only the libraries named.
clients: install
	clients/run.sh

# CURVES=1: the scaling curves instead (bench/curves.py, about 15 minutes), fenced_lock beside
# its anchor as clients, held locks, lease rows, keys per call and waiters grow; writes
# docs/scaling.md and docs/scaling.png.
bench: install
ifeq ($(CURVES),)
	scripts/bench.sh
else
	scripts/venv.sh build/bench/venv psycopg2-binary==2.9.13 matplotlib==3.11.2
	PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=scripts build/bench/venv/bin/python bench/curves.py \
	    build/bench/curves
endif

# Instructions per transaction of the bench workloads, counted by callgrind in the backend
# (repeatable on a busy machine); its files stay in build/profile for callgrind_annotate.
profile: install
	scripts/profile.sh

# fenced_lock under Patroni + etcd (ha/): both modes and the controls, every trial's history
# read by the checker; QUICK=1 is the short form that `make test` runs.
ha: install
	cargo build --manifest-path checker/Cargo.toml --target-dir target/checker
	ha/run.sh $(if $(QUICK),--quick)

# The failure table measured: Redis, Redlock, etcd, PostgreSQL by hand and fenced_lock through
# the same faults (compare/); QUICK=1 is the short form that `make test` runs.
compare: install
	cargo build --manifest-path checker/Cargo.toml --target-dir target/checker
	compare/run.sh $(if $(QUICK),--quick)

clean:
	-scripts/pg.sh stop $(RUN_DIR)
	rm -rf build
	cargo clean
