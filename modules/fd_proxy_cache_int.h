/*
 * The proxy cache's parts (fd_proxy_cache.c: a request's lookup, HIT and
 * store; fd_proxy_cache_index.c: the shared index, the manager, the
 * [cache] section): what they share.
 */
#ifndef FD_PROXY_CACHE_INT_H
#define FD_PROXY_CACHE_INT_H

#include "fd_proxy.h"

#define WAYS 8
#define POLL_MS 10
#define MANAGER_MS 1000
#define FILE_MAGIC 0x32434446u /* "FDC2" */
#define MAX_RANGES 16          /* as the static module's max_ranges */

enum { E_FREE = 0, E_FILLING, E_READY };

typedef struct {
    uint8_t md5[16];
    uint32_t state;
    uint32_t fill_pid;        /* the filler's, so it alone clears it */
    uint64_t fill_until;      /* monotonic ms: waiters give up after */
    uint64_t expires;         /* monotonic ms: fresh until */
    uint64_t used;            /* monotonic ms of the last hit or store */
    uint64_t size;            /* bytes of the file */
    uint64_t gen;             /* which file: a new one for every commit */
} entry_t;

typedef struct {
    uint32_t lock;
    uint32_t pad;
    entry_t e[WAYS];
} bucket_t;

typedef struct {
    uint64_t size;            /* bytes of every ready entry's file */
    uint64_t entries;
    uint64_t manager_at;      /* monotonic ms of the next manager run */
    uint64_t gen;             /* the last entry_t.gen given */
    uint64_t loader_at;       /* monotonic ms the loader's claim lapses */
    uint32_t loader_pid;      /* the worker that claimed it */
    uint32_t loaded;          /* the files on disk at start are indexed */
    uint64_t pad[2];
} head_t;

/* [cache NAME] */
struct fd_proxy_cache_s {
    char *path;
    char *levels_text;
    size_t keys_zone;
    size_t max_size;
    uint64_t inactive;

    char *name;
    struct fd_proxy_cache_s *next; /* the running ones (init_worker) */
    unsigned index;           /* in the status area */
    uint8_t levels[3];        /* hex digits per directory level; 0: none */
    unsigned nlevels;
    head_t *head;
    bucket_t *table;
    size_t nbuckets;
};

/* a file's header; the key, the fields, then the body follow it */
typedef struct {
    uint32_t magic;
    uint32_t status;
    uint32_t key_len;
    uint32_t fields_len;      /* "Name: value\r\n" lines */
    uint64_t body_len;
    int64_t date;             /* unix seconds it was stored */
    int64_t expires;          /* unix seconds it stops being fresh */
} file_head_t;

/* The longest freshness kept, and how far past an expiry is told: a
 * century (a larger max-age would wrap a deadline in ms). */
#define FD_PROXY_CACHE_SEC_MAX ((int64_t)100 * 365 * 86400)

/* one request's cache state */
struct fd_proxy_cache_req_s {
    fd_proxy_cache_t *cache;
    fd_request_t *r;
    proxy_req_t *px;
    fd_str_t key;             /* proxy_cache_key's value */
    fd_str_t vkey;            /* a variant's: key, NUL, its variant */
    unsigned secondary:1;     /* md5 is vkey's: a variant of its own */
    uint8_t md5[16];
    unsigned filler:1;        /* we marked the entry filling */
    unsigned no_store:1;      /* proxy_no_cache, a lock timeout */
    unsigned storing:1;       /* tmp is open */
    unsigned waited:1;
    unsigned revalidating:1;  /* the validators went upstream */
    uint64_t stale_gen;       /* an expired entry's file generation, or 0 */
    fd_str_t etag;            /* its validators (proxy_cache_revalidate) */
    fd_str_t last_modified;
    int stale_status;         /* its status */
    int tmp_fd;
    char *tmp_path;
    char *final_path;
    uint64_t head_len;        /* the file's bytes before the body */
    uint64_t body_len;
    uint64_t want_len;        /* Content-Length; UINT64_MAX: none */
    int64_t valid_sec;
    fd_api_timer_t *timer;    /* the next look while waiting on a fill:
                               * one timer, set again at each look */
    uint64_t wait_until;
};

typedef struct {
    char name[32];
    uint64_t hit, miss, expired, bypass, stored, store_failed, evicted;
    uint64_t stale, updating, revalidated;
} cache_shm_t;

extern cache_shm_t *fd_proxy_cache_area; /* this worker's status entries */

#define COUNT(c, f)                                                         \
    (fd_proxy_cache_area ? (void)__atomic_add_fetch(&fd_proxy_cache_area[(c)->index].f, 1,                 \
                                     __ATOMIC_RELAXED)                       \
          : (void)0)

enum { L_MISS, L_HIT, L_EXPIRED, L_WAIT, L_FILL, L_STALE };

/* lock_ms: wait on another request's fill; stale_ms: an expired entry
 * being updated answers (use_stale updating), marked for that long */
int fd_proxy_cache_index_lookup(fd_proxy_cache_t *c, const uint8_t md5[16],
                                uint64_t now, uint64_t lock_ms,
                                uint64_t stale_ms, int fill,
                                uint64_t *until, uint64_t *gen, int *evict,
                                uint8_t evicted[16]);
int fd_proxy_cache_index_refresh(fd_proxy_cache_t *c, const uint8_t md5[16],
                                 uint64_t gen, uint64_t now,
                                 uint64_t expires);
void fd_proxy_cache_index_commit(fd_proxy_cache_t *c, const uint8_t md5[16],
                                 uint64_t now, uint64_t expires,
                                 uint64_t size);
void fd_proxy_cache_index_unfill(fd_proxy_cache_t *c, const uint8_t md5[16]);
void fd_proxy_cache_index_forget(fd_proxy_cache_t *c, const uint8_t md5[16],
                                 uint64_t gen);
void fd_proxy_cache_unlink(fd_proxy_cache_t *c, const uint8_t md5[16]);
/* fd_proxy_cache.c: the worker's open entries closed (its end). */
void fd_proxy_cache_open_drop(void);

enum { LOAD_ADDED = 1, LOAD_PRESENT = 0, LOAD_FULL = -1 };

int fd_proxy_cache_index_load(fd_proxy_cache_t *c, const uint8_t md5[16],
                              uint64_t now, uint64_t expires, uint64_t size);
uint64_t fd_proxy_cache_expires_msec(int64_t expires, int64_t now_sec,
                                     uint64_t now_msec);
int fd_proxy_cache_hex(const char *s, uint8_t md5[16]);

#endif /* FD_PROXY_CACHE_INT_H */
