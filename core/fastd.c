/*
 * fastd: command line and the master process. The master loads the
 * configuration, holds the listening sockets, forks and supervises the
 * workers, and turns signals into reloads and stops. It waits in
 * sigsuspend(); signal handlers only set flags.
 */
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "fd_core.h"
#include "fd_build.h" /* FD_CONFIGURE_ARGS */
#include "fd_cli.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_proctitle.h"
#include "fd_quic.h"
#include "fd_ssl.h"
#include "fd_status.h"

typedef struct {
    pid_t pid;
    unsigned slot;
    unsigned index;
    uint64_t generation;
    int quitting;
} worker_rec_t;

static worker_rec_t workers[FD_MAX_WORKER_SLOTS];
static volatile sig_atomic_t sig_child, sig_hup, sig_quit, sig_term,
    sig_usr1;
static fd_cycle_t *cycle;
static fd_log_t master_log = {.fd = -1, .level = FD_LOG_NOTICE};
static const char *conf_file = FD_CONF_PATH;
static const char *profile_arg;
static int foreground;

static void notify(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n;
    int fd;

    if (path == NULL || *path == '\0' ||
        (n = strlen(path)) >= sizeof(sa.sun_path))
        return;
    memcpy(sa.sun_path, path, n);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
        fd_log_error(FD_LOG_WARN, errno, "notify \"%s\" failed", msg);
    close(fd);
}

static void master_sig(int signo)
{
    switch (signo) {
    case SIGCHLD: sig_child = 1; break;
    case SIGHUP: sig_hup = 1; break;
    case SIGQUIT: sig_quit = 1; break;
    case SIGTERM:
    case SIGINT: sig_term = 1; break;
    case SIGUSR1: sig_usr1 = 1; break;
    }
}

static int free_slot(void)
{
    unsigned i;

    for (i = 0; i < FD_MAX_WORKER_SLOTS; i++)
        if (workers[i].pid == 0)
            return (int)i;
    return -1;
}

/* A worker of a root master drops to [main] user (nobody without one):
 * the ids the load resolved (fd_main_conf_t.drop) */
static int drop_privileges(const fd_main_conf_t *mc)
{
    if (!mc->drop)
        return FD_OK;
    if (setgroups(0, NULL) < 0 || initgroups(mc->user, mc->gid) < 0 ||
        setgid(mc->gid) < 0 || setuid(mc->uid) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "dropping privileges to \"%s\" "
                     "failed", mc->user);
        return FD_ERROR;
    }
    return FD_OK;
}

/* The error log the root master opened goes to the workers' user, as
 * nginx does: a worker reopens it itself (SIGUSR1), and could not open a
 * root's file for writing, so it would write on into the rotated one. */
static void log_owner(void)
{
    if (!cycle->main.drop || master_log.path == NULL)
        return;
    if (chown(master_log.path, cycle->main.uid, cycle->main.gid) < 0)
        fd_log_error(FD_LOG_ALERT, errno, "chown(\"%s\") to user \"%s\" "
                     "failed", master_log.path, cycle->main.user);
}

static pid_t spawn_worker(unsigned index)
{
    int slot = free_slot();
    pid_t pid;

    if (slot < 0) {
        fd_log_error(FD_LOG_ALERT, 0, "no free worker slot");
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        fd_log_error(FD_LOG_ALERT, errno, "fork() failed");
        return -1;
    }
    if (pid > 0) {
        workers[slot].pid = pid;
        workers[slot].slot = (unsigned)slot;
        workers[slot].index = index;
        workers[slot].generation = cycle->generation;
        workers[slot].quitting = 0;
        return pid;
    }
    /* the worker */
    fd_listening_forget_retired();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGCHLD, SIG_DFL);
    fd_stats_worker_init((unsigned)slot, cycle->generation, index);
    if (cycle->main.cpu_affinity) {
        cpu_set_t set;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        CPU_ZERO(&set);
        CPU_SET(index % (unsigned)(ncpu > 0 ? ncpu : 1), &set);
        if (sched_setaffinity(0, sizeof(set), &set) < 0)
            fd_log_error(FD_LOG_WARN, errno, "sched_setaffinity() failed");
    }
    fd_proctitle_set("worker process");
    if (drop_privileges(&cycle->main) != FD_OK)
        _exit(2);
    /* signals stay blocked (as in the master) until fd_worker_run() has
     * its own handlers: one sent now waits instead of being lost */
    _exit(fd_worker_run(cycle, index, (unsigned)slot));
}

static int start_workers(void)
{
    unsigned i;

    if (cycle->main.user_default)
        fd_log_error(FD_LOG_NOTICE, 0, "no [main] user: the workers run as "
                     "\"%s\" (user = root keeps them root)",
                     cycle->main.user);

    /* ssl_session_ticket_key files are the keys before a worker runs */
    (void)fd_ssl_ticket_rotate(cycle);
    for (i = 0; i < (unsigned)cycle->nworkers; i++)
        if (spawn_worker(i) < 0)
            return FD_ERROR;
    return FD_OK;
}

static void signal_workers(int signo, int only_old, uint64_t generation)
{
    unsigned i;

    for (i = 0; i < FD_MAX_WORKER_SLOTS; i++) {
        if (workers[i].pid <= 0)
            continue;
        if (only_old && workers[i].generation >= generation)
            continue;
        if (signo == SIGQUIT || signo == SIGTERM)
            workers[i].quitting = 1;
        kill(workers[i].pid, signo);
    }
}

static unsigned live_workers(void)
{
    unsigned i, n = 0;

    for (i = 0; i < FD_MAX_WORKER_SLOTS; i++)
        n += workers[i].pid > 0;
    return n;
}

/* The oldest generation a live worker runs, 0 when none lives. */
static uint64_t oldest_generation(void)
{
    uint64_t g = 0;
    unsigned i;

    for (i = 0; i < FD_MAX_WORKER_SLOTS; i++)
        if (workers[i].pid > 0 && (g == 0 || workers[i].generation < g))
            g = workers[i].generation;
    return g;
}

static void reap(void)
{
    int status;
    pid_t pid;
    unsigned i;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (i = 0; i < FD_MAX_WORKER_SLOTS; i++)
            if (workers[i].pid == pid)
                break;
        if (i == FD_MAX_WORKER_SLOTS) {
            fd_helper_reap(pid, status);
            continue;
        }
        fd_stats_retire(workers[i].slot);
        workers[i].pid = 0;
        if (workers[i].quitting || sig_quit || sig_term)
            continue;
        if (WIFSIGNALED(status))
            fd_log_error(FD_LOG_ALERT, 0, "worker %d exited on signal %d%s",
                         (int)pid, WTERMSIG(status),
                         WCOREDUMP(status) ? " (core dumped)" : "");
        else
            fd_log_error(FD_LOG_ALERT, 0, "worker %d exited with code %d",
                         (int)pid, WEXITSTATUS(status));
        if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
            fd_log_error(FD_LOG_ALERT, 0, "worker %d could not start, not "
                         "respawning it", (int)pid);
            continue;
        }
        if (workers[i].generation == cycle->generation) {
            fd_log_error(FD_LOG_NOTICE, 0, "respawning worker %u",
                         workers[i].index);
            spawn_worker(workers[i].index);
        }
    }
    /* a reload's retired reuseport sockets close with the last worker
     * that held them */
    fd_listening_retire(oldest_generation());
}

static void reload(void)
{
    char err[1200];
    fd_cycle_t *nc, *old = cycle;

    notify("RELOADING=1");
    fd_log_error(FD_LOG_NOTICE, 0, "reloading configuration");
    nc = fd_cycle_load(conf_file, profile_arg, err, sizeof(err));
    if (nc == NULL) {
        fd_log_error(FD_LOG_ERR, 0, "reload failed, the old configuration "
                     "keeps serving: %s", err);
        notify("READY=1");
        return;
    }
    if (fd_listening_open(nc, old) != FD_OK) {
        fd_log_error(FD_LOG_ERR, 0, "reload failed (listening sockets), "
                     "the old configuration keeps serving");
        fd_cycle_free(nc);
        notify("READY=1");
        return;
    }
    nc->generation = old->generation + 1;
    cycle = nc;
    fd_cycle_use(nc);
    if (nc->main.error_log && strcmp(nc->main.error_log, "stderr") &&
        fd_log_open(&master_log, nc->main.error_log,
                    nc->main.error_log_level) != FD_OK)
        fd_log_error(FD_LOG_ALERT, errno, "cannot open error log \"%s\"",
                     nc->main.error_log);
    log_owner();
    fd_shm->generation = nc->generation;
    snprintf(fd_shm->profile, sizeof(fd_shm->profile), "%s",
             nc->profile ? nc->profile : "");
    /* before the fork: a new worker must not inherit a socket this cycle
     * dropped (a reuseport socket kept open anywhere stays in the
     * kernel's group and gets its share of new connections, which nobody
     * accepts); the old workers close their own copies as they drain */
    fd_listening_close_unused(nc, old);
    if (start_workers() != FD_OK)
        fd_log_error(FD_LOG_ALERT, 0, "not all new workers started");
    /* the new workers accept on the same sockets; the old ones drain */
    signal_workers(SIGQUIT, 1, nc->generation);
    fd_helper_start(cycle); /* the modules' helpers, after the workers */
    fd_cycle_free(old);
    fd_log_error(FD_LOG_NOTICE, 0, "configuration reloaded (generation "
                 "%llu)", (unsigned long long)nc->generation);
    notify("READY=1");
}

/* Make the directory that will hold path (logs/ in a fresh checkout). */
static void make_parent_dir(const char *path)
{
    char dir[4096], *slash;

    if (path == NULL || strlen(path) >= sizeof(dir))
        return;
    strcpy(dir, path);
    slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return;
    *slash = '\0';
    if (mkdir(dir, 0755) == 0)
        fd_log_error(FD_LOG_NOTICE, 0, "created directory \"%s\"", dir);
}

static int write_pid(const char *path)
{
    char buf[32];
    int fd, n;

    if (path == NULL || strcmp(path, "off") == 0)
        return FD_OK;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "open() \"%s\" failed", path);
        return FD_ERROR;
    }
    n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
    if (write(fd, buf, (size_t)n) != n) {
        close(fd);
        return FD_ERROR;
    }
    close(fd);
    return FD_OK;
}

static int master_loop(void)
{
    sigset_t set, empty;
    struct sigaction sa;
    fd_msec_t stop_deadline = 0;
    int stopping = 0;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGQUIT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGALRM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = master_sig;
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    sigemptyset(&empty);

    fd_proctitle_set("master process");
    if (start_workers() != FD_OK)
        return 1;
    fd_helper_start(cycle); /* the modules' helpers, after the workers */
    notify("READY=1");
    fd_log_error(FD_LOG_NOTICE, 0, "fastd %s started, %ld workers",
                 FASTD_VERSION, (long)cycle->nworkers);

    for (;;) {
        if (sig_child) {
            sig_child = 0;
            reap();
        }
        if ((sig_quit || sig_term) && !stopping) {
            stopping = 1;
            notify("STOPPING=1");
            fd_log_error(FD_LOG_NOTICE, 0, "%s",
                         sig_term ? "fast stop" : "graceful stop");
            signal_workers(sig_term ? SIGTERM : SIGQUIT, 0, 0);
            /* as nginx: a new client is refused at once rather than
             * queued in a backlog nobody will accept from; the workers
             * closed theirs as they began to drain */
            fd_listening_close(cycle);
            stop_deadline = fd_stats_wall_msec() +
                            (sig_term ? 5000 : cycle->main.shutdown_timeout +
                                                   5000);
        }
        if (stopping && sig_term && sig_quit) {
            /* a fast stop while draining: hurry the workers */
            sig_quit = 0;
            signal_workers(SIGTERM, 0, 0);
        }
        if (stopping) {
            if (live_workers() == 0)
                break;
            if (fd_stats_wall_msec() > stop_deadline) {
                signal_workers(SIGKILL, 0, 0);
                stop_deadline = fd_stats_wall_msec() + 1000;
            }
            alarm(1);
        }
        if (sig_hup && !stopping) {
            sig_hup = 0;
            reload();
        }
        if (sig_usr1) {
            sig_usr1 = 0;
            /* the last line of the old file, as nginx writes it: where a
             * rotated log ends, and proof that the signal arrived */
            fd_log_error(FD_LOG_NOTICE, 0, "reopening logs");
            if (fd_log_reopen(fd_log) != FD_OK)
                fd_log_error(FD_LOG_ALERT, errno, "reopening \"%s\" failed",
                             fd_log->path);
            log_owner();
            fd_helper_reopen();
            fd_dso_give_files(cycle);
            signal_workers(SIGUSR1, 0, 0);
        }
        /* the session ticket key's rotation is the master's only clock
         * (SIGALRM wakes it); a stop has its own alarm above */
        if (!stopping)
            alarm(fd_ssl_ticket_rotate(cycle));
        if (!sig_child && !sig_hup && !(stopping && live_workers() == 0))
            sigsuspend(&empty);
    }
    if (cycle->main.pid && strcmp(cycle->main.pid, "off") != 0)
        unlink(cycle->main.pid);
    fd_log_error(FD_LOG_NOTICE, 0, "exiting");
    return 0;
}

static int send_signal(const char *name, const char *arg)
{
    static const struct {
        const char *name;
        int signo;
    } sigs[] = {{"reload", SIGHUP}, {"quit", SIGQUIT}, {"stop", SIGTERM},
                {"reopen", SIGUSR1}};
    char buf[32];
    FILE *fp;
    long pid;
    unsigned i;

    for (i = 0; i < fd_nelems(sigs); i++)
        if (strcmp(sigs[i].name, name) == 0)
            break;
    if (i == fd_nelems(sigs) || arg != NULL) {
        /* a module's command (renew NAME) */
        for (unsigned m = 0; m < fd_nmodules; m++) {
            int rc;
            if (fd_modules[m]->command == NULL)
                continue;
            rc = fd_modules[m]->command(cycle, name, arg);
            if (rc != FD_DECLINED)
                return rc == FD_OK ? 0 : 1;
        }
    }
    if (i == fd_nelems(sigs) || arg != NULL) {
        fprintf(stderr, "fastd: invalid signal \"%s%s%s\" (reload, quit, "
                "stop, reopen, renew NAME)\n", name, arg ? " " : "",
                arg ? arg : "");
        return 1;
    }
    fp = fopen(cycle->main.pid, "r");
    if (fp == NULL || fgets(buf, sizeof(buf), fp) == NULL ||
        (pid = strtol(buf, NULL, 10)) <= 0) {
        fprintf(stderr, "fastd: cannot read pid file \"%s\": %s\n",
                cycle->main.pid, strerror(errno));
        if (fp)
            fclose(fp);
        return 1;
    }
    fclose(fp);
    if (kill((pid_t)pid, sigs[i].signo) < 0) {
        fprintf(stderr, "fastd: kill(%ld, %s) failed: %s\n", pid, name,
                strerror(errno));
        return 1;
    }
    return 0;
}

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: fastd [-c FILE] [-p PROFILE] [-g] [-t] [-s SIGNAL] [-k] "
            "[-v] [-h]\n");
    fd_cli_usage(fp);
    fprintf(fp,
            "\n"
            "  -c FILE        configuration file (default " FD_CONF_PATH ")\n"
            "  -p PROFILE     apply [profile PROFILE] (overrides profile =)\n"
            "  -g             stay in the foreground (as daemon = off)\n"
            "  -t             test the configuration and every profile in "
            "it, and exit\n"
            "  -s SIGNAL      signal the master named by the pid file: "
            "reload, quit,\n"
            "                 stop or reopen (the log files); -s renew "
            "NAME: renew\n"
            "                 the ACME certificate NAME now\n"
            "  -k             print every configuration key (Markdown) and "
            "exit\n"
            "  -v, -V, --version  print the version, the module API's and "
            "the configure\n"
            "                 arguments\n"
            "  -h, --help     print this help and exit\n"
            "\n"
            "One-line commands build a configuration in memory and run it in "
            "the\n"
            "foreground, logging to stderr, until Ctrl-C (fastd COMMAND "
            "--help):\n"
            "  reverse-proxy  proxy every request to one or more backends\n"
            "  file-server    serve the files of a directory\n"
            "  respond        answer every request with a fixed text\n"
            "\n"
            "Exit status: 0 done, 1 a configuration or start error, 2 a bad "
            "command line.\n"
            "\n"
            "The manual: %s/conf/README.md (every key), %s/conf/doc/*.md\n"
            "(a page a topic), %s/conf/examples/; man fastd, man "
            "fastd.conf.\n", FD_PREFIX, FD_PREFIX, FD_PREFIX);
}

int main(int argc, char **argv)
{
    char err[1200];
    static const struct option long_opts[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'v'},
        {NULL, 0, NULL, 0},
    };
    const char *sig = NULL, *sig_arg = NULL;
    int test = 0, cli = 0, opt;

    fd_ssl_mem_init(); /* before OpenSSL allocates anything */
    if (fd_proctitle_init(argc, argv) != FD_OK) {
        fprintf(stderr, "fastd: [emerg] out of memory\n");
        return 1;
    }
    if (fd_modules_init() != FD_OK)
        return 1;
    if (argc > 1 && argv[1][0] != '-') {
        int status;
        switch (fd_cli_command(argc - 1, argv + 1, &conf_file, &status)) {
        case FD_DONE: return status;
        case FD_OK:
            cli = 1;
            foreground = 1;
            goto load;
        default:
            fprintf(stderr, "fastd: unknown command \"%s\" (see fastd "
                    "-h)\n", argv[1]);
            return 2;
        }
    }
    while ((opt = getopt_long(argc, argv, "c:p:ts:gkvVh", long_opts,
                              NULL)) != -1) {
        switch (opt) {
        case 'k':
            fd_conf_dump_keys(stdout);
            return 0;
        case 'c': conf_file = optarg; break;
        case 'p': profile_arg = optarg; break;
        case 't': test = 1; break;
        case 's': sig = optarg; break;
        case 'g': foreground = 1; break;
        case 'v':
        case 'V':
            printf("fastd/%s\nmodule API: %u.%u (%s)\n"
                   "configure arguments: %s\n", FASTD_VERSION,
                   FD_API_VERSION_MAJOR, FD_API_VERSION_MINOR,
                   FD_API_ABI_TAG, FD_CONFIGURE_ARGS);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default: /* getopt said what */
            fprintf(stderr, "see fastd -h\n");
            return 2;
        }
    }
    /* -s renew NAME: the one signal with an argument */
    if (sig && optind < argc && optind + 1 == argc)
        sig_arg = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "fastd: unexpected argument \"%s\" (see fastd "
                "-h)\n", argv[optind]);
        return 2;
    }
load:
    fd_conf_test = test || sig != NULL;
    cycle = fd_cycle_load(conf_file, profile_arg, err, sizeof(err));
    if (cycle != NULL)
        fd_cycle_use(cycle);
    if (cycle == NULL) {
        fprintf(stderr, "fastd: [emerg] %s\n", err);
        if (cli)
            fprintf(stderr, "fastd: (in the configuration \"fastd %s\" "
                    "built: see it with --print-config)\n", conf_file);
        if (test)
            fprintf(stderr, "fastd: configuration file %s test failed\n",
                    conf_file);
        return 1;
    }
    if (test) {
        /* every profile, not only today's: switching to one must not be
         * the moment its typo is found */
        if (fd_cycle_test_profiles(conf_file, cycle->profile, err,
                                   sizeof(err)) != FD_OK) {
            fprintf(stderr, "fastd: [emerg] %s\n", err);
            fprintf(stderr, "fastd: configuration file %s test failed\n",
                    conf_file);
            return 1;
        }
        fprintf(stderr, "fastd: configuration file %s test is successful\n",
                conf_file);
        return 0;
    }
    if (sig)
        return send_signal(sig, sig_arg);

    if (cycle->main.error_log && strcmp(cycle->main.error_log, "stderr"))
        make_parent_dir(cycle->main.error_log);
    if (cycle->main.pid && strcmp(cycle->main.pid, "off"))
        make_parent_dir(cycle->main.pid);
    if (cycle->main.error_log && strcmp(cycle->main.error_log, "stderr") &&
        fd_log_open(&master_log, cycle->main.error_log,
                    cycle->main.error_log_level) != FD_OK) {
        fprintf(stderr, "fastd: [emerg] cannot open error log \"%s\": %s\n",
                cycle->main.error_log, strerror(errno));
        return 1;
    }
    master_log.level = cycle->main.error_log_level;
    /* until the master runs, a reason to stop goes where the one who
     * started it looks: stderr, when it is a terminal or fastd stays in
     * the foreground (a daemon's stderr is often nobody's) */
    master_log.echo = foreground || !cycle->main.daemon ||
                      isatty(STDERR_FILENO);
    fd_log = &master_log;
    log_owner();
    if (fd_shm_init() != FD_OK || fd_ssl_shm_init() != FD_OK ||
        fd_quic_shm_init() != FD_OK) {
        fprintf(stderr, "fastd: [emerg] shared memory setup failed\n");
        return 1;
    }
    fd_shm->generation = cycle->generation = 1;
    snprintf(fd_shm->profile, sizeof(fd_shm->profile), "%s",
             cycle->profile ? cycle->profile : "");
    if (fd_listening_open(cycle, NULL) != FD_OK) {
        fprintf(stderr, "fastd: [emerg] cannot open listening sockets%s\n",
                master_log.echo ? "" : " (see the error log)");
        return 1;
    }
    if (cycle->main.daemon && !foreground) {
        pid_t pid = fork();
        int fd;
        if (pid < 0) {
            perror("fastd: fork");
            return 1;
        }
        if (pid > 0)
            _exit(0);
        setsid();
        fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, STDIN_FILENO);
            dup2(fd, STDOUT_FILENO);
            if (master_log.fd >= 0)
                dup2(fd, STDERR_FILENO);
            if (fd > STDERR_FILENO)
                close(fd);
        }
    }
    fd_shm->master_pid = (uint64_t)getpid();
    if (write_pid(cycle->main.pid) != FD_OK)
        return 1;
    master_log.echo = 0;
    return master_loop();
}
