/*
 * libFuzzer harness: the whole request path, in one process. A
 * configuration chosen by the input's first bytes is loaded through the
 * real reader (fd_cycle_load), the worker's loop runs it
 * (fd_worker_fuzz_cycle, fd_worker_fuzz_turn: core/event/fd_worker.c, FD_FUZZ
 * builds only), a client connects over loopback TCP and sends the input's
 * request bytes, and the harness plays the upstream on a listening socket
 * of its own: it reads what the proxy sends and answers with the input's
 * response bytes. Every byte goes through the engine, the handler, the
 * filters (gzip), the proxy's request builder and response parser and
 * the access log, as in a worker, under ASan and UBSan.
 *
 * Checks, besides the sanitizers: each request header sent upstream is
 * well formed (a request line, then "Name: value" lines with no CR, LF or
 * NUL inside: nothing a client sent can split it); once the harness has
 * reset both sockets, the worker lets go of everything within a few turns
 * (no connection, tunnel or timer left, no descriptor leaked).
 *
 * Input: byte 0 the proxy location (match kind, pass form, proxy_host,
 * buffering, a rewrite), byte 1 its headers and filters (set_header,
 * gzip, access log), byte 2 the upstream group and the engine's options,
 * byte 3 how the bytes travel (pieces, FINs), byte 4 bit 0 websocket = on,
 * bit 1 HTTP/2, bit 2 add_header and expires with variables and the
 * proxy's response header rules (hide, pass, redirect), bit 3 alias
 * locations (a prefix one with gzip_static and autoindex, a regex one
 * with a capture) and try_files (to a URI, a named location that
 * proxies, itself, =404), bit 4 the PROXY protocol (v1 or v2, the client's bytes
 * begin with it; the proxy sends v1 upstream) unless HTTP/2, bit 5 the
 * real address from X-Forwarded-For (bit 6: recursive), bit 7 the
 * proxy's cache (every option on; emptied before each input, so a HIT,
 * a revalidation or a stale answer comes from a request before it in
 * the same input), bytes 4-7 seed
 * the pieces; then the client's bytes,
 * "\n--UPSTREAM--\n", and the bytes the upstream answers each connection
 * with.
 *
 * HTTP/2 (prior knowledge on the same address): the client's bytes are
 * frames, each [type][flags][stream][length][payload]: the harness sends
 * the preface and a SETTINGS, then each frame with its header; a HEADERS
 * or CONTINUATION payload is "name: value" lines that the harness
 * HPACK-encodes (what a request lacks of :method, :scheme, :authority and
 * :path is added first), unless its type byte has bit 7 set (raw bytes).
 * Through the real session (nghttp2) and the engine, up to the proxy.
 *
 * Everything runs with timeouts far longer than an input takes: no timer
 * fires, and an input runs the same way each time (but see the cache).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <nghttp2/nghttp2.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_module.h"
#include "fd_proxy.h"
#include "fd_sendq.h"
#include "fd_status.h"
#include "fuzz_rng.h"

#define SEP "\n--UPSTREAM--\n"
#define MAX_UCONNS 8   /* upstream connections one input may open */
#define MAX_STEPS 400  /* turns of the loop per phase, a bound on work */
#define IDLE_STEPS 2   /* turns in a row with nothing moving: settled */
/* descriptors checked for leaks, at most: above the directories every
 * cached cycle keeps (its static roots, opened on first use), or a new
 * cycle's would be opened beyond the check, never recorded, never closed
 * (a 4.3M-input campaign ran out of descriptors that way, and the accept
 * pause it made was the timer left) */
#define MAX_FDS 8192
#define FD_SLACK 64    /* and above the highest open at the last check */

static char dir[] = "/dev/shm/fd-fuzz-req-XXXXXX"; /* tmpfs: no disk I/O */
static char conf_path[sizeof(dir) + 32];
static int conf_fd = -1, client_ls = -1, up_ls = -1, refused = -1;
static unsigned client_port, up_port, refused_port;
/* the configuration's [upstream] proxy_protocol = on (the PROXY header
 * in and out; not with h2, whose connections hold many clients) */
#define UPSTREAM_PP(k) (((k)[4] & 0x10) && !((k)[4] & 2))
static int upstream_pp;   /* this input's */
static unsigned nfds = MAX_FDS; /* descriptors checked */

/*
 * Loading a configuration costs some 2 ms under the sanitizers, several
 * times the rest of an input: loaded ones are kept, by their text (many
 * header bytes choose the same one), the least recently used dropped.
 * Each input still gets a connection, a request and the modules' worker
 * state of its own; the cycle keeps only a little state from one request
 * to the next (the round robin's position; no server is taken out: an
 * implicit group has one server, which never is, and [upstream
 * backend]'s have max_fails=0), so FUZZ_REQUEST_FRESH=1 in the
 * environment loads every input's afresh, to replay a crash exactly.
 * FUZZ_REQUEST_TRACE=1 prints the configuration and the bytes each peer
 * received.
 */
#define CACHE 256

typedef struct {
    char buf[8192];
    size_t len;
} text_t;

typedef struct {
    text_t text;
    fd_cycle_t *cycle;
    uint64_t used;   /* when, for the least recently used */
    /* directories a worker keeps open for the rest of its life, opened
     * on first use (static's root): closed with the cycle here */
    int dirs[16];
    unsigned ndirs;
} cached_t;

static cached_t cache[CACHE];
static uint64_t now;
static int fresh, trace;
static fd_log_t quiet_log = {.fd = -1, .level = FD_LOG_EMERG};

/* getaddrinfo(): numeric addresses and localhost only, no DNS */
int getaddrinfo(const char *node, const char *service,
                const struct addrinfo *hints, struct addrinfo **res)
{
    static int (*real)(const char *, const char *, const struct addrinfo *,
                       struct addrinfo **);
    struct addrinfo h = {0};

    if (real == NULL)
        real = (int (*)(const char *, const char *, const struct addrinfo *,
                        struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
    if (hints)
        h = *hints;
    if (node && strcmp(node, "localhost") == 0)
        node = "127.0.0.1";
    h.ai_flags |= AI_NUMERICHOST | AI_NUMERICSERV;
    return real(node, service, &h, res);
}

/* A smaller quarantine than ASan's 256 MB: an input allocates afresh
 * what the last one freed, and page faults on new memory were a third of
 * the time. A use after free is still caught within 32 MB of frees. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=32";
}

/* --- setup --------------------------------------------------------------- */

static void put(const char *name, const char *text, size_t repeat)
{
    char path[sizeof(dir) + 64];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "w");
    if (fp == NULL)
        abort();
    while (repeat--)
        fputs(text, fp);
    fclose(fp);
}

static int remove_one(const char *path, const struct stat *st, int flag,
                      struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int remove_below(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
    (void)st;
    (void)flag;
    return ftw->level > 0 ? remove(path) : 0;
}

/* The cache's files and index, empty for an input that uses them: what
 * it finds there is what its own requests stored. Its level directories
 * go too (the cache makes them again): kept, they grew to 16 x 256 that
 * every cache input walked, and the campaign's rate fell from 2,300 to
 * 1,500 inputs a second with them. */
static void cache_empty(fd_cycle_t *cy)
{
    char p[sizeof(dir) + 16];

    snprintf(p, sizeof(p), "%s/cache", dir);
    nftw(p, remove_below, 16, FTW_DEPTH | FTW_PHYS);
    (void)cy;
    fd_proxy_cache_fuzz_reset();
}

static void cleanup(void)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A loopback TCP socket on an ephemeral port: listening, or (refuse)
 * bound only, so that connecting to it is refused at once. */
static int loopback(unsigned *port, int refuse)
{
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
        (!refuse && listen(fd, 64) < 0) ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0)
        abort();
    *port = ntohs(sin.sin_port);
    return fd;
}

static void setup(void)
{
    char path[sizeof(dir) + 16];

    if (fd_modules_init() != FD_OK) /* as main() does */
        abort();
    signal(SIGPIPE, SIG_IGN);
    if (mkdtemp(dir) == NULL)
        abort();
    atexit(cleanup);
    snprintf(path, sizeof(path), "%s/conf", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/html", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/html/static", dir);
    mkdir(path, 0755);
    put("html/index.html", "<h1>index</h1>\n", 1);
    put("html/404.html", "<h1>not here</h1>\n", 1);
    put("html/50x.html", "<h1>upstream trouble</h1>\n", 1);
    put("html/static/index.html", "<h1>static</h1>\n", 1);
    put("html/static/a.txt", "text to compress, text to compress\n", 100);
    put("html/static/b.json", "{\"a\": [1, 2, 3]}\n", 2);
    /* gzip_static serves it as it is: any bytes do */
    put("html/static/a.txt.gz", "\x1f\x8b not really gzip\n", 1);
    snprintf(path, sizeof(path), "%s/html/static/sub", dir);
    mkdir(path, 0755);
    put("html/static/sub/c <&>.txt", "escaped in a listing\n", 1);
    put("conf/mime.types",
        "types {\n text/html html;\n text/plain txt;\n"
        " application/json json;\n}\n", 1);
    snprintf(conf_path, sizeof(conf_path), "%s/conf/fuzz.conf", dir);
    conf_fd = open(conf_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (conf_fd == -1)
        abort();

    client_ls = loopback(&client_port, 0);
    up_ls = loopback(&up_port, 0);
    refused = loopback(&refused_port, 1);

    /* the worker's log and status slot, as the master gives them */
    quiet_log.fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    fd_log = &quiet_log;
    if (fd_shm_init() != FD_OK)
        abort();
    fd_stats_worker_init(0, 1, 0);
    fresh = getenv("FUZZ_REQUEST_FRESH") != NULL;
    trace = getenv("FUZZ_REQUEST_TRACE") != NULL;
}

/* --- the configuration ----------------------------------------------------- */

static void add(text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add(text_t *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(t->buf + t->len, sizeof(t->buf) - t->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(t->buf) - t->len)
        abort(); /* the templates outgrew the buffer */
    t->len += (size_t)n;
}

static void config(text_t *t, const uint8_t *k)
{
    static const char *const match[] = {"/up/", "= /up/x", "~ ^/up/(.*)$",
                                        "/up"};
    static const char *const formats[] = {
        "", " format=json", " format=mine", " format=mine buffer=4k"};
    static const char *const balance[] = {
        "round_robin", "least_conn", "hash\nhash_key = $request_uri",
        "hash\nhash_key = $http_x_key"};
    unsigned pass = (k[0] >> 2) & 7;
    int pp = UPSTREAM_PP(k);

    add(t, "[main]\ndaemon = off\npid = off\nerror_log = stderr\n");
    add(t, "[events]\nedge_triggered = %s\nbatch_sends = %s\n"
           "read_until_eagain = %s\n",
        k[2] & 0x20 ? "off" : "on", k[2] & 0x40 ? "off" : "on",
        k[3] & 0x80 ? "on" : "off");
    add(t, "[offload]\nthreads = 1\n");
    add(t, "[http]\nmax_header_size = 8k\nkeepalive_requests = %d\n",
        k[3] & 0x80 ? 2 : 100);
    add(t, "[server]\nlisten = 127.0.0.1:%u default%s%s\n"
           "server_name = a.example\nroot = %s/html\nopen_file_cache = 0\n"
           "error_page = 404 /404.html\n"
           "error_page = 500 502 503 504 /50x.html\n",
        client_port, k[4] & 2 ? " http2" : "", pp ? " proxy_protocol" : "",
        dir);
    if (pp)
        add(t, "set_real_ip_from = 127.0.0.1\nreal_ip_header = proxy_protocol\n");
    else if (k[4] & 0x20)
        add(t, "set_real_ip_from = 127.0.0.0/8\nset_real_ip_from = ::1\n"
               "real_ip_header = X-Forwarded-For\nreal_ip_recursive = %s\n",
            k[4] & 0x40 ? "on" : "off");
    if (k[4] & 4)
        add(t, "add_header = X-Req \"$host|$uri|$args|$http_x_key|"
               "$remote_addr|$realip_remote_addr|$request_id\" always\n"
               "add_header = Cache-Control no-store\nexpires = %s\n",
            k[4] & 0x40 ? "1h" : "epoch");
    if (k[1] & 0x10)
        add(t, "gzip = on\ngzip_min_length = %s\ngzip_types = *\n",
            k[1] & 0x40 ? "0" : "64");
    if (k[1] & 0x20) {
        add(t, "log_format = mine $remote_addr \"$request\" $status "
               "$body_bytes_sent $host $uri $args $request_uri $http_referer "
               "$upstream_addr $upstream_status $upstream_response_time "
               "$http_x_key $msec $connection $request_time\n");
        add(t, "access_log = /dev/null%s\n", formats[k[1] >> 6]);
    }

    /* the proxy location, in every form the brief names */
    add(t, "[location %s]\nhandler = proxy\n", match[k[0] & 3]);
    switch (pass) {
    case 0: add(t, "pass = http://127.0.0.1:%u\n", up_port); break;
    case 1: add(t, "pass = http://127.0.0.1:%u/uri/\n", up_port); break;
    case 2: add(t, "pass = http://backend\n"); break;
    case 3: add(t, "pass = http://backend/base/\n"); break;
    case 4: add(t, "upstream = backend\n"); break;
    case 5: add(t, "pass = http://127.0.0.1:%u/\n", up_port); break;
    case 6: add(t, "pass = http://localhost:%u\n", up_port); break;
    default: add(t, "pass = http://127.0.0.1:%u/a/b\n", up_port); break;
    }
    add(t, "proxy_host = %s\n", k[0] & 0x20 ? "upstream" : "pass");
    if (k[0] & 0x40)
        add(t, "buffering = off\n");
    if (k[0] & 0x80)
        add(t, "rewrite = ^/up/(.*)$ /up/r/$1 break\n");
    if (k[1] & 1)
        add(t, "set_header = X-Extra: v\n");
    if (k[1] & 2)
        add(t, "set_header = Host: fixed.example\n");
    if (k[1] & 4)
        add(t, "set_header = X-Forwarded-For:\n");
    if (k[1] & 8)
        add(t, "set_header = X-Real-IP: 10.0.0.1\n"
               "set_header = X-Forwarded-Host: h.example\n");
    if (k[2] & 0x10)
        add(t, "next_upstream = error timeout http_502 http_503 "
               "non_idempotent\n");
    if (k[2] & 0x80)
        add(t, "queue = q\n");
    if (k[4] & 1)
        add(t, "websocket = on\n");
    if (k[4] & 4)
        add(t, "add_header = X-Up \"$upstream_status $upstream_addr\"\n"
               "add_header_inherit = %s\n"
               "proxy_hide_header = X-Hide\nproxy_pass_header = Server\n"
               "proxy_redirect = default\n"
               "proxy_redirect = http://127.0.0.1:%u/ https://$host/moved/\n",
            k[4] & 0x20 ? "off" : "on", up_port);
    if (k[4] & 0x80)
        add(t, "proxy_cache = fz\n"
               "proxy_cache_key = $scheme$http_host$request_uri$http_x_key\n"
               "proxy_cache_valid = 200 301 404 1m\n"
               "proxy_cache_methods = GET HEAD POST\n"
               "proxy_cache_bypass = $http_x_bypass\n"
               "proxy_no_cache = $arg_nocache\n"
               "proxy_cache_lock = on\nproxy_cache_lock_timeout = 5s\n"
               "proxy_cache_use_stale = error timeout invalid_header "
               "updating http_500 http_502 http_404\n"
               "proxy_cache_background_update = on\n"
               "proxy_cache_revalidate = on\n");
    add(t, "max_body_size = 4k\n");

    /* what a request may reach besides the proxy */
    add(t, "[location /rw/]\nrewrite = ^/rw/(.*)$ /up/$1 last\n"
           "[location ~ ^/rx/(?<name>[a-z]+)/(\\d+)$]\n"
           "rewrite = ^/rx/(?<name>[a-z]+)/(.*)$ /ret/$name/$2?a=$1 redirect\n"
           "[location /ret/]\nreturn = 301 http://$host$request_uri\n"
           "[location /text]\nreturn = 200 text $uri $args $host\n"
           "[location = /plaintext]\nhandler = plaintext\n"
           "[location = /json]\nhandler = json\n"
           "[location = /status]\nhandler = status\n"
           "[location /static/]\nindex = index.html\n"
           "[location /deny]\ndeny = all\n");
    if (k[4] & 8)
        add(t, "[location /al/]\nalias = %s/html/static/\n"
               "gzip_static = on\nautoindex = on\nautoindex_format = %s\n"
               "[location ~ ^/ar/(.+)$]\nalias = %s/html/static/$1\n"
               "[location /spa/]\nalias = %s/html/static/\n"
               "try_files = $uri $uri/ /static/index.html\n"
               "[location /tf/]\ntry_files = $uri $uri/ @named\n"
               "[location @named]\nhandler = proxy\n"
               "pass = http://127.0.0.1:%u\n"
               "[location /loop/]\ntry_files = $uri /loop/again\n"
               "[location /code/]\ntry_files = /nope/$arg_x =404\n",
            dir, k[4] & 0x40 ? "json" : "html", dir, dir, up_port);
    add(t, "[upstream backend]\n");
    if (k[2] & 2)
        add(t, "server = 127.0.0.1:%u max_fails=0\n", refused_port);
    add(t, "server = 127.0.0.1:%u max_fails=0\nbalance = %s\n"
           "keepalive = %d\n",
        up_port, balance[(k[2] >> 2) & 3], k[2] & 1 && !pp ? 4 : 0);
    if (pp) /* not with keepalive: a connection's header names one client */
        add(t, "proxy_protocol = on\n");
    if (k[2] & 0x80)
        add(t, "[queue q]\nmax_concurrent = 1\nqueue_limit = 2\n");
    if (k[4] & 0x80)
        add(t, "[cache fz]\npath = %s/cache\nlevels = 1:2\n"
               "keys_zone = 64k\nmax_size = 64k\ninactive = 1h\n", dir);
}

/* --- the peers ------------------------------------------------------------ */

typedef struct {
    int fd;
    size_t got;           /* bytes read from the proxy */
    char head[8192];      /* their start: the first request header */
    size_t hlen;
    size_t sent;          /* of the response */
    unsigned checked:1;   /* the header was checked */
    unsigned fin:1;
    unsigned eof:1;       /* the proxy closed (or reset) it */
} uconn_t;

typedef struct {
    const uint8_t *req, *resp;
    size_t req_len, resp_len;
    size_t req_sent;
    unsigned req_pieces, resp_pieces;
    int client;
    int client_fin;
    int client_eof;
    uconn_t up[MAX_UCONNS];
    unsigned nup;
    unsigned fin_up:1;
    unsigned fin_client:1;
} run_t;

static int tchar(unsigned char c)
{
    return c > 0x20 && c < 0x7f && !strchr("\"(),/:;<=>?@[\\]{}", c);
}

/* The header the proxy sent (up to its blank line) is well formed. */
static void check_upstream_header(const char *h, size_t n, int pp)
{
    const char *start = h, *end = memmem(h, n, "\r\n\r\n", 4), *p = h, *eol;

    if (end == NULL)
        return; /* cut short: the client left, or it is longer than kept */
    /* only where the configuration sends one: else "PROXY" is a method
     * a client may use like any token, and its request line is passed */
    if (pp && n > 6 && memcmp(h, "PROXY ", 6) == 0) {
        /* [upstream] proxy_protocol = on: one v1 line of printable
         * bytes first (the client's addresses, as the engine formats
         * them, whatever its own PROXY header said) */
        eol = memmem(h, (size_t)(end + 2 - h), "\r\n", 2);
        for (p = h; p < eol; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                goto bad;
        if (eol - h > 107 || (memcmp(h + 6, "TCP4 ", 5) != 0 &&
                              memcmp(h + 6, "TCP6 ", 5) != 0 &&
                              memcmp(h + 6, "UNKNOWN", 7) != 0))
            goto bad;
        p = h = eol + 2;
        end = memmem(h, n - (size_t)(h - start), "\r\n\r\n", 4);
        if (end == NULL)
            return;
    }
    end += 2;
    eol = memmem(p, (size_t)(end - p), "\r\n", 2);
    /* METHOD SP target SP HTTP/1.1, no control byte in the target */
    for (; p < eol && tchar((unsigned char)*p); p++)
        ;
    if (p == h || *p != ' ')
        goto bad;
    for (p++; p < eol && (unsigned char)*p > 0x20 && *p != 0x7f; p++)
        ;
    if (eol - p != 9 || memcmp(p, " HTTP/1.1", 9) != 0)
        goto bad;
    for (p = eol + 2; p < end; p = eol + 2) {
        const char *q = p;
        eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        while (q < eol && tchar((unsigned char)*q))
            q++;
        if (q == p || q == eol || *q != ':')
            goto bad;
        for (q++; q < eol; q++)
            if (*q == '\r' || *q == '\n' || *q == '\0')
                goto bad;
    }
    return;
bad:
    fprintf(stderr, "malformed request header sent upstream:\n%.*s\n",
            (int)n, start);
    abort();
}

/* The length of the next piece of a message of n bytes, of which off
 * are sent, in at most pieces writes. */
static size_t piece(size_t n, size_t off, unsigned pieces)
{
    size_t left = n - off;

    if (pieces <= 1 || left <= 1)
        return left;
    return 1 + rng() % left;
}

static void reset_close(int fd)
{
    struct linger lg = {1, 0}; /* RST: no TIME_WAIT left behind */

    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

/* Read what fd has for the harness, at most a buffer: 0 if nothing, -1
 * at its end (or a reset). */
static ssize_t take(int fd, char *buf, size_t size)
{
    ssize_t n = recv(fd, buf, size, MSG_DONTWAIT);

    if (n > 0)
        return n;
    return n == 0 || (errno != EAGAIN && errno != EINTR) ? -1 : 0;
}

/* Move what can move between the harness and the worker; returns
 * whether anything did. One poll() says which sockets have something to
 * read: an idle turn costs one system call, not one per socket. */
static int pump(run_t *x, int answer)
{
    struct pollfd p[MAX_UCONNS + 2];
    char buf[16384];
    int moved = 0;
    unsigned i, np = 0;
    ssize_t n;

    /* the client's bytes, in pieces over the turns */
    if (x->client >= 0 && x->req_sent < x->req_len) {
        size_t k = piece(x->req_len, x->req_sent, x->req_pieces);
        n = send(x->client, x->req + x->req_sent, k, MSG_NOSIGNAL);
        if (n > 0) {
            x->req_sent += (size_t)n;
            moved = 1;
        }
    }
    if (x->client >= 0 && x->req_sent == x->req_len && x->fin_client &&
        !x->client_fin) {
        shutdown(x->client, SHUT_WR);
        x->client_fin = 1;
        moved = 1;
    }

    /* p[0] the client, p[1] the upstream's listener, p[2 + i] up[i];
     * a negative fd is left out */
    p[np++] = (struct pollfd){
        .fd = x->client >= 0 && !x->client_eof ? x->client : -1,
        .events = POLLIN};
    p[np++] = (struct pollfd){.fd = x->nup < MAX_UCONNS ? up_ls : -1,
                              .events = POLLIN};
    for (i = 0; i < x->nup; i++)
        p[np++] = (struct pollfd){
            .fd = x->up[i].fd >= 0 && !x->up[i].eof ? x->up[i].fd : -1,
            .events = POLLIN};
    while (poll(p, np, 0) < 0)
        if (errno != EINTR) /* libFuzzer's SIGALRM, for -timeout */
            abort();

    /* whatever the client is sent, read and dropped */
    if (p[0].revents) {
        n = take(x->client, buf, sizeof(buf));
        if (n > 0 && trace)
            fprintf(stderr, "--- client got:\n%.*s\n", (int)n, buf);
        if (n < 0)
            x->client_eof = 1;
        moved |= n > 0;
    }

    /* the upstream's side */
    if (p[1].revents) {
        int fd = accept4(up_ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            memset(&x->up[x->nup], 0, sizeof(x->up[0]));
            x->up[x->nup++].fd = fd;
            moved = 1;
        }
    }
    for (i = 0; i < x->nup; i++) {
        uconn_t *u = &x->up[i];
        if (u->fd < 0)
            continue;
        if (2 + i < np && p[2 + i].revents) {
            n = take(u->fd, buf, sizeof(buf));
            if (n > 0) {
                size_t keep = fd_min((size_t)n, sizeof(u->head) - u->hlen);
                memcpy(u->head + u->hlen, buf, keep);
                u->hlen += keep;
                u->got += (size_t)n;
                moved = 1;
                if (trace)
                    fprintf(stderr, "--- upstream %u got:\n%.*s\n", i,
                            (int)n, buf);
            }
            if (n < 0)
                u->eof = 1;
        }
        if (!u->checked && (memmem(u->head, u->hlen, "\r\n\r\n", 4) ||
                            u->hlen == sizeof(u->head))) {
            check_upstream_header(u->head, u->hlen, upstream_pp);
            u->checked = 1;
        }
        /* answer once the request has come (or the proxy waits) */
        if (answer && u->got && u->sent < x->resp_len) {
            size_t k = piece(x->resp_len, u->sent, x->resp_pieces);
            n = send(u->fd, x->resp + u->sent, k, MSG_NOSIGNAL);
            if (n > 0) {
                u->sent += (size_t)n;
                moved = 1;
            }
        }
        if (answer && u->got && u->sent == x->resp_len && x->fin_up &&
            !u->fin) {
            shutdown(u->fd, SHUT_WR);
            u->fin = 1;
            moved = 1;
        }
    }
    return moved;
}

/* Turns of the loop until nothing moves for IDLE_STEPS turns. */
static void settle(run_t *x, int answer)
{
    unsigned steps, idle = 0;

    for (steps = 0; steps < MAX_STEPS && idle < IDLE_STEPS; steps++) {
        int moved = pump(x, answer);
        if (fd_worker_fuzz_turn(0) != FD_OK)
            abort();
        idle = moved ? 0 : idle + 1;
    }
}

/* Which of the first nfds descriptors are open, in one poll() (a closed
 * one is POLLNVAL, not a system call each); returns the highest + 1. */
static unsigned open_fds(uint8_t *open)
{
    struct pollfd p[MAX_FDS];
    unsigned fd, hi = 0;

    for (fd = 0; fd < nfds; fd++)
        p[fd] = (struct pollfd){.fd = (int)fd, .events = 0};
    while (poll(p, nfds, 0) < 0)
        if (errno != EINTR)
            abort();
    for (fd = 0; fd < nfds; fd++) {
        open[fd] = !(p[fd].revents & POLLNVAL);
        if (open[fd])
            hi = fd + 1;
    }
    return hi;
}

/* --- configurations -------------------------------------------------------- */

static fd_cycle_t *load(const text_t *t)
{
    char err[1200];
    fd_cycle_t *cy;

    if (pwrite(conf_fd, t->buf, t->len, 0) != (ssize_t)t->len ||
        ftruncate(conf_fd, (off_t)t->len) == -1)
        abort();
    cy = fd_cycle_load(conf_path, NULL, err, sizeof(err));
    if (cy == NULL) {
        /* the templates must load: a refusal is the harness's bug */
        fprintf(stderr, "fuzz_request: config refused: %s\n%s", err,
                t->buf);
        abort();
    }
    /* the harness's listening socket stands in for the master's */
    cy->listening->fds = fd_palloc(cy->pool, sizeof(int));
    cy->listening->fds[0] = client_ls;
    cy->listening->nfds = 1;
    return cy;
}

static void cycle_drop(cached_t *c)
{
    while (c->ndirs)
        close(c->dirs[--c->ndirs]);
    fd_cycle_free(c->cycle);
    c->cycle = NULL;
}

/* The configuration chosen by k: a cached one, or one loaded now. */
static cached_t *cycle_get(const uint8_t *k)
{
    text_t t = {.len = 0};
    cached_t *c, *pick = &cache[0];

    config(&t, k);
    if (trace)
        fprintf(stderr, "--- configuration:\n%s", t.buf);
    now++;
    for (c = cache; c < cache + CACHE; c++) {
        if (c->cycle && c->text.len == t.len &&
            memcmp(c->text.buf, t.buf, t.len) == 0) {
            c->used = now;
            return c;
        }
        if (pick->cycle && (c->cycle == NULL || c->used < pick->used))
            pick = c;
    }
    if (pick->cycle)
        cycle_drop(pick);
    pick->text = t;
    pick->cycle = load(&t);
    pick->used = now;
    return pick;
}

/* --- HTTP/2 frames --------------------------------------------------------- */

static uint8_t h2buf[1 << 17];

static size_t put_frame(size_t at, unsigned type, unsigned flags,
                        uint32_t sid, const uint8_t *p, size_t n)
{
    uint8_t *f = h2buf + at;

    if (at + 9 + n > sizeof(h2buf))
        return at;
    f[0] = (uint8_t)(n >> 16);
    f[1] = (uint8_t)(n >> 8);
    f[2] = (uint8_t)n;
    f[3] = (uint8_t)type;
    f[4] = (uint8_t)flags;
    f[5] = (uint8_t)(sid >> 24 & 0x7f);
    f[6] = (uint8_t)(sid >> 16);
    f[7] = (uint8_t)(sid >> 8);
    f[8] = (uint8_t)sid;
    if (n)
        memcpy(f + 9, p, n);
    return at + 9 + n;
}

/* "name: value" lines into a header block, the missing pseudo-fields
 * first: at most out_size bytes, 0 when it does not fit. */
static size_t hpack(nghttp2_hd_deflater *d, const uint8_t *p, size_t n,
                    uint8_t *out, size_t out_size)
{
    static const char *const pseudo[][2] = {{":method", "GET"},
                                            {":scheme", "http"},
                                            {":authority", "a.example"},
                                            {":path", "/up/x"}};
    nghttp2_nv nv[64];
    size_t nn = 0, k;
    const uint8_t *e = p + n;
    ssize_t rv;

    for (k = 0; k < 4; k++) {
        size_t len = strlen(pseudo[k][0]);
        if (memmem(p, n, pseudo[k][0], len) == NULL)
            nv[nn++] = (nghttp2_nv){(uint8_t *)pseudo[k][0],
                                    (uint8_t *)pseudo[k][1], len,
                                    strlen(pseudo[k][1]), 0};
    }
    while (p < e && nn < fd_nelems(nv)) {
        const uint8_t *eol = memchr(p, '\n', (size_t)(e - p)), *c;
        size_t skip;
        if (eol == NULL)
            eol = e;
        skip = p < eol && *p == ':'; /* a pseudo-field's own colon */
        c = memchr(p + skip, ':', (size_t)(eol - p) - skip);
        if (c && c > p) {
            const uint8_t *v = c + 1;
            while (v < eol && *v == ' ')
                v++;
            nv[nn++] = (nghttp2_nv){(uint8_t *)p, (uint8_t *)v,
                                    (size_t)(c - p), (size_t)(eol - v), 0};
        }
        p = eol + 1;
    }
    /* names are sent as they came: an upper-case one is a malformed
     * request, which the session must answer */
    rv = nghttp2_hd_deflate_hd(d, out, out_size, nv, nn);
    return rv < 0 ? 0 : (size_t)rv;
}

/* The client's frames, after the preface and a SETTINGS: into h2buf. */
static size_t h2_frames(const uint8_t *p, size_t n)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    nghttp2_hd_deflater *d;
    uint8_t block[8192];
    size_t at = sizeof(preface) - 1;

    memcpy(h2buf, preface, at);
    at = put_frame(at, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
    if (nghttp2_hd_deflate_new(&d, 4096) != 0)
        abort();
    while (n >= 4) {
        unsigned t = p[0], type = t & 0x0f, flags = p[1];
        uint32_t sid = t & 0x40 ? 2u * p[2] + 1 : p[2];
        size_t len = fd_min((size_t)p[3], n - 4);
        const uint8_t *pl = p + 4;

        if (type > 9)
            type = NGHTTP2_HEADERS;
        if ((type == NGHTTP2_HEADERS || type == NGHTTP2_CONTINUATION) &&
            !(t & 0x80)) {
            size_t k = hpack(d, pl, len, block, sizeof(block));
            at = put_frame(at, type, flags, sid, block, k);
        } else {
            at = put_frame(at, type, flags, sid, pl, len);
        }
        p += 4 + len;
        n -= 4 + len;
    }
    nghttp2_hd_deflate_del(d);
    return at;
}

/* --- one input ------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t before[MAX_FDS], after[MAX_FDS];
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cached_t *c;
    fd_cycle_t *cy;
    const uint8_t *sep;
    run_t x;
    uint32_t seed;
    unsigned i, steps, idle, hi;
    int batch;

    if (conf_path[0] == '\0')
        setup();
    if (size < 8)
        return 0;
    c = cycle_get(data);
    cy = c->cycle;
    upstream_pp = UPSTREAM_PP(data);
    batch = cy->events.batch_sends;
    if (fd_worker != NULL && batch != fd_sendq_active()) {
        /* the worker takes batch_sends at its start (the first cycle) */
        fd_sendq_exit();
        if (fd_sendq_init(batch) != FD_OK)
            abort();
    }
    quiet_log.level = data[3] & 0x40 ? FD_LOG_DEBUG : FD_LOG_EMERG;
    if (data[4] & 0x80)
        cache_empty(cy);
    if (fd_worker_fuzz_cycle(cy) != FD_OK)
        abort();

    memset(&x, 0, sizeof(x));
    memcpy(&seed, data + 4, 4);
    rng_state = seed;
    x.fin_up = data[3] & 1;
    x.fin_client = (data[3] >> 1) & 1;
    x.req_pieces = 1 + ((data[3] >> 2) & 3);
    x.resp_pieces = 1 + ((data[3] >> 4) & 3);
    data += 8;
    size -= 8;
    sep = memmem(data, size, SEP, sizeof(SEP) - 1);
    x.req = data;
    x.req_len = sep ? (size_t)(sep - data) : size;
    x.resp = sep ? sep + sizeof(SEP) - 1 : data + size;
    x.resp_len = sep ? size - (size_t)(x.resp - data) : 0;
    if (cy->listening->http2) {
        x.req_len = h2_frames(x.req, x.req_len);
        x.req = h2buf;
    }

    open_fds(before);
    x.client = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sin.sin_port = htons(client_port);
    if (x.client < 0 ||
        (connect(x.client, (struct sockaddr *)&sin, sizeof(sin)) < 0 &&
         errno != EINPROGRESS))
        abort();

    settle(&x, 0); /* the request, up to what the upstream is sent */
    settle(&x, 1); /* the upstream's answer, and the client's */

    /* both peers reset: the worker must let go of everything */
    reset_close(x.client);
    x.client = -1;
    for (i = 0; i < x.nup; i++)
        reset_close(x.up[i].fd);
    for (steps = 0, idle = 0; steps < MAX_STEPS && idle < IDLE_STEPS;
         steps++) {
        int fd;
        /* a connection the proxy opened after the resets */
        while ((fd = accept4(up_ls, NULL, NULL, SOCK_CLOEXEC)) >= 0)
            reset_close(fd);
        if (fd_worker_fuzz_turn(0) != FD_OK)
            abort();
        idle = fd_worker->nconns == 0 && fd_worker->nheld == 0 ? idle + 1
                                                               : 0;
    }
    if (idle < IDLE_STEPS) {
        fprintf(stderr, "fuzz_request: the worker still holds %u "
                "connections and %u tunnels after both peers reset\n",
                fd_worker->nconns, fd_worker->nheld);
        abort();
    }
    if (fd_worker_fuzz_cycle(NULL) != FD_OK)
        abort();
    /* the modules' work ended (an access log's flush with it): a timer
     * left is a connection or a tunnel nothing will end */
    if (fd_timer_expire() != -1) {
        fd_timer_t *t = fd_timer_fuzz_first();
        Dl_info di = {0};
        /* its handler names it: llvm-symbolizer --obj=FILE OFFSET */
        if (t)
            dladdr((void *)(uintptr_t)t->handler, &di);
        fprintf(stderr, "fuzz_request: a timer is armed after both peers "
                "reset and the modules' work ended: handler %s+0x%zx "
                "(%s), due in %d ms\n",
                di.dli_fname ? di.dli_fname : "?",
                t ? (size_t)((uintptr_t)t->handler -
                             (uintptr_t)di.dli_fbase)
                  : 0,
                di.dli_sname ? di.dli_sname : "no symbol",
                t ? (int)fd_msec32_diff(t->when,
                                        (uint32_t)fd_current_msec)
                  : 0);
        abort();
    }
    /* A descriptor opened in an input takes the lowest free number: one
     * above the highest open before, plus FD_SLACK, would need FD_SLACK
     * open at once. The cached cycles' directories make the range. */
    hi = open_fds(after);
    for (i = 0; i < nfds; i++) {
        struct stat st;
        if (!after[i] || before[i])
            continue;
        if (fstat((int)i, &st) == 0 && S_ISDIR(st.st_mode) && c->cycle &&
            c->ndirs < fd_nelems(c->dirs)) {
            c->dirs[c->ndirs++] = (int)i; /* kept by design */
            continue;
        }
        fprintf(stderr, "fuzz_request: descriptor %u leaked\n", i);
        abort();
    }
    if (hi + FD_SLACK > MAX_FDS) {
        fprintf(stderr, "fuzz_request: %u descriptors open, more than it "
                "checks\n", hi);
        abort();
    }
    nfds = hi + FD_SLACK;
    if (fresh)
        cycle_drop(c);
    return 0;
}
