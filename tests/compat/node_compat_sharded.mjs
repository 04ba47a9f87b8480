// node_compat_sharded.mjs MONGOSIM — the official Node.js driver against `mongosim --shards 2` (started here): the
// router seen as a mongos, shardCollection/split/moveChunk, CRUD routed to the shards, a merged find without orphans,
// and a transaction across both shards committed by two-phase commit, checked in each shard's oplog (read with a
// direct connection). Ends with "N passed, N failed"; exit status 1 on a failure.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { MongoClient } from "mongodb";

const binary = process.argv[2];
if (!binary) {
    console.error("usage: node node_compat_sharded.mjs path/to/mongosim");
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

const sim = spawn(binary, ["--shards", "2", "--port", "0"], { stdio: ["ignore", "pipe", "ignore"] });
const port = await new Promise((resolve, reject) => {
    createInterface({ input: sim.stdout }).once("line", (l) => resolve(Number(l)));
    sim.once("exit", () => reject(new Error("mongosim exited")));
});
const client = new MongoClient(`mongodb://127.0.0.1:${port}/`, { serverSelectionTimeoutMS: 5000 });
const shardClients = [];
try {
    await client.connect();
    const admin = client.db("admin");
    const coll = client.db("nodeshard").collection("c");
    let ports = {};
    await check("router: a mongos (isdbgrid), two shards", async () => {
        const hello = await admin.command({ hello: 1 });
        assert.equal(hello.msg, "isdbgrid");
        assert.equal(hello.setName, undefined);
        const shards = (await admin.command({ listShards: 1 })).shards;
        assert.deepEqual(shards.map((s) => s._id), ["shard0", "shard1"]);
        for (const s of shards) {
            assert.match(s.host, new RegExp(`^${s._id}/127\\.0\\.0\\.1:\\d+$`));
            ports[s._id] = Number(s.host.split(":").pop());
        }
    });
    const shardOplog = (id, ns) => {
        const c = new MongoClient(`mongodb://127.0.0.1:${ports[id]}/?directConnection=true`);
        shardClients.push(c);
        return c.db("local").collection("oplog.rs").find({}).toArray().then((es) => es.filter((e) => e.ns === ns));
    };
    await check("shardCollection, split, moveChunk; routed CRUD; merged find", async () => {
        await admin.command({ shardCollection: "nodeshard.c", key: { k: 1 } });
        await admin.command({ split: "nodeshard.c", middle: { k: 10 } });
        await coll.insertMany(Array.from({ length: 20 }, (_, i) => ({ _id: i, k: i })));
        await admin.command({ moveChunk: "nodeshard.c", find: { k: 15 }, to: "shard1" });
        await coll.updateOne({ _id: 15 }, { $set: { x: 1 } });
        await coll.deleteOne({ _id: 3 });
        const ids = (await coll.find({}).sort({ _id: 1 }).toArray()).map((d) => d._id);
        assert.deepEqual(ids, Array.from({ length: 20 }, (_, i) => i).filter((i) => i !== 3));
        assert.equal(await coll.countDocuments({}), 19);
        const s1 = await shardOplog("shard1", "nodeshard.c");
        assert.equal(s1.filter((e) => e.op === "i" && e.fromMigrate === true).length, 10);
        const u = s1.find((e) => e.op === "u");
        assert.deepEqual(Object.keys(u.o2), ["k", "_id"]);
    });
    await check("transaction across both shards: prepare, one commitTimestamp", async () => {
        const session = client.startSession();
        try {
            await session.withTransaction(async () => {
                await coll.updateOne({ _id: 1 }, { $inc: { v: 1 } }, { session });
                await coll.updateOne({ _id: 18 }, { $inc: { v: 1 } }, { session });
            });
        } finally {
            await session.endSession();
        }
        const commits = [];
        for (const id of ["shard0", "shard1"]) {
            const es = await shardOplog(id, "admin.$cmd");
            assert.ok(es.some((e) => e.o.prepare === true), `${id} has no prepare`);
            commits.push(es.find((e) => e.o.commitTransaction === 1).o.commitTimestamp);
        }
        assert.ok(commits[0].equals(commits[1]));
        assert.equal((await coll.findOne({ _id: 18 })).v, 1);
    });
} finally {
    for (const c of shardClients) await c.close();
    await client.close();
    sim.kill("SIGTERM");
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
