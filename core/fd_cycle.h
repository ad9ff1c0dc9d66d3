#ifndef FD_CYCLE_H
#define FD_CYCLE_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "fd_conf.h"
#include "fd_event.h"

/* the workers' user of a root master without [main] user */
#define FD_DEFAULT_USER "nobody"

/* [main] */
typedef struct {
    int daemon;
    fd_int_t workers;          /* 0 = auto */
    int cpu_affinity;
    char *user;
    int user_default;          /* user is nobody: no user = under root */
    /* a root master whose workers run as another user: that user's ids,
     * resolved once at load, to drop to and to give what the master makes
     * for the workers (logs, a cache's directories) */
    int drop;
    uid_t uid;
    gid_t gid;
    char *pid;
    char *error_log;
    int error_log_level;
    char *profile;
    fd_int_t rlimit_nofile;
    fd_msec_t shutdown_timeout;
    fd_conf_list_t include;    /* read by fd_conf_read; kept for -t output */
} fd_main_conf_t;

enum { FD_ACCEPT_REUSEPORT, FD_ACCEPT_EXCLUSIVE, FD_ACCEPT_SHARED };

/* [events] */
typedef struct {
    fd_int_t max_connections;
    int accept;
    int edge_triggered;
    int read_until_eagain;
    fd_int_t backlog;
    fd_int_t max_events;
    int batch_sends;
    int backend;               /* FD_BACKEND_* (fd_event.h) */
} fd_events_conf_t;

#define FD_SERVER_HEADER_MAX 256 /* [http] server_header, the Server: value */

/* [http] ssl_session_ticket_keys: who makes them (fd_ssl_tickets.c) */
enum { FD_SSL_TICKETS_LOCAL, FD_SSL_TICKETS_REDIS };

/* [http]: the engine-wide settings (location keys live in fd_http_loc_t) */
typedef struct {
    char *server_header;       /* Server: header value, "" to omit */
    int server_tokens;         /* on: "fastd" becomes "fastd/VERSION" */
    fd_msec_t keepalive_timeout;
    fd_int_t keepalive_requests;
    fd_msec_t header_timeout;
    fd_msec_t body_timeout;
    fd_msec_t send_timeout;
    size_t max_header_size;
    int inline_completions;
    fd_int_t max_headers;
    fd_msec_t ssl_session_ticket_rotate;
    int ssl_session_ticket_keys; /* FD_SSL_TICKETS_* */
    /* ssl_session_ticket_key files, read at load: 80 bytes each */
    fd_conf_list_t ssl_session_ticket_key;
    unsigned char *ssl_ticket_keys; /* their bytes, in order */
    fd_int_t http2_max_concurrent_streams;
    size_t http2_max_header_size;
    size_t http2_initial_window;
    fd_msec_t http2_idle_timeout;
    fd_int_t http3_max_concurrent_streams;
    size_t http3_stream_buffer_size;
    int quic_gso;
    /* fd_api_conf_named_location()'s, while the configuration loads */
    struct fd_named_check_s *named_checks;
} fd_http_conf_t;

/* [offload]: the per-worker thread pool */
typedef struct {
    fd_int_t threads;
    fd_int_t max_threads;
    fd_msec_t idle_timeout;
    int adaptive;
} fd_offload_conf_t;

/* A listening address; one socket per worker with reuseport. */
struct fd_listening_s {
    fd_event_t ev;             /* ev.fd: this worker's socket */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *text;                /* "127.0.0.1:8080" as configured */
    int *fds;                  /* [nfds]: sockets held by the master */
    unsigned nfds;
    fd_http_server_t **servers; /* servers on this address, first = default */
    unsigned nservers;
    unsigned index;            /* in cycle->ls_array (a connection's ls_index) */
    const struct fd_proto_s *proto; /* what its connections speak */
    unsigned ssl;              /* listen ... ssl: TLS (fd_ssl.c) */
    unsigned http2;            /* listen ... http2: h2 by ALPN under TLS,
                                * the h2c preface (prior knowledge) on
                                * cleartext, beside HTTP/1.1 */
    fd_msec_t ssl_handshake_timeout; /* the default server's */
    unsigned proxy_protocol;   /* listen ... proxy_protocol: a PROXY
                                * header first (fd_worker.c) */
    unsigned quic;             /* listen ... quic: a UDP socket speaking
                                * HTTP/3 (fd_quic.c); its ev.fd stays -1,
                                * so the TCP accept paths pass it by */
    void *quic_tls;            /* its GnuTLS credentials (fd_quic_tls.c) */
    unsigned udp;              /* a module's listen ... udp ([stream]): a
                                * UDP socket per worker as quic's (no
                                * steering: the kernel's hash of the
                                * client's address picks one), read by
                                * its owner; ev.fd stays -1 */
    void *owner;               /* a module's listener: its conf (a
                                * [stream]); NULL for HTTP's */
    fd_listening_t *next;
};

/* The server on ls that a host name (a Host without its port, an SNI
 * name) chooses by its server_name, NULL when none matches it. */
fd_http_server_t *fd_listening_server(const fd_listening_t *ls,
                                      fd_str_t name);

/* A [NAME value] section owned by a module (upstream, queue, ...). */
typedef struct fd_conf_section_s {
    const fd_module_t *module;
    char *name;
    void *conf;
    const char *file;
    int line;
    struct fd_conf_section_s *next;
} fd_conf_section_t;

/* Everything one configuration load produced. Replaced on reload. */
struct fd_cycle_s {
    fd_pool_t *pool;
    char *conf_file;
    char *profile;             /* the profile applied, or NULL */
    fd_main_conf_t main;
    fd_events_conf_t events;
    fd_http_conf_t http;
    fd_offload_conf_t offload;
    fd_http_server_t *servers;
    fd_listening_t *listening;
    fd_listening_t **ls_array; /* the same, by index */
    unsigned nlistening;
    int conns_per_ip;          /* a server has max_conns_per_ip: count them */
    fd_conf_section_t *sections;
    /* [cluster]'s Redis servers and timeout (fd_api_redis_addrs_set), or
     * NULL */
    const struct fd_cluster_addrs_s *cluster;
    struct fd_upstream_s *upstream_implicit; /* the groups pass = made
                                * (fd_upstream_implicit), newest first */
    fd_int_t nworkers;
    uint64_t generation;       /* incremented on each reload */
    struct fd_var_decl_s *vars; /* the $variables its file declared */
    /* files the workers append to, made by a root master for them
     * (fd_api_conf_worker_file): NULL-ended paths, or NULL */
    const char **worker_files;
    /* directories the workers write in that this load made, given to
     * their user by a root master (fd_api_conf_worker_dir): NULL-ended,
     * or NULL */
    const char **worker_dirs;
    /* the modules' helper processes (fd_api_helper), fd_helper.c */
    struct fd_helper_s *helpers;
};

/* Load and validate a configuration; NULL with cf->err set on error. */
/* cy serves from now on: the $variables its file declared are the ones
 * found by name (fd_var_find), at run time too. */
void fd_cycle_use(fd_cycle_t *cy);
fd_cycle_t *fd_cycle_load(const char *file, const char *profile, char *err,
                          size_t errlen);
/*
 * fastd -t: load file once with each [profile NAME] it declares, other
 * than the one already checked (skip, may be NULL), so that an error in a
 * profile not selected today is found before the day it is. FD_OK, or
 * FD_ERROR with err naming the file:line and the profile.
 */
int fd_cycle_test_profiles(const char *file, const char *skip, char *err,
                           size_t errlen);
/* Every key name means one thing at every level that accepts it. */
int fd_cycle_check_keys(char *err, size_t errlen);
void fd_cycle_free(fd_cycle_t *cycle);
void fd_conf_dump_keys(FILE *fp);

/* The core's keys (fd_cycle_keys.c); [server] and [location] are
 * fd_http.h's */
extern const fd_directive_t fd_main_directives[];
extern const fd_directive_t fd_events_directives[];
extern const fd_directive_t fd_http_directives[];
extern const fd_directive_t fd_offload_directives[];
/* A [server] listen value, "ADDR:PORT [default] [ssl]": FD_OK with the
 * address and the FD_LISTEN_* bits, or FD_ERROR (said through cf). */
enum { FD_LISTEN_DEFAULT = 1, FD_LISTEN_SSL = 2, FD_LISTEN_HTTP2 = 4,
       FD_LISTEN_PROXY = 8, FD_LISTEN_QUIC = 16, FD_LISTEN_UDP = 32 };
int fd_cycle_listen_parse(fd_conf_t *cf, const char *v,
                          struct sockaddr_storage *ss, socklen_t *len,
                          char addr[300], unsigned *opts);
/* A module's own listening address ([stream] listen = ADDR:PORT): no
 * [server] on it, its connections go to proto with ls->owner = owner.
 * NULL after fd_conf_error() (a bad address, or one already in use by
 * another listener of the file). */
fd_listening_t *fd_cycle_listening_add(fd_conf_t *cf, const char *value,
                                       const struct fd_proto_s *proto,
                                       void *owner);
/* Find a module-owned section by type and name, e.g. ("upstream", "app") */
void *fd_cycle_section(fd_cycle_t *cycle, const char *type, const char *name);
/* A [TYPE NAME] section's name as the named-entry modules take it (queue,
 * limit_req): 1 to max-1 letters, digits, '_', '-', '.', not "off".
 * FD_OK, or FD_ERROR after fd_conf_error(). */
int fd_cycle_section_name(fd_conf_t *cf, const char *type, const char *name,
                          size_t max);
/* Number module m's sections 0.. into the unsigned at index_offset of
 * each one's conf (their entries in a status area of max): FD_ERROR past
 * max, after fd_conf_error() at the section. */
int fd_cycle_number_sections(fd_conf_t *cf, fd_cycle_t *cycle,
                             const fd_module_t *m, unsigned max,
                             size_t index_offset);

/* Open (or take over from old) the listening sockets. */
int fd_listening_open(fd_cycle_t *cycle, fd_cycle_t *old);
void fd_listening_close_unused(fd_cycle_t *cycle, fd_cycle_t *old);
/* The master: close the reuseport sockets a reload retired once no worker
 * older than them lives (oldest: the oldest live generation, 0: none). */
void fd_listening_retire(uint64_t oldest);
/* A new worker: close its copies of the retired sockets. */
void fd_listening_forget_retired(void);
/* A stop: close every listening socket of cycle now. */
void fd_listening_close(fd_cycle_t *cycle);

/* Why a TLS handshake failed (fd_stats_t.ssl_failed) */
enum {
    FD_SSL_FAIL_PROTOCOL,      /* no common version, or not TLS at all */
    FD_SSL_FAIL_CIPHER,        /* no shared cipher, group or signature */
    FD_SSL_FAIL_CLIENT_CERT,   /* ssl_verify_client = on refused it */
    FD_SSL_FAIL_PLAIN_HTTP,    /* an HTTP request on the TLS port */
    FD_SSL_FAIL_CLOSED,        /* the client went away */
    FD_SSL_FAIL_TIMEOUT,       /* ssl_handshake_timeout */
    FD_SSL_FAIL_OTHER,
    FD_SSL_FAIL_N
};

/*
 * Shared memory: one cache-line-aligned slot per worker, written only by
 * that worker, read by the status handler of any worker. Modules reserve a
 * part of each slot with ->shm_size and find it with fd_stats_area().
 */
typedef struct {
    uint64_t pid;
    uint64_t generation;
    uint64_t index;            /* the worker's, 0 .. workers - 1 */
    uint64_t started_msec;     /* wall clock */
    uint64_t conn_active;
    uint64_t conn_reading;
    uint64_t conn_writing;
    uint64_t conn_idle;
    uint64_t conn_parked;      /* of the idle, parked in the io_uring
                                * ring: no struct of their own */
    uint64_t conn_accepted;
    uint64_t conn_handled;
    uint64_t requests;
    uint64_t status[6];        /* [1..5]: 1xx..5xx; [0]: other */
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint64_t ssl_tls12;        /* TLS handshakes completed, by version */
    uint64_t ssl_tls13;
    uint64_t ssl_resumed;      /* of those, resumed sessions */
    uint64_t ssl_failed[FD_SSL_FAIL_N];
    uint64_t h2_conns;         /* HTTP/2 connections taken (h2 and h2c) */
    uint64_t h2_active;        /* of those, open now (a gauge) */
    uint64_t h2_streams;       /* requests carried by HTTP/2 */
    uint64_t h2_resets;        /* streams the client reset */
    uint64_t h2_goaways;       /* connections fastd ended with GOAWAY for
                                * an error (flood, protocol error) */
    uint64_t quic_conns;       /* QUIC connections made */
    uint64_t quic_active;      /* of those, open now (a gauge) */
    uint64_t quic_closed;      /* of those, ended */
    uint64_t quic_streams;     /* requests carried by HTTP/3 */
    uint64_t quic_retries;     /* Retry packets sent */
    uint64_t quic_validated;   /* Initials a Retry token validated */
    uint64_t quic_lost;        /* packets with stream data declared lost,
                                * once per stream in them */
    uint64_t quic_migrations;  /* moves to a client's new address */
    uint64_t quic_resets;      /* stateless resets sent */
    uint64_t quic_dropped;     /* client Initials that made no connection
                                * (and no Retry) */
    uint64_t quic_forwarded;   /* datagrams handed to the worker that owns
                                * their connection (fd_quic_fwd.c) */
    uint64_t quic_forward_dropped; /* of those to hand, dropped: the
                                * owner's queue stayed full */
    uint64_t quic_gso_sends;   /* sends of several datagrams (UDP GSO) */
    uint64_t alive;            /* 1 while the worker runs */
} fd_stats_t;

#define FD_MAX_WORKER_SLOTS 128

typedef struct {
    uint64_t started_msec;
    uint64_t generation;
    uint64_t master_pid;
    size_t slot_size;
    uint64_t slots_used;       /* slots [0, slots_used) have held a worker */
    fd_stats_t retired;        /* folded counters of exited workers */
    char profile[64];
} fd_shm_header_t;

extern fd_shm_header_t *fd_shm;
int fd_shm_init(void);

/* fd_shm_zone.c: a shared zone of size bytes, zeroed when new (*fresh
 * = 1), or the one an earlier configuration made with the same kind, name
 * and size (*fresh = 0); NULL with errno. Master only, while loading. */
void *fd_shm_zone(const char *kind, const char *name, size_t size,
                  int *fresh);
/* A spin lock in a zone (a word, 0: free), held for a few loads and
 * stores: the public API's (fastd.h), whose slow path, in fd_shm_zone.c,
 * yields once a waiter spun 64 times (the holder was preempted). */
#define fd_shm_lock fd_api_shm_lock
#define fd_shm_unlock fd_api_shm_unlock
fd_stats_t *fd_stats_slot(unsigned i);
void *fd_stats_area(fd_stats_t *slot, const fd_module_t *m);
extern fd_stats_t *fd_stats; /* this worker's slot */

/* The worker process. */
struct fd_worker_s {
    int epfd;
    unsigned slot;
    unsigned index;            /* 0..nworkers-1: which reuseport socket */
    fd_cycle_t *cycle;
    fd_block_cache_t rbufs;    /* read buffers: max_header_size */
    fd_block_cache_t wbufs;    /* write buffers */
    fd_connection_t **conns;   /* by fd */
    unsigned nconns;
    unsigned nheld;            /* connections modules took over (tunnels):
                                * a graceful stop waits for them too */
    unsigned max_conns;
    int quitting;              /* graceful: stop accepting, drain */
    int terminating;           /* fast stop */
    void *offload;             /* fd_offload_pool_t */
};

extern fd_worker_t *fd_worker;

/* The listening address a connection came in on. */
#define fd_conn_listening(c) (fd_worker->cycle->ls_array[(c)->ls_index])

#endif
