// node_compat.mjs URI — the official Node.js driver (npm "mongodb" 7.x) against mongosim (or a real replica set):
// handshake, CRUD, the update operators, bulkWrite, a tailable awaitData cursor on local.oplog.rs, and transactions
// (commit, abort, a chain), checking the oplog entries written, and the driver's own watch() on a change stream. Ends with "N passed, N failed"; exit status 1 on a
// failure. Run `npm ci` in tests/compat first (scripts/deps.sh does).
import assert from "node:assert/strict";
import { MongoClient, Timestamp, Long } from "mongodb";

const uri = process.argv[2];
if (!uri) {
    console.error("usage: node node_compat.mjs MONGO_URI");
    process.exit(2);
}
let passed = 0, failed = 0;
async function check(name, fn) {
    try {
        await fn();
        passed++;
        console.log(`ok   ${name}`);
    } catch (e) {
        failed++;
        console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    }
}

const client = new MongoClient(uri, { serverSelectionTimeoutMS: 5000 });
await client.connect();
const admin = client.db("admin");
const oplog = client.db("local").collection("oplog.rs");
const dbn = "nodecompat";
const db = client.db(dbn);
const isSim = !!(await admin.command({ buildInfo: 1 })).mongosim;

async function lastTs() {
    const e = await oplog.find({}).sort({ $natural: -1 }).limit(1).next();
    return e ? e.ts : new Timestamp({ t: 0, i: 0 });
}
async function entriesAfter(ts) {
    return oplog.find({ ts: { $gt: ts } }).toArray();
}
const isNull = (pot) => pot && pot.ts.equals(new Timestamp({ t: 0, i: 0 })) && Number(pot.t) === -1;

await check("handshake: a writable primary of rs0", async () => {
    const h = await admin.command({ hello: 1 });
    assert.equal(h.isWritablePrimary, true);
    assert.equal(typeof h.setName, "string");
    assert.ok(h.maxWireVersion >= 8);
    const p = await admin.command({ ping: 1 });
    assert.equal(p.ok, 1);
});

await db.dropDatabase().catch(() => {});
const c = db.collection("crud");
await db.createCollection("crud");

await check("CRUD: insertOne/insertMany/find/count/replace/delete", async () => {
    const r = await c.insertOne({ _id: 1, a: 1 });
    assert.equal(r.insertedId, 1);
    const m = await c.insertMany([{ _id: 2, a: 2 }, { _id: 3, a: 3 }]);
    assert.equal(m.insertedCount, 2);
    assert.deepEqual(await c.findOne({ _id: 2 }), { _id: 2, a: 2 });
    assert.equal((await c.find({}).toArray()).length, 3);
    assert.equal(await c.countDocuments({}), 3);
    const rep = await c.replaceOne({ _id: 3 }, { b: "x" });
    assert.equal(rep.modifiedCount, 1);
    assert.deepEqual(await c.findOne({ _id: 3 }), { _id: 3, b: "x" });
    const up = await c.updateOne({ _id: 9 }, { $set: { u: 1 } }, { upsert: true });
    assert.equal(up.upsertedId, 9);
    const d = await c.deleteOne({ _id: 9 });
    assert.equal(d.deletedCount, 1);
    await assert.rejects(c.insertOne({ _id: 1 }), (e) => e.code === 11000);
});

await check("update operators: documents and entries", async () => {
    await c.insertOne({ _id: "u", n: 5, m: 2, s: "x", arr: [1, 2, 3], set: [1], old: 1, lo: 5, hi: 5 });
    const ops = [
        [{ $set: { s: "y", "o.p": 1 } }, (d) => d.s === "y" && d.o.p === 1],
        [{ $unset: { s: "" } }, (d) => !("s" in d)],
        [{ $inc: { n: 2 } }, (d) => d.n === 7],
        [{ $mul: { m: 3 } }, (d) => d.m === 6],
        [{ $min: { lo: 1 } }, (d) => d.lo === 1],
        [{ $max: { hi: 9 } }, (d) => d.hi === 9],
        [{ $push: { arr: { $each: [5, 4], $sort: -1, $slice: 4 } } }, (d) => d.arr.join() === "5,4,3,2"],
        [{ $push: { arr: { $each: [0], $position: 0 } } }, (d) => d.arr[0] === 0],
        [{ $pull: { arr: { $gte: 4 } } }, (d) => d.arr.join() === "0,3,2"],
        [{ $pullAll: { arr: [0, 2] } }, (d) => d.arr.join() === "3"],
        [{ $addToSet: { set: { $each: [1, 2] } } }, (d) => d.set.join() === "1,2"],
        [{ $pop: { set: 1 } }, (d) => d.set.join() === "1"],
        [{ $rename: { old: "renamed" } }, (d) => d.renamed === 1 && !("old" in d)],
        [{ $currentDate: { when: true, ts: { $type: "timestamp" } } }, (d) => d.when instanceof Date && d.ts instanceof Timestamp],
        [{ $setOnInsert: { never: 1 } }, (d) => !("never" in d)],
    ];
    for (const [u, ok] of ops) {
        const before = await lastTs();
        await c.updateOne({ _id: "u" }, u);
        const d = await c.findOne({ _id: "u" });
        assert.ok(ok(d), `${JSON.stringify(u)} gave ${JSON.stringify(d)}`);
        const es = (await entriesAfter(before)).filter((e) => e.op === "u");
        if (Object.keys(u)[0] !== "$setOnInsert") {
            assert.equal(es.length, 1, `${JSON.stringify(u)}: one u entry`);
            assert.deepEqual(es[0].o2, { _id: "u" });
            assert.ok(es[0].o.$v === 2 || es[0].o.$v === 1);
        }
    }
});

await check("bulkWrite: mixed ordered operations", async () => {
    const b = db.collection("bulk");
    const r = await b.bulkWrite([
        { insertOne: { document: { _id: 1, v: 1 } } },
        { insertOne: { document: { _id: 2, v: 2 } } },
        { updateOne: { filter: { _id: 1 }, update: { $inc: { v: 10 } } } },
        { replaceOne: { filter: { _id: 2 }, replacement: { v: 20 } } },
        { updateOne: { filter: { _id: 3 }, update: { $set: { v: 3 } }, upsert: true } },
        { deleteOne: { filter: { _id: 2 } } },
    ]);
    assert.equal(r.insertedCount, 2);
    assert.equal(r.modifiedCount, 2);
    assert.equal(r.upsertedCount, 1);
    assert.equal(r.deletedCount, 1);
    assert.deepEqual(await b.find({}).toArray(), [{ _id: 1, v: 11 }, { _id: 3, v: 3 }]);
});

await check("tailable awaitData cursor on local.oplog.rs", async () => {
    const start = await lastTs();
    const cur = oplog.find({ ts: { $gt: start } }, { tailable: true, awaitData: true, maxAwaitTimeMS: 200 });
    await c.insertOne({ _id: "tail" });
    const e = await cur.next();
    assert.equal(e.op, "i");
    assert.equal(e.ns, `${dbn}.crud`);
    assert.deepEqual(e.o, { _id: "tail" });
    const t0 = Date.now();
    assert.equal(await cur.tryNext(), null);
    assert.ok(Date.now() - t0 >= 100, "awaitData waited");
    await cur.close();
});

const tx = db.collection("tx");
await db.createCollection("tx");

await check("transaction: withTransaction commits one applyOps entry", async () => {
    const before = await lastTs();
    const s = client.startSession();
    try {
        await s.withTransaction(async () => {
            await tx.insertOne({ _id: 1, v: 1 }, { session: s });
            await tx.updateOne({ _id: 1 }, { $inc: { v: 1 } }, { session: s });
            // reads inside the transaction see its own writes; outside, nothing yet
            assert.deepEqual(await tx.findOne({ _id: 1 }, { session: s }), { _id: 1, v: 2 });
            assert.equal(await tx.countDocuments({}, { session: s }), 1);
            assert.equal(await tx.findOne({ _id: 1 }), null);
            await tx.insertOne({ _id: 2 }, { session: s });
        });
    } finally {
        await s.endSession();
    }
    assert.deepEqual(await tx.find({}).toArray(), [{ _id: 1, v: 2 }, { _id: 2 }]);
    const es = await entriesAfter(before);
    assert.equal(es.length, 1, JSON.stringify(es));
    const e = es[0];
    assert.equal(e.op, "c");
    assert.equal(e.ns, "admin.$cmd");
    assert.ok(e.lsid && e.lsid.id && e.txnNumber !== undefined);
    assert.ok(isNull(e.prevOpTime));
    assert.deepEqual(e.o.applyOps.map((o) => o.op), ["i", "u", "i"]);
    assert.equal(e.o.partialTxn, undefined);
    assert.equal(e.o.count, undefined);
    assert.equal(e.o.applyOps[0].ns, `${dbn}.tx`);
});

await check("transaction: an aborted one writes nothing", async () => {
    const before = await lastTs();
    const s = client.startSession();
    try {
        s.startTransaction();
        await tx.insertOne({ _id: 10 }, { session: s });
        await tx.deleteOne({ _id: 1 }, { session: s });
        await s.abortTransaction();
    } finally {
        await s.endSession();
    }
    assert.equal((await entriesAfter(before)).length, 0);
    assert.equal(await tx.findOne({ _id: 10 }), null);
    assert.deepEqual(await tx.findOne({ _id: 1 }), { _id: 1, v: 2 });
});

await check("transaction: a large one becomes a chain (partialTxn, prevOpTime, count)", async () => {
    let was;
    if (isSim) was = (await admin.command({ setParameter: 1, maxNumberOfTransactionOperationsInSingleOplogEntry: 2 })).was;
    const before = await lastTs();
    const s = client.startSession();
    try {
        await s.withTransaction(async () => {
            for (let i = 0; i < 5; i++) await tx.insertOne({ _id: 100 + i }, { session: s });
        });
    } finally {
        await s.endSession();
        if (isSim) await admin.command({ setParameter: 1, maxNumberOfTransactionOperationsInSingleOplogEntry: was });
    }
    const es = await entriesAfter(before);
    if (!isSim) return; // a real server keeps its startup value: a single entry
    assert.equal(es.length, 3);
    assert.deepEqual(es.map((e) => e.o.applyOps.length), [2, 2, 1]);
    assert.ok(isNull(es[0].prevOpTime));
    for (let i = 1; i < 3; i++) {
        assert.ok(es[i].prevOpTime.ts.equals(es[i - 1].ts));
        assert.equal(es[i].txnNumber.toString(), es[0].txnNumber.toString());
    }
    assert.equal(es[0].o.partialTxn, true);
    assert.equal(es[1].o.partialTxn, true);
    assert.equal(es[2].o.partialTxn, undefined);
    assert.ok(Long.fromValue(es[2].o.count).equals(Long.fromNumber(5)));
    assert.equal(await tx.countDocuments({ _id: { $gte: 100 } }), 5);
});

await check("transaction: a write error aborts it with NoSuchTransaction after", async () => {
    const s = client.startSession();
    try {
        s.startTransaction();
        await assert.rejects(tx.insertOne({ _id: 1 }, { session: s }), (e) => e.code === 11000);
        await assert.rejects(tx.insertOne({ _id: 500 }, { session: s }),
            (e) => e.code === 251 && e.hasErrorLabel("TransientTransactionError"));
        await s.abortTransaction().catch(() => {});
    } finally {
        await s.endSession();
    }
    assert.equal(await tx.findOne({ _id: 500 }), null);
});

if (isSim) {
    // prepareTransaction is for shards on a real cluster; mongosim runs it on command.
    for (const finish of ["commit", "abort"]) {
        await check(`prepared transaction: prepare, then ${finish}Transaction`, async () => {
            const before = await lastTs();
            const s = client.startSession();
            try {
                s.startTransaction();
                await tx.insertOne({ _id: `prep-${finish}` }, { session: s });
                const p = await admin.command({ prepareTransaction: 1 }, { session: s });
                assert.ok(p.prepareTimestamp instanceof Timestamp);
                assert.equal(await tx.findOne({ _id: `prep-${finish}` }), null); // not visible yet
                const cmd = finish === "commit"
                    ? { commitTransaction: 1, commitTimestamp: p.prepareTimestamp }
                    : { abortTransaction: 1 };
                await admin.command(cmd, { session: s });
                const es = await entriesAfter(before);
                assert.equal(es.length, 2);
                assert.equal(es[0].o.prepare, true);
                assert.ok(es[0].ts.equals(p.prepareTimestamp));
                assert.ok(isNull(es[0].prevOpTime));
                assert.ok(es[1].prevOpTime.ts.equals(es[0].ts));
                assert.equal(es[1].txnNumber.toString(), es[0].txnNumber.toString());
                if (finish === "commit") {
                    assert.equal(es[1].o.commitTransaction, 1);
                    assert.ok(es[1].o.commitTimestamp.equals(p.prepareTimestamp));
                    assert.deepEqual(await tx.findOne({ _id: "prep-commit" }), { _id: "prep-commit" });
                } else {
                    assert.deepEqual(es[1].o, { abortTransaction: 1 });
                    assert.equal(await tx.findOne({ _id: "prep-abort" }), null);
                }
            } finally {
                await s.endSession().catch(() => {});
            }
        });
    }

    await check("batched multi-delete: applyOps entries without lsid", async () => {
        const bd = db.collection("bd");
        await bd.insertMany([...Array(12).keys()].map((i) => ({ _id: i })));
        const before = await lastTs();
        const r = await bd.deleteMany({});
        assert.equal(r.deletedCount, 12);
        const es = await entriesAfter(before);
        assert.deepEqual(es.map((e) => e.o.applyOps.length), [10, 2]); // batchedDeletesTargetBatchDocs 10
        for (const e of es) {
            assert.equal(e.lsid, undefined);
            assert.equal(e.prevOpTime, undefined);
            assert.ok(e.o.applyOps.every((o) => o.op === "d"));
        }
    });
}

await check("change stream: the driver's own watch(), resume token, resumeAfter", async () => {
    const w = db.collection("watch");
    await w.insertOne({ _id: 0 });
    const cs = w.watch([], { maxAwaitTimeMS: 300 });
    assert.equal(await cs.tryNext(), null); // the empty first batch opens the stream
    assert.ok(cs.resumeToken, "a resume token after an empty batch");
    await w.insertOne({ _id: 1, a: 1 });
    await w.updateOne({ _id: 1 }, { $set: { b: 2 } });
    await w.deleteOne({ _id: 1 });
    const evs = [];
    const until = Date.now() + 10000;
    while (evs.length < 3 && Date.now() < until) {
        const ev = await cs.tryNext();
        if (ev) evs.push(ev);
    }
    assert.deepEqual(evs.map((e) => e.operationType), ["insert", "update", "delete"]);
    assert.deepEqual(evs[0].fullDocument, { _id: 1, a: 1 });
    assert.deepEqual(evs[1].updateDescription.updatedFields, { b: 2 });
    assert.deepEqual(evs[2].documentKey, { _id: 1 });
    await cs.close();
    const again = w.watch([], { resumeAfter: evs[0]._id, maxAwaitTimeMS: 300 });
    let ev = null;
    const until2 = Date.now() + 10000;
    while (!ev && Date.now() < until2) ev = await again.tryNext();
    assert.equal(ev && ev.operationType, "update");
    await again.close();
});

await db.dropDatabase().catch(() => {});
await client.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
