/*
 * The QUIC secrets every worker shares (fd_quic.h): the static secret
 * that stateless reset tokens are derived from (RFC 9000 10.3.2), the key
 * of Retry and NEW_TOKEN tokens (RFC 9000 8.1.2, 8.1.3; ngtcp2 derives
 * a key of its own for each kind), and the budget of stateless resets
 * per second. The master makes them in a shared mapping before the first
 * fork (fd_quic_shm_init) and keeps it across reloads, as the session
 * ticket keys (fd_ssl_tickets.c): a token one worker gave is known to
 * every other, to a worker respawned after a crash and to the workers of
 * the next configuration. They are written once, before any worker
 * exists, and only read after: no lock. A restart of the master makes
 * new ones.
 */
#include "fd_core.h"

#ifdef FD_HTTP3

#include <sys/mman.h>
#include <sys/random.h>

#define FD_QUIC_PRIVATE
#include "fd_quic.h"

fd_quic_keys_t *fd_quic_keys;

int fd_quic_shm_init(void)
{
    fd_quic_keys_t *k;
    size_t got = 0;
    ssize_t n;

    if (fd_quic_keys)
        return FD_OK;
    k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (k == MAP_FAILED) {
        fd_log_error(FD_LOG_EMERG, errno, "mmap(%zu) failed", sizeof(*k));
        return FD_ERROR;
    }
    while (got < sizeof(k->secrets)) {
        n = getrandom((uint8_t *)&k->secrets + got, sizeof(k->secrets) - got,
                      0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fd_log_error(FD_LOG_EMERG, errno, "getrandom() failed");
            munmap(k, sizeof(*k));
            return FD_ERROR;
        }
        got += (size_t)n;
    }
    fd_quic_keys = k;
    return FD_OK;
}

/*
 * One stateless reset from the budget all workers share: at most
 * FD_QUIC_RESETS_PER_SEC in a second of the monotonic clock.
 */
int fd_quic_reset_allowed(uint64_t now_sec)
{
    uint64_t sec = __atomic_load_n(&fd_quic_keys->reset_sec, __ATOMIC_RELAXED);

    if (sec != now_sec &&
        __atomic_compare_exchange_n(&fd_quic_keys->reset_sec, &sec, now_sec, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        __atomic_store_n(&fd_quic_keys->resets, 0, __ATOMIC_RELAXED);
    return __atomic_add_fetch(&fd_quic_keys->resets, 1, __ATOMIC_RELAXED) <=
           FD_QUIC_RESETS_PER_SEC;
}

#else

int fd_quic_shm_init(void)
{
    return FD_OK;
}

#endif
