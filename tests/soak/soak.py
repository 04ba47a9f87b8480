"""tests/soak/soak.py BUILD — the fault soak (`make soak`; docs/reliability.md, "Fault soak").

Replicates a mixed workload through the daemon while faults are injected at random moments, then checks that
PostgreSQL holds exactly what the source holds. Run it under scripts/with-pg.sh, which provides the throwaway
PostgreSQL and tells how to stop and start it (OPLOG2PG_TEST_PG_*).

Three phases, each with a mongosim, a service and databases of its own:
  rs  the oplog source on a replica set started with --state (it is also restarted from that state);
  cs  the change-stream source on a replica set;
  sh  the oplog source on a two-shard cluster, with chunk migrations in the workload.
rs and sh also write time-series collections (tests/soak/soak_ts.py), checked against the workload's own record.

Scale and choices (environment):
  SOAK_OPS=1000000      workload ops in all (rs 50 %, cs 25 %, sh 25 %)
  SOAK_KILLS=100        kill -9 of the daemon in all (shared the same way)
  SOAK_OUTAGE=60        seconds of the PostgreSQL outage (once, in phase rs; 0 leaves it out)
  SOAK_PHASES=rs,cs,sh  which phases run
  SOAK_FAULTS=0         no faults at all (a control run of the same workload)
  SOAK_CATCHUP_TIMEOUT=900  seconds a phase waits, after its workload, for the daemon to apply everything
  SOAK_SEED=N           the random seed (default: from the clock; printed)
  SOAK_LOSE_ROW=1       a self-test: deletes one replicated row from PostgreSQL behind the daemon mid-run; the final
                        comparison must then fail (the run exits 1 and says which row)
  SOAK_TS=1             time-series collections in phases rs and sh (tests/soak/soak_ts.py); 0 leaves them out
  SOAK_TS_FORMATS=5.0,7.0,8.0  phase rs: mongosim's --oplog-format at its start, then after each restart from
                        --state (an upgrade; the last one stays); phase sh runs 7.0
  SOAK_TS_SELFTEST=delete,doc,time,meta,swap  a self-test: after the catch-up, deletes one row of a table of measurements
                        and changes the doc, time or meta of others, or swaps two rows of a bucket, behind the daemon;
                        the time-series check must then fail, and says whether it found exactly those differences
  SOAK_DIR=DIR          where logs go (default: a new folder under $TMPDIR, kept)

Exit status: 0 when every phase ends with PostgreSQL equal to the source and every dead letter accounted for, 1
otherwise, 2 when the harness itself failed.
"""
import datetime
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import bson
import pymongo
import soak_ts
from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp
from pymongo.errors import PyMongoError

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
OPS = int(os.environ.get("SOAK_OPS", "1000000"))
KILLS = int(os.environ.get("SOAK_KILLS", "100"))
OUTAGE = int(os.environ.get("SOAK_OUTAGE", "60"))
PHASES = [p for p in os.environ.get("SOAK_PHASES", "rs,cs,sh").split(",") if p]
SEED = int(os.environ.get("SOAK_SEED", str(int(time.time()))))
FAULTS = os.environ.get("SOAK_FAULTS", "1") != "0"
CATCHUP = int(os.environ.get("SOAK_CATCHUP_TIMEOUT", "900"))
LOSE_ROW = os.environ.get("SOAK_LOSE_ROW", "0") == "1"
TS = os.environ.get("SOAK_TS", "1") != "0"
TS_FORMATS = [f for f in os.environ.get("SOAK_TS_FORMATS", "5.0,7.0,8.0").split(",") if f]
TS_SELFTEST = [k for k in os.environ.get("SOAK_TS_SELFTEST", "").split(",") if k]
DATES = [datetime.datetime(1, 1, 1), datetime.datetime(1970, 1, 1), datetime.datetime(2262, 4, 11, 23, 47, 16),
         datetime.datetime(9999, 12, 31, 23, 59, 59, 999000)]
SHARE = {"rs": 0.5, "cs": 0.25, "sh": 0.25}

PG = os.environ["OPLOG2PG_TEST_PG"]
PG_BINDIR = os.environ["OPLOG2PG_TEST_PG_BINDIR"]
PG_DATA = os.environ["OPLOG2PG_TEST_PG_DATA"]
PG_LOG = os.environ["OPLOG2PG_TEST_PG_LOG"]
PG_OPTS = os.environ["OPLOG2PG_TEST_PG_OPTS"]
PG_RUNAS = os.environ.get("OPLOG2PG_TEST_PG_RUNAS", "")

DIR = os.environ.get("SOAK_DIR") or tempfile.mkdtemp(prefix="oplog2pg-soak.", dir=os.environ.get("TMPDIR", "/tmp"))
os.makedirs(DIR, exist_ok=True)


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


def psql(sql, check=True):
    """One statement through psql; its rows as lists of fields (unaligned, tab-separated)."""
    r = subprocess.run(["psql", "-X", "-q", "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1", PG, "-c", sql],
                       capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("psql: %s: %s" % (sql[:80], r.stderr.strip()))
    return [line.split("\t") for line in r.stdout.splitlines()] if r.returncode == 0 else None


def pg_ctl(*args):
    cmd = ([] if not PG_RUNAS else ["runuser", "-u", PG_RUNAS, "--"]) + [os.path.join(PG_BINDIR, "pg_ctl"),
                                                                          "-D", PG_DATA, "-l", PG_LOG, "-w", "-t",
                                                                          "120"] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("pg_ctl %s: %s %s" % (" ".join(args), r.stdout, r.stderr))


class Stats:
    def __init__(self):
        self.faults = {}
        self.unexpected_exits = []
        self.peak_rss_kb = 0
        self.ops = 0

    def count(self, name):
        self.faults[name] = self.faults.get(name, 0) + 1


STATS = Stats()
STARTED = []  # every mongosim and daemon started, stopped at the end even when the harness fails


# ---------------------------------------------------------------------------------------------------------------
# mongosim and the daemon


class Sim:
    def __init__(self, phase, args):
        self.phase, self.args, self.proc, self.port = phase, args, None, 0
        STARTED.append(self)
        self.starts = 0

    def start(self, port=0):
        logf = open(os.path.join(DIR, "mongosim-%s.%d.log" % (self.phase, self.starts)), "w")
        self.starts += 1
        self.proc = subprocess.Popen([os.path.join(BUILD, "mongosim"), "--port", str(port)] + self.args,
                                     stdout=subprocess.PIPE, stderr=logf, text=True)
        if port == 0:  # it prints the port it picked alone on its first line
            line = self.proc.stdout.readline()
            if not line.strip().isdigit():
                raise RuntimeError("mongosim did not print its port (%r)" % line)
            self.port = int(line)
            return
        self.port = port
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("mongosim exited with %s" % self.proc.returncode)
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("mongosim does not listen on %d" % port)

    def uri(self):
        if "--shards" in self.args:
            return "mongodb://127.0.0.1:%d/" % self.port
        return "mongodb://127.0.0.1:%d/?replicaSet=rs0" % self.port

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


class Daemon:
    """oplog2pg run, restarted as systemd's Restart=on-failure would restart it."""

    def __init__(self, phase, ini):
        self.phase, self.ini, self.proc, self.starts, self.logpath = phase, ini, None, 0, None
        STARTED.append(self)
        self.lock = threading.Lock()

    def start(self):
        self.logpath = os.path.join(DIR, "oplog2pg-%s.%d.log" % (self.phase, self.starts))
        self.starts += 1
        with open(self.logpath, "w") as logf:
            self.proc = subprocess.Popen([os.path.join(BUILD, "oplog2pg"), "-c", self.ini, "run"], stdout=logf,
                                         stderr=subprocess.STDOUT)

    def rss(self):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        kb = int(line.split()[1])
                        STATS.peak_rss_kb = max(STATS.peak_rss_kb, kb)
                        return kb
        except OSError:
            pass
        return 0

    def check_alive(self):
        """A daemon that exited by itself is a finding: it is recorded with its log, then started again."""
        if self.proc.poll() is not None:
            rc = self.proc.returncode
            if rc == 1:
                # "a failure a restart may cure": systemd restarts it (Restart=on-failure), and so does the soak.
                STATS.count("daemon exit 1, restarted (as systemd does)")
            else:
                # 70 or a crash is a bug; 3..7 keep a service down until a person acts: none may happen here.
                STATS.unexpected_exits.append("%s: exit %s (%s)" % (self.phase, rc, self.logpath))
            log("daemon exited by itself with %s, see %s" % (rc, self.logpath))
            self.start()

    def kill9(self):
        self.rss()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def sighup(self):
        # Not before the daemon has set up its signal handlers (it logs "starting" after): a SIGHUP before that ends
        # any process, as systemd, which reloads a Type=notify service only once it is ready, never does.
        deadline = time.time() + 30
        while time.time() < deadline:
            with open(self.logpath, errors="replace") as f:
                if " starting: " in f.read():
                    break
            time.sleep(0.05)
        self.proc.send_signal(signal.SIGHUP)

    def stop(self):
        self.rss()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                STATS.unexpected_exits.append("%s: did not stop on SIGTERM within 120 s" % self.phase)
        if self.proc.returncode not in (0, -signal.SIGKILL):
            STATS.unexpected_exits.append("%s: stop ended with %s" % (self.phase, self.proc.returncode))


# ---------------------------------------------------------------------------------------------------------------
# The workload


def hostile_doc(rng, _id):
    """Every BSON type, odd keys, deep nesting, long arrays."""
    deep = {"leaf": 1}
    for i in range(rng.randrange(1, 90)):
        deep = {"d%d" % i: deep}
    return {
        "_id": _id,
        "types": {
            "i32": rng.randrange(-2**31, 2**31), "i64": Int64(rng.randrange(-2**63, 2**63)),
            "dbl": rng.choice([0.1, -0.0, 1e308, float("inf"), float("-inf"), float("nan")]),
            "dec": Decimal128(rng.choice(["1.10", "-0", "NaN", "Infinity", "1E+6144", "123456789.123456789"])),
            "bin": Binary(os.urandom(rng.randrange(0, 40))), "uuid": Binary(os.urandom(16), 4),
            "oid": ObjectId(), "date": rng.choice(DATES), "re": Regex("^a.*[b]$", "imsx"),
            "code": Code("function(){return 1}"), "ts": Timestamp(rng.randrange(1, 2**31), 1), "min": MinKey(),
            "max": MaxKey(), "null": None, "bool": rng.random() < 0.5,
        },
        "keys": {"": 1, " ": 2, "ключ": 3, "日本": 4, "emoji\U0001F600": 5, "quote\"back\\slash": 6, "tab\t": 7},
        "text": "".join(chr(rng.choice([0x41, 0xe9, 0x3b1, 0x4e2d, 0x1F600, 0x7f, 0x1, 0x2028, 0xfffd]))
                        for _ in range(rng.randrange(1, 200))),
        "deep": deep,
        "arr": [rng.choice([1, "x", None, [1, [2]], {"a": 1}]) for _ in range(rng.randrange(0, 300))],
    }


class Workload:
    """Writes through pymongo until `target` ops are done. Each op is one document written (an insert, an update,
    a replace, a delete, one statement of a transaction, a DDL command). What the driver reports as failed during
    a fault may or may not have been applied: the comparison reads the source as it ends, so that does not matter;
    the op is simply tried again or skipped."""

    def __init__(self, phase, uri, target, rng, sharded):
        self.phase, self.uri, self.target, self.rng, self.sharded = phase, uri, target, rng, sharded
        self.client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=60000, socketTimeoutMS=120000,
                                          retryWrites=True)
        self.db = self.client["soak_%s_main" % phase]
        self.ops = 0
        self.errors = 0
        self.next_id = 0
        self.live = []  # ids believed present in main.docs
        self.typed_bad = set()  # typed-map ids given a value the column cannot take (one dead letter each)
        self.typed_live = []
        self.nul_ids = []  # documents with U+0000 in a string (jsonb refuses them: one dead letter each)
        self.stop_flag = False
        self.paused = threading.Event()
        self.paused.set()
        self.pending_loss = None
        self.gate = target  # the workload waits here until the fault injector lets it go on (Faults.run)
        self.ts = None  # the time-series part (soak_ts.TimeSeries), in phases rs and sh

    def _id(self):
        self.next_id += 1
        return self.next_id

    def run(self):
        while self.ops < self.target and not self.stop_flag:
            self.paused.wait()
            if self.ops >= self.gate:
                time.sleep(0.02)
                continue
            try:
                self.step()
            except PyMongoError as e:
                self.errors += 1
                if self.errors % 200 == 1:
                    log("workload %s: %s (%d errors so far)" % (self.phase, str(e)[:120], self.errors))
                time.sleep(0.05)

    def step(self):
        rng = self.rng
        if self.ts is not None and rng.random() < 0.06:
            self.ops += self.ts.step()
            return
        r = rng.random()
        docs = self.db.docs
        if r < 0.30 or len(self.live) < 50:
            batch = [{"_id": self._id(), "n": 0, "s": "x" * rng.randrange(0, 300), "tags": ["a"]}
                     for _ in range(rng.randrange(1, 20))]
            try:
                docs.insert_many(batch, ordered=True)
            except pymongo.errors.BulkWriteError:
                pass  # a retried batch after a fault: the ids already there stay
            self.live.extend(d["_id"] for d in batch)
            self.ops += len(batch)
        elif r < 0.55:
            _id = rng.choice(self.live)
            u = rng.choice([{"$inc": {"n": 1}}, {"$set": {"s": "y" * rng.randrange(0, 100), "sub.k": rng.random()}},
                            {"$push": {"tags": rng.choice(["b", "c"])}}, {"$unset": {"sub": ""}},
                            {"$pull": {"tags": "b"}}, {"$set": {"tags.0": "z"}}, {"$rename": {"s": "s2"}},
                            {"$currentDate": {"when": True}}, {"$min": {"n": -1}}])
            docs.update_one({"_id": _id}, u)
            self.ops += 1
        elif r < 0.60:
            _id = rng.choice(self.live)
            docs.replace_one({"_id": _id}, {"replaced": True, "n": rng.randrange(100)}, upsert=True)
            self.ops += 1
        elif r < 0.68:
            i = rng.randrange(len(self.live))
            self.live[i], self.live[-1] = self.live[-1], self.live[i]
            docs.delete_one({"_id": self.live.pop()})
            self.ops += 1
        elif r < 0.73:
            docs.update_one({"_id": self._id()}, {"$set": {"up": True}}, upsert=True)
            self.live.append(self.next_id)
            self.ops += 1
        elif r < 0.80:
            self.transaction()
        elif r < 0.85:
            self.typed()
        elif r < 0.88:
            c = self.db.scratch
            c.insert_many([{"_id": i} for i in range(rng.randrange(5, 40))])
            c.delete_many({})  # a batched multi-delete: applyOps entries without a session
            self.ops += 2
        elif r < 0.90:
            self.ddl()
        elif r < 0.93:
            self.hostile()
        elif r < 0.935:
            self.large()
        elif r < 0.94:
            self.nul()
        elif r < 0.945 and self.sharded:
            self.migrate()
        else:
            kv = self.client["soak_%s_kv" % self.phase].pairs
            kv.update_one({"_id": "k%d" % rng.randrange(2000)}, {"$inc": {"v": 1}, "$set": {"at": time.time()}},
                          upsert=True)
            self.ops += 1

    def transaction(self):
        rng = self.rng
        with self.client.start_session() as s:
            ids = [self._id() for _ in range(rng.randrange(1, 6))]

            def body(sess):
                self.db.docs.insert_many([{"_id": i, "txn": True, "n": 0} for i in ids], session=sess)
                if self.live:
                    self.db.docs.update_one({"_id": rng.choice(self.live)}, {"$inc": {"n": 10}}, session=sess)
                self.client["soak_%s_kv" % self.phase].pairs.update_one(
                    {"_id": "txn"}, {"$inc": {"v": 1}}, upsert=True, session=sess)

            s.with_transaction(body)
            self.live.extend(ids)
            self.ops += len(ids) + 2

    def typed(self):
        rng = self.rng
        c = self.client["soaktyped_%s" % self.phase].orders
        if rng.random() < 0.6 or not self.typed_live:
            _id = "t%07d" % self._id()
            bad = rng.random() < 0.02
            c.insert_one({"_id": _id, "qty": "lots" if bad else rng.randrange(1000), "price": rng.random() * 100,
                          "note": rng.choice(["a", "b", None]), "extra": {"x": 1}})
            if bad:
                self.typed_bad.add(_id)
            else:
                self.typed_live.append(_id)
        elif rng.random() < 0.97:
            c.update_one({"_id": rng.choice(self.typed_live)}, {"$inc": {"qty": 1}, "$set": {"note": "u"}})
        else:
            # A type the column cannot take, in an update: set aside; the document leaves the checked set.
            _id = self.typed_live.pop(rng.randrange(len(self.typed_live)))
            self.typed_bad.add(_id)
            c.update_one({"_id": _id}, {"$set": {"qty": {"not": "a number"}}})
        self.ops += 1

    def ddl(self):
        rng = self.rng
        k = rng.randrange(4)
        name = "ddl%d" % rng.randrange(5)
        d = self.client["soak_%s_ddl" % self.phase]
        if k == 0:
            d[name].insert_many([{"_id": i, "v": i} for i in range(rng.randrange(1, 30))], ordered=False)
        elif k == 1:
            d.drop_collection(name)
        elif k == 2:
            if name in d.list_collection_names() and not self.sharded:
                d[name].rename("ddl%d" % rng.randrange(5, 8), dropTarget=True)
        else:
            if rng.random() < 0.2:
                self.client.drop_database("soak_%s_ddl" % self.phase)
            else:
                d.create_collection("c%d" % rng.randrange(20))
        self.ops += 1

    def hostile(self):
        _id = rng_id(self.rng, self._id())
        self.client["soak_%s_hostile" % self.phase].docs.insert_one(hostile_doc(self.rng, _id))
        self.ops += 1

    def large(self):
        rng = self.rng
        size = rng.choice([100_000] * 6 + [1_000_000] * 3 + [4_000_000, 8_000_000])
        c = self.client["soak_%s_large" % self.phase].blobs
        _id = self._id()
        c.insert_one({"_id": _id, "blob": "L" * size, "arr": list(range(min(size // 100, 50_000)))})
        c.update_one({"_id": _id}, {"$set": {"blob2": "M" * (size // 10)}})
        if rng.random() < 0.5:
            c.delete_one({"_id": _id})
        self.ops += 3

    def nul(self):
        _id = "nul%d" % self._id()
        self.client["soaknul_%s" % self.phase].docs.insert_one({"_id": _id, "s": "before\x00after"})
        self.nul_ids.append(_id)
        self.ops += 1

    def migrate(self):
        rng = self.rng
        a = self.client.admin
        cfg = self.client.config
        chunks = list(cfg.chunks.find({}))
        shards = [s["_id"] for s in cfg.shards.find({})]
        if not chunks or len(shards) < 2:
            return
        if rng.random() < 0.3 and self.live:
            try:
                a.command("split", "soak_%s_main.docs" % self.phase, middle={"_id": rng.choice(self.live)})
                chunks = list(cfg.chunks.find({}))
            except PyMongoError:
                pass
        ch = rng.choice(chunks)
        to = rng.choice([s for s in shards if s != ch["shard"]])
        a.command("moveChunk", "soak_%s_main.docs" % self.phase, bounds=[ch["min"], ch["max"]], to=to)
        STATS.count("chunk migration")
        self.ops += 1


def rng_id(rng, n):
    k = rng.randrange(5)
    if k == 0:
        return n
    if k == 1:
        return "h%d" % n
    if k == 2:
        return {"a": n, "b": "x"}
    if k == 3:
        return Int64(n * 1000003)
    return ObjectId()


# ---------------------------------------------------------------------------------------------------------------
# Faults


def write_ini(path, uri, phase, source, broken=False, batch_rows=None):
    lines = ["[mongodb]", "uri = %s" % uri, "source = %s" % source, "[postgres]", "conninfo = %s" % PG,
             "[replication]", "service = soak_%s" % phase,
             "include = soak_%s_*.*, soaktyped_%s.*, soaknul_%s.*" % (phase, phase, phase)]
    if batch_rows:
        lines.append("batch_rows = %s" % batch_rows)
    if broken:
        lines.append("batch_rows = 10x")  # a value that is no number, and a key given twice
    lines += ["[logging]", "level = info",
              "[map soaktyped_%s.orders]" % phase, "key = id", "column.id = text from _id",
              "column.qty = integer", "column.price = double precision", "column.note = text"]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


class Faults:
    def __init__(self, phase, sim, daemon, wl, rng, kills, ini, source):
        self.phase, self.sim, self.daemon, self.wl, self.rng = phase, sim, daemon, wl, rng
        self.kills, self.ini, self.source = kills, ini, source
        self.admin = pymongo.MongoClient(sim.uri(), serverSelectionTimeoutMS=60000).admin

    def plan(self):
        """The faults of this phase, each at a random point of the workload (a fraction of its ops)."""
        f = ["kill -9 daemon"] * self.kills
        f += ["PostgreSQL restart (fast)", "PostgreSQL restart (immediate)"] * 2
        f += ["pg_terminate_backend"] * 3
        f += ["SIGHUP (valid configuration)", "SIGHUP (broken configuration)"] * 2
        if self.phase == "sh":
            f += ["shard failover (step-down)"] * 3 + ["shard: dropped connections"] * 2
        else:
            f += ["mongosim step-down"] * 3 + ["mongosim dropped connections"] * 3 + ["mongosim delay"] * 2
        if self.phase == "rs":
            f += ["mongosim restart from --state"] * 2
            if OUTAGE > 0:
                f += ["PostgreSQL outage (%d s)" % OUTAGE]
        if not FAULTS:
            f = []
        if LOSE_ROW:
            f += ["self-test: delete one replicated row"]
        plan = sorted((self.rng.uniform(0.02, 0.95), name) for name in f)
        return plan

    def run(self, plan):
        # The workload may run up to the point of the fault after the next one, never further: each fault then
        # comes while the workload is writing, at its planned point, however long the faults before it took.
        def gate(i):
            return int(plan[i][0] * self.wl.target) if i < len(plan) else self.wl.target

        self.wl.gate = gate(1)
        for i, (frac, name) in enumerate(plan):
            while self.wl.ops < frac * self.wl.target and not self.wl.stop_flag:
                time.sleep(0.05)
                self.daemon.check_alive()
            self.daemon.check_alive()
            try:
                self.inject(name)
                STATS.count(name)
            except Exception as e:  # a fault that could not be injected is reported, not counted
                log("fault %s could not be injected: %s" % (name, e))
                STATS.count("NOT INJECTED: " + name)
            self.wl.gate = gate(i + 2)
            time.sleep(self.rng.uniform(0.05, 0.5))

    def shard_command(self, name, value):
        """A test command sent to one shard, picked at random (the router does not take them)."""
        st = self.admin.command("mongosimStatus")
        port = self.rng.choice(st["shards"])["port"]
        c = pymongo.MongoClient("mongodb://127.0.0.1:%d/?directConnection=true" % port)
        try:
            c.admin.command(name, value)
        finally:
            c.close()

    def inject(self, name):
        d = self.daemon
        if name == "kill -9 daemon":
            d.kill9()
            time.sleep(self.rng.uniform(0, 1.0))
            d.start()
        elif name == "PostgreSQL restart (fast)":
            pg_ctl("-m", "fast", "restart", "-o", PG_OPTS)
        elif name == "PostgreSQL restart (immediate)":
            pg_ctl("-m", "immediate", "restart", "-o", PG_OPTS)
        elif name.startswith("PostgreSQL outage"):
            pg_ctl("-m", "fast", "stop")
            log("PostgreSQL stopped for %d s" % OUTAGE)
            time.sleep(OUTAGE)
            pg_ctl("start", "-o", PG_OPTS)
        elif name == "pg_terminate_backend":
            # Only while the daemon has its sessions (it may be reconnecting after an earlier fault).
            deadline = time.time() + 30
            while True:
                rows = psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = 'oplog2pg' AND pid <> pg_backend_pid()")
                if int(rows[0][0]) > 0:
                    break
                if time.time() > deadline:
                    raise RuntimeError("the daemon had no PostgreSQL session for 30 s")
                time.sleep(0.2)
                d.check_alive()
        elif name.startswith("SIGHUP"):
            broken = "broken" in name
            write_ini(self.ini, self.sim.uri(), self.phase, self.source, broken=broken,
                      batch_rows=self.rng.choice([200, 1000, 5000]))
            size = os.path.getsize(d.logpath)
            d.sighup()
            # The daemon reads the file when it handles the signal; the valid one is restored after that.
            deadline = time.time() + 10
            while time.time() < deadline and os.path.getsize(d.logpath) == size:
                time.sleep(0.05)
            time.sleep(0.2)
            write_ini(self.ini, self.sim.uri(), self.phase, self.source)
        elif name == "shard failover (step-down)":
            self.shard_command("mongosimStepDown", self.rng.randrange(500, 3000))
        elif name == "shard: dropped connections":
            self.shard_command("mongosimDropConnections", 1)
        elif name == "mongosim step-down":
            self.admin.command("mongosimStepDown", self.rng.randrange(500, 3000))
        elif name == "mongosim dropped connections":
            self.admin.command("mongosimDropConnections", 1)
        elif name == "mongosim delay":
            self.admin.command("mongosimDelay", self.rng.randrange(100, 800))
            time.sleep(self.rng.uniform(1, 4))
            self.admin.command("mongosimDelay", 0)
        elif name == "mongosim restart from --state":
            self.wl.paused.clear()
            time.sleep(0.3)
            ts = self.wl.ts
            if ts is not None:
                ts.lock.acquire()  # no time-series write in flight: its outcome must be known (soak_ts.py)
            try:
                port = self.sim.port
                self.sim.stop()  # SIGTERM saves the oplog and the data
                time.sleep(self.rng.uniform(0.2, 2))
                fmt = None
                if ts is not None and "--oplog-format" in self.sim.args:
                    # The next format: an upgrade, as far as time-series buckets go (docs/reliability.md).
                    i = self.sim.args.index("--oplog-format") + 1
                    k = TS_FORMATS.index(self.sim.args[i]) if self.sim.args[i] in TS_FORMATS else -1
                    fmt = self.sim.args[i] = TS_FORMATS[min(k + 1, len(TS_FORMATS) - 1)]
                for _ in range(50):
                    try:
                        self.sim.start(port)
                        break
                    except RuntimeError:
                        time.sleep(0.2)
                else:
                    raise RuntimeError("mongosim did not start again on port %d" % port)
                if ts is not None:
                    # mongosim cannot re-pack the compressed buckets of its previous start: new collections.
                    ts.new_generation(fmt or ts.fmt)
                    log("mongosim restarted with --oplog-format %s; time-series collections of generation %d"
                        % (ts.fmt, ts.gen))
            finally:
                if ts is not None:
                    ts.lock.release()
            self.admin = pymongo.MongoClient(self.sim.uri(), serverSelectionTimeoutMS=60000).admin
            self.wl.paused.set()
        elif name.startswith("self-test"):
            # The seed document: no later write touches it, so only the comparison can notice.
            rows = psql("DELETE FROM soak_%s_seed.s RETURNING _id" % self.phase)
            self.wl.pending_loss = rows[0][0] if rows else None
            log("self-test: deleted row _id=%s of soak_%s_seed.s behind the daemon" % (self.wl.pending_loss,
                                                                                      self.phase))
        else:
            raise RuntimeError("unknown fault " + name)


# ---------------------------------------------------------------------------------------------------------------
# The end of a phase: wait, compare, account for dead letters


def wait_caught_up(phase, uri, daemon, timeout):
    """Writes a marker after everything else and waits for its row: the daemon applies in order, so everything
    written before it is then applied too."""
    c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=60000)
    token = "%s-%f" % (phase, time.time())
    for attempt in range(100):  # a fault's step-down may still be running
        try:
            c["soak_%s_marker" % phase].m.replace_one({"_id": 1}, {"_id": 1, "token": token}, upsert=True)
            break
        except PyMongoError:
            if attempt == 99:
                raise
            time.sleep(0.2)
    deadline = time.time() + timeout
    while time.time() < deadline:
        daemon.check_alive()
        rows = psql("SELECT doc->>'token' FROM soak_%s_marker.m" % phase, check=False)
        if rows and rows[0] and rows[0][0] == token:
            return True
        time.sleep(0.5)
    return False


def check_phase(phase, uri, wl):
    ok = True
    r = subprocess.run([os.path.join(BUILD, "soak_compare"), uri, PG, "soak_%s_" % phase], capture_output=True,
                       text=True)
    report = r.stdout + r.stderr
    with open(os.path.join(DIR, "compare-%s.txt" % phase), "w") as f:
        f.write(report)
    print(report.strip())
    if r.returncode != 0:
        ok = False
    # Typed map: every document not set aside has its row with the typed values.
    c = pymongo.MongoClient(uri)
    src = {d["_id"]: d for d in c["soaktyped_%s" % phase].orders.find({})}
    rows = {row[0]: row for row in psql("SELECT id, qty, price, coalesce(note, '<null>') FROM soaktyped_%s.orders"
                                        % phase, check=False) or []}
    typed_bad = 0
    for _id, d in src.items():
        if _id in wl.typed_bad:
            continue
        row = rows.pop(_id, None) or rows.pop(json.dumps(_id), None)
        want = [_id, str(d["qty"]), None, d.get("note") if d.get("note") is not None else "<null>"]
        if row is None or row[1] != want[1] or row[3] != want[3] or abs(float(row[2]) - d["price"]) > 1e-9:
            typed_bad += 1
            if typed_bad <= 3:
                print("  typed soaktyped_%s.orders %s: source %s, pg %s" % (phase, _id, want, row))
    extra = [k for k in rows if k not in wl.typed_bad and k.strip('"') not in wl.typed_bad]
    if extra:
        typed_bad += len(extra)
        print("  typed soaktyped_%s.orders: rows without a source document: %s" % (phase, extra[:3]))
    print("typed map soaktyped_%s.orders: %d documents checked, %d set aside by design, %d wrong"
          % (phase, len(src) - len(wl.typed_bad & set(src)), len(wl.typed_bad), typed_bad))
    ok = ok and typed_bad == 0
    # Dead letters: exactly one per document the workload made PostgreSQL refuse, each with the expected reason.
    # A dead letter names the op by its position (ts and place in an applyOps entry): the same position twice is an
    # op set aside twice. One document can be refused at several positions (its insert, and the initial copy that
    # read it), each a dead letter of its own.
    dl = psql("SELECT db, coll, op, doc_id, coalesce(sqlstate, ''), error, ts_sec, ts_inc, op_index "
              "FROM oplog2pg.dead_letter WHERE service = 'soak_%s'" % phase)
    expected = {("soaktyped_%s" % phase, "orders", json.dumps(i)) for i in wl.typed_bad}
    expected |= {("soaknul_%s" % phase, "docs", json.dumps(i)) for i in wl.nul_ids}
    seen = {}
    positions = {}
    unjustified = []
    for db, coll, op, doc_id, sqlstate, error, ts_sec, ts_inc, op_index in dl:
        key = (db, coll, doc_id)
        seen[key] = seen.get(key, 0) + 1
        pos = (db, coll, doc_id, op, ts_sec, ts_inc, op_index)
        positions[pos] = positions.get(pos, 0) + 1
        justified = key in expected and (
            (db.startswith("soaknul_") and sqlstate == "22P05") or
            (db.startswith("soaktyped_") and "cannot be converted to integer" in error))
        if not justified:
            unjustified.append((db, coll, op, doc_id, sqlstate, error[:160]))
    doubled = [k for k, n in positions.items() if n > 1]
    refused_again = sum(1 for n in seen.values() if n > 1)
    missing = [k for k in expected if k not in seen]
    # A document refused for U+0000 has no row.
    nul_rows = psql("SELECT count(*) FROM soaknul_%s.docs" % phase, check=False)
    nul_rows = int(nul_rows[0][0]) if nul_rows else 0
    print("dead letters: %d recorded for %d documents, %d documents expected (%d typed-map type errors, %d U+0000 "
          "strings), %d refused at more than one position; %d unjustified, %d doubled, %d missing; "
          "%d rows for refused U+0000 documents"
          % (len(dl), len(seen), len(expected), len(wl.typed_bad), len(wl.nul_ids), refused_again,
             len(unjustified), len(doubled), len(missing), nul_rows))
    for u in unjustified[:5]:
        print("  unjustified dead letter: %s" % (u,))
    for key in [k for k, n in seen.items() if n > 1][:3]:
        print("  refused at more than one position: %s: %s" % (key, sorted(
            (p[3], int(p[4]), int(p[5]), int(p[6])) for p in positions if p[:3] == key)))
    for k in doubled[:5]:
        print("  doubled dead letter: %s" % (k,))
    for k in missing[:5]:
        print("  expected dead letter not found: %s" % (k,))
    ok = ok and not unjustified and not doubled and not missing and nul_rows == 0
    if wl.ts is not None:
        ok = soak_ts.check(wl.ts, psql, TS_SELFTEST) and ok
    if wl.pending_loss is not None:
        line = [x for x in report.splitlines() if x.strip().startswith("soak_%s_seed.s:" % phase)]
        found = r.returncode == 1 and bool(line) and "missing 1," in line[0]
        print("self-test: the deleted row %s is %s by the comparison" % (wl.pending_loss,
                                                                        "caught" if found else "NOT caught"))
    return ok


def run_phase(phase, ops, kills, rng):
    log("phase %s: %d ops, %d kills" % (phase, ops, kills))
    if phase == "rs":
        state = os.path.join(DIR, "state-rs")
        os.makedirs(state, exist_ok=True)
        sim = Sim(phase, ["--state", state, "--noop-interval", "1"] +
                  (["--timeseries-bucket-max-count", "32", "--oplog-format", TS_FORMATS[0]] if TS else []))
        source = "oplog"
    elif phase == "cs":
        sim = Sim(phase, ["--noop-interval", "1"])
        source = "change_stream"
    else:
        sim = Sim(phase, ["--shards", "2", "--noop-interval", "1"] +
                  (["--timeseries-bucket-max-count", "32"] if TS else []))
        source = "oplog"
    sim.start()
    uri = sim.uri()
    ini = os.path.join(DIR, "oplog2pg-%s.ini" % phase)
    write_ini(ini, uri, phase, source)
    c = pymongo.MongoClient(uri)
    c["soak_%s_seed" % phase].s.insert_one({"_id": 0})  # a newest entry to start from
    if phase == "sh":
        c.admin.command("enableSharding", "soak_sh_main")
        c.admin.command("shardCollection", "soak_sh_main.docs", key={"_id": 1})
        for m in (2000, 20000, 60000):
            c.admin.command("split", "soak_sh_main.docs", middle={"_id": m})
    daemon = Daemon(phase, ini)
    daemon.start()
    wl = Workload(phase, uri, ops, random.Random(rng.random()), phase == "sh")
    if TS and phase in ("rs", "sh"):
        wl.ts = soak_ts.TimeSeries(phase, uri, random.Random(rng.random()), TS_FORMATS[0] if phase == "rs" else "7.0",
                                   log)
    faults = Faults(phase, sim, daemon, wl, random.Random(rng.random()), kills, ini, source)
    plan = faults.plan()
    t0 = time.time()
    wt = threading.Thread(target=wl.run)
    wt.start()
    faults.run(plan)
    wt.join()
    log("phase %s: workload done: %d ops in %.0f s, %d driver errors during faults" % (phase, wl.ops,
                                                                                        time.time() - t0, wl.errors))
    STATS.ops += wl.ops
    daemon.check_alive()
    caught = wait_caught_up(phase, sim.uri(), daemon, CATCHUP)
    if not caught:
        log("phase %s: the daemon did not catch up within %d s (%s)" % (phase, CATCHUP, daemon.logpath))
    daemon.rss()
    ok = check_phase(phase, sim.uri(), wl) and caught  # compared even when not caught up: it shows what is behind
    daemon.stop()
    sim.stop()
    log("phase %s: %s" % (phase, "PASS" if ok else "FAIL"))
    return ok


def main():
    rng = random.Random(SEED)
    log("fault soak: SOAK_OPS=%d SOAK_KILLS=%d SOAK_OUTAGE=%d SOAK_PHASES=%s SOAK_SEED=%d; logs in %s"
        % (OPS, KILLS, OUTAGE, ",".join(PHASES), SEED, DIR))
    t0 = time.time()
    results = {}
    total_share = sum(SHARE[p] for p in PHASES)
    kills_left = KILLS
    for i, p in enumerate(PHASES):
        k = kills_left if i == len(PHASES) - 1 else round(KILLS * SHARE[p] / total_share)
        kills_left -= k
        results[p] = run_phase(p, int(OPS * SHARE[p] / total_share), k, rng)
    ok = all(results.values()) and not STATS.unexpected_exits
    summary = {
        "result": "PASS" if ok else "FAIL", "phases": results, "ops": STATS.ops, "seconds": round(time.time() - t0),
        "peak_rss_mb": round(STATS.peak_rss_kb / 1024, 1), "faults": dict(sorted(STATS.faults.items())),
        "unexpected_exits": STATS.unexpected_exits, "seed": SEED, "logs": DIR,
    }
    with open(os.path.join(DIR, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        rc = main()
    except Exception as e:
        log("soak harness failed: %r" % e)
        rc = 2
    finally:
        for p in STARTED:
            if p.proc is not None and p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()
    sys.exit(rc)
