/*
 * exitcodes.h — what oplog2pg's exit status means.
 *
 * Distinct codes let systemd (RestartPreventExitStatus=) and operators tell a passing fault, which a restart cures,
 * from one a person must act on. docs/operations.md lists them; keep the two in step.
 */
#ifndef OPLOG2PG_DAEMON_EXITCODES_H
#define OPLOG2PG_DAEMON_EXITCODES_H

enum {
    EXIT_OK = 0,              /* clean stop: everything read was applied and committed */
    EXIT_FAILURE_GENERIC = 1, /* an unexpected fault; restarting may help */
    EXIT_USAGE = 2,           /* bad command line */
    EXIT_CONFIG = 3,          /* configuration file missing or invalid: a person must fix it */
    EXIT_RESUME_LOST = 4,     /* the checkpoint is no longer in the oplog: resync (--reimport) */
    EXIT_UNSUPPORTED = 5,     /* an oplog entry this version cannot apply (stopped before it; nothing lost) */
    EXIT_FENCED = 6,          /* another daemon holds this service name */
    EXIT_COPY_WINDOW = 7,     /* the oplog no longer holds the initial copy's start: raise its size, --reimport */
    EXIT_SOFTWARE = 70,       /* internal error (EX_SOFTWARE) */
};

#endif
