/*
 * The proxy module's own header: what its files (fd_proxy_module.c: the
 * request, the response, retries; fd_proxy_conf.c: the location keys;
 * fd_proxy_tunnel.c: the tunnel after a 101) share. Upstream groups,
 * balancing, health and the keep-alive pool are core/http/fd_upstream.h.
 */
#ifndef FD_PROXY_H
#define FD_PROXY_H

#include <string.h>
#include <strings.h>

#include "fastd.h"
#include "fastd_upstream.h"

/* a literal's fd_str_t, a case-blind match of one, an array's length */
#define STR(lit) ((fd_str_t){sizeof(lit) - 1, (char *)(lit)})
#define lit_eq(s, lit)                                                       \
    ((s).len == sizeof(lit) - 1 && strncasecmp((s).data, lit, (s).len) == 0)
#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

enum { HOST_PASS, HOST_UPSTREAM };

/* what a location speaks to its upstream */
enum { PROXY_H1, PROXY_H2, PROXY_GRPC };

/* request headers the proxy generates, which a set_header replaces */
#define GEN_HOST 0x01
#define GEN_XFF 0x02
#define GEN_XRIP 0x04
#define GEN_XFP 0x08
#define GEN_XFH 0x10

/*
 * Results of the steps of a request, the engine's (fastd_upstream.h):
 * PX_DONE: it is over (r may be gone), touch nothing. PX_WAIT: stop here,
 * an event resumes it (a new attempt began, or the client's output is
 * full). The response header parser also says PX_MORE (incomplete) and
 * PX_INTERIM (a 1xx was skipped).
 */
#define PX_OK FD_OK
#define PX_WAIT FD_AGAIN
#define PX_DONE FD_DONE
enum { PX_MORE = 1, PX_INTERIM };

enum { FR_NONE, FR_LENGTH, FR_CHUNKED, FR_CLOSE };

typedef struct proxy_req_s proxy_req_t;
typedef struct fd_proxy_cache_s fd_proxy_cache_t;
typedef struct fd_proxy_cache_valid_s fd_proxy_cache_valid_t;
typedef struct fd_proxy_cache_req_s fd_proxy_cache_req_t;

/* --- configuration (fd_proxy_conf.c) --- */

typedef struct {
    fd_str_t name;
    fd_str_t value;            /* as written */
    const fd_api_script_t *script; /* the value, compiled; empty: not
                                    * sent */
} set_header_t;

/* proxy_redirect = FROM TO (or default: resolved at init_conf) */
typedef struct {
    fd_str_t from;             /* a prefix of Location / Refresh's URL */
    const fd_api_script_t *to; /* what replaces it */
    fd_str_t to_rest;          /* default: the client's scheme://host, then
                                * this */
    unsigned dflt:1;
} redirect_t;

typedef struct {
    char *upstream_name;       /* upstream = NAME */
    char *pass;                /* pass = http[s]://NAME/uri */
    char *proxy_host_src;      /* proxy_host = pass | upstream */
    int proxy_host;            /* HOST_* */
    uint64_t connect_timeout;  /* the options of uc */
    uint64_t send_timeout;
    uint64_t read_timeout;
    unsigned next_upstream;    /* FD_API_UPSTREAM_NEXT_* */
    int64_t next_upstream_tries;
    int buffering;
    uint64_t websocket_idle_timeout;
    int websocket;
    fd_api_tls_client_t *tls;  /* proxy_ssl_*'s files, protocols, ciphers */
    int ssl_verify;            /* ... and its flags */
    int ssl_server_name;
    int ssl_session_reuse;
    char *ssl_name;

    /* built */
    fd_api_upstream_t *group;  /* upstream = NAME, or pass's HOST:PORT */
    fd_api_upstream_conf_t *uc; /* the location's requests to it */
    char *pass_host;           /* HOST of pass, or the group's NAME */
    fd_str_t uri;              /* the URI part of pass, if any */
    unsigned has_uri:1;
    unsigned https:1;
    unsigned nodelay:1;        /* no buffering: the client's writes go at
                                * once (TCP_NODELAY) */
    unsigned h2:2;             /* PROXY_H1, PROXY_H2, PROXY_GRPC */
    set_header_t *hdrs;
    unsigned nhdrs;
    unsigned gen_replaced;     /* GEN_* a set_header replaces */

    /* response headers: proxy_hide_header, proxy_pass_header (names),
     * proxy_redirect (rules, in order; the first that matches applies) */
    fd_str_t *hide;
    unsigned nhide;
    fd_str_t *pass_hdr;
    unsigned npass_hdr;
    redirect_t *redirects;
    unsigned nredirects;
    unsigned redirect_set:1;   /* proxy_redirect given: no implied default */

    /* proxy_cache_* (fd_proxy_cache.c) */
    char *cache_name;
    char *cache_key_src;
    char *cache_methods_src;
    int cache_lock;
    uint64_t cache_lock_timeout;
    fd_proxy_cache_t *cache;   /* NULL: no caching here */
    const fd_api_script_t *cache_key;
    fd_proxy_cache_valid_t *valid;
    unsigned nvalid;
    unsigned cache_methods;    /* FD_API_GET | ... */
    const fd_api_script_t **bypass;
    unsigned nbypass;
    const fd_api_script_t **no_cache;
    unsigned nno_cache;
    unsigned cache_ignore;     /* FD_PROXY_IGNORE_* */
    char *use_stale_src;
    unsigned use_stale;        /* FD_PROXY_STALE_* */
    int cache_revalidate;
    int cache_background_update;
} proxy_loc_conf_t;

/* proxy_cache_use_stale: when an expired entry answers instead */
#define FD_PROXY_STALE_ERROR 0x001
#define FD_PROXY_STALE_TIMEOUT 0x002
#define FD_PROXY_STALE_INVALID 0x004
#define FD_PROXY_STALE_UPDATING 0x008
#define FD_PROXY_STALE_500 0x010
#define FD_PROXY_STALE_502 0x020
#define FD_PROXY_STALE_503 0x040
#define FD_PROXY_STALE_504 0x080
#define FD_PROXY_STALE_403 0x100
#define FD_PROXY_STALE_404 0x200
#define FD_PROXY_STALE_429 0x400

extern const fd_api_key_t fd_proxy_keys[];
int fd_proxy_set(void *conf, const char *key, const char *value, int own);
int fd_proxy_init_conf(void *conf);

/* --- a request --- */

/* "Name: value\r\n" into o */
static inline void fd_proxy_out_field(fd_api_out_t *o, fd_str_t n,
                                      fd_str_t v)
{
    char *p = fd_api_out_room(o, n.len + v.len + 4);

    if (p == NULL)
        return;
    memcpy(p, n.data, n.len);
    p += n.len;
    *p++ = ':';
    *p++ = ' ';
    memcpy(p, v.data, v.len);
    p += v.len;
    *p++ = '\r';
    *p++ = '\n';
    o->p = p;
}

struct proxy_req_s {
    fd_api_upstream_req_t *au; /* the request's upstream side */
    fd_request_t *r;
    proxy_loc_conf_t *lc;
    fd_api_upstream_t *up;
    fd_api_http_req_t in;      /* the client's request (fd_req_http) */

    /* the response */
    size_t hscan;              /* where the header's scan resumes */
    int framing;               /* FR_* */
    fd_api_http_chunked_t ck;

    int64_t rest;              /* FR_LENGTH: body bytes still to come */
    int64_t body_bytes;        /* of the client's, chunked */

    unsigned header_done:1;    /* this try's response header was taken */
    unsigned bg:1;             /* a background update (the cache's) */
    unsigned chunked_body:1;
    unsigned upgrade:1;        /* a tunnel was asked for */
    unsigned keepalive:1;      /* the response lets us reuse uc */
    unsigned cache_fields:1;   /* the cache may answer it: the client's
                                * If-* and Range stay here, not upstream */
    unsigned ninterim;         /* 1xx responses skipped */
    char ws_key[24];           /* HTTP/2 WebSocket: the upstream's key */

    fd_proxy_cache_req_t *cr;  /* the location caches: the key's state */
    int cache_status;          /* FD_PROXY_CACHE_* */
};

/* fd_proxy_module.c: HTTP/1.1, HTTP/2, gRPC (PROXY_H1 ...) */
extern const fd_api_upstream_proto_t fd_proxy_protos[3];
/* for the tunnel and the cache */
int fd_proxy_fail(proxy_req_t *px, int status);
/* r's proxy request (r->ctx is its upstream side), or NULL */
static inline proxy_req_t *fd_proxy_req(fd_request_t *r)
{
    void *u = fd_req_get_ctx(r);

    return u ? fd_api_upstream_data(u) : NULL;
}

/* The rest of the handler once the cache let the request go upstream:
 * the handler's result (FD_AGAIN, or a status when it failed at once). */
int fd_proxy_start(proxy_req_t *px);

/* --- the cache (fd_proxy_cache.c) --- */

#define FD_PROXY_CACHE_MAX 8  /* [cache] sections with status entries */
#define FD_PROXY_CACHE_SHM_SIZE (FD_PROXY_CACHE_MAX * 128) /* their bytes */
/* fd_proxy_cache_lookup(): the stale entry is in r, and the request
 * goes upstream to update it in the background */
#define FD_PROXY_CACHE_BACKGROUND 1001

enum { FD_PROXY_CACHE_NONE, FD_PROXY_CACHE_MISS, FD_PROXY_CACHE_HIT,
       FD_PROXY_CACHE_EXPIRED, FD_PROXY_CACHE_BYPASS, FD_PROXY_CACHE_STALE,
       FD_PROXY_CACHE_UPDATING, FD_PROXY_CACHE_REVALIDATED };

/* the [cache NAME] section type (the descriptor's .section) */
extern const fd_api_section_t fd_proxy_cache_section;
/* proxy_cache_valid and the other repeatable keys of the cache, a line
 * (from fd_proxy_set): FD_OK, FD_DECLINED (not one of them), FD_ERROR */
int fd_proxy_cache_set(proxy_loc_conf_t *lc, const char *key,
                       const char *value);
int fd_proxy_cache_init_conf(proxy_loc_conf_t *lc);
int fd_proxy_cache_init_worker(void);
void fd_proxy_cache_exit_worker(void);
#ifdef FD_FUZZ
/* tests/fuzz/fuzz_request.c: every cache of the running configuration
 * empty, as new (its files are the harness's to remove) */
void fd_proxy_cache_fuzz_reset(void);
#endif
void fd_proxy_cache_status(fd_api_status_t *st, const void *area,
                           unsigned worker);
void fd_proxy_cache_status_shared(fd_api_status_t *st);
void fd_proxy_cache_retire(void *retired, const void *area);
const char *fd_proxy_cache_status_text(int s);

/* The handler's first step where proxy_cache is set: FD_OK (a HIT is in
 * r), FD_AGAIN (it waits for another request's fill, then goes on by
 * itself), FD_DECLINED (go upstream), FD_PROXY_CACHE_BACKGROUND (the
 * stale entry went to the client already), or an error status. */
int fd_proxy_cache_lookup(proxy_req_t *px);
/* The response header was parsed (raw fields f, and r's): store it? */
void fd_proxy_cache_header(proxy_req_t *px, const fd_api_field_t *f,
                           unsigned nf, int64_t content_length);
/* Body pieces as they go to the client. */
void fd_proxy_cache_body(proxy_req_t *px, const fd_api_piece_t *p,
                         unsigned n);
/* The body is complete (whole: no byte after it): commit the file. */
void fd_proxy_cache_end(proxy_req_t *px, int whole);
/* The request ends otherwise: drop the file, release the fill. */
void fd_proxy_cache_abandon(proxy_req_t *px);
/* Stale entries and revalidation (see fd_proxy_cache.c) */
int fd_proxy_cache_drops_field(fd_str_t name);
void fd_proxy_cache_request_fields(proxy_req_t *px, fd_api_out_t *o);
int fd_proxy_cache_stale(proxy_req_t *px, unsigned cond);
int fd_proxy_cache_response(proxy_req_t *px, int status,
                            const fd_api_field_t *f, unsigned nf);

/* unit tested */
void fd_proxy_cache_hash(const char *key, size_t n, uint8_t md5[16]);
int fd_proxy_cache_levels(const char *s, uint8_t lv[3], unsigned *n);
size_t fd_proxy_cache_file(char *buf, size_t size, const char *path,
                           const uint8_t lv[3], unsigned nlv,
                           const uint8_t md5[16], size_t *dir_len);
struct fd_proxy_cache_valid_s {
    int status;                /* 0: any */
    int64_t sec;
};
/* proxy_ignore_headers: response fields the cache does not heed */
#define FD_PROXY_IGNORE_XAE 0x01      /* X-Accel-Expires */
#define FD_PROXY_IGNORE_EXPIRES 0x02
#define FD_PROXY_IGNORE_CC 0x04       /* Cache-Control */
#define FD_PROXY_IGNORE_COOKIE 0x08   /* Set-Cookie */
#define FD_PROXY_IGNORE_VARY 0x10
int64_t fd_proxy_cache_valid_for(const fd_api_field_t *f, unsigned nf,
                                 int status,
                                 const fd_proxy_cache_valid_t *valid,
                                 unsigned nvalid, time_t now, int auth,
                                 unsigned ignore);

/* --- WebSocket (fd_proxy_tunnel.c) --- */

/* WebSocket over HTTP/2 (RFC 8441, r->in.ext_connect): the handshake to
 * the upstream is fastd's. A fresh Sec-WebSocket-Key in px->ws_key
 * (FD_OK, FD_ERROR); the client's own fields for it, which are not
 * passed; whether the 101's fields hold the Sec-WebSocket-Accept that
 * answers the key. */
int fd_proxy_tunnel_key(proxy_req_t *px);
int fd_proxy_tunnel_own_field(fd_str_t name);
int fd_proxy_tunnel_accepted(proxy_req_t *px, const fd_api_field_t *f,
                             unsigned nf);

#endif
