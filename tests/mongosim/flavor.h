/*
 * flavor.h — `--flavor`: servers that speak the protocol but differ from MongoDB where a change-stream or oplog
 * reader notices (Atlas's shared tiers, Amazon DocumentDB, Azure Cosmos DB for MongoDB RU). See README "Flavors".
 */
#ifndef MONGOSIM_FLAVOR_H
#define MONGOSIM_FLAVOR_H

#include "sim_internal.h"

bool flavor_parse(const char *name, sim_flavor *out);

/* A find on local.oplog.rs: false after replying the flavor's refusal. */
bool flavor_oplog_find(sim_server *srv, sim_reply *r, const bson_t *filter);

/* {modifyChangeStreams: 1, database, collection, enable} (DocumentDB only; elsewhere no such command). */
void flavor_cmd_modify_change_streams(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *db);

/* Before a $changeStream aggregate opens: false after replying the flavor's refusal; otherwise *out (initialised
 * here) is the pipeline to open (a DocumentDB resume token turned back into the server's own). */
bool flavor_cs_open(sim_server *srv, sim_reply *r, const char *db, const char *coll, const bson_t *pipeline,
                    bson_t *out);

/* A batch's events as the flavor sends them, into *out (initialised here). */
void flavor_cs_events(const sim_server *srv, const bson_t *events, bson_t *out);

/* Whether replies carry postBatchResumeToken. */
bool flavor_cs_pbrt(const sim_server *srv);

/* A post-batch resume token as the flavor sends it (opaque where the server's tokens are), into *out. */
void flavor_cs_token(const sim_server *srv, const bson_t *token, bson_t *out);

/* Frees what modifyChangeStreams kept. */
void flavor_free(sim_server *srv);

#endif
