#!/usr/bin/python3
"""Computes the measurements of mongo-tools' 5.0 time-series dump after its oplog is replayed, independently of the
daemon's C code (pymongo's bson module, a diff applier and an unpacker written here in Python), and writes them to
mongo-tools_ts_dump_with_oplog.expected.txt: one line per measurement, in bucket file order then position order:

    <bucket _id hex> <position> <time, ms since the epoch> <FNV-1a 64 of the measurement's BSON bytes, hex>

The measurement is built as the time-series view returns it (the server's bucket_unpacker.cpp, BucketUnpackerV1):
the time field, then `meta` under the metaField name, then the other data fields in the bucket's data order.
Replay: every oplog entry is a `$v:2` update of one bucket, applied as the server's document_diff_applier.cpp does
with its existence check for inserts on (an `i` of a field that exists replaces it and moves it to the end: how
applyOps / mongorestore --oplogReplay make entries already in the dump harmless).

Run from this directory: /usr/bin/python3 expected.py  (needs pymongo's bson module)."""
import bson
from bson.codec_options import CodecOptions
from bson.son import SON

OPTS = CodecOptions(document_class=SON, tz_aware=False)
TIME, META = "ts", "meta"  # foo_ts.metadata.json: timeField "ts", metaField "meta"


def apply_object(pre, diff):
    out = SON()
    inserts = []  # the server's fieldsToInsert: u entries, then i entries
    mods = {}
    for sec in ("d", "u", "i"):
        for k, v in diff.get(sec, {}).items():
            assert k not in mods, "duplicate field in diff"
            mods[k] = (sec, v)
            if sec in ("u", "i"):
                inserts.append(k)
    for k, v in diff.items():
        if k.startswith("s") and len(k) > 1:
            assert k[1:] not in mods
            mods[k[1:]] = ("s", v)
        elif k not in ("d", "u", "i"):
            raise ValueError("unexpected section %r" % k)
    done = set()
    for k, v in pre.items():
        if k not in mods:
            out[k] = v
            continue
        sec, mv = mods[k]
        if sec == "u":
            out[k] = mv
            done.add(k)
        elif sec == "s":
            assert isinstance(v, dict) and "a" not in mv, "only object sub-diffs occur in this oplog"
            out[k] = apply_object(v, mv)
        # d: dropped; i: dropped here, appended below
    for k in inserts:
        if k not in done:
            out[k] = mods[k][1]
    return out


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def unpack_v1(bucket):
    data = bucket["data"]
    times = data[TIME]
    rows = []
    for pos, (key, t) in enumerate(times.items()):
        assert key == str(pos)
        m = SON()
        m[TIME] = t
        if "meta" in bucket:
            m[META] = bucket["meta"]
        for col, vals in data.items():
            if col != TIME and key in vals:
                m[col] = vals[key]
        rows.append(m)
    return rows


def main():
    buckets = bson.decode_all(open("mongo-tools_ts_dump_with_oplog.buckets.bson", "rb").read(), OPTS)
    by_id = {b["_id"]: i for i, b in enumerate(buckets)}
    ops = bson.decode_all(open("mongo-tools_ts_dump_with_oplog.oplog.bson", "rb").read(), OPTS)
    for op in ops:
        assert op["op"] == "u" and op["o"]["$v"] == 2
        i = by_id[op["o2"]["_id"]]
        buckets[i] = apply_object(buckets[i], op["o"]["diff"])
    lines = []
    for b in buckets:
        assert b["control"]["version"] == 1
        for pos, m in enumerate(unpack_v1(b)):
            # bson.encode moves a top-level _id to the front; the view keeps the bucket's data order, so the
            # measurement is encoded as a sub-document and its bytes taken from there (after 4 + 1 + "m\\0").
            holder = bson.encode(SON([("m", m)]))
            raw = holder[7:-1]
            assert int.from_bytes(raw[:4], "little") == len(raw)
            ms = bson.decode(bson.encode({"t": m[TIME]}), CodecOptions(tz_aware=True))["t"]
            ms = int(round(ms.timestamp() * 1000))
            # then the measurement's own fields, for checks that see it as JSON (the daemon's table): its _id and
            # its `measurement` value
            lines.append("%s %d %d %016x %s %s\n" % (b["_id"], pos, ms, fnv1a64(raw), m["_id"], m["measurement"]))
    assert len(lines) == 2164, len(lines)
    open("mongo-tools_ts_dump_with_oplog.expected.txt", "w").write("".join(lines))
    print("%d measurements in %d buckets" % (len(lines), len(buckets)))


main()
