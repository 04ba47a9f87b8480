/*
 * hashkey.h — the value a hashed index (and a hashed shard key) stores for a BSON element: the server's
 * BSONElementHasher::hash64 (src/mongo/db/hasher.cpp), an MD5 of the seed and the element, its first 8 bytes read
 * as a little-endian int64. Hashed indexes use seed 0. Not for use outside tests/mongosim.
 */
#ifndef MONGOSIM_HASHKEY_H
#define MONGOSIM_HASHKEY_H

#include <bson/bson.h>
#include <stdint.h>

int64_t hashkey_hash64(const bson_iter_t *element, int32_t seed);

#endif
