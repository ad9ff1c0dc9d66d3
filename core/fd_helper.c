/*
 * The modules' helper processes (fd_api_helper, API 1.8): a process of a
 * module's beside the workers, for work that may block and is done once
 * an instance (ACME's orders). A configuration's helpers are listed in
 * it at load; the master forks them once the configuration's workers
 * run, stops the previous configuration's at a reload, reaps them, and
 * forks one that exits again, unless it exited at once. The master only
 * forks and reaps: it stays responsive to signals.
 */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_module.h"
#include "fd_proctitle.h"

#define HELPERS_MAX 16

/* One helper of a configuration (its memory) */
typedef struct fd_helper_s {
    fd_api_helper_t h;
    unsigned module;              /* the module's id, one a configuration */
    struct fd_helper_s *next;
} fd_helper_t;

/* The helpers running, whatever configuration they are of */
static struct {
    pid_t pid;
    int stopping;                 /* a reload stopped it: reaped quietly */
    time_t started;
    const fd_helper_t *hp;
} running[HELPERS_MAX];

static fd_cycle_t *current;       /* whose helpers are started again */

fd_cycle_t *fd_dso_cycle;

int fd_api_helper(const fd_api_module_t *self, const fd_api_helper_t *h)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_helper_t *hp, **pp;
    unsigned n = 0;

    if (cf == NULL)
        return FD_ERROR; /* not at load */
    if (h == NULL || h->tick == NULL || h->title == NULL)
        return fd_conf_error(cf, "a helper process needs a title and a "
                                 "tick");
    for (pp = &cf->cycle->helpers; *pp; pp = &(*pp)->next, n++)
        if ((*pp)->module == self->id)
            return memcmp(&(*pp)->h, h, sizeof(*h)) == 0
                       ? FD_OK
                       : fd_conf_error(cf, "module %s has a helper "
                                       "process already", self->name);
    if (n == HELPERS_MAX)
        return fd_conf_error(cf, "more than %d helper processes",
                             HELPERS_MAX);
    if ((hp = fd_pcalloc(cf->cycle->pool, sizeof(*hp))) == NULL)
        return fd_conf_error(cf, "out of memory");
    hp->h = *h;
    hp->module = self->id;
    *pp = hp;
    return FD_OK;
}

static volatile sig_atomic_t reopen;

static void on_usr1(int signo)
{
    (void)signo;
    reopen = 1;
}

/* The helper itself: never returns */
static void helper_run(fd_cycle_t *cy, const fd_helper_t *hp)
{
    uint64_t ms = hp->h.interval_msec ? hp->h.interval_msec : 1000;
    struct sigaction sa;
    sigset_t set;

    /* the master's signals back to their defaults */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGALRM, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigemptyset(&set);
    sigprocmask(SIG_SETMASK, &set, NULL);
    /* its copies of the listening sockets go: it accepts nothing, and a
     * copy would keep a socket a reload drops open (plain close(): the
     * sockets and their reuseport group stay the master's) */
    fd_listening_forget_retired();
    for (fd_listening_t *ls = cy->listening; ls; ls = ls->next)
        for (unsigned i = 0; i < ls->nfds; i++)
            close(ls->fds[i]);
    fd_proctitle_set(hp->h.title);
    fd_dso_cycle = cy;
    if (hp->h.init && hp->h.init(hp->h.data) != FD_OK)
        _exit(2);
    for (;;) {
        struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                              .tv_nsec = (long)(ms % 1000) * 1000000};
        if (reopen) {
            reopen = 0;
            if (fd_log_reopen(fd_log) != FD_OK)
                fd_log_error(FD_LOG_ALERT, errno, "%s: reopening the error "
                             "log failed", hp->h.title);
        }
        hp->h.tick(hp->h.data);
        nanosleep(&ts, NULL); /* SIGUSR1 cuts it short: reopen at once */
    }
}

static void spawn(unsigned i)
{
    pid_t pid = fork();

    if (pid < 0) {
        fd_log_error(FD_LOG_ALERT, errno, "%s: fork() failed",
                     running[i].hp->h.title);
        running[i].hp = NULL;
        return;
    }
    if (pid == 0)
        helper_run(current, running[i].hp);
    running[i].pid = pid;
    running[i].stopping = 0;
    running[i].started = time(NULL);
}

void fd_helper_start(fd_cycle_t *cy)
{
    const fd_helper_t *hp;
    unsigned i;

    /* a reload: the new configuration's helpers take over (what an old
     * one had under way is left) */
    for (i = 0; i < HELPERS_MAX; i++)
        if (running[i].pid > 0 && !running[i].stopping) {
            kill(running[i].pid, SIGTERM);
            running[i].stopping = 1;
        } else if (running[i].pid == 0)
            running[i].hp = NULL;
    current = cy;
    for (hp = cy->helpers; hp; hp = hp->next) {
        for (i = 0; i < HELPERS_MAX && running[i].hp; i++)
            ;
        if (i == HELPERS_MAX)
            return; /* HELPERS_MAX a configuration, and the old stop */
        running[i].hp = hp;
        spawn(i);
    }
}

int fd_helper_reap(pid_t pid, int status)
{
    unsigned i;

    for (i = 0; i < HELPERS_MAX; i++)
        if (running[i].pid == pid)
            break;
    if (i == HELPERS_MAX || pid <= 0)
        return 0;
    running[i].pid = 0;
    if (running[i].stopping) {
        running[i].hp = NULL;
        return 1;
    }
    fd_log_error(FD_LOG_ALERT, 0, "%s process %d exited (%s %d)",
                 running[i].hp->h.title, (int)pid,
                 WIFSIGNALED(status) ? "signal" : "code",
                 WIFSIGNALED(status) ? WTERMSIG(status)
                                     : WEXITSTATUS(status));
    if (time(NULL) - running[i].started < 2) {
        fd_log_error(FD_LOG_ALERT, 0, "%s: the helper died at once; not "
                     "starting it again until a reload",
                     running[i].hp->h.title);
        running[i].hp = NULL;
        return 1;
    }
    spawn(i);
    return 1;
}

void fd_helper_reopen(void)
{
    for (unsigned i = 0; i < HELPERS_MAX; i++)
        if (running[i].pid > 0 && !running[i].stopping)
            kill(running[i].pid, SIGUSR1);
}
