# oplog2pg — top-level build.
#
#   make                 build build/oplog2pg and build/mongosim
#   make check           unit suites + integration tests (throwaway PostgreSQL, mongosim, libmongoc, pymongo)
#   make SANITIZE=1 check   the same under AddressSanitizer and UBSan (objects in build/san)
#   make demo            replicate a sample workload into a throwaway PostgreSQL and show the result
#   make bench           benchmarks (kept in build/bench-results.md, plotted into docs/*.svg by bench/plots.sh;
#                        figures go to docs/benchmarks.md by hand)
#   make package-check   build the Debian package (debian/), install, run, purge it here (root; not in make check)
#   make monitoring-check   the Grafana dashboard and Prometheus rules in contrib/ (part of make check)
#   make install         binary, unit, sysusers file, man pages, docs, and the configuration if there is none
#                        (PREFIX=/usr/local, DESTDIR=, SYSCONFDIR=...: see the install section below); make uninstall
#   make format / lint   clang-format in place / cppcheck
#   make fuzz            libFuzzer targets (clang, ASan, UBSan; objects in build/fuzz), each run FUZZ_SECONDS
#                        (default 20) from its corpus; docs/reliability.md says more
#
# Sources are found by folder, so adding a file needs no edit here:
#   src/**.c              the daemon (src/daemon/main.c holds main(); the rest is also linked into the tests)
#   src/**.cc             C++ only where a library offers nothing else (src/util/dtoa_digits.cc: libdouble-conversion)
#   tests/mongosim/*.c    the MongoDB replica-set simulator (main.c holds main())
#   tests/unit/*.c        Check suites; each defines `Suite *NAME_suite(void)`, collected into runner.c's list
#   tests/integration/*.c Check suites run against PostgreSQL and mongosim (or MONGO_URI), their own runner
#   tests/lib/*.c         helpers shared by both
#   bench/*.c             benchmarks, one program each (bench/lib/*.c: what the replication benchmarks share)

CC      ?= cc
CXX     ?= c++
PKGS    := libmongoc-1.0 libbson-1.0 libpq inih libsystemd libmicrohttpd
VERSION := $(shell cat VERSION 2>/dev/null || echo 0.0.0)

# BUILD may be set on the command line to keep several builds apart (make BUILD=build/mine).
ifeq ($(SANITIZE),1)
BUILD   ?= build/san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else
BUILD   ?= build
SANFLAGS :=
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) check 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -ldouble-conversion -lev -lpthread -lm
# The allocator: tcmalloc (gperftools) for every program but sanitizer builds, which keep glibc's malloc under ASan.
# include/util/memory.h says why; docs/benchmarks.md ("The allocator") has the figures, measured against a build on
# glibc's malloc: make MALLOC=glibc BUILD=build/glibc.
ifeq ($(SANITIZE),1)
MALLOC := glibc
endif
ifneq ($(MALLOC),glibc)
PKG_LIBS   += $(shell pkg-config --libs libtcmalloc_minimal 2>/dev/null || echo -ltcmalloc_minimal)
MALLOC_FLAGS := -DOPLOG2PG_TCMALLOC
endif
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)
# mongosim serves TLS (--tls-cert) through OpenSSL, the library libmongoc itself is built with on Debian.
SIM_LIBS   := $(shell pkg-config --libs openssl 2>/dev/null || echo -lssl -lcrypto)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CFLAGS  ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) $(MALLOC_FLAGS) -Iinclude -I$(BUILD)/gen \
              -DOPLOG2PG_VERSION='"$(VERSION)"' $(PKG_CFLAGS) -MMD -MP
ALL_LDFLAGS := $(LDFLAGS) $(SANFLAGS)
# The C++ file calls one function and throws nothing; UBSan's vptr check needs RTTI, which it does not have.
ALL_CXXFLAGS := -std=c++11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -fno-exceptions \
                -fno-rtti $(CFLAGS) $(SANFLAGS) $(if $(SANFLAGS),-fno-sanitize=vptr) -Iinclude -MMD -MP

DAEMON_SRC := $(sort $(shell find src -name '*.c'))
DAEMON_LIB_SRC := $(filter-out src/daemon/main.c,$(DAEMON_SRC))
DAEMON_CXX_SRC := $(sort $(shell find src -name '*.cc'))
SIM_SRC    := $(sort $(wildcard tests/mongosim/*.c))
SIM_LIB_SRC := $(filter-out tests/mongosim/main.c,$(SIM_SRC))
UNIT_SRC   := $(sort $(wildcard tests/unit/*.c))
INTEG_SRC  := $(sort $(wildcard tests/integration/*.c))
# tests/fuzz/*.c: the fuzz targets' entry points, linked into the unit tests too (their regression inputs run there);
# main.c (the libFuzzer side) and seeds.c (a program) are built by `make fuzz` only.
FUZZ_ENTRY_SRC := $(filter-out tests/fuzz/main.c tests/fuzz/seeds.c,$(sort $(wildcard tests/fuzz/*.c)))
TESTLIB_SRC := $(sort $(wildcard tests/lib/*.c)) $(FUZZ_ENTRY_SRC)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
cxxobj = $(patsubst %.cc,$(BUILD)/obj/%.o,$(1))

SQL_SRC    := $(sort $(shell find src -name '*.sql'))
TEST_SQL_SRC := $(sort $(wildcard tests/integration/*.sql))
BENCH_SRC  := $(sort $(wildcard bench/*.c))
BENCH_BIN  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
BENCH_LIB_SRC := $(sort $(wildcard bench/lib/*.c))

DAEMON_LIB := $(BUILD)/liboplog2pg.a
SIM_LIB    := $(BUILD)/libmongosim.a
TEST_LIB   := $(BUILD)/libtestutil.a
BENCH_LIB  := $(BUILD)/libbench.a

.PHONY: all check soak unit integration demo bench format lint clean deps install uninstall package-check \
        monitoring-check fuzz fuzz-targets

all: $(BUILD)/oplog2pg $(BUILD)/mongosim $(BENCH_BIN)

deps:
	@scripts/deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_CXXFLAGS) -c $< -o $@

# SQL the daemon installs (src/**/*.sql) is compiled in as strings: see scripts/embed-sql.sh.
$(BUILD)/gen/sql_embed.c $(BUILD)/gen/sql_embed.h &: $(SQL_SRC) scripts/embed-sql.sh
	@mkdir -p $(BUILD)/gen
	@scripts/embed-sql.sh $(BUILD)/gen/sql_embed.c $(BUILD)/gen/sql_embed.h $(SQL_SRC)
$(BUILD)/obj/gen/sql_embed.o: $(BUILD)/gen/sql_embed.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@
$(call obj,$(DAEMON_SRC) $(UNIT_SRC) $(INTEG_SRC) $(TESTLIB_SRC) $(BENCH_SRC)): | $(BUILD)/gen/sql_embed.h
# SQL only the integration tests load (tests/integration/*.sql), never installed by the daemon.
$(BUILD)/gen/test_sql_embed.c $(BUILD)/gen/test_sql_embed.h &: $(TEST_SQL_SRC) scripts/embed-sql.sh
	@mkdir -p $(BUILD)/gen
	@scripts/embed-sql.sh $(BUILD)/gen/test_sql_embed.c $(BUILD)/gen/test_sql_embed.h $(TEST_SQL_SRC)
$(BUILD)/obj/gen/test_sql_embed.o: $(BUILD)/gen/test_sql_embed.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@
$(call obj,$(INTEG_SRC)): | $(BUILD)/gen/test_sql_embed.h

$(DAEMON_LIB): $(call obj,$(DAEMON_LIB_SRC)) $(call cxxobj,$(DAEMON_CXX_SRC)) $(BUILD)/obj/gen/sql_embed.o
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SIM_LIB): $(call obj,$(SIM_LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(TEST_LIB): $(call obj,$(TESTLIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(call obj,$(BENCH_LIB_SRC)): | $(BUILD)/gen/sql_embed.h
$(BENCH_LIB): $(call obj,$(BENCH_LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/oplog2pg: $(call obj,src/daemon/main.c) $(DAEMON_LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS)

$(BUILD)/mongosim: $(call obj,tests/mongosim/main.c) $(SIM_LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS) $(SIM_LIBS)

# The suite lists are generated from the `Suite *NAME_suite(void)` definitions in the test files.
$(BUILD)/gen/unit_suites.h: $(UNIT_SRC)
	@mkdir -p $(dir $@)
	@sed -n 's/^Suite \*\([a-z0-9_]*_suite\)(void)$$/SUITE(\1)/p' $(UNIT_SRC) > $@.tmp && mv $@.tmp $@
$(BUILD)/gen/integration_suites.h: $(INTEG_SRC)
	@mkdir -p $(dir $@)
	@sed -n 's/^Suite \*\([a-z0-9_]*_suite\)(void)$$/SUITE(\1)/p' $(INTEG_SRC) > $@.tmp && mv $@.tmp $@

$(call obj,tests/unit/runner.c): $(BUILD)/gen/unit_suites.h
$(call obj,tests/integration/runner.c): $(BUILD)/gen/integration_suites.h

$(BUILD)/unit_tests: $(call obj,$(UNIT_SRC)) $(TEST_LIB) $(DAEMON_LIB) $(SIM_LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(PKG_LIBS) $(SIM_LIBS)

$(BUILD)/integration_tests: $(call obj,$(INTEG_SRC)) $(BUILD)/obj/gen/test_sql_embed.o $(TEST_LIB) $(DAEMON_LIB) $(SIM_LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(PKG_LIBS) $(SIM_LIBS)

# Benchmarks: each bench/NAME.c is a program linked with what the replication benchmarks share (bench/lib/*.c), the
# test helpers, the daemon and simulator libraries (and libcrypto, whose md5 checks what a benchmark wrote;
# libmongoc's dev package brings it).
BENCH_LIBS := $(shell pkg-config --libs libcrypto 2>/dev/null)
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BENCH_LIB) $(TEST_LIB) $(DAEMON_LIB) $(SIM_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS) $(BENCH_LIBS) $(SIM_LIBS)

# The fault soak's comparer (tests/soak/): PostgreSQL against the source, by the integration tests' comparison.
$(BUILD)/soak_compare: $(BUILD)/obj/tests/soak/soak_compare.o $(TEST_LIB) $(DAEMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS)

# The fault soak (docs/reliability.md, "Fault soak"): long, so not part of `make check`. SOAK_OPS, SOAK_KILLS and the
# other SOAK_* variables set its scale; tests/soak/soak.py says what each does. SOAK_PARALLEL=1 runs its phases at the
# same time, each with a PostgreSQL of its own (tests/soak/parallel.sh).
soak: deps
	@$(MAKE) --no-print-directory $(BUILD)/oplog2pg $(BUILD)/mongosim $(BUILD)/soak_compare
	@if [ "$(SOAK_PARALLEL)" = 1 ]; then tests/soak/parallel.sh $(BUILD); \
	else scripts/with-pg.sh /usr/bin/python3 tests/soak/soak.py $(BUILD); fi

check: deps
	@$(MAKE) --no-print-directory all $(BUILD)/unit_tests $(BUILD)/integration_tests
	@tests/run.sh $(BUILD)

unit: all $(BUILD)/unit_tests
	$(BUILD)/unit_tests

integration: all $(BUILD)/integration_tests
	scripts/with-pg.sh tests/integration/run.sh $(BUILD)

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/with-pg.sh scripts/demo.sh $(BUILD)

bench: deps
	@$(MAKE) --no-print-directory SANITIZE= CFLAGS='-O2 -g' all
	@bench/run.sh build

# ---- fuzzing ----------------------------------------------------------------------------------------------------
# make fuzz [FUZZ_SECONDS=20]: builds every target of tests/fuzz/fuzz.h with clang into build/fuzz (the daemon's and
# mongosim's sources compiled with -fsanitize=fuzzer-no-link,address,undefined, so libFuzzer sees their coverage),
# writes the seed corpora, and runs each target for FUZZ_SECONDS (tests/fuzz/run.sh). Not part of `make check`: the
# inputs that once crashed (tests/fuzz/regressions/) run in the unit tests instead.
FUZZ_SECONDS ?= 20
FUZZ_SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_TARGETS := $(shell sed -n 's/^ *X(\([a-z0-9_]*\)).*/\1/p' tests/fuzz/fuzz.h)

fuzz:
	@scripts/deps.sh --fuzz
	@$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang CXX=clang++ MALLOC=glibc CFLAGS='-O1 -g' \
	    SANFLAGS='$(FUZZ_SANFLAGS)' fuzz-targets
	@tests/fuzz/run.sh build/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-targets: $(patsubst %,$(BUILD)/fuzz_%,$(FUZZ_TARGETS)) $(BUILD)/fuzz_seeds

$(BUILD)/fuzz_%: tests/fuzz/main.c tests/fuzz/fuzz.h $(TEST_LIB) $(DAEMON_LIB) $(SIM_LIB)
	$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -DFUZZ_ENTRY=fuzz_$* -fsanitize=fuzzer -o $@ tests/fuzz/main.c $(TEST_LIB) $(DAEMON_LIB) \
	    $(SIM_LIB) $(PKG_LIBS) $(SIM_LIBS)

$(BUILD)/fuzz_seeds: $(call obj,tests/fuzz/seeds.c)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS)

format:
	clang-format -i $(shell find src include tests bench -name '*.[ch]' -o -name '*.cc')

lint:
	scripts/check-layers.sh
	cppcheck --quiet --error-exitcode=1 --std=c11 --enable=warning,performance,portability \
	    --inline-suppr --suppress=missingIncludeSystem -Iinclude $(shell find src tests/mongosim -name '*.c')

# ---- install / uninstall ----------------------------------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=/staging] [SYSCONFDIR=...] [BUILD=...]
#
# The configuration lives in /etc for the two system prefixes (/usr, /usr/local), which is also the binary's default
# -c path; any other prefix (an /opt/oplog2pg tree) keeps it at $(PREFIX)/etc. The installed unit names the
# binary and the configuration at the paths of this install. An existing configuration file is never overwritten.
# With DESTDIR everything goes under it and nothing needs root; without DESTDIR, as root, the oplog2pg user is
# created (systemd-sysusers) and the new configuration file is given to its group, unless SYSTEM_SETUP=no.
PREFIX     ?= /usr/local
DESTDIR    ?=
SYSTEM_SETUP ?= yes
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= $(if $(filter /usr /usr/local,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/oplog2pg
CONFDIR    := $(SYSCONFDIR)/oplog2pg
DOC_FILES  := README.md $(sort $(wildcard docs/*.md))

install: $(BUILD)/oplog2pg
	install -D -m 0755 $(BUILD)/oplog2pg $(DESTDIR)$(BINDIR)/oplog2pg
	install -d -m 0755 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(MANDIR)/man5 \
	    $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(CONFDIR)
	sed -e 's|/usr/local/bin/oplog2pg|$(BINDIR)/oplog2pg|g' -e 's|/etc/oplog2pg/|$(CONFDIR)/|g' \
	    systemd/oplog2pg.service > $(DESTDIR)$(UNITDIR)/oplog2pg.service.tmp
	@grep -q '^ExecStart=$(BINDIR)/oplog2pg -c $(CONFDIR)/oplog2pg.ini ' $(DESTDIR)$(UNITDIR)/oplog2pg.service.tmp \
	    || { echo "install: systemd/oplog2pg.service: ExecStart= was not rewritten to $(BINDIR) and $(CONFDIR)" >&2; \
	         rm -f $(DESTDIR)$(UNITDIR)/oplog2pg.service.tmp; exit 1; }
	chmod 0644 $(DESTDIR)$(UNITDIR)/oplog2pg.service.tmp
	mv -f $(DESTDIR)$(UNITDIR)/oplog2pg.service.tmp $(DESTDIR)$(UNITDIR)/oplog2pg.service
	install -m 0644 systemd/oplog2pg.sysusers $(DESTDIR)$(SYSUSERSDIR)/oplog2pg.conf
	install -m 0644 man/oplog2pg.8 $(DESTDIR)$(MANDIR)/man8/oplog2pg.8
	install -m 0644 man/oplog2pg.ini.5 $(DESTDIR)$(MANDIR)/man5/oplog2pg.ini.5
	install -m 0644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/
	install -m 0644 conf/oplog2pg.ini conf/oplog2pg-minimal.ini $(DESTDIR)$(DOCDIR)/examples/
	@if [ -z "$(DESTDIR)" ] && [ "$(SYSTEM_SETUP)" != no ] && [ "$$(id -u)" = 0 ] && \
	    command -v systemd-sysusers >/dev/null; then \
	    echo "systemd-sysusers $(SYSUSERSDIR)/oplog2pg.conf"; systemd-sysusers $(SYSUSERSDIR)/oplog2pg.conf; fi
	@conf=$(DESTDIR)$(CONFDIR)/oplog2pg.ini; \
	if [ -e "$$conf" ]; then \
	    echo "install: kept the existing $$conf (the new sample is $(DESTDIR)$(DOCDIR)/examples/oplog2pg.ini)"; \
	else \
	    echo "install -m 0640 conf/oplog2pg.ini $$conf"; install -m 0640 conf/oplog2pg.ini "$$conf" || exit 1; \
	    if [ -z "$(DESTDIR)" ] && [ "$(SYSTEM_SETUP)" != no ] && [ "$$(id -u)" = 0 ] && \
	        getent group oplog2pg >/dev/null; then \
	        echo "chgrp oplog2pg $$conf"; chgrp oplog2pg "$$conf" || exit 1; \
	    else \
	        echo "install: $$conf must be readable by group oplog2pg: chgrp oplog2pg $(CONFDIR)/oplog2pg.ini"; \
	    fi; \
	fi
	@if [ -z "$(DESTDIR)" ]; then echo "install: next: edit $(CONFDIR)/oplog2pg.ini, then" \
	    "systemctl daemon-reload && systemctl enable --now oplog2pg (see oplog2pg(8))"; fi

# The Grafana dashboard and Prometheus rules (contrib/): metric names against src/daemon/metrics.c, promtool check and
# test rules (a few seconds; make check runs it too, through tests/run.sh).
monitoring-check:
	@tests/system/monitoring.sh

# The Debian package (debian/): built with `dpkg-buildpackage -us -uc -b`, then installed, run as the oplog2pg user
# against a throwaway PostgreSQL and mongosim, removed and purged on this machine (root; tests/system/package.sh).
# Not part of `make check`.
package-check: $(BUILD)/mongosim
	@tests/system/package.sh $(BUILD)

# Removes what install put, except the configuration (and the oplog2pg user, which may own files elsewhere).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/oplog2pg $(DESTDIR)$(UNITDIR)/oplog2pg.service \
	    $(DESTDIR)$(SYSUSERSDIR)/oplog2pg.conf $(DESTDIR)$(MANDIR)/man8/oplog2pg.8 \
	    $(DESTDIR)$(MANDIR)/man5/oplog2pg.ini.5 $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(DOC_FILES))) \
	    $(DESTDIR)$(DOCDIR)/examples/oplog2pg.ini $(DESTDIR)$(DOCDIR)/examples/oplog2pg-minimal.ini
	@rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	@if [ -e $(DESTDIR)$(CONFDIR)/oplog2pg.ini ]; then \
	    echo "uninstall: kept the configuration $(DESTDIR)$(CONFDIR)/oplog2pg.ini"; fi

clean:
	rm -rf build

# What each object was made from (-MMD): a changed header rebuilds what includes it, in whichever BUILD is made.
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
