"""tests/soak/soak_ts.py — the fault soak's time-series collections (tests/soak/soak.py; docs/reliability.md).

The workload writes measurements into time-series collections and keeps its own model of them: every measurement
it inserted, as it is after the updates and deletes it made. The final check compares that model with the rows of
the table of measurements (time, meta and the measurement document, as a multiset), and the tables' rows per bucket
with the buckets MongoDB holds (their _ids, counts, meta values and latest times, read from the plain fields of
DB.system.buckets.NAME). Neither side goes through the daemon's bucket decoder (src/map/bucket.c, bsoncolumn.c):
the model is the workload's own record, and the bucket fields read are the ones MongoDB keeps uncompressed.

A write the driver reports as failed may or may not have happened. The workload then reads the same plain bucket
fields (the count of measurements per meta value, and the largest stamp `v`, which every insert and update sets to a
new, larger number) and keeps the outcome whose prediction they match. A write neither outcome explains leaves the
model unreliable: the check then fails and says so. The time-series writes use a client without retryable writes,
since mongosim does not recognise a retried write: a retry of an insert that was applied would apply it twice.

mongosim keeps its bucket catalog in memory only: after a restart from --state it cannot re-pack a compressed
bucket written before. In phase rs, each start of mongosim therefore gets collections of its own (generation g:
m<g> with a metaField, n<g> without), and updates and deletes go only to the collections of the current start.
"""
import collections
import datetime
import json
import threading
import time

import pymongo
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo.errors import PyMongoError

EPOCH = datetime.datetime(1970, 1, 1)
T0 = datetime.datetime(2026, 1, 1)
SITES = ["A", "B", "C", "D"]
TEXTS = ["", "ok", "été", "日本語", "emoji\U0001F600", "tab\tnew\nline", "quote\"back\\slash"]
DECIMALS = ["1.10", "-0", "123.456", "1E+3"]


def ms_of(dt):
    return (dt - EPOCH) // datetime.timedelta(milliseconds=1)


def canon(v):
    """A value of a model document, as a hashable form that keeps what the table's jsonb keeps: the type (integer,
    double, string, ...) and the value, not the order of a document's fields."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", int(v))
    if isinstance(v, float):
        return ("f", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("n",)
    if isinstance(v, datetime.datetime):
        return ("d", ms_of(v.replace(tzinfo=None)))
    if isinstance(v, ObjectId):
        return ("o", str(v))
    if isinstance(v, Decimal128):
        return ("dec", str(v))
    if isinstance(v, dict):
        return ("doc", frozenset((k, canon(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ("arr", tuple(canon(x) for x in v))
    raise TypeError("no canonical form for %r" % (v,))


def parse_iso_ms(s):
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return ms_of(datetime.datetime.strptime(s, fmt))
        except ValueError:
            pass
    raise ValueError("not a date: %r" % s)


def canon_json(v):
    """The same form for a value read back from PostgreSQL's jsonb (relaxed Extended JSON)."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("n",)
    if isinstance(v, list):
        return ("arr", tuple(canon_json(x) for x in v))
    if isinstance(v, dict):
        if len(v) == 1 and "$date" in v and isinstance(v["$date"], str):
            return ("d", parse_iso_ms(v["$date"]))
        if len(v) == 1 and "$oid" in v:
            return ("o", v["$oid"])
        if len(v) == 1 and "$numberDouble" in v:
            return ("f", float(v["$numberDouble"]))
        if len(v) == 1 and "$numberDecimal" in v:
            return ("dec", v["$numberDecimal"])
        return ("doc", frozenset((k, canon_json(x)) for k, x in v.items()))
    raise TypeError("no canonical form for %r" % (v,))


def show(c, limit=300):
    """A canonical form, readable (for the report)."""
    def plain(x):
        if x[0] == "doc":
            return {k: plain(y) for k, y in sorted(x[1])}
        if x[0] == "arr":
            return [plain(y) for y in x[1]]
        if x[0] in ("d", "o", "dec"):
            return "%s:%s" % (x[0], x[1])
        return x[1] if len(x) > 1 else None
    s = json.dumps(plain(c), ensure_ascii=False, sort_keys=True) if isinstance(c, tuple) else str(c)
    return s if len(s) <= limit else s[:limit] + "..."


class Coll:
    """One time-series collection and the model of its measurements: _id -> the measurement as MongoDB holds it."""

    def __init__(self, name, meta_field, fmt):
        self.name, self.meta_field, self.fmt = name, meta_field, fmt
        self.docs = {}
        self.keys = []  # the _ids, for a random pick
        self.pos = {}
        self.created = False

    def put(self, doc):
        k = doc["_id"]
        if k not in self.docs:
            self.pos[k] = len(self.keys)
            self.keys.append(k)
        self.docs[k] = doc

    def remove(self, k):
        del self.docs[k]
        i = self.pos.pop(k)
        last = self.keys.pop()
        if last != k:
            self.keys[i] = last
            self.pos[last] = i


class TimeSeries:
    """The time-series part of a phase's workload (see the module's comment)."""

    def __init__(self, phase, uri, rng, fmt, log):
        self.phase, self.rng, self.log = phase, rng, log
        self.client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=60000, socketTimeoutMS=120000,
                                          retryWrites=False)
        self.dbname = "soak_%s_ts" % phase
        self.db = self.client[self.dbname]
        self.lock = threading.Lock()  # held for a whole step; a restart of mongosim waits for it
        self.colls = {}
        self.gen = -1
        self.stamp = 0
        self.clock = {}  # per series: the time of its latest measurement
        self.counts = collections.Counter()
        self.unresolved = []
        self.new_generation(fmt)

    # -- the workload ---------------------------------------------------------------------------------------

    def new_generation(self, fmt):
        """Collections of their own for a new start of mongosim (running the oplog format fmt)."""
        self.gen += 1
        self.fmt = fmt
        self.current = [Coll("m%d" % self.gen, "tag", fmt), Coll("n%d" % self.gen, None, fmt)]
        for c in self.current:
            self.colls[c.name] = c

    def step(self):
        """One time-series write; returns the ops it counts (measurements written, or 1 for an update or delete)."""
        with self.lock:
            for c in self.current:
                if not c.created:
                    self.create(c)
            rng = self.rng
            c = self.current[0] if rng.random() < 0.8 else self.current[1]
            r = rng.random()
            v50 = self.fmt == "5.0"
            if r < 0.55 or len(c.docs) < 20 or (v50 and c.meta_field is None):
                return self.insert(c)
            if v50:
                return self.meta_delete(c) if r < 0.75 else self.meta_update(c)
            if r < 0.77:
                return self.update_one(c)
            if r < 0.95:
                return self.delete_one(c)
            if c.meta_field and r < 0.975:
                return self.meta_delete(c)
            if c.meta_field:
                return self.meta_update(c)
            return self.delete_one(c)

    def create(self, c):
        opts = {"timeField": "ts"}
        if c.meta_field:
            opts["metaField"] = c.meta_field
        try:
            self.db.create_collection(c.name, timeseries=opts)
        except pymongo.errors.CollectionInvalid:
            pass  # created by an earlier try whose reply was lost
        except pymongo.errors.OperationFailure as e:
            if e.code != 48:
                raise
        c.created = True

    def next_stamp(self):
        self.stamp += 1
        return self.stamp

    def series_time(self, key):
        rng = self.rng
        t = self.clock.get(key, T0 + datetime.timedelta(seconds=rng.randrange(3600)))
        x = rng.random()
        if x < 0.05:
            t -= datetime.timedelta(seconds=rng.randrange(60, 1800))  # out of order: archived buckets, version 3
        elif x < 0.08:
            t += datetime.timedelta(seconds=rng.randrange(3600, 7200))  # past the bucket's span
        else:
            t += datetime.timedelta(milliseconds=rng.randrange(1, 120000))
        self.clock[key] = max(t, self.clock.get(key, t))
        return t

    def measurement(self, c, meta, stamp):
        rng = self.rng
        key = (c.name, json.dumps(meta, sort_keys=True))
        m = {"_id": ObjectId(), "ts": self.series_time(key), "v": stamp,
             "temp": round(rng.uniform(-40, 50), rng.choice([0, 1, 3])) * 1.0, "n": rng.randrange(-1000, 1000)}
        if meta is not None:
            m[c.meta_field] = meta
        x = rng.random()
        if x < 0.7:
            m["s"] = rng.choice(TEXTS)
        if rng.random() < 0.2:
            m["sub"] = {"a": rng.randrange(10), "b": [rng.randrange(5) for _ in range(rng.randrange(4))]}
        if rng.random() < 0.1:
            m["f%d" % rng.randrange(6)] = rng.choice([True, False, None, Int64(rng.randrange(-2**40, 2**40)),
                                                       Decimal128(rng.choice(DECIMALS)),
                                                       datetime.datetime(2025, 6, 1, 12, 0, 0, 123000)])
        return m

    def random_meta(self, c):
        if c.meta_field is None:
            return None
        meta = {"site": self.rng.choice(SITES), "id": self.rng.randrange(5)}
        if self.rng.random() < 0.5:
            meta = {"id": meta["id"], "site": meta["site"]}  # the same series, fields in another order
        return meta

    def insert(self, c):
        stamp = self.next_stamp()
        metas = [self.random_meta(c) for _ in range(self.rng.randrange(1, 4))]
        batch = [self.measurement(c, self.rng.choice(metas), stamp) for _ in range(self.rng.randrange(1, 30))]
        changes = {m["_id"]: m for m in batch}
        self.write(c, "insert", lambda coll: coll.insert_many(batch, ordered=True), changes)
        return len(batch)

    def update_one(self, c):
        rng = self.rng
        k = rng.choice(c.keys)
        old = c.docs[k]
        stamp = self.next_stamp()
        new = dict(old)
        u = {"$set": {"v": stamp, "temp": round(rng.uniform(-40, 50), 2)}}
        new.update(u["$set"])
        if rng.random() < 0.5:
            u["$inc"] = {"n": 1}
            new["n"] = old["n"] + 1
        if rng.random() < 0.3 and "s" in old:
            u["$unset"] = {"s": ""}
            del new["s"]
        if rng.random() < 0.15 and c.meta_field:
            site = rng.choice(SITES)
            u["$set"][c.meta_field + ".site"] = site
            new[c.meta_field] = dict(old[c.meta_field], site=site)
        if rng.random() < 0.1:
            t = old["ts"] + datetime.timedelta(seconds=rng.randrange(-600, 600))
            u["$set"]["ts"] = t
            new["ts"] = t
        self.write(c, "update", lambda coll: coll.update_one({"_id": k}, u), {k: new})
        return 1

    def delete_one(self, c):
        k = self.rng.choice(c.keys)
        self.write(c, "delete", lambda coll: coll.delete_one({"_id": k}), {k: None})
        return 1

    def meta_filter(self, c):
        m = c.docs[self.rng.choice(c.keys)][c.meta_field]
        q = {c.meta_field + ".site": m["site"], c.meta_field + ".id": m["id"]}
        hits = [k for k, d in c.docs.items() if d[c.meta_field]["site"] == m["site"]
                and d[c.meta_field]["id"] == m["id"]]
        return q, m, hits

    def meta_delete(self, c):
        q, _, hits = self.meta_filter(c)
        self.write(c, "delete by meta", lambda coll: coll.delete_many(q), {k: None for k in hits})
        return 1

    def meta_update(self, c):
        """5.0: an update of the meta field alone (each bucket's meta rewritten); 7.0 and 8.0: a multi-update of a
        whole series (each of its buckets re-packed, the measurements moved to new buckets)."""
        q, m, hits = self.meta_filter(c)
        changes = {}
        if self.fmt == "5.0":
            new_id = (m["id"] + 1 + self.rng.randrange(4)) % 5
            u = {"$set": {c.meta_field + ".id": new_id}}
            for k in hits:
                changes[k] = dict(c.docs[k], **{c.meta_field: dict(c.docs[k][c.meta_field], id=new_id)})
        else:
            stamp = self.next_stamp()
            u = {"$set": {"v": stamp, "flag": True}}
            for k in hits:
                changes[k] = dict(c.docs[k], v=stamp, flag=True)
        self.write(c, "update by meta", lambda coll: coll.update_many(q, u), changes)
        return 1

    def write(self, c, kind, fn, changes):
        """Runs one write; on a driver error, finds out from the buckets whether it happened."""
        try:
            fn(self.db[c.name])
        except PyMongoError as e:
            applied = self.resolve(c, changes)
            self.counts["%s failed (%s)" % (kind, {True: "applied", False: "not applied",
                                                    None: "unresolved"}[applied])] += 1
            if applied is None:
                self.unresolved.append("%s.%s: %s: %s" % (self.dbname, c.name, kind, str(e)[:200]))
                self.log("time-series %s: the outcome of a failed %s is not known: %s" % (self.phase, kind, e))
                return
            if not applied:
                return
        self.counts[kind] += 1
        for k, d in changes.items():
            if d is None:
                c.remove(k)
            else:
                c.put(d)

    # -- what MongoDB holds: the plain fields of the buckets ------------------------------------------------

    def buckets(self, c, deadline=120):
        """Every bucket of c, retried while a fault lasts."""
        end = time.time() + deadline
        while True:
            try:
                return list(self.db["system.buckets." + c.name].find({}))
            except PyMongoError:
                if time.time() > end:
                    raise
                time.sleep(0.2)

    @staticmethod
    def bucket_count(b):
        ctl = b["control"]
        if ctl.get("version", 1) == 1:
            return len(b["data"]["ts"])
        return int(ctl["count"])

    def source_summary(self, c, buckets):
        per_meta = collections.Counter()
        top = 0
        for b in buckets:
            n = self.bucket_count(b)
            if n:
                per_meta[canon(b.get("meta"))] += n
                top = max(top, b["control"]["max"].get("v", 0))
        return per_meta, top

    @staticmethod
    def model_summary(c, changes=None):
        per_meta = collections.Counter()
        top = 0
        docs = c.docs
        if changes is not None:
            docs = dict(docs)
            for k, d in changes.items():
                if d is None:
                    docs.pop(k, None)
                else:
                    docs[k] = d
        for d in docs.values():
            per_meta[canon(d.get(c.meta_field)) if c.meta_field else canon(None)] += 1
            top = max(top, d["v"])
        return per_meta, top

    def resolve(self, c, changes):
        """True when the buckets show the write applied, False when they show it not applied, None when neither."""
        try:
            seen = self.source_summary(c, self.buckets(c))
        except PyMongoError:
            return None
        before, after = self.model_summary(c), self.model_summary(c, changes)
        if before == after:
            return False if seen == before else None  # nothing to tell apart: the write changed nothing countable
        if seen == after:
            return True
        if seen == before:
            return False
        return None


# -- the final check ---------------------------------------------------------------------------------------------


def check(ts, psql, selftest=()):
    """Compares, per collection, the model with the table's rows and the buckets with the table's rows. Prints the
    report; True when everything is equal and no write was left unresolved. `selftest` names corruptions made in
    PostgreSQL before the comparison (SOAK_TS_SELFTEST), each of which must then be reported."""
    ok = True
    found = 0  # differences between the model and the rows, for the self-test
    found_places = 0  # differences found bucket by bucket
    schema = ts.dbname
    if selftest:
        corrupt(ts, psql, schema, selftest)
    for name in sorted(ts.colls):
        c = ts.colls[name]
        if not c.created:
            continue
        table = '%s."%s"' % (schema, name)
        rows = psql('SELECT bucket, pos, (extract(epoch FROM "time") * 1000)::bigint, coalesce(meta::text, \'\'), '
                    "doc::text FROM %s" % table, check=False)
        if rows is None:
            print("time-series %s.%s: no table in PostgreSQL" % (schema, name))
            ok = False
            continue
        # 1. The model against the rows: a multiset of (time, meta, measurement).
        want = collections.Counter()
        for d in c.docs.values():
            meta = canon(d[c.meta_field]) if c.meta_field else None
            want[(ms_of(d["ts"]), meta, canon(d))] += 1
        got = collections.Counter()
        bad_rows = []
        at = {}  # (bucket, place) -> (time, meta, measurement)
        for bucket, pos, t, meta, doc in rows:
            try:
                key = (int(t), canon_json(json.loads(meta)) if meta else None, canon_json(json.loads(doc)))
            except (ValueError, TypeError) as e:
                bad_rows.append("%s/%s: %s" % (bucket, pos, e))
                continue
            got[key] += 1
            at[(bucket, int(pos))] = key
        missing, extra = want - got, got - want
        # 2. The buckets MongoDB holds against the rows, per bucket: count, places 0..count-1, meta, latest time.
        buckets = ts.buckets(c)
        per_bucket = {}
        for row in psql('SELECT bucket, count(*), min(pos), max(pos), (extract(epoch FROM max("time")) * 1000)'
                        "::bigint, count(DISTINCT meta::text), min(meta::text) FROM %s GROUP BY bucket" % table):
            per_bucket[row[0]] = row[1:]
        bucket_diffs = []
        by_version = collections.Counter()
        for b in buckets:
            bid = str(b["_id"])
            n = TimeSeries.bucket_count(b)
            meta = canon(b.get("meta")) if c.meta_field else None
            bucket_diffs += places(c, b, bid, n, at)
            by_version[b["control"].get("version", 1)] += 1
            r = per_bucket.pop(bid, None)
            if n == 0 and r is None:
                continue
            if r is None:
                bucket_diffs.append("bucket %s: %d measurements in MongoDB, no rows" % (bid, n))
                continue
            cnt, lo, hi, tmax, nmeta, pgmeta = r
            pgm = canon_json(json.loads(pgmeta)) if pgmeta else None
            want_t = ms_of(b["control"]["max"]["ts"])
            if (int(cnt), int(lo), int(hi), int(tmax), int(nmeta) if c.meta_field else 0) != \
                    (n, 0, n - 1, want_t, 1 if c.meta_field else 0) or pgm != meta:
                bucket_diffs.append("bucket %s: MongoDB %d measurements, latest %d, meta %s; PostgreSQL %s rows at "
                                    "places %s..%s, latest %s, %s meta value(s), meta %s"
                                    % (bid, n, want_t, show(meta, 80), cnt, lo, hi, tmax, nmeta, show(pgm, 80)))
        for bid in per_bucket:
            bucket_diffs.append("bucket %s: rows in PostgreSQL, no such bucket in MongoDB" % bid)
        # 3. The model against MongoDB's buckets (a disagreement is the harness's or mongosim's, not the daemon's).
        model_vs_source = TimeSeries.model_summary(c) == ts.source_summary(c, buckets)
        print("time-series %s.%s (%s, format %s): %d measurements in the model, %d rows, %d buckets in MongoDB; "
              "model vs rows: %d missing, %d extra%s; buckets vs rows (%d of version 1 also place by place, %d of version 2 "
              "also in time order): %d differ; model vs MongoDB's buckets: %s"
              % (schema, name, "metaField " + c.meta_field if c.meta_field else "no metaField", c.fmt,
                 len(c.docs), len(rows), len(buckets), sum(missing.values()), sum(extra.values()),
                 ", %d unreadable" % len(bad_rows) if bad_rows else "", by_version[1], by_version[2], len(bucket_diffs),
                 "equal" if model_vs_source else "DIFFERENT"))
        for key in list(missing)[:3]:
            print("  missing from PostgreSQL: time %d, meta %s, %s" % (key[0], show(key[1], 80), show(key[2])))
        for key in list(extra)[:3]:
            print("  extra in PostgreSQL: time %d, meta %s, %s" % (key[0], show(key[1], 80), show(key[2])))
        for line in (bad_rows + bucket_diffs)[:5]:
            print("  " + line)
        ok = ok and not missing and not extra and not bad_rows and not bucket_diffs and model_vs_source
        found += sum(missing.values()) + sum(extra.values())
        found_places += len(bucket_diffs)
    dead = psql("SELECT count(*) FROM oplog2pg.dead_letter WHERE db = '%s'" % schema, check=False)
    dead = int(dead[0][0]) if dead else 0
    print("time-series writes: %s; %d dead letters for %s (none expected: no refusal is injected there)%s"
          % (", ".join("%s %d" % kv for kv in sorted(ts.counts.items())) or "none", dead, schema,
             "; UNRESOLVED: %s" % ts.unresolved[:3] if ts.unresolved else ""))
    ok = ok and dead == 0 and not ts.unresolved
    if selftest:
        # A deleted row is one measurement missing; a changed one is one missing and one extra; a swap changes no
        # measurement, only places, which the check bucket by bucket must report.
        expected = sum({"delete": 1, "swap": 0}.get(k, 2) for k in selftest)
        caught = not ok and found == expected and ("swap" not in selftest or found_places > 0)
        print("self-test (time-series): %d corruption(s) made, %d difference(s) from the record expected, %d found; "
              "%d difference(s) bucket by bucket: %s" % (len(selftest), expected, found, found_places,
                                                         "caught" if caught else "NOT caught"))
    return ok


def places(c, b, bid, n, at):
    """What can be checked place by place without decoding a compressed column. A version 1 bucket is read as it is:
    the measurement at each key of its time column (the data fields at that key, and the bucket's meta) must be the
    row at that place. A version 2 bucket is sorted by time: the rows' times must not fall from one place to the
    next. (Version 3, 8.0's unsorted bucket, has no order to check.)"""
    out = []
    version = b["control"].get("version", 1)
    if version == 1:
        for key in b["data"]["ts"]:
            m = {f: col[key] for f, col in b["data"].items() if key in col}
            if c.meta_field and "meta" in b:
                m[c.meta_field] = b["meta"]
            row = at.get((bid, int(key)))
            if row is None or row[2] != canon(m) or row[0] != ms_of(m["ts"]):
                out.append("bucket %s place %s: MongoDB %s; PostgreSQL %s" % (bid, key, show(canon(m), 150),
                                                                                show(row[2], 150) if row else None))
    elif version == 2:
        times = [at[(bid, i)][0] for i in range(n) if (bid, i) in at]
        if times != sorted(times):
            out.append("bucket %s: a version 2 bucket, but its rows' times are not in the order of their places" % bid)
    return out


def corrupt(ts, psql, schema, kinds):
    """SOAK_TS_SELFTEST: changes PostgreSQL behind the daemon, after it caught up, so that the check must fail."""
    names = [n for n in sorted(ts.colls) if ts.colls[n].created and ts.colls[n].meta_field]
    for i, kind in enumerate(kinds):
        table = '%s."%s"' % (schema, names[i % len(names)])
        pick = "(SELECT bucket, pos FROM %s ORDER BY bucket, pos OFFSET %d LIMIT 1)" % (table, i)
        sql = {
            "delete": "DELETE FROM %s WHERE (bucket, pos) IN %s RETURNING bucket, pos",
            "doc": "UPDATE %s SET doc = jsonb_set(doc, '{n}', to_jsonb(coalesce((doc->>'n')::int, 0) + 1)) "
                   "WHERE (bucket, pos) IN %s RETURNING bucket, pos",
            "time": "UPDATE %s SET \"time\" = \"time\" + interval '1 millisecond' WHERE (bucket, pos) IN %s "
                    "RETURNING bucket, pos",
            "meta": "UPDATE %s SET meta = jsonb_set(meta, '{id}', '99') WHERE (bucket, pos) IN %s "
                    "RETURNING bucket, pos",
        }[kind] % (table, pick) if kind != "swap" else (
            # Two rows of one bucket (the last with two times) trade their time and measurement: the multiset of
            # rows stays the same, and only the check by place can notice.
            "WITH b AS (SELECT bucket FROM {t} GROUP BY bucket HAVING count(DISTINCT \"time\") > 1 "
            "ORDER BY bucket DESC LIMIT 1), "
            "lo AS (SELECT pos, \"time\", doc FROM {t} WHERE bucket = (SELECT bucket FROM b) ORDER BY \"time\", pos "
            "LIMIT 1), "
            "hi AS (SELECT pos, \"time\", doc FROM {t} WHERE bucket = (SELECT bucket FROM b) "
            "ORDER BY \"time\" DESC, pos DESC LIMIT 1) "
            "UPDATE {t} SET \"time\" = CASE WHEN {t}.pos = lo.pos THEN hi.\"time\" ELSE lo.\"time\" END, "
            "doc = CASE WHEN {t}.pos = lo.pos THEN hi.doc ELSE lo.doc END FROM lo, hi "
            "WHERE {t}.bucket = (SELECT bucket FROM b) AND {t}.pos IN (lo.pos, hi.pos) RETURNING {t}.bucket, {t}.pos"
        ).format(t=table)
        print("self-test: %s of %s at %s" % (kind, table, psql(sql)))
