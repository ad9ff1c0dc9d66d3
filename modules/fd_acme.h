#ifndef FD_ACME_H
#define FD_ACME_H

/*
 * Automatic HTTPS over ACME (RFC 8555), shared by the module's parts:
 *   fd_acme_module.c  [acme NAME], ssl_certificate = acme:NAME, the
 *                     workers' side (certificate swap, http-01 and
 *                     tls-alpn-01 answers), the master's helper process,
 *                     /status, fastd -s renew NAME;
 *   fd_acme_client.c  the helper: the ACME exchange (libcurl, OpenSSL
 *                     JWS and CSR, jansson), renewal times, ARI;
 *   fd_acme_store.c   the storage interface and its files under
 *                     state_path;
 *   fd_acme_store_redis.c  the same in the [cluster]'s Redis.
 *
 * All of it is on the public API (fastd.h, fastd_tls.h): the helper is an
 * fd_api_helper(), the certificates an fd_api_tls_provider_t.
 *
 * The helper writes each new certificate (chain and key, PEM) into the
 * shared zone and bumps its generation; fastd asks the provider for the
 * generation at each full handshake and, when it moved, for the
 * certificate, which it serves from that handshake on. Connections
 * already made keep theirs.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "fastd_tls.h"

#define FD_ACME_CERT_MAX 32          /* certificates a configuration holds */
#define FD_ACME_PEM_MAX (48 * 1024)  /* a chain and its key */
#define FD_ACME_CHAL_MAX 32          /* challenges answered at once */
#define FD_ACME_NAMES_MAX 1024       /* the names, space-separated (status) */

enum { FD_ACME_HTTP01 = 1, FD_ACME_TLSALPN01 = 2 };
enum { FD_ACME_KEY_EC = 0, FD_ACME_KEY_RSA = 1 };
enum { FD_ACME_STORE_FILES = 0, FD_ACME_STORE_REDIS = 1 };

/* One certificate in the shared zone (the slot outlives reloads: found
 * again by its id) */
typedef struct {
    uint32_t lock;
    char id[256];                    /* "ISSUER/first.name": "" free */
    uint64_t gen;                    /* bumped by each new certificate */
    uint32_t cert_len, key_len;      /* in pem: the chain, then the key */
    char pem[FD_ACME_PEM_MAX];
    /* for /status (the helper writes them) */
    int64_t not_after, next_renewal; /* unix seconds; 0 unknown */
    uint64_t renewals, failures;
    char issuer[128];
    char error[256];                 /* the last failure, "" none */
} fd_acme_slot_t;

typedef struct {
    uint32_t type;                   /* 0 free, FD_ACME_HTTP01, TLSALPN01 */
    uint32_t remote;                 /* another instance's (storage =
                                      * redis), copied by worker 0 */
    char token[128];                 /* http-01 */
    char keyauth[256];               /* http-01: the body */
    char name[256];                  /* tls-alpn-01: the SNI name */
    uint32_t cert_len, key_len;      /* tls-alpn-01: PEM in pem */
    char pem[4096];
} fd_acme_chal_t;

typedef struct {
    uint32_t lock;
    fd_acme_chal_t chal[FD_ACME_CHAL_MAX];
    fd_acme_slot_t slot[FD_ACME_CERT_MAX];
} fd_acme_shm_t;

extern fd_acme_shm_t *fd_acme_shm;

#define FD_ACME_MIN(a, b) ((a) < (b) ? (a) : (b))

/* contact = ..., repeatable */
typedef struct {
    char **items;
    unsigned n;
} fd_acme_list_t;

/* [acme NAME] */
typedef struct {
    const char *name;
    const char *directory;
    fd_acme_list_t contact;
    int accept_terms;
    const char *eab_kid, *eab_hmac;
    const char *ca_certificate;      /* the CA's HTTPS, not the system's */
    /* the enums' values as written; the numbers below from init */
    const char *challenge_s, *key_type_s, *storage_s, *placeholder_s;
    int challenge;                   /* FD_ACME_HTTP01 | FD_ACME_TLSALPN01 */
    int key_type;
    const char *profile;
    const char *preferred_chain;     /* the root's common name, or NULL */
    const char *state_path;
    int storage;                     /* FD_ACME_STORE_FILES, _REDIS */
    int placeholder;                 /* 0: refuse handshakes until issued */
    uint64_t retry;                  /* ms: the first retry after a failure */
    uint64_t retry_max;
    uint64_t max_response;           /* bytes of a CA's answer */
    fd_api_conf_pos_t pos;           /* the section's line */
    struct fd_acme_cert_s *certs;    /* the servers that use it */
} fd_acme_issuer_t;

/* One certificate of a configuration: a [server] with acme:NAME */
typedef struct fd_acme_cert_s {
    fd_acme_issuer_t *issuer;
    const char *names[64];
    unsigned nnames;
    unsigned slot;                   /* in fd_acme_shm->slot */
    /* until the helper's first: what the master found at load (the
     * stored one, or the placeholder), or none with refuse */
    int refuse;                      /* placeholder = refuse */
    char *pem;                       /* the chain, then the key */
    uint32_t cert_len, key_len;
    struct fd_acme_cert_s *next;
} fd_acme_cert_t;

/* --- fd_acme_store.c: where an ACME client keeps what it must not lose.
 * Keys are relative names ("account.key", "example.com.pem"); the files
 * store puts them under state_path, 0600, written to a temporary name and
 * renamed. lock() serialises holders of the same key across processes
 * (two fastd sharing state_path order a name once). */
typedef struct fd_acme_store_s fd_acme_store_t;
struct fd_acme_store_s {
    /* malloc'd data, NUL-ended; FD_DECLINED: none; FD_ERROR */
    int (*get)(fd_acme_store_t *st, const char *key, char **data,
               size_t *len, time_t *mtime);
    int (*put)(fd_acme_store_t *st, const char *key, const char *data,
               size_t len);
    int (*del)(fd_acme_store_t *st, const char *key);
    /* a handle >= 0, or -1; blocks while another holds it */
    int (*lock)(fd_acme_store_t *st, const char *key);
    void (*unlock)(fd_acme_store_t *st, int handle);
    /* when key was last put: FD_OK, FD_DECLINED (none), FD_ERROR */
    int (*mtime)(fd_acme_store_t *st, const char *key, time_t *mtime);
    /* storage = redis: a challenge this helper answers, told to the
     * fleet (every instance's worker 0 copies it, so the CA may validate
     * at any of them); NULL for the files store */
    int (*share)(fd_acme_store_t *st, int type, const char *name,
                 const char *token, const char *keyauth);
    void (*unshare)(fd_acme_store_t *st, const char *token);
    /* this instance's own files, for what is not shared (a renewal
     * asked for by fastd -s renew): st itself for the files store */
    fd_acme_store_t *local;
    char dir[4096];
    void *redis;               /* fd_acme_store_redis.c's state, or NULL */
};
/* create: make the directory (0700) if missing; else only read it */
int fd_acme_store_files(fd_acme_store_t *st, const char *dir, int create);
/* storage = redis: the [cluster]'s Redis, shared by a fleet, over the
 * files under dir (this instance's copy); the helper process only */
int fd_acme_store_redis(fd_acme_store_t *st, const char *dir,
                        const char *issuer);

/* The fleet's challenges in Redis: a hash of token to "AT TYPE NAME
 * TOKEN KEYAUTH" (AT: unix seconds; older than FD_ACME_CHAL_TTL ignored) */
#define FD_ACME_CHALS_KEY "fastd:acme:challenges"
#define FD_ACME_CHAL_TTL 600

/* --- fd_acme_client.c: the helper process (fd_api_helper) */
extern const fd_api_helper_t fd_acme_helper;
/* a self-signed certificate and key (PEM) for names; with keyauth, the
 * tls-alpn-01 challenge certificate (RFC 8737) */
int fd_acme_self_signed(const char *name, const char *keyauth,
                        int key_type, char *pem, uint32_t *cert_len,
                        uint32_t *key_len, size_t size);

#endif
