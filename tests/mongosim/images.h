/*
 * images.h — the pre- and post-images of collections with changeStreamPreAndPostImages enabled.
 *
 * A MongoDB server writes each pre-image into config.system.preimages, keyed by {nsUUID, ts, applyOpsIndex}: the
 * collection's UUID, the ts of the oplog entry holding the write, and the write's index inside that entry's applyOps
 * (0 outside one) (ChangeStreamPreImageId, change_stream_preimage.idl). The post-image of `fullDocument:
 * whenAvailable|required` is that pre-image with the update applied (document_source_change_stream_add_post_image
 * .cpp). mongosim keeps both in memory under the same key: the store hands each write's images over as the write
 * happens (store_set_image_hook), and they get their key when the entry holding the write is appended to the oplog.
 */
#ifndef MONGOSIM_IMAGES_H
#define MONGOSIM_IMAGES_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sim_images sim_images;

sim_images *images_new(void);
void images_free(sim_images *im);
/* A store_image_fn: the body of a write not yet in the oplog, with its images (post NULL for a delete). */
void images_pending(void *im, const bson_t *body, const bson_t *pre, const bson_t *post);
/* An entry appended at ts: every update or delete in it (or in its applyOps) takes the pending images of the same
 * body, newest first. */
void images_on_entry(sim_images *im, const bson_t *entry, uint64_t ts);
/* The images of the write of collection uuid at (ts, index); false when none were kept. *pre and *post are views
 * valid until the next images_* call; post is empty for a delete. */
bool images_find(const sim_images *im, const uint8_t uuid[16], uint64_t ts, uint32_t index, bson_t *pre, bson_t *post);
/* Forgets the images of entries before ts (the server removes pre-images older than the oplog's first entry). */
void images_expire(sim_images *im, uint64_t ts);

#endif
