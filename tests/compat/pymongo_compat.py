#!/usr/bin/python3
"""pymongo_compat.py — checks that pymongo 3.11 treats the server at URI (mongosim, or a real replica set) as a
replica-set PRIMARY and can write, read and tail local.oplog.rs with a TAILABLE_AWAIT cursor, and that the update
operators ($push with modifiers, $pull, $addToSet, $pop, $pullAll, $min, $max, $mul, $rename, $currentDate) give the
documents, the oplog `o` fields ($v:2 or $v:1), the no-ops and the error codes a server gives, and that its own
watch() reads a change stream (events, resume tokens, resume_after).

Usage: /usr/bin/python3 tests/compat/pymongo_compat.py mongodb://127.0.0.1:PORT/?replicaSet=rs0
       /usr/bin/python3 tests/compat/pymongo_compat.py --sharded build/mongosim
The second form starts `mongosim --shards 2 --port 0` and connects to its router as to a real mongos: CRUD,
shardCollection, split, moveChunk, a transaction across both shards, and each shard's oplog read directly.
Prints one line per check and, alone on the last line, "N passed, N failed"; exits 1 on any failure.
"""
import random
import subprocess
import sys
import time

import bson
import pymongo
from bson.timestamp import Timestamp
from pymongo import CursorType

passed = 0
failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   %s" % name)
    else:
        failed += 1
        print("FAIL %s %s" % (name, detail))


def last_ts(client):
    hello = client.admin.command("isMaster")
    return hello["lastWrite"]["opTime"]["ts"]


def tail(client, after, ns, want, seconds=10.0):
    """Entries on ns after ts `after`, read with a tailable awaitData cursor."""
    cur = client.local["oplog.rs"].find({"ts": {"$gt": after}}, cursor_type=CursorType.TAILABLE_AWAIT)
    cur = cur.max_await_time_ms(200)
    got = []
    deadline = time.time() + seconds
    while cur.alive and len(got) < want and time.time() < deadline:
        for e in cur:
            if e.get("ns") == ns:
                got.append(e)
            if len(got) >= want:
                break
    cur.close()
    return got


def ordered(x):
    """x with every dict turned into a list of (key, value) pairs, so that == also compares field order."""
    if isinstance(x, dict):
        return [(k, ordered(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [ordered(v) for v in x]
    return x


# Update operators: (update, document after it, `o` a 7.0 server logs, `o` a 4.4 server logs). The documents follow
# one another, starting from {_id: 1, a: [1, 2, 3], n: 5, t: {x: 1}}. Appending with $push logs the new element;
# every other array change logs the whole array; $rename logs the destination and deletes the source.
OPERATOR_CASES = [
    ({"$push": {"a": 4}},
     {"_id": 1, "a": [1, 2, 3, 4], "n": 5, "t": {"x": 1}},
     {"sa": {"a": True, "u3": 4}}, {"$set": {"a.3": 4}}),
    ({"$push": {"a": {"$each": [0], "$position": 0}}},
     {"_id": 1, "a": [0, 1, 2, 3, 4], "n": 5, "t": {"x": 1}},
     {"u": {"a": [0, 1, 2, 3, 4]}}, {"$set": {"a": [0, 1, 2, 3, 4]}}),
    ({"$pull": {"a": {"$gte": 3}}},
     {"_id": 1, "a": [0, 1, 2], "n": 5, "t": {"x": 1}},
     {"u": {"a": [0, 1, 2]}}, {"$set": {"a": [0, 1, 2]}}),
    ({"$addToSet": {"a": {"$each": [2, 5]}}},
     {"_id": 1, "a": [0, 1, 2, 5], "n": 5, "t": {"x": 1}},
     {"u": {"a": [0, 1, 2, 5]}}, {"$set": {"a": [0, 1, 2, 5]}}),
    ({"$pop": {"a": -1}},
     {"_id": 1, "a": [1, 2, 5], "n": 5, "t": {"x": 1}},
     {"u": {"a": [1, 2, 5]}}, {"$set": {"a": [1, 2, 5]}}),
    ({"$pullAll": {"a": [1, 5]}},
     {"_id": 1, "a": [2], "n": 5, "t": {"x": 1}},
     {"u": {"a": [2]}}, {"$set": {"a": [2]}}),
    ({"$min": {"n": 3}, "$max": {"m": 7}},
     {"_id": 1, "a": [2], "n": 3, "t": {"x": 1}, "m": 7},
     {"u": {"n": 3}, "i": {"m": 7}}, {"$set": {"m": 7, "n": 3}}),
    ({"$mul": {"n": 2}},
     {"_id": 1, "a": [2], "n": 6, "t": {"x": 1}, "m": 7},
     {"u": {"n": 6}}, {"$set": {"n": 6}}),
    ({"$rename": {"t.x": "y"}},
     {"_id": 1, "a": [2], "n": 6, "t": {}, "m": 7, "y": 1},
     {"i": {"y": 1}, "st": {"d": {"x": False}}}, {"$set": {"y": 1}, "$unset": {"t.x": True}}),
]


def check_update_operators(client, db, name):
    """$push/$pull/$addToSet/$pop/$pullAll/$min/$max/$mul/$rename/$currentDate: documents, oplog o, no-ops, errors."""
    coll = db[name + "_ops"]
    ns = "%s.%s" % (db.name, coll.name)
    coll.insert_one({"_id": 1, "a": [1, 2, 3], "n": 5, "t": {"x": 1}})
    start = last_ts(client)
    for update, want_doc, _, _ in OPERATOR_CASES:
        r = coll.update_one({"_id": 1}, update)
        got = coll.find_one({"_id": 1})
        check("%s changes the document" % list(update), r.modified_count == 1 and ordered(got) == ordered(want_doc),
              "%r %r" % (r.raw_result, got))
    for update in ({"$pull": {"a": 99}}, {"$addToSet": {"a": 2}}, {"$min": {"n": 7}}, {"$pop": {"zz": 1}}):
        r = coll.update_one({"_id": 1}, update)
        check("%s is a no-op" % update, r.matched_count == 1 and r.modified_count == 0, repr(r.raw_result))
    r = coll.update_one({"_id": 1}, {"$currentDate": {"d": True}})
    got = coll.find_one({"_id": 1})
    check("$currentDate sets a date", r.modified_count == 1 and hasattr(got.get("d"), "year"), repr(got))
    for update, code in (({"$pop": {"a": 2}}, 9), ({"$pull": {"n": 1}}, 2), ({"$mul": {"t": 2}}, 14),
                         ({"$rename": {"a.0": "z"}}, 2)):
        try:
            coll.update_one({"_id": 1}, update)
            check("%s fails with %d" % (update, code), False)
        except pymongo.errors.WriteError as exc:
            check("%s fails with %d" % (update, code), exc.code == code, repr(exc.details))

    entries = tail(client, start, ns, len(OPERATOR_CASES) + 1)
    check("one oplog entry per modifying update", len(entries) == len(OPERATOR_CASES) + 1,
          repr([e.get("o") for e in entries]))
    for (update, _, want_v2, want_v1), e in zip(OPERATOR_CASES, entries):
        o = e["o"]
        want = {"$v": 2, "diff": want_v2} if o.get("$v") == 2 else dict([("$v", 1)] + list(want_v1.items()))
        check("%s logs %r" % (list(update), want), e["op"] == "u" and ordered(o) == ordered(want), repr(o))
    if len(entries) == len(OPERATOR_CASES) + 1:
        o, d = entries[-1]["o"], got.get("d")
        want = {"$v": 2, "diff": {"i": {"d": d}}} if o.get("$v") == 2 else {"$v": 1, "$set": {"d": d}}
        check("$currentDate logs the date it set", ordered(o) == ordered(want), repr(o))
    coll.drop()


def check_transaction(client, coll, ns):
    """A pymongo transaction (with_transaction): one applyOps entry on admin.$cmd; an aborted one writes nothing."""
    start = last_ts(client)

    def body(session):
        coll.insert_one({"_id": "t1", "v": 1}, session=session)
        coll.update_one({"_id": "t1"}, {"$inc": {"v": 1}}, session=session)
        return coll.find_one({"_id": "t1"}, session=session)

    with client.start_session() as s:
        seen = s.with_transaction(body)
    check("transaction reads its own writes", seen == {"_id": "t1", "v": 2}, repr(seen))
    check("transaction committed", coll.find_one({"_id": "t1"}) == {"_id": "t1", "v": 2})
    entries = list(client.local["oplog.rs"].find({"ts": {"$gt": start}}))
    ok = (len(entries) == 1 and entries[0]["op"] == "c" and entries[0]["ns"] == "admin.$cmd" and
          "lsid" in entries[0] and "txnNumber" in entries[0] and
          [o["op"] for o in entries[0]["o"]["applyOps"]] == ["i", "u"] and
          all(o["ns"] == ns for o in entries[0]["o"]["applyOps"]) and
          entries[0]["prevOpTime"]["t"] == -1 and "partialTxn" not in entries[0]["o"])
    check("transaction oplog entry", ok, repr(entries))

    start = last_ts(client)
    with client.start_session() as s:
        s.start_transaction()
        coll.insert_one({"_id": "t2"}, session=s)
        s.abort_transaction()
    after = list(client.local["oplog.rs"].find({"ts": {"$gt": start}}))
    check("aborted transaction writes nothing", after == [] and coll.find_one({"_id": "t2"}) is None, repr(after))


def shard_entries(port, ns):
    """The entries on ns in a shard's local.oplog.rs, read with a direct connection to that shard."""
    c = pymongo.MongoClient("mongodb://127.0.0.1:%d/" % port, directConnection=True, serverSelectionTimeoutMS=10000)
    try:
        return [e for e in c.local["oplog.rs"].find() if e.get("ns") == ns]
    finally:
        c.close()


def check_sharded(binary):
    """A 2-shard mongosim cluster through pymongo's mongos topology."""
    proc = subprocess.Popen([binary, "--shards", "2", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        port = int(proc.stdout.readline())
        client = pymongo.MongoClient("mongodb://127.0.0.1:%d/" % port, serverSelectionTimeoutMS=10000)
        hello = client.admin.command("hello")
        check("router hello isdbgrid", hello.get("msg") == "isdbgrid" and "setName" not in hello, repr(hello))
        client.db.c.insert_one({"_id": -1, "k": -1})  # selects the server: pymongo then knows the topology
        check("pymongo sees a mongos", client.is_mongos)
        shards = client.admin.command("listShards")["shards"]
        hosts = {s["_id"]: s["host"] for s in shards}
        check("listShards", sorted(hosts) == ["shard0", "shard1"] and
              all(h.startswith(i + "/127.0.0.1:") for i, h in hosts.items()), repr(shards))
        ports = {i: int(h.rsplit(":", 1)[1]) for i, h in hosts.items()}
        res = client.admin.command("shardCollection", "db.c", key={"k": 1})
        check("shardCollection", res.get("collectionsharded") == "db.c", repr(res))
        client.admin.command("split", "db.c", middle={"k": 50})
        client.db.c.insert_many([{"_id": i, "k": i} for i in range(100)])
        res = client.admin.command("moveChunk", "db.c", find={"k": 70}, to="shard1")
        check("moveChunk", res.get("ok") == 1.0, repr(res))
        chunks = list(client.config.chunks.find({}, {"_id": 0, "min": 1, "shard": 1}))
        check("config.chunks after the move",
              sorted(c["shard"] for c in chunks) == ["shard0", "shard1"], repr(chunks))
        client.db.c.update_one({"_id": 70}, {"$set": {"x": 1}})
        client.db.c.delete_one({"_id": 10})
        client.db.c.insert_one({"_id": 200, "k": 200})
        docs = list(client.db.c.find({}, sort=[("_id", 1)]))
        ids = [d["_id"] for d in docs]
        check("router find merges the shards, no orphans",
              ids == [-1] + [i for i in range(100) if i != 10] + [200], repr(ids[:5]))
        n = client.db.c.count_documents({})
        check("count_documents", n == 101, repr(n))
        check("find by _id on shard1", client.db.c.find_one({"_id": 70}) == {"_id": 70, "k": 70, "x": 1})

        s0 = shard_entries(ports["shard0"], "db.c")
        s1 = shard_entries(ports["shard1"], "db.c")
        copies = [e for e in s1 if e["op"] == "i" and e.get("fromMigrate")]
        check("recipient copies with fromMigrate", sorted(e["o"]["_id"] for e in copies) == list(range(50, 100)))
        gone = [e for e in s0 if e["op"] == "d" and e.get("fromMigrate")]
        check("donor range deletion with fromMigrate and the shard key in o",
              len(gone) == 50 and all(list(e["o"].keys()) == ["k", "_id"] for e in gone), repr(gone[:1]))
        noop = [e for e in s0 if e["op"] == "n" and "migrateChunkToNewShard" in e.get("o2", {})]
        check("migrateChunkToNewShard noop", len(noop) == 1 and noop[0]["o2"] == {
            "migrateChunkToNewShard": "db.c", "fromShardId": "shard0", "toShardId": "shard1"}, repr(noop))
        upd = [e for e in s1 if e["op"] == "u"]
        check("update o2 holds the shard key", len(upd) == 1 and ordered(upd[0]["o2"]) == [("k", 70), ("_id", 70)],
              repr(upd))
        dele = [e for e in s0 if e["op"] == "d" and not e.get("fromMigrate")]
        check("delete o holds the shard key", len(dele) == 1 and dele[0]["o"] == {"k": 10, "_id": 10}, repr(dele))

        client.db.plain.insert_many([{"_id": i} for i in range(250)])
        got = [d["_id"] for d in client.db.plain.find(batch_size=7)]
        check("unsharded collection: getMore batches through the router", got == list(range(250)), repr(got[:3]))
        cid = client.db.command("find", "plain", batchSize=5)["cursor"]["id"]
        res = client.db.command("killCursors", "plain", cursors=[cid])
        try:
            client.db.command("getMore", cid, collection="plain")
            gone = False
        except pymongo.errors.OperationFailure as exc:
            gone = exc.code == 43
        check("killCursors through the router", cid != 0 and res["cursorsKilled"] == [cid] and gone, repr(res))
        client.db.plain2.insert_one({"_id": 1})
        client.db.plain2.rename("plain3")
        check("renameCollection of an unsharded collection",
              "plain3" in client.db.list_collection_names() and client.db.plain3.find_one() == {"_id": 1})
        plain = shard_entries(ports["shard0"], "db.plain")
        check("unsharded collection on the primary shard", len(plain) == 250 and
              not shard_entries(ports["shard1"], "db.plain"), repr(len(plain)))

        with client.start_session() as s:
            with s.start_transaction():
                client.db.c.update_one({"_id": 1}, {"$inc": {"v": 1}}, session=s)
                client.db.c.update_one({"_id": 99}, {"$inc": {"v": 1}}, session=s)
        p0 = [e for e in shard_entries(ports["shard0"], "admin.$cmd") if "commitTransaction" in e["o"]]
        p1 = [e for e in shard_entries(ports["shard1"], "admin.$cmd") if "commitTransaction" in e["o"]]
        check("two-phase commit: one commitTimestamp on both shards",
              len(p0) == 1 and len(p1) == 1 and p0[0]["o"]["commitTimestamp"] == p1[0]["o"]["commitTimestamp"],
              repr((p0, p1)))
        check("transaction applied through the router",
              client.db.c.find_one({"_id": 1})["v"] == 1 and client.db.c.find_one({"_id": 99})["v"] == 1)
        client.close()
    finally:
        proc.terminate()
        proc.wait()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def check_watch(client, db, name):
    """pymongo's own watch(): events for inserts, an update's updateDescription, a delete, the resume token after
    each event and after an empty batch, and resume_after giving the next event again."""
    coll = db[name + "_watch"]
    coll.insert_one({"_id": 0})
    with coll.watch(max_await_time_ms=300) as stream:
        first = stream.try_next()
        check("watch: empty batch", first is None and stream.alive, repr(first))
        check("watch: a resume token after an empty batch", stream.resume_token is not None)
        coll.insert_one({"_id": 1, "a": 1})
        coll.update_one({"_id": 1}, {"$set": {"b.c": 2}, "$unset": {"a": 1}})
        coll.delete_one({"_id": 1})
        events = []
        deadline = time.time() + 10
        while len(events) < 3 and time.time() < deadline:
            ev = stream.try_next()
            if ev is not None:
                events.append(ev)
        kinds = [e["operationType"] for e in events]
        check("watch: insert, update, delete", kinds == ["insert", "update", "delete"], repr(kinds))
        if len(events) == 3:
            check("watch: fullDocument", events[0].get("fullDocument") == {"_id": 1, "a": 1},
                  repr(events[0].get("fullDocument")))
            ud = events[1].get("updateDescription", {})
            check("watch: updateDescription", ud.get("updatedFields") == {"b": {"c": 2}} and
                  ud.get("removedFields") == ["a"], repr(ud))
            check("watch: ns", events[0]["ns"] == {"db": db.name, "coll": coll.name}, repr(events[0]["ns"]))
            token = events[0]["_id"]
            with coll.watch(resume_after=token, max_await_time_ms=300) as again:
                ev = None
                deadline = time.time() + 10
                while ev is None and time.time() < deadline:
                    ev = again.try_next()
                check("watch: resume_after gives the next event", ev is not None and
                      ev["operationType"] == "update", repr(ev))
    coll.drop()


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--sharded":
        return check_sharded(sys.argv[2])
    if len(sys.argv) != 2:
        print(__doc__)
        print("0 passed, 1 failed")
        return 1
    uri = sys.argv[1]
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    try:
        client.admin.command("ping")
        check("ping", True)
    except Exception as exc:  # noqa: BLE001 - report and stop
        check("ping", False, repr(exc))
        print("%d passed, %d failed" % (passed, failed))
        return 1

    check("sees a primary", client.primary is not None, repr(client.primary))
    hello = client.admin.command("isMaster")
    check("isMaster ismaster:true", hello.get("ismaster") is True, repr(hello.get("ismaster")))
    check("isMaster setName", bool(hello.get("setName")), repr(hello.get("setName")))
    check("logicalSessionTimeoutMinutes", hello.get("logicalSessionTimeoutMinutes") == 30)
    info = client.server_info()
    check("buildInfo version", isinstance(info.get("version"), str) and info.get("versionArray") is not None)

    name = "compat_%d_%d" % (int(time.time()), random.randint(0, 99999))
    db = client["mongosim_compat"]
    coll = db[name]
    ns = "mongosim_compat.%s" % name
    start = last_ts(client)
    check("last ts is a Timestamp", isinstance(start, Timestamp), repr(start))

    res = coll.insert_many([{"_id": i, "v": i} for i in range(5)])
    check("insert_many", res.inserted_ids == list(range(5)))
    try:
        coll.insert_one({"_id": 0})
        check("duplicate key raises", False)
    except pymongo.errors.DuplicateKeyError as exc:
        check("duplicate key raises", exc.code == 11000)
    r = coll.update_one({"_id": 1}, {"$set": {"w": "x"}, "$inc": {"v": 10}})
    check("update_one", r.matched_count == 1 and r.modified_count == 1, repr(r.raw_result))
    r = coll.update_one({"_id": 99}, {"$set": {"u": 1}}, upsert=True)
    check("upsert", r.upserted_id == 99, repr(r.raw_result))
    r = coll.delete_one({"_id": 2})
    check("delete_one", r.deleted_count == 1)
    docs = list(coll.find().sort("_id", 1))
    check("find sorted", [d["_id"] for d in docs] == [0, 1, 3, 4, 99], repr([d["_id"] for d in docs]))
    check("find doc", coll.find_one({"_id": 1}) == {"_id": 1, "v": 11, "w": "x"}, repr(coll.find_one({"_id": 1})))
    check("count_documents", coll.count_documents({}) == 5)
    many = db[name + "_big"]
    many.insert_many([{"_id": i} for i in range(250)])
    ids = [d["_id"] for d in many.find(batch_size=7)]
    check("find with getMore batches", ids == list(range(250)), "got %d" % len(ids))
    check("list_collection_names", name in db.list_collection_names())
    check("list_database_names", "mongosim_compat" in client.list_database_names())

    entries = tail(client, start, ns, 8)
    ops = [e["op"] for e in entries]
    check("oplog entries for the writes", ops == ["i"] * 5 + ["u", "i", "d"], repr(ops))
    if len(entries) >= 8:
        ins, upd, ups, dele = entries[0], entries[5], entries[6], entries[7]
        check("insert o", ins["o"] == {"_id": 0, "v": 0}, repr(ins["o"]))
        check("update o2", upd.get("o2") == {"_id": 1}, repr(upd.get("o2")))
        check("update o is a modifier or diff", "$v" in upd["o"] or "$set" in upd["o"], repr(upd["o"]))
        check("upsert logged as insert", ups["o"].get("_id") == 99, repr(ups["o"]))
        check("delete o", dele["o"] == {"_id": 2}, repr(dele["o"]))
        check("t is int64", isinstance(ins.get("t"), bson.int64.Int64), repr(type(ins.get("t"))))
        check("ui is a UUID", ins.get("ui") is not None and getattr(ins["ui"], "version", None) is not None,
              repr(ins.get("ui")))
        check("wall is a date", hasattr(ins.get("wall"), "year"))
        tss = [e["ts"] for e in entries]
        check("ts strictly increasing", all(a < b for a, b in zip(tss, tss[1:])))

    # A write made while the cursor is waiting shows up in the next batch.
    cur = client.local["oplog.rs"].find({"ts": {"$gt": last_ts(client)}}, cursor_type=CursorType.TAILABLE_AWAIT)
    cur = cur.max_await_time_ms(300)
    t0 = time.time()
    first = list(cur)
    waited = time.time() - t0
    check("empty tailable batch", first == [] and cur.alive, repr(first))
    check("awaitData waits", waited < 3.0, "%.3f s" % waited)
    coll.insert_one({"_id": 1000})
    seen = []
    deadline = time.time() + 5
    while cur.alive and not seen and time.time() < deadline:
        seen = [e for e in cur if e.get("ns") == ns]
    check("tailing cursor sees a new write", len(seen) == 1 and seen[0]["o"] == {"_id": 1000}, repr(seen))
    cur.close()

    check_update_operators(client, db, name)
    check_transaction(client, coll, ns)
    check_watch(client, db, name)

    try:
        client.admin.command("noSuchCommandHere")
        check("unknown command error", False)
    except pymongo.errors.OperationFailure as exc:
        check("unknown command error", exc.code == 59, repr(exc.details))

    coll.drop()
    many.drop()
    check("drop", name not in db.list_collection_names())
    client.close()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
