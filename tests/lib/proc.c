/*
 * proc.c — spawning and stopping test child processes (see proc.h).
 *
 * The table of live children is a process-wide global on purpose: an atexit handler has no other way to find them.
 * Each entry remembers which process started it, so a forked Check test child never kills its parent's children.
 * Everything the child needs (argv, the merged environment) is built before fork(); between fork() and exec() the
 * child only calls async-signal-safe functions, and reports an exec failure through a close-on-exec pipe.
 */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_CHILDREN 64

static struct {
    pid_t pid;
    pid_t owner;
} children[MAX_CHILDREN];
static bool atexit_done;

static void on_exit_kill(void)
{
    proc_kill_all();
}

static void track(pid_t pid)
{
    if (!atexit_done) {
        atexit(on_exit_kill);
        atexit_done = true;
    }
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i].pid == 0) {
            children[i].pid = pid;
            children[i].owner = getpid();
            return;
        }
    }
    /* Table full: the child still dies with us through PR_SET_PDEATHSIG. */
}

static void untrack(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i].pid == pid)
            children[i].pid = 0;
}

void proc_kill_all(void)
{
    pid_t me = getpid();
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i].pid > 0 && children[i].owner == me) {
            kill(children[i].pid, SIGKILL);
            waitpid(children[i].pid, NULL, 0);
            children[i].pid = 0;
        }
    }
}

const char *proc_build_dir(void)
{
    const char *b = getenv("OPLOG2PG_TEST_BUILD");
    return b && *b ? b : "build";
}

static void handle_init(proc_handle *p)
{
    memset(p, 0, sizeof *p);
    p->stdout_fd = -1;
}

/* environ with env_extra entries added, replacing same-named ones. The array (not the strings) is malloc'd. */
static char **merged_env(const char *const *extra)
{
    size_t n = 0, m = 0;
    while (environ[n])
        n++;
    while (extra && extra[m])
        m++;
    char **env = calloc(n + m + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool overridden = false;
        for (size_t j = 0; j < m && !overridden; j++)
            overridden = strncmp(extra[j], environ[i], nl) == 0 && extra[j][nl] == '=';
        if (!overridden)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++)
        env[k++] = (char *)extra[j];
    env[k] = NULL;
    return env;
}

/* fork + exec. out_fd >= 0: the child's stdout goes there; log_fd >= 0: its stderr (and stdout when out_fd < 0). */
static bool spawn(const char *const *argv, const char *const *env_extra, int out_fd, int log_fd, proc_handle *out,
                  char *err, size_t errlen)
{
    int errpipe[2] = {-1, -1};
    char **env = merged_env(env_extra);
    pid_t parent = getpid();
    bool ok = false;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    if (!env || devnull < 0 || pipe2(errpipe, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "proc: cannot prepare to start %s: %s", argv[0], strerror(errno));
        goto fail;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "proc: fork for %s failed: %s", argv[0], strerror(errno));
        goto fail;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        setpgid(0, 0); /* own process group: a Ctrl-C at the terminal reaches the runner, which then cleans up */
        dup2(devnull, 0);
        if (out_fd >= 0)
            dup2(out_fd, 1);
        else if (log_fd >= 0)
            dup2(log_fd, 1);
        if (log_fd >= 0)
            dup2(log_fd, 2);
        signal(SIGPIPE, SIG_DFL);
        execvpe(argv[0], (char *const *)argv, env);
        int e = errno;
        (void)!write(errpipe[1], &e, sizeof e);
        _exit(127);
    }
    close(errpipe[1]);
    errpipe[1] = -1;
    int child_errno = 0;
    ssize_t got;
    do
        got = read(errpipe[0], &child_errno, sizeof child_errno);
    while (got < 0 && errno == EINTR);
    if (got > 0) {
        waitpid(pid, NULL, 0);
        snprintf(err, errlen, "proc: cannot execute %s: %s", argv[0], strerror(child_errno));
        goto fail;
    }
    track(pid);
    out->pid = pid;
    ok = true;

fail:
    if (errpipe[0] >= 0)
        close(errpipe[0]);
    if (errpipe[1] >= 0)
        close(errpipe[1]);
    if (devnull >= 0)
        close(devnull);
    free(env);
    return ok;
}

static int open_log(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        snprintf(err, errlen, "proc: cannot open log %s: %s", path, strerror(errno));
    return fd;
}

bool proc_start(const char *const *argv, const char *const *env_extra, const char *log_path, proc_handle *out,
                char *err, size_t errlen)
{
    int log_fd = -1;
    handle_init(out);
    if (!argv || !argv[0]) {
        snprintf(err, errlen, "proc: empty argv");
        return false;
    }
    if (log_path) {
        if ((log_fd = open_log(log_path, err, errlen)) < 0)
            return false;
        snprintf(out->log_path, sizeof out->log_path, "%s", log_path);
    }
    bool ok = spawn(argv, env_extra, -1, log_fd, out, err, errlen);
    if (log_fd >= 0)
        close(log_fd);
    return ok;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool proc_start_mongosim(const char *const *extra_args, const char *log_path, proc_handle *out, char *err,
                         size_t errlen)
{
    const char *argv[40];
    char path[1024];
    int pipefd[2] = {-1, -1}, log_fd = -1;
    size_t n = 0;
    char line[64];
    size_t len = 0;

    handle_init(out);
    snprintf(path, sizeof path, "%s/mongosim", proc_build_dir());
    argv[n++] = path;
    argv[n++] = "--port";
    argv[n++] = "0";
    for (size_t i = 0; extra_args && extra_args[i]; i++) {
        if (n + 1 >= sizeof argv / sizeof argv[0]) {
            snprintf(err, errlen, "proc: too many mongosim arguments");
            return false;
        }
        argv[n++] = extra_args[i];
    }
    argv[n] = NULL;

    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "proc: pipe failed: %s", strerror(errno));
        return false;
    }
    if (log_path) {
        if ((log_fd = open_log(log_path, err, errlen)) < 0)
            goto fail;
        snprintf(out->log_path, sizeof out->log_path, "%s", log_path);
    }
    if (!spawn(argv, NULL, pipefd[1], log_fd, out, err, errlen))
        goto fail;
    close(pipefd[1]);
    pipefd[1] = -1;
    out->stdout_fd = pipefd[0];
    pipefd[0] = -1;

    /* The port alone on the first line. */
    double deadline = now_s() + 60.0; /* a mongosim that generates a large data set first takes a while */
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            snprintf(err, errlen, "proc: %s printed no port within 60 s%s%s", path, log_path ? "; see " : "",
                     log_path ? log_path : "");
            goto fail;
        }
        struct pollfd pfd = {.fd = out->stdout_fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        char ch;
        ssize_t got = read(out->stdout_fd, &ch, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            snprintf(err, errlen, "proc: %s exited before printing its port%s%s", path, log_path ? "; see " : "",
                     log_path ? log_path : "");
            goto fail;
        }
        if (ch == '\n')
            break;
        if (len + 1 >= sizeof line) {
            snprintf(err, errlen, "proc: %s printed an overlong first line", path);
            goto fail;
        }
        line[len++] = ch;
    }
    line[len] = '\0';
    char *end = NULL;
    long port = strtol(line, &end, 10);
    if (end == line || (*end && *end != '\r') || port <= 0 || port > 65535) {
        snprintf(err, errlen, "proc: %s printed \"%s\" instead of a port", path, line);
        goto fail;
    }
    out->port = (int)port;
    if (log_fd >= 0)
        close(log_fd);
    return true;

fail:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    if (log_fd >= 0)
        close(log_fd);
    proc_stop(out, 0);
    return false;
}

bool proc_signal(proc_handle *p, int sig)
{
    if (p->pid <= 0 || p->exited)
        return false;
    return kill(p->pid, sig) == 0;
}

bool proc_wait(proc_handle *p, double timeout_s)
{
    if (p->exited)
        return true;
    if (p->pid <= 0)
        return false;
    double deadline = now_s() + timeout_s;
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid || (r < 0 && errno == ECHILD)) {
            untrack(p->pid);
            p->exited = true;
            p->status = r == p->pid ? st : 0;
            return true;
        }
        if (now_s() >= deadline)
            return false;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int proc_exit_code(const proc_handle *p)
{
    if (!p->exited)
        return -1;
    if (WIFEXITED(p->status))
        return WEXITSTATUS(p->status);
    if (WIFSIGNALED(p->status))
        return 128 + WTERMSIG(p->status);
    return -1;
}

bool proc_stop(proc_handle *p, double timeout_s)
{
    bool clean = true;
    if (p->pid > 0 && !p->exited) {
        proc_signal(p, SIGTERM);
        clean = timeout_s > 0 && proc_wait(p, timeout_s);
        if (!clean) {
            proc_signal(p, SIGKILL);
            proc_wait(p, 30.0);
        }
    }
    if (p->stdout_fd >= 0) {
        close(p->stdout_fd);
        p->stdout_fd = -1;
    }
    return clean;
}

long proc_peak_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}
