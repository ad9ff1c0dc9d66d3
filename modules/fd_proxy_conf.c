/*
 * handler = proxy: the location keys (upstream, pass, set_header, the
 * timeouts, next_upstream, websocket, proxy_ssl_*), checked and built at
 * load: the group, the location's requests to it and their TLS client
 * on fastd_upstream.h (set_api). The [upstream NAME] keys are
 * core/http/fd_upstream.c's.
 */
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_proxy.h"

static int set_api(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                   const char *value);
static int set_hide_header(fd_conf_t *cf, const fd_directive_t *d,
                           void *conf, const char *value);
static int set_redirect(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *value);

static const fd_conf_enum_t host_enums[] = {
    {"pass", HOST_PASS}, {"upstream", HOST_UPSTREAM}, {NULL, 0}};

#define LOC(f) offsetof(proxy_loc_conf_t, f)

/* set_api's keys (d->offset): the TLS client's are FD_API_TLS_* */
enum { KEY_UPSTREAM = 100, KEY_PASS, KEY_NEXT };

const fd_directive_t fd_proxy_directives[] = {
    {.name = "upstream", .type = FD_CONF_CUSTOM, .offset = KEY_UPSTREAM,
     .set = set_api,
     .doc = "handler = proxy: the [upstream NAME] group requests go to; the "
            "request URI is passed as the client sent it (after a rewrite: "
            "the new URI, normalised and encoded)"},
    {.name = "pass", .type = FD_CONF_CUSTOM, .offset = KEY_PASS,
     .set = set_api,
     .handler_key = 1, /* fastcgi's too: the location's handler decides */
     .doc = "handler = proxy, as nginx's proxy_pass: http://NAME[/uri] where "
            "NAME is an [upstream NAME] or HOST[:PORT] (resolved at load). "
            "With a /uri, the part of the normalised path the location "
            "matched is replaced by it and the rest sent encoded, so \"..\", "
            "\"%2e%2e\" or \"//\" cannot leave the prefix (prefix and exact "
            "locations); a regex location passes the request URI unchanged. "
            "HOST:PORT may be followed by max_fails=N and fail_timeout=T, as "
            "on an [upstream] server line. https://NAME[/uri]: TLS to the "
            "upstream (HOST's port defaults to 443; see proxy_ssl_*). "
            "h2://NAME[/uri]: HTTP/2 to the upstream (prior knowledge), "
            "h2s:// over TLS with ALPN h2; requests share a few connections "
            "as streams (the group's h2_connections). grpc:// and grpcs://: "
            "HTTP/2 for gRPC (te: trailers sent, grpc-timeout and a second "
            "bound read_timeout); trailers pass through. An [upstream] whose "
            "servers say h2 is HTTP/2 with http:// too"},
    {.name = "proxy_host", .type = FD_CONF_ENUM, .offset = LOC(proxy_host),
     .def = "pass", .enums = host_enums,
     .doc = "Host header sent upstream: pass (the client's) or upstream "
            "(the upstream's name, or HOST:PORT of pass)"},
    {.name = "set_header", .type = FD_CONF_LIST, .offset = LOC(set_header),
     .doc = "\"Name: value\", repeatable: sent upstream instead of the "
            "client's header of that name (also replaces Host, "
            "X-Forwarded-*, X-Real-IP); the value may hold $variables "
            "(\"X-Request-Id: $request_id\"); an empty value (or one whose "
            "variables are all empty) removes it"},
    {.name = "proxy_hide_header", .type = FD_CONF_LIST, .offset = 0,
     .set = set_hide_header,
     .doc = "NAME, repeatable: an upstream response header not passed to "
            "the client. E.g. proxy_hide_header = X-Powered-By"},
    {.name = "proxy_pass_header", .type = FD_CONF_LIST, .offset = 1,
     .set = set_hide_header,
     .doc = "NAME, repeatable: pass an upstream response header the proxy "
            "drops by default: Server (then it replaces fastd's own), "
            "X-Pad or an X-Accel-* one. Date and the hop-by-hop and framing "
            "fields are never passed. E.g. proxy_pass_header = Server"},
    {.name = "proxy_redirect", .type = FD_CONF_LIST, .offset = 0,
     .set = set_redirect,
     .doc = "default (the default), off, or FROM TO, repeatable: rewrite a "
            "Location or Refresh URL of the upstream's that starts with "
            "FROM into TO ($variables allowed); the first rule that "
            "matches applies. default: the pass URL (http://HOST:PORT/uri) "
            "becomes the client's view, $scheme://HOST[:PORT] as the "
            "client asked, then the location's prefix for a pass with a "
            "URI, else /. Any proxy_redirect replaces the implied default "
            "(list default again to keep it); off removes every rule. E.g. "
            "proxy_redirect = http://app:3000/ https://$host/app/"},
    {.name = "buffering", .type = FD_CONF_FLAG, .offset = LOC(buffering),
     .def = "on",
     .doc = "on: the response body is read in pieces of up to 16k as fast "
            "as the client takes it (memory stays bounded; no temp files); "
            "off: each piece leaves as soon as it arrives (server-sent "
            "events, long polling)"},
    {.name = "connect_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(connect_timeout), .def = "60s",
     .doc = "connecting to an upstream server; 504 on expiry"},
    {.name = "proxy_send_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(send_timeout), .def = "60s",
     .doc = "between two writes of the request to the upstream; 504 on "
            "expiry"},
    /* its old name, which [http] send_timeout (the client's) shares */
    {.name = "send_timeout", .renamed = "proxy_send_timeout",
     .doc = "the upstream's is proxy_send_timeout; the client's is [http] "
            "send_timeout"},
    {.name = "read_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(read_timeout), .def = "60s",
     .doc = "between two reads of the response from the upstream; 504 on "
            "expiry before the response header"},
    {.name = "next_upstream", .type = FD_CONF_CUSTOM,
     .offset = KEY_NEXT, .def = "error timeout", .set = set_api,
     .doc = "when to try the next server: any of error timeout http_502 "
            "http_503 http_504 non_idempotent, or off. A request whose "
            "method is not idempotent is retried only if no byte of it was "
            "sent (or with non_idempotent), and never once its body was "
            "read from the client"},
    {.name = "next_upstream_tries", .type = FD_CONF_INT,
     .offset = LOC(next_upstream_tries), .def = "0",
     .doc = "at most this many servers per request; 0: no limit"},
    {.name = "websocket", .type = FD_CONF_FLAG, .offset = LOC(websocket),
     .def = "off",
     .doc = "on: a GET with \"Upgrade: websocket\" is passed with its "
            "Upgrade, and the upstream's 101 opens a tunnel; so is an "
            "HTTP/2 extended CONNECT with :protocol websocket (RFC 8441, "
            "answered 200; 501 where this is off). Off (as "
            "nginx, where the Upgrade headers must be set by hand): the "
            "tunnel's bytes escape every location rule, so a location "
            "opts in. No other upgrade token (h2c, TLS/1.0) is ever passed"},
    {.name = "websocket_idle_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(websocket_idle_timeout), .def = "1h",
     .doc = "a WebSocket tunnel with no byte either way for this long is "
            "closed"},
    {.name = "proxy_ssl_verify", .type = FD_CONF_FLAG,
     .offset = LOC(ssl_verify), .def = "on",
     .doc = "pass = https://: the upstream's certificate must verify "
            "against proxy_ssl_trusted_certificate and be valid for "
            "proxy_ssl_name; a failure is the server's error (the next "
            "server, then 502) with the reason in the error log. off: any "
            "certificate is taken"},
    {.name = "proxy_ssl_trusted_certificate", .type = FD_CONF_CUSTOM,
     .offset = FD_API_TLS_TRUSTED, .set = set_api,
     .doc = "PEM CA certificates the upstream's certificate is verified "
            "against; default: the system's store (OpenSSL's default "
            "paths: /etc/ssl/certs on Debian)"},
    {.name = "proxy_ssl_name", .type = FD_CONF_STR, .offset = LOC(ssl_name),
     .doc = "the name the upstream's certificate must be valid for, also "
            "sent as SNI; default: the HOST of pass (for an [upstream "
            "NAME], NAME). An IP address is matched against the "
            "certificate's IP addresses and sends no SNI"},
    {.name = "proxy_ssl_server_name", .type = FD_CONF_FLAG,
     .offset = LOC(ssl_server_name), .def = "on",
     .doc = "send proxy_ssl_name as SNI (RFC 6066). On by default, unlike "
            "nginx: an upstream behind a name-based TLS front needs it"},
    {.name = "proxy_ssl_certificate", .type = FD_CONF_CUSTOM,
     .offset = FD_API_TLS_CERTIFICATE, .set = set_api,
     .doc = "a PEM client certificate (then its chain) for upstreams that "
            "ask for one; with proxy_ssl_certificate_key"},
    {.name = "proxy_ssl_certificate_key", .type = FD_CONF_CUSTOM,
     .offset = FD_API_TLS_CERTIFICATE_KEY, .set = set_api,
     .doc = "the PEM private key of proxy_ssl_certificate; both are read by "
            "the master before privileges drop, again on reload"},
    {.name = "proxy_ssl_protocols", .type = FD_CONF_CUSTOM,
     .offset = FD_API_TLS_PROTOCOLS, .set = set_api,
     .def = "TLSv1.2 TLSv1.3",
     .doc = "TLSv1.2 and/or TLSv1.3 to upstreams (older ones are refused)"},
    {.name = "proxy_ssl_ciphers", .type = FD_CONF_CUSTOM,
     .offset = FD_API_TLS_CIPHERS, .set = set_api, .def = "DEFAULT",
     .doc = "TLS 1.2 cipher list to upstreams, OpenSSL syntax; DEFAULT is "
            "OpenSSL's (as nginx: an internal upstream may be older than "
            "the clients a server faces)"},
    {.name = "proxy_ssl_session_reuse", .type = FD_CONF_FLAG,
     .offset = LOC(ssl_session_reuse), .def = "on",
     .doc = "offer an upstream server the last TLS session it gave this "
            "worker when connecting to it again (an abbreviated handshake); "
            "only the location settings and name that verified a session "
            "reuse it"},
    {.name = "proxy_cache", .type = FD_CONF_STR, .offset = LOC(cache_name),
     .doc = "NAME of a [cache NAME] whose entries answer this location's "
            "GET and HEAD requests, and which keeps its cacheable "
            "responses (see proxy_cache_valid); off: none. "
            "$upstream_cache_status says what happened (MISS, HIT, "
            "EXPIRED, STALE, UPDATING, REVALIDATED, BYPASS). A request "
            "the cache may answer goes upstream without the client's "
            "If-* and Range fields (the cache answers them from the "
            "entry, as nginx)"},
    {.name = "proxy_cache_key", .type = FD_CONF_STR,
     .offset = LOC(cache_key_src), .def = "$scheme$http_host$request_uri",
     /* $http_host, not $host: the port and case the request gave reach
      * the upstream (Host, X-Forwarded-Host) and the stored Location, so
      * the key must tell them apart (Host: name:1 would otherwise store
      * a redirect to port 1 that every client of name gets) */
     .doc = "text and $variables an entry is found by (its MD5 names the "
            "file); the whole key is kept in the file and compared on "
            "every HIT. Keep in it every request input the response "
            "depends on: the default has $http_host (the port and case "
            "sent, which the upstream and a stored Location see), not "
            "$host"},
    {.name = "proxy_cache_valid", .type = FD_CONF_LIST,
     .offset = LOC(cache_valid),
     .doc = "[CODE...] TIME, repeatable: how long a response of these "
            "statuses is kept when it says nothing itself (X-Accel-Expires, "
            "Cache-Control max-age or s-maxage, Expires come first); no "
            "code: 200 301 302; any: every status. Without it only what "
            "the upstream marks fresh is kept. E.g. proxy_cache_valid = "
            "404 1m"},
    {.name = "proxy_cache_methods", .type = FD_CONF_STR,
     .offset = LOC(cache_methods_src), .def = "GET HEAD",
     .doc = "the methods looked up in the cache: GET and HEAD always (a "
            "HEAD is answered from a GET's entry, never stored). POST is "
            "accepted (nginx's configurations name it) but not answered "
            "from an entry nor stored: it goes upstream with its fields "
            "and counts as a MISS"},
    {.name = "proxy_cache_bypass", .type = FD_CONF_LIST,
     .offset = LOC(cache_bypass_src),
     .doc = "$variables, repeatable: when any is neither empty nor \"0\", "
            "the request goes upstream without looking in the cache "
            "(BYPASS), and its response is stored. E.g. proxy_cache_bypass "
            "= $http_x_refresh"},
    {.name = "proxy_no_cache", .type = FD_CONF_LIST,
     .offset = LOC(no_cache_src),
     .doc = "$variables, repeatable: when any is neither empty nor \"0\", "
            "the response is not stored. E.g. proxy_no_cache = "
            "$cookie_session"},
    {.name = "proxy_ignore_headers", .type = FD_CONF_LIST,
     .offset = LOC(ignore_src),
     .doc = "response fields the cache does not heed, repeatable or "
            "several in one: X-Accel-Expires, Expires, Cache-Control (then "
            "proxy_cache_valid decides), Set-Cookie (then a response "
            "setting a cookie is stored, cookie and all: for cookies every "
            "client may get), Vary (then one variant is kept for all). "
            "E.g. proxy_ignore_headers = Set-Cookie"},
    {.name = "proxy_cache_lock", .type = FD_CONF_FLAG,
     .offset = LOC(cache_lock), .def = "off",
     .doc = "on: of the requests that miss one key at once (in every "
            "worker), one goes upstream and the others wait for its entry "
            "(looking every 10 ms), up to proxy_cache_lock_timeout"},
    {.name = "proxy_cache_lock_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(cache_lock_timeout), .def = "5s", .min = 1, .max = 3600000,
     .doc = "a request waiting on proxy_cache_lock this long goes upstream "
            "itself, and its response is not stored (as nginx); also how "
            "long an expired entry counts as being updated (see "
            "proxy_cache_use_stale updating)"},
    {.name = "proxy_cache_use_stale", .type = FD_CONF_STR,
     .offset = LOC(use_stale_src), .def = "off",
     .doc = "when an expired entry answers (STALE) rather than the "
            "upstream, any of: error (no server could be reached or the "
            "connection failed before the header), timeout, "
            "invalid_header, http_500, http_502, http_503, http_504, "
            "http_403, http_404, http_429 (the upstream's answer, after "
            "proxy_next_upstream's tries), updating (another request is "
            "fetching a new one: UPDATING); off: never. E.g. "
            "proxy_cache_use_stale = error timeout updating http_502"},
    {.name = "proxy_cache_background_update", .type = FD_CONF_FLAG,
     .offset = LOC(cache_background_update), .def = "off",
     .doc = "on (with proxy_cache_use_stale updating): the first request "
            "past an entry's expiry is answered from it at once (STALE) "
            "and goes on upstream to update it, as nginx's; over HTTP/1.1 "
            "its connection takes the next request once the update ends "
            "(as nginx's), over HTTP/2 only the stream waits; the update "
            "goes on when its client leaves"},
    {.name = "proxy_cache_revalidate", .type = FD_CONF_FLAG,
     .offset = LOC(cache_revalidate), .def = "off",
     .doc = "on: an expired entry with an ETag or Last-Modified is asked "
            "for with If-None-Match / If-Modified-Since, and a 304 makes "
            "it fresh again and answers from it (REVALIDATED), by the "
            "304's own Cache-Control or Expires, else proxy_cache_valid"},
    FD_CONF_END};


/* n bytes of s, NUL-terminated, in the configuration's memory */
static char *conf_strndup(const char *s, size_t n)
{
    char *p = fd_api_conf_alloc(n + 1);

    if (p == NULL) {
        fd_api_conf_error("out of memory");
        return NULL;
    }
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static int upstream_set(proxy_loc_conf_t *lc, const char *value)
{
    lc->group = fd_api_upstream_group(value);
    if (lc->group == NULL) {
        fd_api_conf_error("unknown upstream \"%s\" (no [upstream %s] "
                          "section)", value, value);
        return FD_ERROR;
    }
    if ((lc->upstream_name = conf_strndup(value, strlen(value))) == NULL)
        return FD_ERROR;
    lc->pass = NULL;
    lc->has_uri = 0;
    lc->https = 0;
    lc->h2 = PROXY_H1; /* the group's server lines may say h2 */
    return FD_OK;
}

/* HOST[:PORT] or [IPv6][:PORT]: whether a port is given */
static int has_port(const char *name)
{
    const char *end = name[0] == '[' ? strchr(name, ']') : name;

    return end && strchr(end, ':') != NULL;
}

/* The name TLS checks the upstream's certificate for by default: the
 * group's name, or the HOST of HOST:PORT (no brackets around IPv6). */
static char *pass_host(const char *name, int group)
{
    const char *end;

    if (group)
        return conf_strndup(name, strlen(name));
    if (name[0] == '[' && (end = strchr(name, ']')) != NULL)
        return conf_strndup(name + 1, (size_t)(end - name - 1));
    end = strchr(name, ':');
    return conf_strndup(name, end ? (size_t)(end - name) : strlen(name));
}

static int pass_set(proxy_loc_conf_t *lc, const char *value)
{
    const char *auth, *end, *slash, *opts;
    char name[256];
    size_t n, ulen;
    static const struct {
        const char *scheme;
        unsigned https, h2;
    } schemes[] = {{"http://", 0, PROXY_H1},  {"https://", 1, PROXY_H1},
                   {"h2://", 0, PROXY_H2},    {"h2s://", 1, PROXY_H2},
                   {"grpc://", 0, PROXY_GRPC}, {"grpcs://", 1, PROXY_GRPC}};
    unsigned i;

    for (i = 0; i < fd_nelems(schemes); i++)
        if (strncmp(value, schemes[i].scheme,
                    strlen(schemes[i].scheme)) == 0)
            break;
    if (i == fd_nelems(schemes)) {
        fd_api_conf_error("\"pass\" must be http[s]://NAME[/uri] (or "
                          "h2[s]://, grpc[s]://), not \"%s\"", value);
        return FD_ERROR;
    }
    lc->https = schemes[i].https;
    lc->h2 = schemes[i].h2;
    auth = value + strlen(schemes[i].scheme);
    end = auth + strcspn(auth, " \t");
    for (opts = end; *opts == ' ' || *opts == '\t'; opts++)
        ;
    slash = memchr(auth, '/', (size_t)(end - auth));
    n = (size_t)((slash ? slash : end) - auth);
    if (n == 0 || n + 4 >= sizeof(name)) { /* room for ":443" */
        fd_api_conf_error("\"pass\": bad host in \"%s\"", value);
        return FD_ERROR;
    }
    memcpy(name, auth, n);
    name[n] = '\0';
    lc->group = fd_api_upstream_group(name);
    if (lc->group && *opts) {
        fd_api_conf_error("\"pass\": options for [upstream %s] go on its "
                          "\"server\" lines", name);
        return FD_ERROR;
    }
    lc->pass_host = pass_host(name, lc->group != NULL);
    if (lc->pass_host == NULL)
        return FD_ERROR;
    if (lc->group == NULL && lc->https && !has_port(name))
        memcpy(name + n, ":443", 5);
    if (lc->group == NULL &&
        (lc->group = fd_api_upstream_server(name, opts)) == NULL)
        return FD_ERROR;
    if ((lc->pass = conf_strndup(value, (size_t)(end - value))) == NULL)
        return FD_ERROR;
    lc->upstream_name = NULL;
    lc->has_uri = slash != NULL;
    if (slash) {
        ulen = (size_t)(end - slash);
        lc->uri = (fd_str_t){ulen, conf_strndup(slash, ulen)};
        if (lc->uri.data == NULL)
            return FD_ERROR;
    }
    return FD_OK;
}

/*
 * The keys that are on the API's calls (fastd_upstream.h: the group, the
 * TLS client, next_upstream), by d->offset, as an fd_api_module_t.set
 * has them. The module's descriptor is still the engine's (its cache is
 * not all on the API yet: issue 41), so the engine gives its hooks the
 * load, cf; they enter it for the API's calls, which find it there as a
 * public-API module's hooks do.
 */
static int set_api(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                   const char *value)
{
    proxy_loc_conf_t *lc = conf;
    int rc;

    fd_dso_conf_enter(cf);
    switch (d->offset) {
    case KEY_UPSTREAM:
        rc = upstream_set(lc, value);
        break;
    case KEY_PASS:
        rc = pass_set(lc, value);
        break;
    case KEY_NEXT:
        rc = fd_api_upstream_parse_next(value, &lc->next_upstream);
        break;
    default:
        rc = fd_api_tls_client_set(&lc->tls, (int)d->offset, d->name, value);
    }
    fd_dso_conf_enter(NULL);
    return rc;
}

/* fields the proxy writes or drops for framing: never passed */
static int hop_field(const char *n)
{
    static const char *const hop[] = {
        "connection", "keep-alive", "transfer-encoding", "content-length",
        "te", "trailer", "upgrade", "proxy-connection", "date"};
    unsigned i;

    for (i = 0; i < fd_nelems(hop); i++)
        if (strcasecmp(n, hop[i]) == 0)
            return 1;
    return 0;
}

/* proxy_hide_header (d->offset 0) and proxy_pass_header (1) = NAME */
static int set_hide_header(fd_conf_t *cf, const fd_directive_t *d,
                           void *conf, const char *v)
{
    proxy_loc_conf_t *lc = conf;
    fd_str_t **list = d->offset ? &lc->pass_hdr : &lc->hide, *l;
    unsigned *n = d->offset ? &lc->npass_hdr : &lc->nhide;
    size_t k, len = strlen(v);

    for (k = 0; k < len; k++)
        if (!fd_http_tchar[(uint8_t)v[k]])
            break;
    if (len == 0 || k < len)
        return fd_conf_error(cf, "\"%s\" needs one header NAME, not "
                             "\"%s\"", d->name, v);
    if (d->offset && hop_field(v))
        return fd_conf_error(cf, "\"proxy_pass_header\": %s is never "
                             "passed (fastd's own, or hop-by-hop)", v);
    if ((l = fd_palloc(cf->pool, (*n + 1) * sizeof(*l))) == NULL)
        return fd_conf_error(cf, "out of memory");
    if (*n)
        memcpy(l, *list, *n * sizeof(*l));
    l[*n] = (fd_str_t){len, fd_pstrdup(cf->pool, v, len)};
    *list = l;
    (*n)++;
    return FD_OK;
}

/* A value with $variables compiled as fd_api_script_compile() makes it:
 * the request side reads it through the API (fd_req_script_add). */
const fd_api_script_t *fd_proxy_script(fd_conf_t *cf, const char *v,
                                       size_t n, const char *what)
{
    fd_var_script_t *s = fd_pcalloc(cf->pool, sizeof(*s));

    if (s == NULL) {
        fd_conf_error(cf, "out of memory");
        return NULL;
    }
    if (fd_var_compile(cf, s, v, n, 0, what) != FD_OK)
        return NULL;
    return (const fd_api_script_t *)s;
}

static redirect_t *redirect_new(fd_conf_t *cf, proxy_loc_conf_t *lc)
{
    redirect_t *rd = fd_palloc(cf->pool, (lc->nredirects + 1) * sizeof(*rd));

    if (rd == NULL) {
        fd_conf_error(cf, "out of memory");
        return NULL;
    }
    if (lc->nredirects)
        memcpy(rd, lc->redirects, lc->nredirects * sizeof(*rd));
    lc->redirects = rd;
    memset(&rd[lc->nredirects], 0, sizeof(*rd));
    return &rd[lc->nredirects++];
}

/* proxy_redirect = default | off | FROM TO */
static int set_redirect(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *v)
{
    proxy_loc_conf_t *lc = conf;
    const char *sp, *to;
    redirect_t *rd;

    (void)d;
    lc->redirect_set = 1; /* no implied default any more */
    if (strcmp(v, "off") == 0) {
        lc->nredirects = 0;
        return FD_OK;
    }
    if (strcmp(v, "default") == 0) {
        if ((rd = redirect_new(cf, lc)) == NULL)
            return FD_ERROR;
        rd->dflt = 1;
        return FD_OK;
    }
    sp = v + strcspn(v, " \t");
    for (to = sp; *to == ' ' || *to == '\t'; to++)
        ;
    if (sp == v || *to == '\0' || to[strcspn(to, " \t")] != '\0')
        return fd_conf_error(cf, "\"proxy_redirect\" must be default, off "
                             "or FROM TO, not \"%s\"", v);
    if (memchr(v, '$', (size_t)(sp - v)))
        return fd_conf_error(cf, "\"proxy_redirect\": FROM is literal "
                             "text (variables go in TO)");
    if ((rd = redirect_new(cf, lc)) == NULL)
        return FD_ERROR;
    rd->from = (fd_str_t){(size_t)(sp - v),
                          fd_pstrdup(cf->pool, v, (size_t)(sp - v))};
    rd->to = fd_proxy_script(cf, to, strlen(to), "proxy_redirect");
    return rd->to ? FD_OK : FD_ERROR;
}

/* proxy_redirect default, for this location: FROM is the pass URL with
 * its URI (then TO's rest is the location's prefix, whose part of the
 * path the URI replaced), or without one http://HOST[:PORT]/ (then "/");
 * TO begins with the client's scheme://host[:port] */
static int redirect_default(fd_conf_t *cf, proxy_loc_conf_t *lc,
                            fd_http_loc_t *loc, redirect_t *rd)
{
    const char *p = lc->pass, *auth;
    fd_sbuf_t sb;

    if (lc->has_uri) {
        rd->from = (fd_str_t){strlen(p), p};
        rd->to_rest = loc->match;
        return FD_OK;
    }
    if (fd_sbuf_init(&sb, cf->pool, 64) != FD_OK)
        return fd_conf_error(cf, "out of memory");
    if (p) {
        auth = strstr(p, "://") + 3;
        fd_sbuf_add(&sb, p, (size_t)(auth - p) + strcspn(auth, "/"));
    } else {
        fd_sbuf_add_lit(&sb, "http://");
        fd_sbuf_add(&sb, fd_api_upstream_name(lc->group),
                    strlen(fd_api_upstream_name(lc->group)));
    }
    fd_sbuf_addc(&sb, '/');
    if (fd_sbuf_failed(&sb))
        return fd_conf_error(cf, "out of memory");
    rd->from = fd_sbuf_str(&sb);
    rd->to_rest = fd_string("/");
    return FD_OK;
}

/* pass = https://: the TLS client of the location's requests */
static int init_tls(proxy_loc_conf_t *lc)
{
    static const struct {
        int opt;
        const char *key;
        size_t off;
    } flags[] = {{FD_API_TLS_VERIFY, "proxy_ssl_verify", LOC(ssl_verify)},
                 {FD_API_TLS_SERVER_NAME, "proxy_ssl_server_name",
                  LOC(ssl_server_name)},
                 {FD_API_TLS_SESSION_REUSE, "proxy_ssl_session_reuse",
                  LOC(ssl_session_reuse)}};
    unsigned i;

    for (i = 0; i < fd_nelems(flags); i++)
        if (fd_api_tls_client_set(&lc->tls, flags[i].opt, flags[i].key,
                                  *(int *)((char *)lc + flags[i].off)
                                      ? "on"
                                      : "off") != FD_OK)
            return FD_ERROR;
    fd_api_conf_at_key(lc, lc->ssl_name ? "proxy_ssl_name" : "pass");
    return fd_api_upstream_conf_tls(lc->uc, lc->tls,
                                    lc->ssl_name ? lc->ssl_name
                                                 : lc->pass_host);
}

/* the location's requests to its group (fastd_upstream.h) */
static int init_upstream(proxy_loc_conf_t *lc)
{
    lc->uc = fd_api_upstream_conf(lc->group, &fd_proxy_protos[lc->h2]);
    if (lc->uc == NULL ||
        fd_api_upstream_conf_set(lc->uc, FD_API_UPSTREAM_CONNECT_TIMEOUT,
                                 (int64_t)lc->connect_timeout) != FD_OK ||
        fd_api_upstream_conf_set(lc->uc, FD_API_UPSTREAM_SEND_TIMEOUT,
                                 (int64_t)lc->send_timeout) != FD_OK ||
        fd_api_upstream_conf_set(lc->uc, FD_API_UPSTREAM_READ_TIMEOUT,
                                 (int64_t)lc->read_timeout) != FD_OK ||
        fd_api_upstream_conf_set(lc->uc, FD_API_UPSTREAM_NEXT,
                                 (int64_t)lc->next_upstream) != FD_OK ||
        fd_api_upstream_conf_set(lc->uc, FD_API_UPSTREAM_NEXT_TRIES,
                                 (int64_t)lc->next_upstream_tries) != FD_OK ||
        fd_api_upstream_conf_set(lc->uc, FD_API_UPSTREAM_BUFFERING,
                                 (int64_t)lc->buffering) != FD_OK)
        return FD_ERROR;
    return lc->https ? init_tls(lc) : FD_OK;
}

static int init_conf(fd_conf_t *cf, fd_http_loc_t *loc,
                     proxy_loc_conf_t *lc);

/* handler = proxy's locations, with the load entered for the API's calls
 * (see set_api) */
int fd_proxy_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    int rc;

    if (loc->handler != &fd_proxy_module)
        return FD_OK;
    fd_dso_conf_enter(cf);
    rc = init_conf(cf, loc, conf);
    fd_dso_conf_enter(NULL);
    return rc;
}

static int init_conf(fd_conf_t *cf, fd_http_loc_t *loc,
                     proxy_loc_conf_t *lc)
{
    unsigned i;

    if (fd_proxy_cache_init_conf(cf, lc) != FD_OK)
        return FD_ERROR;
    if (lc->group == NULL)
        return fd_conf_error(cf, "%s: handler = proxy needs \"upstream = "
                             "NAME\" or \"pass = http://NAME/\"", loc->name);
    if (loc->kind == FD_LOC_REGEX || loc->kind == FD_LOC_REGEX_CASELESS)
        lc->has_uri = 0; /* documented: a regex location passes the URI */
    if (lc->h2 == PROXY_H1 && fd_api_upstream_is_h2(lc->group))
        lc->h2 = PROXY_H2;
    if (lc->h2 && lc->cache)
        return fd_conf_error(cf, "%s: proxy_cache is not available with "
                             "an HTTP/2 or gRPC upstream yet", loc->name);
    if (lc->h2 && fd_api_upstream_proxy_protocol(lc->group))
        return fd_conf_error(cf, "%s: an HTTP/2 upstream's connections "
                             "carry many clients' requests: no "
                             "proxy_protocol", loc->name);
    lc->nodelay = !lc->buffering;
    if (init_upstream(lc) != FD_OK)
        return FD_ERROR;
    if (!lc->redirect_set) {
        redirect_t *rd = redirect_new(cf, lc);
        if (rd == NULL)
            return FD_ERROR;
        rd->dflt = 1;
    }
    for (i = 0; i < lc->nredirects; i++)
        if (lc->redirects[i].dflt &&
            redirect_default(cf, lc, loc, &lc->redirects[i]) != FD_OK)
            return FD_ERROR;
    lc->nhdrs = lc->set_header.n;
    lc->hdrs = fd_pcalloc(cf->pool, (lc->nhdrs + 1) * sizeof(set_header_t));
    for (i = 0; i < lc->nhdrs; i++) {
        const char *s = lc->set_header.items[i], *colon = strchr(s, ':');
        const char *v;
        size_t n, k;
        set_header_t *h = &lc->hdrs[i];

        n = colon ? (size_t)(colon - s) : 0;
        for (k = 0; k < n; k++)
            if (!fd_http_tchar[(uint8_t)s[k]])
                break;
        if (n == 0 || k < n)
            return fd_conf_error(cf, "\"set_header\" must be \"Name: "
                                 "value\", not \"%s\"", s);
        for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
            ;
        h->name = (fd_str_t){n, s};
        h->value = (fd_str_t){strlen(v), v};
        while (h->value.len && (v[h->value.len - 1] == ' ' ||
                                v[h->value.len - 1] == '\t'))
            h->value.len--;
        for (k = 0; k < h->value.len; k++)
            if ((uint8_t)v[k] < 0x20 && v[k] != '\t')
                return fd_conf_error(cf, "\"set_header\": control character "
                                     "in \"%s\"", s);
        if ((h->script = fd_proxy_script(cf, v, h->value.len,
                                         "set_header")) == NULL)
            return FD_ERROR;
        if (fd_str_caseeq_lit(h->name, "connection") ||
            fd_str_caseeq_lit(h->name, "transfer-encoding") ||
            fd_str_caseeq_lit(h->name, "content-length") ||
            fd_str_caseeq_lit(h->name, "upgrade") ||
            fd_str_caseeq_lit(h->name, "te") ||
            fd_str_caseeq_lit(h->name, "keep-alive"))
            return fd_conf_error(cf, "\"set_header\": %.*s is the proxy's to "
                                 "set (framing and hop-by-hop)", (int)n, s);
        if (fd_str_caseeq_lit(h->name, "host"))
            lc->gen_replaced |= GEN_HOST;
        else if (fd_str_caseeq_lit(h->name, "x-forwarded-for"))
            lc->gen_replaced |= GEN_XFF;
        else if (fd_str_caseeq_lit(h->name, "x-real-ip"))
            lc->gen_replaced |= GEN_XRIP;
        else if (fd_str_caseeq_lit(h->name, "x-forwarded-proto"))
            lc->gen_replaced |= GEN_XFP;
        else if (fd_str_caseeq_lit(h->name, "x-forwarded-host"))
            lc->gen_replaced |= GEN_XFH;
    }
    return FD_OK;
}
