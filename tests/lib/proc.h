/*
 * proc.h — child processes for integration tests: mongosim instances and the daemon.
 *
 * Every child started here is recorded in a process-wide table and killed (SIGKILL) by an atexit handler of the
 * process that started it, so a failing Check test (which exits its forked child) leaves nothing behind; children
 * are also started with PR_SET_PDEATHSIG=SIGKILL, which covers a test killed by Check's timeout.
 * Binaries are found in the build directory named by env OPLOG2PG_TEST_BUILD (default "build").
 */
#ifndef OPLOG2PG_TESTS_PROC_H
#define OPLOG2PG_TESTS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;          /* 0 when not running (never started, or reaped) */
    int port;           /* mongosim: the port it printed; 0 otherwise */
    int stdout_fd;      /* mongosim: read end of its stdout pipe, kept open so later writes cannot SIGPIPE it; -1 */
    bool exited;        /* reaped by proc_wait / proc_stop */
    int status;         /* raw waitpid status once exited */
    char log_path[512]; /* where stderr (and stdout, for proc_start) goes; "" = inherited */
} proc_handle;

/* The build directory: $OPLOG2PG_TEST_BUILD or "build". */
const char *proc_build_dir(void);

/* Starts <build>/mongosim --port 0 [extra_args...] (extra_args NULL-terminated, may be NULL) and reads the port it
 * prints on its first stdout line (waiting up to 10 s). stderr goes to log_path when non-NULL. */
bool proc_start_mongosim(const char *const *extra_args, const char *log_path, proc_handle *out, char *err,
                         size_t errlen);

/* Starts argv[0] (a path, or a name looked up in PATH) with argv; env_extra is a NULL-terminated list of
 * "NAME=value" added to (overriding) the current environment, may be NULL. stdout and stderr go to log_path
 * (created/truncated) when non-NULL, else are inherited. stdin is /dev/null. */
bool proc_start(const char *const *argv, const char *const *env_extra, const char *log_path, proc_handle *out,
                char *err, size_t errlen);

/* Sends sig (SIGTERM, SIGKILL, SIGHUP, ...). False when the process is not running. */
bool proc_signal(proc_handle *p, int sig);

/* Waits up to timeout_s for the process to exit and reaps it. True when it exited (see p->status and
 * proc_exit_code); false on timeout (the process keeps running). */
bool proc_wait(proc_handle *p, double timeout_s);

/* Exit code when it exited normally, 128+signal when killed by a signal, -1 when not exited. */
int proc_exit_code(const proc_handle *p);

/* SIGTERM, wait up to timeout_s, then SIGKILL and reap. Returns true when it stopped within the timeout after
 * SIGTERM (false means SIGKILL was needed). Closes stdout_fd. Safe on a handle that was never started. */
bool proc_stop(proc_handle *p, double timeout_s);

/* SIGKILLs and reaps every child still recorded (the atexit handler calls this). */
void proc_kill_all(void);

/* Peak resident memory of a process (VmHWM in /proc), in kB; -1 when unknown. */
long proc_peak_kb(pid_t pid);

#endif
