/*
 * handler = proxy: the location keys (upstream, pass, set_header, the
 * timeouts, next_upstream, websocket, proxy_ssl_*), checked and built at
 * load: the group, the location's requests to it and their TLS client
 * on fastd_upstream.h (fd_proxy_set, fd_proxy_init_conf). The [upstream
 * NAME] keys are core/http/fd_upstream.c's; proxy_cache_*'s checks are
 * fd_proxy_cache.c's.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fd_proxy.h"

#define LOC(f) offsetof(proxy_loc_conf_t, f)

const fd_api_key_t fd_proxy_keys[] = {
    {.name = "upstream", .type = FD_API_CUSTOM,
     .doc = "handler = proxy: the [upstream NAME] group requests go to; the "
            "request URI is passed as the client sent it (after a rewrite: "
            "the new URI, normalised and encoded)"},
    {.name = "pass", .type = FD_API_CUSTOM,
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
    {.name = "proxy_host", .type = FD_API_STRING,
     .offset = LOC(proxy_host_src), .def = "pass",
     .doc = "Host header sent upstream: pass (the client's) or upstream "
            "(the upstream's name, or HOST:PORT of pass)"},
    {.name = "set_header", .type = FD_API_LIST,
     .doc = "\"Name: value\", repeatable: sent upstream instead of the "
            "client's header of that name (also replaces Host, "
            "X-Forwarded-*, X-Real-IP); the value may hold $variables "
            "(\"X-Request-Id: $request_id\"); an empty value (or one whose "
            "variables are all empty) removes it"},
    {.name = "proxy_hide_header", .type = FD_API_LIST,
     .doc = "NAME, repeatable: an upstream response header not passed to "
            "the client. E.g. proxy_hide_header = X-Powered-By"},
    {.name = "proxy_pass_header", .type = FD_API_LIST,
     .doc = "NAME, repeatable: pass an upstream response header the proxy "
            "drops by default: Server (then it replaces fastd's own), "
            "X-Pad or an X-Accel-* one. Date and the hop-by-hop and framing "
            "fields are never passed. E.g. proxy_pass_header = Server"},
    {.name = "proxy_redirect", .type = FD_API_LIST,
     .doc = "default (the default), off, or FROM TO, repeatable: rewrite a "
            "Location or Refresh URL of the upstream's that starts with "
            "FROM into TO ($variables allowed); the first rule that "
            "matches applies. default: the pass URL (http://HOST:PORT/uri) "
            "becomes the client's view, $scheme://HOST[:PORT] as the "
            "client asked, then the location's prefix for a pass with a "
            "URI, else /. Any proxy_redirect replaces the implied default "
            "(list default again to keep it); off removes every rule. E.g. "
            "proxy_redirect = http://app:3000/ https://$host/app/"},
    {.name = "buffering", .type = FD_API_FLAG, .offset = LOC(buffering),
     .def = "on",
     .doc = "on: the response body is read in pieces of up to 16k as fast "
            "as the client takes it (memory stays bounded; no temp files); "
            "off: each piece leaves as soon as it arrives (server-sent "
            "events, long polling)"},
    {.name = "connect_timeout", .type = FD_API_MSEC,
     .offset = LOC(connect_timeout), .def = "60s",
     .doc = "connecting to an upstream server; 504 on expiry"},
    {.name = "proxy_send_timeout", .type = FD_API_MSEC,
     .offset = LOC(send_timeout), .def = "60s",
     .doc = "between two writes of the request to the upstream; 504 on "
            "expiry"},
    /* its old name, which [http] send_timeout (the client's) shares */
    {.name = "send_timeout", .type = FD_API_RENAMED,
     .def = "proxy_send_timeout",
     .doc = "the upstream's is proxy_send_timeout; the client's is [http] "
            "send_timeout"},
    {.name = "read_timeout", .type = FD_API_MSEC,
     .offset = LOC(read_timeout), .def = "60s",
     .doc = "between two reads of the response from the upstream; 504 on "
            "expiry before the response header"},
    {.name = "next_upstream", .type = FD_API_CUSTOM, .def = "error timeout",
     .doc = "when to try the next server: any of error timeout http_502 "
            "http_503 http_504 non_idempotent, or off. A request whose "
            "method is not idempotent is retried only if no byte of it was "
            "sent (or with non_idempotent), and never once its body was "
            "read from the client"},
    {.name = "next_upstream_tries", .type = FD_API_INT,
     .offset = LOC(next_upstream_tries), .def = "0",
     .doc = "at most this many servers per request; 0: no limit"},
    {.name = "websocket", .type = FD_API_FLAG, .offset = LOC(websocket),
     .def = "off",
     .doc = "on: a GET with \"Upgrade: websocket\" is passed with its "
            "Upgrade, and the upstream's 101 opens a tunnel; so is an "
            "HTTP/2 extended CONNECT with :protocol websocket (RFC 8441, "
            "answered 200; 501 where this is off). Off (as "
            "nginx, where the Upgrade headers must be set by hand): the "
            "tunnel's bytes escape every location rule, so a location "
            "opts in. No other upgrade token (h2c, TLS/1.0) is ever passed"},
    {.name = "websocket_idle_timeout", .type = FD_API_MSEC,
     .offset = LOC(websocket_idle_timeout), .def = "1h",
     .doc = "a WebSocket tunnel with no byte either way for this long is "
            "closed"},
    {.name = "proxy_ssl_verify", .type = FD_API_FLAG,
     .offset = LOC(ssl_verify), .def = "on",
     .doc = "pass = https://: the upstream's certificate must verify "
            "against proxy_ssl_trusted_certificate and be valid for "
            "proxy_ssl_name; a failure is the server's error (the next "
            "server, then 502) with the reason in the error log. off: any "
            "certificate is taken"},
    {.name = "proxy_ssl_trusted_certificate", .type = FD_API_CUSTOM,
     .doc = "PEM CA certificates the upstream's certificate is verified "
            "against; default: the system's store (OpenSSL's default "
            "paths: /etc/ssl/certs on Debian)"},
    {.name = "proxy_ssl_name", .type = FD_API_STRING, .offset = LOC(ssl_name),
     .doc = "the name the upstream's certificate must be valid for, also "
            "sent as SNI; default: the HOST of pass (for an [upstream "
            "NAME], NAME). An IP address is matched against the "
            "certificate's IP addresses and sends no SNI"},
    {.name = "proxy_ssl_server_name", .type = FD_API_FLAG,
     .offset = LOC(ssl_server_name), .def = "on",
     .doc = "send proxy_ssl_name as SNI (RFC 6066). On by default, unlike "
            "nginx: an upstream behind a name-based TLS front needs it"},
    {.name = "proxy_ssl_certificate", .type = FD_API_CUSTOM,
     .doc = "a PEM client certificate (then its chain) for upstreams that "
            "ask for one; with proxy_ssl_certificate_key"},
    {.name = "proxy_ssl_certificate_key", .type = FD_API_CUSTOM,
     .doc = "the PEM private key of proxy_ssl_certificate; both are read by "
            "the master before privileges drop, again on reload"},
    {.name = "proxy_ssl_protocols", .type = FD_API_CUSTOM,
     .def = "TLSv1.2 TLSv1.3",
     .doc = "TLSv1.2 and/or TLSv1.3 to upstreams (older ones are refused)"},
    {.name = "proxy_ssl_ciphers", .type = FD_API_CUSTOM, .def = "DEFAULT",
     .doc = "TLS 1.2 cipher list to upstreams, OpenSSL syntax; DEFAULT is "
            "OpenSSL's (as nginx: an internal upstream may be older than "
            "the clients a server faces)"},
    {.name = "proxy_ssl_session_reuse", .type = FD_API_FLAG,
     .offset = LOC(ssl_session_reuse), .def = "on",
     .doc = "offer an upstream server the last TLS session it gave this "
            "worker when connecting to it again (an abbreviated handshake); "
            "only the location settings and name that verified a session "
            "reuse it"},
    {.name = "proxy_cache", .type = FD_API_STRING, .offset = LOC(cache_name),
     .doc = "NAME of a [cache NAME] whose entries answer this location's "
            "GET and HEAD requests, and which keeps its cacheable "
            "responses (see proxy_cache_valid); off: none. "
            "$upstream_cache_status says what happened (MISS, HIT, "
            "EXPIRED, STALE, UPDATING, REVALIDATED, BYPASS). A request "
            "the cache may answer goes upstream without the client's "
            "If-* and Range fields (the cache answers them from the "
            "entry, as nginx)"},
    {.name = "proxy_cache_key", .type = FD_API_STRING,
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
    {.name = "proxy_cache_valid", .type = FD_API_LIST,
     .doc = "[CODE...] TIME, repeatable: how long a response of these "
            "statuses is kept when it says nothing itself (X-Accel-Expires, "
            "Cache-Control max-age or s-maxage, Expires come first); no "
            "code: 200 301 302; any: every status. Without it only what "
            "the upstream marks fresh is kept. E.g. proxy_cache_valid = "
            "404 1m"},
    {.name = "proxy_cache_methods", .type = FD_API_STRING,
     .offset = LOC(cache_methods_src), .def = "GET HEAD",
     .doc = "the methods looked up in the cache: GET and HEAD always (a "
            "HEAD is answered from a GET's entry, never stored). POST is "
            "accepted (nginx's configurations name it) but not answered "
            "from an entry nor stored: it goes upstream with its fields "
            "and counts as a MISS"},
    {.name = "proxy_cache_bypass", .type = FD_API_LIST,
     .doc = "$variables, repeatable: when any is neither empty nor \"0\", "
            "the request goes upstream without looking in the cache "
            "(BYPASS), and its response is stored. E.g. proxy_cache_bypass "
            "= $http_x_refresh"},
    {.name = "proxy_no_cache", .type = FD_API_LIST,
     .doc = "$variables, repeatable: when any is neither empty nor \"0\", "
            "the response is not stored. E.g. proxy_no_cache = "
            "$cookie_session"},
    {.name = "proxy_ignore_headers", .type = FD_API_LIST,
     .doc = "response fields the cache does not heed, repeatable or "
            "several in one: X-Accel-Expires, Expires, Cache-Control (then "
            "proxy_cache_valid decides), Set-Cookie (then a response "
            "setting a cookie is stored, cookie and all: for cookies every "
            "client may get), Vary (then one variant is kept for all). "
            "E.g. proxy_ignore_headers = Set-Cookie"},
    {.name = "proxy_cache_lock", .type = FD_API_FLAG,
     .offset = LOC(cache_lock), .def = "off",
     .doc = "on: of the requests that miss one key at once (in every "
            "worker), one goes upstream and the others wait for its entry "
            "(looking every 10 ms), up to proxy_cache_lock_timeout"},
    {.name = "proxy_cache_lock_timeout", .type = FD_API_MSEC,
     .offset = LOC(cache_lock_timeout), .def = "5s",
     .doc = "a request waiting on proxy_cache_lock this long goes upstream "
            "itself, and its response is not stored (as nginx); also how "
            "long an expired entry counts as being updated (see "
            "proxy_cache_use_stale updating)"},
    {.name = "proxy_cache_use_stale", .type = FD_API_STRING,
     .offset = LOC(use_stale_src), .def = "off",
     .doc = "when an expired entry answers (STALE) rather than the "
            "upstream, any of: error (no server could be reached or the "
            "connection failed before the header), timeout, "
            "invalid_header, http_500, http_502, http_503, http_504, "
            "http_403, http_404, http_429 (the upstream's answer, after "
            "proxy_next_upstream's tries), updating (another request is "
            "fetching a new one: UPDATING); off: never. E.g. "
            "proxy_cache_use_stale = error timeout updating http_502"},
    {.name = "proxy_cache_background_update", .type = FD_API_FLAG,
     .offset = LOC(cache_background_update), .def = "off",
     .doc = "on (with proxy_cache_use_stale updating): the first request "
            "past an entry's expiry is answered from it at once (STALE) "
            "and goes on upstream to update it, as nginx's; over HTTP/1.1 "
            "its connection takes the next request once the update ends "
            "(as nginx's), over HTTP/2 only the stream waits; the update "
            "goes on when its client leaves"},
    {.name = "proxy_cache_revalidate", .type = FD_API_FLAG,
     .offset = LOC(cache_revalidate), .def = "off",
     .doc = "on: an expired entry with an ETag or Last-Modified is asked "
            "for with If-None-Match / If-Modified-Since, and a 304 makes "
            "it fresh again and answers from it (REVALIDATED), by the "
            "304's own Cache-Control or Expires, else proxy_cache_valid"},
    {NULL, 0, 0, NULL, NULL}};


static int upstream_set(proxy_loc_conf_t *lc, const char *value)
{
    lc->group = fd_api_upstream_group(value);
    if (lc->group == NULL) {
        fd_api_conf_error("unknown upstream \"%s\" (no [upstream %s] "
                          "section)", value, value);
        return FD_ERROR;
    }
    if ((lc->upstream_name = fd_api_conf_strndup(value, strlen(value))) == NULL)
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
        return fd_api_conf_strndup(name, strlen(name));
    if (name[0] == '[' && (end = strchr(name, ']')) != NULL)
        return fd_api_conf_strndup(name + 1, (size_t)(end - name - 1));
    end = strchr(name, ':');
    return fd_api_conf_strndup(name, end ? (size_t)(end - name) : strlen(name));
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

    for (i = 0; i < NELEMS(schemes); i++)
        if (strncmp(value, schemes[i].scheme,
                    strlen(schemes[i].scheme)) == 0)
            break;
    if (i == NELEMS(schemes)) {
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
    if ((lc->pass = fd_api_conf_strndup(value, (size_t)(end - value))) == NULL)
        return FD_ERROR;
    lc->upstream_name = NULL;
    lc->has_uri = slash != NULL;
    if (slash) {
        ulen = (size_t)(end - slash);
        lc->uri = (fd_str_t){ulen, fd_api_conf_strndup(slash, ulen)};
        if (lc->uri.data == NULL)
            return FD_ERROR;
    }
    return FD_OK;
}

/* a token character of RFC 9110 (a field's name) */
static int tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* fields the proxy writes or drops for framing: never passed */
static int hop_field(const char *n)
{
    static const char *const hop[] = {
        "connection", "keep-alive", "transfer-encoding", "content-length",
        "te", "trailer", "upgrade", "proxy-connection", "date"};
    unsigned i;

    for (i = 0; i < NELEMS(hop); i++)
        if (strcasecmp(n, hop[i]) == 0)
            return 1;
    return 0;
}

/* set_header = "Name: value": checked, its value compiled, at its line */
static int set_header_add(proxy_loc_conf_t *lc, const char *s)
{
    static const struct {
        const char *name;
        unsigned gen;
    } gen[] = {{"host", GEN_HOST},
               {"x-forwarded-for", GEN_XFF},
               {"x-real-ip", GEN_XRIP},
               {"x-forwarded-proto", GEN_XFP},
               {"x-forwarded-host", GEN_XFH}};
    const char *colon = strchr(s, ':'), *v;
    set_header_t *hdrs, *h;
    size_t n, k;

    n = colon ? (size_t)(colon - s) : 0;
    for (k = 0; k < n; k++)
        if (!tchar((unsigned char)s[k]))
            break;
    if (n == 0 || k < n) {
        fd_api_conf_error("\"set_header\" must be \"Name: value\", not "
                          "\"%s\"", s);
        return FD_ERROR;
    }
    if ((hdrs = fd_api_conf_grow(lc->hdrs, lc->nhdrs, sizeof(*h))) == NULL)
        return FD_ERROR;
    lc->hdrs = hdrs;
    h = &hdrs[lc->nhdrs];
    for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
        ;
    /* both read per request (X-Forwarded-For's own): kept with the
     * configuration, not the line's memory */
    h->name = (fd_str_t){n, fd_api_conf_strndup(s, n)};
    h->value = (fd_str_t){strlen(v), fd_api_conf_strndup(v, strlen(v))};
    if (h->name.data == NULL || h->value.data == NULL)
        return FD_ERROR;
    v = h->value.data;
    while (h->value.len && (v[h->value.len - 1] == ' ' ||
                            v[h->value.len - 1] == '\t'))
        h->value.len--;
    for (k = 0; k < h->value.len; k++)
        if ((uint8_t)v[k] < 0x20 && v[k] != '\t') {
            fd_api_conf_error("\"set_header\": control character in "
                              "\"%s\"", s);
            return FD_ERROR;
        }
    if (lit_eq(h->name, "connection") ||
        lit_eq(h->name, "transfer-encoding") ||
        lit_eq(h->name, "content-length") || lit_eq(h->name, "upgrade") ||
        lit_eq(h->name, "te") || lit_eq(h->name, "keep-alive")) {
        fd_api_conf_error("\"set_header\": %.*s is the proxy's to set "
                          "(framing and hop-by-hop)", (int)n, s);
        return FD_ERROR;
    }
    if ((h->script = fd_api_script_compile(v, h->value.len, 0,
                                           "set_header")) == NULL)
        return FD_ERROR;
    for (k = 0; k < NELEMS(gen); k++)
        if (h->name.len == strlen(gen[k].name) &&
            strncasecmp(h->name.data, gen[k].name, h->name.len) == 0)
            lc->gen_replaced |= gen[k].gen;
    lc->nhdrs++;
    return FD_OK;
}

/* proxy_hide_header (pass 0) and proxy_pass_header (1) = NAME */
static int set_hide_header(proxy_loc_conf_t *lc, int pass, const char *key,
                           const char *v)
{
    fd_str_t **list = pass ? &lc->pass_hdr : &lc->hide, *l;
    unsigned *n = pass ? &lc->npass_hdr : &lc->nhide;
    size_t k, len = strlen(v);

    for (k = 0; k < len; k++)
        if (!tchar((unsigned char)v[k]))
            break;
    if (len == 0 || k < len) {
        fd_api_conf_error("\"%s\" needs one header NAME, not \"%s\"", key,
                          v);
        return FD_ERROR;
    }
    if (pass && hop_field(v)) {
        fd_api_conf_error("\"proxy_pass_header\": %s is never passed "
                          "(fastd's own, or hop-by-hop)", v);
        return FD_ERROR;
    }
    if ((l = fd_api_conf_grow(*list, *n, sizeof(*l))) == NULL)
        return FD_ERROR;
    l[*n] = (fd_str_t){len, fd_api_conf_strndup(v, len)};
    *list = l;
    return l[(*n)++].data ? FD_OK : FD_ERROR;
}

static redirect_t *redirect_new(proxy_loc_conf_t *lc)
{
    redirect_t *rd = fd_api_conf_grow(lc->redirects, lc->nredirects,
                                      sizeof(*rd));

    if (rd == NULL)
        return NULL;
    lc->redirects = rd;
    return &rd[lc->nredirects++];
}

/* proxy_redirect = default | off | FROM TO */
static int set_redirect(proxy_loc_conf_t *lc, const char *v)
{
    const char *sp, *to;
    redirect_t *rd;

    lc->redirect_set = 1; /* no implied default any more */
    if (strcmp(v, "off") == 0) {
        lc->nredirects = 0;
        return FD_OK;
    }
    if (strcmp(v, "default") == 0) {
        if ((rd = redirect_new(lc)) == NULL)
            return FD_ERROR;
        rd->dflt = 1;
        return FD_OK;
    }
    sp = v + strcspn(v, " \t");
    for (to = sp; *to == ' ' || *to == '\t'; to++)
        ;
    if (sp == v || *to == '\0' || to[strcspn(to, " \t")] != '\0') {
        fd_api_conf_error("\"proxy_redirect\" must be default, off or FROM "
                          "TO, not \"%s\"", v);
        return FD_ERROR;
    }
    if (memchr(v, '$', (size_t)(sp - v))) {
        fd_api_conf_error("\"proxy_redirect\": FROM is literal text "
                          "(variables go in TO)");
        return FD_ERROR;
    }
    if ((rd = redirect_new(lc)) == NULL)
        return FD_ERROR;
    rd->from = (fd_str_t){(size_t)(sp - v),
                          fd_api_conf_strndup(v, (size_t)(sp - v))};
    rd->to = fd_api_script_compile(to, strlen(to), 0, "proxy_redirect");
    return rd->from.data && rd->to ? FD_OK : FD_ERROR;
}

/* The keys the module parses itself (FD_API_CUSTOM, FD_API_LIST), a line
 * each: the group, the TLS client (proxy_ssl_*: FD_API_TLS_*),
 * next_upstream, set_header, the response's headers, proxy_redirect and
 * the cache's (fd_proxy_cache_set). */
int fd_proxy_set(void *conf, const char *key, const char *value, int own)
{
    static const struct {
        const char *key;
        int opt;
    } tls[] = {{"proxy_ssl_trusted_certificate", FD_API_TLS_TRUSTED},
               {"proxy_ssl_certificate", FD_API_TLS_CERTIFICATE},
               {"proxy_ssl_certificate_key", FD_API_TLS_CERTIFICATE_KEY},
               {"proxy_ssl_protocols", FD_API_TLS_PROTOCOLS},
               {"proxy_ssl_ciphers", FD_API_TLS_CIPHERS}};
    proxy_loc_conf_t *lc = conf;
    unsigned i;
    int rc;

    (void)own;
    if (strcmp(key, "upstream") == 0)
        return upstream_set(lc, value);
    if (strcmp(key, "pass") == 0)
        return pass_set(lc, value);
    if (strcmp(key, "next_upstream") == 0)
        return fd_api_upstream_parse_next(value, &lc->next_upstream);
    if (strcmp(key, "set_header") == 0)
        return set_header_add(lc, value);
    if (strcmp(key, "proxy_hide_header") == 0 ||
        strcmp(key, "proxy_pass_header") == 0)
        return set_hide_header(lc, key[6] == 'p', key, value);
    if (strcmp(key, "proxy_redirect") == 0)
        return set_redirect(lc, value);
    for (i = 0; i < NELEMS(tls); i++)
        if (strcmp(key, tls[i].key) == 0)
            return fd_api_tls_client_set(&lc->tls, tls[i].opt, key, value);
    rc = fd_proxy_cache_set(lc, key, value);
    if (rc == FD_DECLINED) {
        fd_api_conf_error("\"%s\": not a key of the proxy's", key);
        return FD_ERROR;
    }
    return rc;
}

/* proxy_redirect default, for this location: FROM is the pass URL with
 * its URI (then TO's rest is the location's prefix, whose part of the
 * path the URI replaced), or without one http://HOST[:PORT]/ (then "/");
 * TO begins with the client's scheme://host[:port] */
static int redirect_default(proxy_loc_conf_t *lc, fd_str_t match,
                            redirect_t *rd)
{
    const char *p = lc->pass, *auth;
    const char *name = fd_api_upstream_name(lc->group);
    size_t n;
    char *s;

    if (lc->has_uri) {
        rd->from = (fd_str_t){strlen(p), p};
        rd->to_rest = match;
        return FD_OK;
    }
    if (p) {
        auth = strstr(p, "://") + 3;
        n = (size_t)(auth - p) + strcspn(auth, "/");
        s = fd_api_conf_alloc(n + 2);
        if (s)
            snprintf(s, n + 2, "%.*s/", (int)n, p);
    } else {
        n = sizeof("http://") - 1 + strlen(name);
        s = fd_api_conf_alloc(n + 2);
        if (s)
            snprintf(s, n + 2, "http://%s/", name);
    }
    if (s == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    rd->from = (fd_str_t){n + 1, s};
    rd->to_rest = STR("/");
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

    for (i = 0; i < NELEMS(flags); i++)
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

/* a handler = proxy location, its keys set */
int fd_proxy_init_conf(void *conf)
{
    static const char *const hosts[] = {"pass", "upstream", NULL};
    proxy_loc_conf_t *lc = conf;
    fd_str_t match = {0, NULL};
    int kind = 0, host;
    unsigned i;

    host = fd_api_conf_enum(lc, "proxy_host", lc->proxy_host_src, hosts);
    if (host == FD_ERROR)
        return FD_ERROR;
    lc->proxy_host = host == 0 ? HOST_PASS : HOST_UPSTREAM;
    fd_api_conf_location(&match, &kind);
    if (fd_proxy_cache_init_conf(lc) != FD_OK)
        return FD_ERROR;
    if (lc->group == NULL) {
        fd_api_conf_error("handler = proxy needs \"upstream = NAME\" or "
                          "\"pass = http://NAME/\"");
        return FD_ERROR;
    }
    if (kind == FD_API_LOC_REGEX || kind == FD_API_LOC_REGEX_CASELESS)
        lc->has_uri = 0; /* documented: a regex location passes the URI */
    if (lc->h2 == PROXY_H1 && fd_api_upstream_is_h2(lc->group))
        lc->h2 = PROXY_H2;
    if (lc->h2 && lc->cache) {
        fd_api_conf_at_key(lc, "proxy_cache");
        fd_api_conf_error("proxy_cache is not available with an HTTP/2 or "
                          "gRPC upstream yet");
        return FD_ERROR;
    }
    if (lc->h2 && fd_api_upstream_proxy_protocol(lc->group)) {
        fd_api_conf_error("an HTTP/2 upstream's connections carry many "
                          "clients' requests: no proxy_protocol");
        return FD_ERROR;
    }
    lc->nodelay = !lc->buffering;
    if (init_upstream(lc) != FD_OK)
        return FD_ERROR;
    if (!lc->redirect_set) {
        redirect_t *rd = redirect_new(lc);
        if (rd == NULL)
            return FD_ERROR;
        rd->dflt = 1;
    }
    for (i = 0; i < lc->nredirects; i++)
        if (lc->redirects[i].dflt &&
            redirect_default(lc, match, &lc->redirects[i]) != FD_OK)
            return FD_ERROR;
    return FD_OK;
}
