/*
 * The session ticket keys every worker shares (fd_ssl.h): two keys in a
 * shared mapping the master makes before the workers, the first
 * encrypting new tickets and both decrypting, written under a seqlock.
 * Where they come from:
 *
 *   - the master's clock: a new key every ssl_session_ticket_rotate, the
 *     old one kept second (fd_ssl_ticket_rotate);
 *   - ssl_session_ticket_key files, the same on every instance of a fleet;
 *   - ssl_session_ticket_keys = redis: the fleet's pair, kept in Redis
 *     ([cluster]). Worker 0 of each instance asks every second with a
 *     script that, atomically, stores the pair when there is none and
 *     rotates it when it is ssl_session_ticket_rotate old (the caller's
 *     random key becomes the new first, the first the second), so
 *     whichever instance asks first rotates for all and the others read
 *     the same pair; the answer goes into the mapping. A Redis without
 *     the pair (a first start, a restart without persistence) takes the
 *     asker's, so no session is lost with it. While Redis does not
 *     answer, the pair in use stays (a line in the log when that starts
 *     and when it ends).
 */
#include <limits.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include "fd_cluster.h"
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_ssl.h"
#include "fd_ssl_int.h"

/* --- the session ticket keys, shared by every worker --- */

/* One key: 16 bytes of name (sent in the ticket), AES-256, HMAC-SHA256. */
typedef struct {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
} ticket_key_t;

/*
 * The master writes (a rotation) under a seqlock: seq is odd while it
 * does; a worker copies both keys and copies again if seq moved.
 */
typedef struct {
    uint64_t seq;
    uint64_t keys[2 * sizeof(ticket_key_t) / sizeof(uint64_t)];
} ticket_shm_t;

static ticket_shm_t *tickets;
static fd_msec_t tickets_rotated; /* master: monotonic ms of the last one */

static fd_msec_t mono_msec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (fd_msec_t)ts.tv_sec * 1000 + (fd_msec_t)ts.tv_nsec / 1000000;
}

static int key_new(ticket_key_t *k)
{
    return RAND_bytes((unsigned char *)k, sizeof(*k)) == 1 ? FD_OK
                                                           : FD_ERROR;
}

int fd_ssl_shm_init(void)
{
    ticket_key_t k[2];

    if (tickets)
        return FD_OK;
    tickets = mmap(NULL, sizeof(*tickets), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (tickets == MAP_FAILED) {
        tickets = NULL;
        fd_log_error(FD_LOG_EMERG, errno, "mmap(%zu) failed",
                     sizeof(*tickets));
        return FD_ERROR;
    }
    /* the previous key too: a random name that no ticket carries */
    if (key_new(&k[0]) != FD_OK || key_new(&k[1]) != FD_OK) {
        fd_log_error(FD_LOG_EMERG, 0, "RAND_bytes() failed");
        return FD_ERROR;
    }
    memcpy(tickets->keys, k, sizeof(k));
    OPENSSL_cleanse(k, sizeof(k));
    tickets_rotated = mono_msec();
    return FD_OK;
}

static void tickets_store(const ticket_key_t k[2])
{
    const uint64_t *src = (const uint64_t *)k;
    uint64_t seq = tickets->seq;
    unsigned i;

    __atomic_store_n(&tickets->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (i = 0; i < fd_nelems(tickets->keys); i++)
        __atomic_store_n(&tickets->keys[i], src[i], __ATOMIC_RELAXED);
    __atomic_store_n(&tickets->seq, seq + 2, __ATOMIC_RELEASE);
}

static void tickets_load(ticket_key_t k[2])
{
    uint64_t *dst = (uint64_t *)k, seq;
    unsigned i;

    for (;;) {
        seq = __atomic_load_n(&tickets->seq, __ATOMIC_ACQUIRE);
        if (seq & 1) {
            sched_yield(); /* the master is half way through a rotation */
            continue;
        }
        for (i = 0; i < fd_nelems(tickets->keys); i++)
            dst[i] = __atomic_load_n(&tickets->keys[i], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&tickets->seq, __ATOMIC_RELAXED) == seq)
            return;
    }
}

static int cycle_has_ssl(const fd_cycle_t *cycle)
{
    const fd_listening_t *ls;

    for (ls = cycle->listening; ls; ls = ls->next)
        if (ls->ssl)
            return 1;
    return 0;
}

/* ssl_session_ticket_key: nginx's 80 bytes are the name, the HMAC key
 * and the AES key, in that order; no rotation (0: no alarm) */
static unsigned tickets_from_files(const fd_cycle_t *cycle)
{
    const unsigned char *b = cycle->http.ssl_ticket_keys;
    ticket_key_t k[2];
    unsigned i;

    for (i = 0; i < 2; i++) {
        const unsigned char *f =
            b + 80 * (i < cycle->http.ssl_session_ticket_key.n ? i : 0);
        memcpy(k[i].name, f, 16);
        memcpy(k[i].hmac, f + 16, 32);
        memcpy(k[i].aes, f + 48, 32);
    }
    if (memcmp(k, tickets->keys, sizeof(k)) != 0)
        tickets_store(k);
    OPENSSL_cleanse(k, sizeof(k));
    return 0;
}

unsigned fd_ssl_ticket_rotate(const fd_cycle_t *cycle)
{
    fd_msec_t every = cycle->http.ssl_session_ticket_rotate, now, left;
    ticket_key_t k[2];

    if (tickets == NULL || !cycle_has_ssl(cycle))
        return 0;
    if (cycle->http.ssl_session_ticket_key.n)
        return tickets_from_files(cycle);
    if (cycle->http.ssl_session_ticket_keys == FD_SSL_TICKETS_REDIS)
        return 0; /* the fleet's keys: a worker keeps them (below) */
    now = mono_msec();
    if (now - tickets_rotated >= every) {
        tickets_load(k);
        k[1] = k[0];
        if (key_new(&k[0]) == FD_OK) {
            tickets_store(k);
            tickets_rotated = now;
            fd_log_error(FD_LOG_INFO, 0, "session ticket key rotated");
        } else {
            fd_log_error(FD_LOG_ALERT, 0, "RAND_bytes() failed: the session "
                         "ticket key is not rotated");
        }
        OPENSSL_cleanse(k, sizeof(k));
    }
    left = every - (now - tickets_rotated);
    return (unsigned)fd_min((left + 999) / 1000, UINT_MAX);
}

/*
 * OpenSSL asks for a key to encrypt a new ticket (enc = 1) or the key
 * that a ticket's name says (enc = 0): 1 found, 2 found but old (issue a
 * new ticket), 0 unknown (a full handshake), -1 error.
 */
int fd_ssl_ticket_cb(SSL *ssl, unsigned char name[16], unsigned char *iv,
                     EVP_CIPHER_CTX *ectx, EVP_MAC_CTX *hctx, int enc)
{
    /* fetched once: EVP_aes_256_cbc() would be looked up by name in the
     * provider store at every ticket (a lock, a hash, string compares) */
    static EVP_CIPHER *aes;
    ticket_key_t k[2];
    OSSL_PARAM params[3];
    int i, rc = -1;

    if (aes == NULL && (aes = EVP_CIPHER_fetch(NULL, "AES-256-CBC",
                                               NULL)) == NULL)
        return -1;
    tickets_load(k);
    if (enc) {
        i = 0;
        if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1)
            goto done;
        memcpy(name, k[0].name, sizeof(k[0].name));
        if (EVP_EncryptInit_ex(ectx, aes, NULL, k[0].aes, iv) != 1)
            goto done;
    } else {
        for (i = 0; i < 2; i++)
            if (memcmp(name, k[i].name, sizeof(k[i].name)) == 0)
                break;
        if (i == 2) {
            rc = 0;
            goto done;
        }
        if (EVP_DecryptInit_ex(ectx, aes, NULL, k[i].aes, iv) != 1)
            goto done;
    }
    params[0] = OSSL_PARAM_construct_octet_string("key", k[i].hmac,
                                                  sizeof(k[i].hmac));
    params[1] = OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0);
    params[2] = OSSL_PARAM_construct_end();
    if (EVP_MAC_CTX_set_params(hctx, params) != 1)
        goto done;
    /* 2 has OpenSSL send a new ticket: for a ticket under the previous
     * key, and for every TLS 1.3 resumption (RFC 8446 C.4: a ticket is
     * for one use; a client left without a new one makes a full
     * handshake next time, every other connection) */
    rc = i == 0 && SSL_version(ssl) != TLS1_3_VERSION ? 1 : 2;
done:
    OPENSSL_cleanse(k, sizeof(k));
    return rc;
}

/* --- ssl_session_ticket_keys = redis (worker 0 of each instance) --- */

#define REDIS_KEY "fastd:ssl:ticket_keys"
#define SYNC_MSEC 1000

/* KEYS[1]: the pair, "MS" (13 digits, Redis's clock at its making or
 * last rotation) then two keys of 80 bytes; ARGV[1]: the rotation period
 * in ms; ARGV[2]: a new random key of the caller's; ARGV[3]: the
 * caller's pair. None there (a first start, a Redis restarted empty):
 * the caller's pair becomes the fleet's, so the sessions it issued go on
 * resuming. Due: the new key first, the first second. Returns the pair. */
static const char sync_script[] =
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
    "local v = redis.call('GET', KEYS[1]) "
    "if not v or #v ~= 173 then "
    "v = string.format('%013d', now) .. ARGV[3] "
    "elseif now - tonumber(string.sub(v, 1, 13)) >= tonumber(ARGV[1]) then "
    "v = string.format('%013d', now) .. ARGV[2] .. string.sub(v, 14, 93) "
    "else return v end "
    "redis.call('SET', KEYS[1], v) "
    "return v";

static fd_timer_t sync_timer;
static fd_redis_cmd_t *sync_cmd;
static fd_msec_t sync_rotate;
static int sync_down;          /* the last ask failed (logged once) */
static int sync_answered;      /* Redis answered since the start */
static unsigned sync_fails;    /* asks in a row without an answer */

/* Logged once per outage; at the start, the client's first connection
 * may not be up at the first ask: said after 3 s of no answer */
static void sync_down_log(const char *why, size_t len)
{
    sync_fails++;
    if (!sync_down && (sync_answered || sync_fails >= 3)) {
        fd_log_error(FD_LOG_WARN, 0, "ssl_session_ticket_keys: Redis "
                     "does not answer (%.*s): the keys in use stay",
                     (int)len, why);
        sync_down = 1;
    }
}

static void sync_done(void *data, const fd_redis_reply_t *re)
{
    ticket_key_t k[2], cur[2];
    const unsigned char *b;
    unsigned i;

    (void)data;
    sync_cmd = NULL;
    if (re->type != FD_REDIS_STR || re->str.len != 13 + 160) {
        sync_down_log(re->type == FD_REDIS_FAIL || re->type == FD_REDIS_ERR
                          ? re->str.data
                          : "an answer that is not a key pair",
                      re->type == FD_REDIS_FAIL || re->type == FD_REDIS_ERR
                          ? re->str.len
                          : 34);
        return;
    }
    if (sync_down)
        fd_log_error(FD_LOG_NOTICE, 0, "ssl_session_ticket_keys: Redis "
                     "answers again: the fleet's keys are in use");
    sync_down = 0;
    sync_answered = 1;
    sync_fails = 0;
    b = (const unsigned char *)re->str.data + 13;
    for (i = 0; i < 2; i++) { /* nginx's order: name, HMAC, AES */
        memcpy(k[i].name, b + 80 * i, 16);
        memcpy(k[i].hmac, b + 80 * i + 16, 32);
        memcpy(k[i].aes, b + 80 * i + 48, 32);
    }
    tickets_load(cur);
    if (memcmp(k, cur, sizeof(k)) != 0) {
        tickets_store(k);
        fd_log_error(FD_LOG_INFO, 0, "ssl_session_ticket_keys: the "
                     "fleet's keys %s", memcmp(k[1].name, cur[0].name, 16)
                                            == 0 ? "rotated" : "taken");
    }
    OPENSSL_cleanse(k, sizeof(k));
    OPENSSL_cleanse(cur, sizeof(cur));
}

/* A key in nginx's 80-byte order: name, HMAC, AES */
static void key_bytes(const ticket_key_t *k, unsigned char b[80])
{
    memcpy(b, k->name, 16);
    memcpy(b + 16, k->hmac, 32);
    memcpy(b + 48, k->aes, 32);
}

int fd_ssl_ticket_secret(unsigned which, unsigned char key[80])
{
    ticket_key_t k[2];

    if (tickets == NULL || which > 1)
        return 0;
    tickets_load(k);
    key_bytes(&k[which], key);
    OPENSSL_cleanse(k, sizeof(k));
    return 1;
}

static void sync_ask(fd_timer_t *t)
{
    unsigned char key[80], pair[160];
    ticket_key_t cur[2];
    char every[24];
    const char *argv[7];
    size_t len[7];
    unsigned i;

    (void)t;
    fd_timer_add(&sync_timer, SYNC_MSEC);
    if (sync_cmd != NULL || fd_cluster == NULL)
        return; /* the last ask still waits (its timeout ends it) */
    if (RAND_bytes(key, sizeof(key)) != 1)
        return;
    tickets_load(cur);
    key_bytes(&cur[0], pair);
    key_bytes(&cur[1], pair + 80);
    snprintf(every, sizeof(every), "%llu", (unsigned long long)sync_rotate);
    argv[0] = "EVAL";
    argv[1] = sync_script;
    argv[2] = "1";
    argv[3] = REDIS_KEY;
    argv[4] = every;
    argv[5] = (const char *)key;
    argv[6] = (const char *)pair;
    for (i = 0; i < 5; i++)
        len[i] = strlen(argv[i]);
    len[5] = sizeof(key);
    len[6] = sizeof(pair);
    sync_cmd = fd_cluster->command(7, argv, len, sync_done, NULL);
    if (sync_cmd == NULL)
        sync_down_log("not connected", 13);
    OPENSSL_cleanse(key, sizeof(key));
    OPENSSL_cleanse(pair, sizeof(pair));
    OPENSSL_cleanse(cur, sizeof(cur));
}

int fd_ssl_tickets_check(fd_cycle_t *cycle, char *err, size_t errlen)
{
    if (cycle->http.ssl_session_ticket_keys != FD_SSL_TICKETS_REDIS)
        return FD_OK;
    if (cycle->http.ssl_session_ticket_key.n) {
        snprintf(err, errlen, "ssl_session_ticket_keys = redis and "
                 "ssl_session_ticket_key files: one or the other");
        return FD_ERROR;
    }
    if (!fd_cluster_configured(cycle)) {
        snprintf(err, errlen, "ssl_session_ticket_keys = redis needs a "
                 "[cluster] section (redis = ...)");
        return FD_ERROR;
    }
    return FD_OK;
}

void fd_ssl_tickets_init_worker(const fd_cycle_t *cycle, unsigned index)
{
    sync_cmd = NULL;
    sync_down = 0;
    sync_answered = 0;
    sync_fails = 0;
    if (cycle->http.ssl_session_ticket_keys != FD_SSL_TICKETS_REDIS ||
        index != 0 || tickets == NULL || !cycle_has_ssl(cycle))
        return;
    sync_rotate = cycle->http.ssl_session_ticket_rotate;
    sync_timer.handler = sync_ask;
    sync_ask(&sync_timer); /* now: the fleet's keys from the first second */
}

void fd_ssl_tickets_exit_worker(void)
{
    if (fd_timer_armed(&sync_timer))
        fd_timer_del(&sync_timer);
    if (sync_cmd && fd_cluster)
        fd_cluster->cancel(sync_cmd);
    sync_cmd = NULL;
}
