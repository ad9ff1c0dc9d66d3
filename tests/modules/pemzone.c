/*
 * pemzone: API 1.8 from outside the tree (tests/modules_tls.t), the
 * example of modules/README.md with a little more, built against an
 * installed fastd as a user builds a module.
 *
 *   ssl_certificate = pemzone:PATH   the server's certificate is PATH's
 *                    (the chain, then the key, PEM), which a helper
 *                    process ("pemzone helper") reads every 200 ms into
 *                    a shared zone; a handshake takes a new one when the
 *                    zone's generation moves; none yet: handshakes fail
 *   ALPN x-pemzone   answered in the handshake with the same certificate
 *   GET /.pemzone    answered before routing, on every server: the
 *                    generation ("gen N")
 *   fastd -s pemzone ARG   prints "pemzone ARG, master PID" on stderr
 *   /status          pemzone_generation, once (what the workers share)
 */
#include <stdio.h>
#include <string.h>

#include <fastd_tls.h>

typedef struct {
    uint32_t lock;
    uint64_t gen;              /* moves with each new certificate */
    size_t cert_len, key_len;
    char pem[32768];
} zone_t;

static zone_t *zone;
static const char *path;       /* ssl_certificate = pemzone:PATH */

/* the helper, every 200 ms: it may block (a file here, a vault there) */
static void fetch(void *data)
{
    static char buf[sizeof(zone->pem)];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    char *key;

    (void)data;
    if (f)
        fclose(f);
    buf[n] = '\0';
    if ((key = strstr(buf, "-----BEGIN PRIVATE KEY")) == NULL ||
        (n == zone->cert_len + zone->key_len &&
         memcmp(buf, zone->pem, n) == 0))
        return;
    fd_api_shm_lock(&zone->lock);
    memcpy(zone->pem, buf, n);
    zone->cert_len = (size_t)(key - buf);
    zone->key_len = n - zone->cert_len;
    __atomic_add_fetch(&zone->gen, 1, __ATOMIC_RELEASE);
    fd_api_shm_unlock(&zone->lock);
    fd_api_log(FD_API_LOG_NOTICE, 0, "pemzone: generation %llu",
               (unsigned long long)zone->gen);
}

static int started(void *data)
{
    (void)data;
    fd_api_log(FD_API_LOG_NOTICE, 0, "pemzone: helper started");
    return FD_OK;
}

static const fd_api_helper_t helper = {.title = "pemzone helper",
                                       .interval_msec = 200,
                                       .init = started,
                                       .tick = fetch};

static void *attach(const char *name, const char *const *names, unsigned n)
{
    (void)names;
    (void)n;
    if ((path = fd_api_conf_path(name)) == NULL ||
        (zone == NULL &&
         (zone = fd_api_shm_zone(FD_API_SELF, "pem", sizeof(*zone),
                                 NULL)) == NULL)) {
        fd_api_conf_error("pemzone: out of memory");
        return NULL;
    }
    if (!fd_api_conf_test() && fd_api_helper(FD_API_SELF, &helper) != FD_OK)
        return NULL;
    return zone;
}

static uint64_t generation(void *cert)
{
    return __atomic_load_n(&((zone_t *)cert)->gen, __ATOMIC_ACQUIRE);
}

static int get_pem(zone_t *z, fd_api_tls_pem_t *pem, uint64_t *gen)
{
    static char copy[sizeof(zone->pem)];

    fd_api_shm_lock(&z->lock);
    *gen = z->gen;
    pem->cert_len = z->cert_len;
    pem->key_len = z->key_len;
    memcpy(copy, z->pem, z->cert_len + z->key_len);
    fd_api_shm_unlock(&z->lock);
    pem->pem = copy;
    return *gen ? FD_OK : FD_DECLINED; /* none yet: handshakes fail */
}

static int get(void *cert, fd_api_tls_pem_t *pem, uint64_t *gen)
{
    return get_pem(cert, pem, gen);
}

static int alpn_cert(const char *sni, fd_api_tls_pem_t *pem)
{
    uint64_t gen;

    if (zone == NULL || get_pem(zone, pem, &gen) != FD_OK)
        return FD_DECLINED;
    fd_api_log(FD_API_LOG_NOTICE, 0, "pemzone: x-pemzone for \"%s\"", sni);
    return FD_OK;
}

static const fd_api_tls_provider_t tls = {
    .scheme = "pemzone", .attach = attach, .generation = generation,
    .get = get, .alpn = "x-pemzone", .alpn_cert = alpn_cert};

static int init_worker(void)
{
    if (zone)
        fd_api_early_on();
    return FD_OK;
}

static int early(fd_request_t *r)
{
    fd_str_t p = fd_req_path(r);
    char body[64];
    int n;

    if (p.len != 9 || memcmp(p.data, "/.pemzone", 9) != 0)
        return FD_DECLINED;
    n = snprintf(body, sizeof(body), "gen %llu worker %d\n",
                 (unsigned long long)generation(zone),
                 fd_api_worker_number());
    fd_resp_status(r, 200);
    return fd_resp_body(r, body, (size_t)n);
}

static void status_shared(fd_api_status_t *st)
{
    if (zone)
        fd_api_status_gauge(st, "pemzone_generation",
                            "the certificate's generation", NULL,
                            generation(zone));
}

static int command(const char *cmd, const char *arg)
{
    if (strcmp(cmd, "pemzone") != 0)
        return FD_DECLINED;
    fprintf(stderr, "pemzone %s, master %ld\n", arg ? arg : "-",
            fd_api_master_pid());
    return FD_OK;
}

FD_API_MODULE = {FD_API_HEADER,
                 .name = "pemzone",
                 .tls = &tls,
                 .init_worker = init_worker,
                 .early = early,
                 .status_shared = status_shared,
                 .command = command};
