/*
 * wire.c — fuzz target: bytes a client sends to mongosim (tests/mongosim), through its wire layer: the framing of
 * messages (length, header, OP_MSG sections and document sequences, OP_QUERY), then each command the bytes make.
 * A fresh server per input (so no input depends on an earlier one) serves one end of a socketpair
 * (sim_server_adopt); the target writes the input to the other end and runs the server's loop (sim_server_run_once)
 * while reading what comes back until the server stops answering, then half-closes its end and runs the loop until
 * the server closes the connection or stops answering again (a parked getMore waits on a timer that never fires
 * here); then the server is freed with what it still holds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../mongosim/server.h"
#include "fuzz.h"

/* Loop turns with nothing read or written before the target stops waiting. */
#define IDLE_TURNS 8

int fuzz_wire(const uint8_t *data, size_t size)
{
    if (size > 1 << 20)
        return 0;
    sim_options opts;
    sim_options_init(&opts);
    bson_error_t err;
    sim_server *srv = sim_server_new(&opts, NULL, &err);
    FUZZ_CHECK(srv != NULL);
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    FUZZ_CHECK(sim_server_adopt(srv, sv[0]));
    size_t off = 0;
    bool closed = false, half = false;
    int idle = 0;
    uint8_t sink[65536];
    while (!closed && idle < IDLE_TURNS) {
        bool moved = false;
        if (off < size) {
            ssize_t n = send(sv[1], data + off, size - off, MSG_NOSIGNAL);
            if (n > 0) {
                off += (size_t)n;
                moved = true;
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                off = size; /* the server closed its end */
            }
        }
        sim_server_run_once(srv);
        for (;;) {
            ssize_t n = recv(sv[1], sink, sizeof sink, 0);
            if (n > 0) {
                moved = true;
                continue;
            }
            if (n == 0)
                closed = true;
            break;
        }
        idle = moved ? 0 : idle + 1;
        /* Everything sent and answered: the end of the input is the client hanging up (mongosim reads no message
         * that arrives together with the end, so the hang-up waits until the server has stopped answering). */
        if (off == size && !half && idle == IDLE_TURNS) {
            shutdown(sv[1], SHUT_WR);
            half = true;
            idle = 0;
        }
    }
    close(sv[1]);
    sim_server_free(srv); /* closes sv[0] with the connection, if still open */
    return 0;
}
