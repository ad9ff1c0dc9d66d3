/*
 * Listening sockets belong to the master and outlive reloads: a reload
 * takes over every socket whose address is still configured, so nothing
 * queued in a backlog is dropped. reuseport opens one socket per worker.
 */
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_cycle.h"

/*
 * A reload that lowers "workers" drops reuseport sockets. Closing one
 * resets the connections in its backlog, and it gets its share of new
 * ones until it closes: the kernel moves neither to the rest of the group
 * unless net.ipv4.tcp_migrate_req is on. So a dropped socket is retired
 * instead: the master keeps it in the group, steers new connections away
 * from it with a classic BPF program on the group (SO_ATTACH_REUSEPORT_
 * CBPF), lets the old workers take what its backlog holds as they drain,
 * and closes it when the last of them has exited.
 *
 * The program names sockets by their index in the kernel's array for the
 * group, so the master keeps a copy of that array: listen() appends; the
 * last close of a socket moves the last one into its slot. The master
 * holds every socket of a group until it closes it, so its closes are the
 * last ones and its copy stays exact.
 */
typedef struct {
    int fd;
    uint64_t retired;          /* 0, or the generation that dropped it */
} group_sock_t;

typedef struct group_s {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    group_sock_t *socks;       /* in the kernel's order */
    unsigned n, cap;
    unsigned steered;          /* a program is attached */
    struct group_s *next;
} group_t;

static group_t *groups;

/* The group of addr, made when new; NULL when out of memory. */
static group_t *group_of(const struct sockaddr_storage *addr,
                         socklen_t addrlen)
{
    group_t *g;

    for (g = groups; g; g = g->next)
        if (g->addrlen == addrlen && memcmp(&g->addr, addr, addrlen) == 0)
            return g;
    if ((g = calloc(1, sizeof(*g))) == NULL)
        return NULL;
    memcpy(&g->addr, addr, addrlen);
    g->addrlen = addrlen;
    g->next = groups;
    groups = g;
    return g;
}

static void group_add(const fd_listening_t *ls, int fd)
{
    group_t *g = group_of(&ls->addr, ls->addrlen);
    group_sock_t *ns;

    if (g == NULL)
        return;
    if (g->n == g->cap) {
        ns = realloc(g->socks, (g->cap ? g->cap * 2 : 8) * sizeof(*ns));
        if (ns == NULL)
            return;
        g->socks = ns;
        g->cap = g->cap ? g->cap * 2 : 8;
    }
    g->socks[g->n].fd = fd;
    g->socks[g->n].retired = 0;
    g->n++;
}

static group_sock_t *group_find(int fd, group_t **gp)
{
    group_t *g;
    unsigned i;

    for (g = groups; g; g = g->next)
        for (i = 0; i < g->n; i++)
            if (g->socks[i].fd == fd) {
                *gp = g;
                return &g->socks[i];
            }
    return NULL;
}

/* The master's close of a listening socket: the last one (see above). */
static void sock_close(int fd)
{
    group_t *g, **pg;
    group_sock_t *gs = group_find(fd, &g);

    close(fd);
    if (gs == NULL)
        return;
    *gs = g->socks[--g->n];
    if (g->n)
        return;
    for (pg = &groups; *pg != g; pg = &(*pg)->next) {}
    *pg = g->next;
    free(g->socks);
    free(g);
}

/*
 * Attach to g a program that picks one of the sockets at the kernel
 * indexes idx[0..k-1], by a hash of the client's address and port (the
 * kernel's own choice hashes the 4-tuple; the port alone would not do:
 * Linux hands out even ports first). The hash reads the IP header
 * (SKF_NET_OFF); a packet too short for it makes the program return 0,
 * the group's first socket, which a reload never drops.
 */
#define FD_STEER_MAX 1024

static int steer_attach(group_t *g, const unsigned *idx, unsigned k)
{
    struct sock_filter f[32 + 2 * FD_STEER_MAX], *p = f;
    struct sock_fprog prog;
    unsigned i;

    if (k == 0 || k > FD_STEER_MAX)
        return FD_ERROR;
    if (k == 1) {
        *p++ = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, idx[0]);
    } else {
        const unsigned N = (unsigned)SKF_NET_OFF;
        /* A = the IP version */
        *p++ = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, N);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 4);
        *p++ = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6,
                                            0, 4);
        /* IPv6: M[0] = the low word of the source, A = the source port
         * (no extension headers before TCP) */
        *p++ = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, N + 20);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ST, 0);
        *p++ = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | BPF_ABS, N + 40);
        *p++ = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, 7, 0, 0);
        /* IPv4: the source, then the port past the header's own length */
        *p++ = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, N + 12);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ST, 0);
        *p++ = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, N);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xf);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 2);
        *p++ = (struct sock_filter)BPF_STMT(BPF_MISC | BPF_TAX, 0);
        *p++ = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | BPF_IND, N);
        /* A = the top 16 bits of (port ^ source) * the golden ratio,
         * scaled to 0..k-1: Fibonacci hashing, which spreads even
         * consecutive ports evenly */
        *p++ = (struct sock_filter)BPF_STMT(BPF_LDX | BPF_MEM, 0);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_MUL | BPF_K,
                                            0x9e3779b1u);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 16);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, k);
        *p++ = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 16);
        for (i = 0; i + 1 < k; i++) {
            *p++ = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, i,
                                                0, 1);
            *p++ = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, idx[i]);
        }
        *p++ = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, idx[k - 1]);
    }
    prog.len = (unsigned short)(p - f);
    prog.filter = f;
    /* any member sets the group's program */
    if (setsockopt(g->socks[0].fd, SOL_SOCKET,
                   SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) < 0) {
        fd_log_error(FD_LOG_WARN, errno, "SO_ATTACH_REUSEPORT_CBPF failed: "
                     "a dropped reuseport socket may reset connections");
        return FD_ERROR;
    }
    g->steered = 1;
    return FD_OK;
}

/* Steer g's new connections to its sockets not retired, skipping the
 * index skip too (-1: none); no program when none is retired. FD_ERROR:
 * the kernel took no program. */
static int steer(group_t *g, int skip)
{
    unsigned idx[FD_STEER_MAX], i, k = 0, retired = 0;

    for (i = 0; i < g->n; i++) {
        retired += g->socks[i].retired != 0;
        if (!g->socks[i].retired && (int)i != skip && k < FD_STEER_MAX)
            idx[k++] = i;
    }
    if (retired == 0 && skip < 0) {
        if (!g->steered)
            return FD_OK;
#ifdef SO_DETACH_REUSEPORT_BPF
        {
            int zero = 0;
            if (setsockopt(g->socks[0].fd, SOL_SOCKET,
                           SO_DETACH_REUSEPORT_BPF, &zero, sizeof(zero)) == 0) {
                g->steered = 0;
                return FD_OK;
            }
        }
#endif
    }
    return k ? steer_attach(g, idx, k) : FD_ERROR;
}

/*
 * A quic address: one UDP socket per worker (SO_REUSEPORT: the kernel
 * hashes the 4-tuple, so a client keeps reaching the same worker while
 * its address stays), receiving the local address of each datagram
 * (IP_PKTINFO), so that a wildcard address answers from the one asked.
 * Not in a reuseport group: no backlog to retire, and a TCP socket on
 * the same port is another group.
 */
#define QUIC_SOCKBUF (2 * 1024 * 1024)

/* net.core.rmem_max (or wmem_max) caps what SO_RCVBUF may ask: say so
 * once, with the sysctl that lifts it */
static void sockbuf_check(const char *name)
{
    char path[64];
    long v = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/sys/net/core/%s", name);
    if ((f = fopen(path, "r")) == NULL)
        return;
    if (fscanf(f, "%ld", &v) == 1 && v < QUIC_SOCKBUF)
        fd_log_error(FD_LOG_WARN, 0, "net.core.%s is %ld: UDP listeners "
                     "(quic, udp) get less than the %d bytes of buffer "
                     "they ask for, and "
                     "drop datagrams under load (sysctl -w net.core.%s=%d)",
                     name, v, QUIC_SOCKBUF, name, QUIC_SOCKBUF);
    fclose(f);
}

static int open_udp(fd_listening_t *ls)
{
    int fd, one = 1, size = QUIC_SOCKBUF;
    static int checked;

    fd = socket(ls->addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                0);
    if (fd < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "socket() for %s%s failed",
                     ls->text, ls->quic ? " quic" : " udp");
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "SO_REUSEPORT on %s%s failed",
                     ls->text, ls->quic ? " quic" : " udp");
        close(fd);
        return -1;
    }
    /* a burst of a window's packets, in and out, without drops */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    if (!checked) {
        checked = 1;
        sockbuf_check("rmem_max");
        sockbuf_check("wmem_max");
    }
    if (ls->addr.ss_family == AF_INET6) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
    } else {
        setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
    }
    if (bind(fd, (struct sockaddr *)&ls->addr, ls->addrlen) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "bind() to %s%s failed",
                     ls->text, ls->quic ? " quic" : " udp");
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * A quic address's n sockets: a datagram goes to the worker that owns its
 * connection, whatever the client's address (migration, a NAT's new
 * port). fastd's connection IDs carry the worker's index in their first
 * byte (fd_quic.c), worker i reads the group's i-th socket (the kernel
 * keeps them in the order they were bound: fds[i]), and this classic BPF
 * program, run with the UDP payload at offset 0, returns the first byte
 * of the Destination Connection ID modulo n: offset 1 in a short header,
 * 6 in a long one. A client's first Initials carry an ID of its own
 * choosing, the same in each, so they too reach one worker every time.
 * A datagram too short for the load makes the program return 0.
 */
static void quic_steer(fd_listening_t *ls)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x80, 0, 2),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 6),      /* long header */
        BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 1),      /* short header */
        BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, ls->nfds),
        BPF_STMT(BPF_RET | BPF_A, 0),
    };
    struct sock_fprog prog = {.len = fd_nelems(f), .filter = f};

    if (ls->nfds < 2)
        return;
    if (setsockopt(ls->fds[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog,
                   sizeof(prog)) < 0)
        fd_log_error(FD_LOG_WARN, errno, "SO_ATTACH_REUSEPORT_CBPF on %s "
                     "quic failed: a client whose address changes may "
                     "reach another worker", ls->text);
}

static int open_one(fd_cycle_t *cycle, fd_listening_t *ls, int reuseport)
{
    int fd, one = 1, secs = 1;

    if (ls->quic || ls->udp)
        return open_udp(ls);
    fd = socket(ls->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
                                         SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "socket() for %s failed", ls->text);
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "SO_REUSEPORT on %s failed",
                     ls->text);
        close(fd);
        return -1;
    }
    if (ls->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ls->addr, ls->addrlen) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "bind() to %s failed", ls->text);
        close(fd);
        return -1;
    }
    if (listen(fd, (int)cycle->events.backlog) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "listen() on %s failed", ls->text);
        close(fd);
        return -1;
    }
    /* accept() only once the request has arrived (nginx's "deferred") */
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof(secs));
    if (reuseport)
        group_add(ls, fd);
    return fd;
}

/*
 * SO_REUSEPORT lets any process of the same user bind beside another, and
 * the kernel would then split new connections between two servers. An
 * address this master does not hold yet is first bound without it: that
 * fails while anyone else listens there, as a plain bind would.
 */
static int address_free(fd_listening_t *ls)
{
    int fd, one = 1, rc, err;

    fd = socket(ls->addr.ss_family,
                (ls->quic || ls->udp ? SOCK_DGRAM : SOCK_STREAM) |
                    SOCK_CLOEXEC,
                0);
    if (fd < 0)
        return 1; /* the real socket() will say why */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    rc = bind(fd, (struct sockaddr *)&ls->addr, ls->addrlen);
    err = errno;
    close(fd);
    if (rc < 0 && err == EADDRINUSE) {
        fd_log_error(FD_LOG_EMERG, err, "bind() to %s failed: another "
                     "process listens there", ls->text);
        return 0;
    }
    return 1;
}

static int in_cycle(fd_cycle_t *cycle, int fd)
{
    fd_listening_t *ls;
    unsigned i;

    for (ls = cycle ? cycle->listening : NULL; ls; ls = ls->next)
        for (i = 0; i < ls->nfds; i++)
            if (ls->fds[i] == fd)
                return 1;
    return 0;
}

/* Does old listen on the address of ls (in either accept mode)? */
static int held(fd_cycle_t *old, fd_listening_t *ls)
{
    fd_listening_t *ol;

    for (ol = old ? old->listening : NULL; ol; ol = ol->next)
        if (ol->nfds && ol->addrlen == ls->addrlen && ol->quic == ls->quic &&
            ol->udp == ls->udp &&
            memcmp(&ol->addr, &ls->addr, ls->addrlen) == 0)
            return 1;
    return 0;
}

/*
 * Give every address of cycle its sockets: the old cycle's where the
 * address (and the balancing mode) is unchanged, new ones otherwise. The
 * old cycle is not modified; on failure the new sockets are closed.
 */
int fd_listening_open(fd_cycle_t *cycle, fd_cycle_t *old)
{
    fd_listening_t *ls, *ol;
    int reuseport = cycle->events.accept == FD_ACCEPT_REUSEPORT;
    unsigned want = reuseport ? (unsigned)cycle->nworkers : 1, i;

    for (ls = cycle->listening; ls; ls = ls->next) {
        /* quic, udp: a socket per worker whatever events.accept says */
        unsigned n = ls->quic || ls->udp ? (unsigned)cycle->nworkers : want;
        ls->fds = fd_palloc(cycle->pool, n * sizeof(int));
        ls->nfds = 0;
        ls->ev.fd = -1;
        ol = NULL;
        if (old && (ls->quic || ls->udp ||
                    (old->events.accept == FD_ACCEPT_REUSEPORT) == reuseport))
            for (ol = old->listening; ol; ol = ol->next)
                if (ol->addrlen == ls->addrlen && ol->quic == ls->quic &&
                    ol->udp == ls->udp &&
                    memcmp(&ol->addr, &ls->addr, ls->addrlen) == 0)
                    break;
        for (i = 0; ol && i < ol->nfds && ls->nfds < n; i++)
            ls->fds[ls->nfds++] = ol->fds[i];
        if ((reuseport || ls->quic || ls->udp) && ls->nfds == 0 &&
            !held(old, ls) &&
            !address_free(ls))
            goto failed;
        while (ls->nfds < n) {
            int fd = open_one(cycle, ls, reuseport);
            if (fd < 0)
                goto failed;
            ls->fds[ls->nfds++] = fd;
        }
        if (ls->quic)
            quic_steer(ls);
    }
    return FD_OK;

failed:
    for (ls = cycle->listening; ls; ls = ls->next) {
        for (i = 0; ls->fds && i < ls->nfds; i++)
            if (!in_cycle(old, ls->fds[i]))
                sock_close(ls->fds[i]);
        ls->nfds = 0;
    }
    return FD_ERROR;
}

/*
 * After a reload: close the old sockets the new cycle did not take, but
 * retire those of a reuseport group the new cycle still listens on (see
 * the top of this file), and steer the group away from them.
 */
void fd_listening_close_unused(fd_cycle_t *cycle, fd_cycle_t *old)
{
    fd_listening_t *ol;
    group_sock_t *gs;
    group_t *g;
    unsigned i;

    if (old == NULL)
        return;
    for (ol = old->listening; ol; ol = ol->next)
        for (i = 0; i < ol->nfds; i++) {
            if (in_cycle(cycle, ol->fds[i]))
                continue;
            gs = group_find(ol->fds[i], &g);
            if (gs && cycle->events.accept == FD_ACCEPT_REUSEPORT &&
                g->n > 1 && !g->socks[0].retired &&
                in_cycle(cycle, g->socks[0].fd))
                gs->retired = cycle->generation;
            else
                sock_close(ol->fds[i]);
        }
    for (g = groups; g; g = g->next) {
        if (steer(g, -1) == FD_OK)
            continue;
        /* not steered away: a retired socket would get connections
         * nobody takes, so it closes now (its backlog is reset, as
         * before retiring) */
        for (i = g->n; i-- > 0;)
            if (g->socks[i].retired)
                sock_close(g->socks[i].fd);
    }
}

/*
 * The master, when workers have exited: close the retired sockets no
 * live worker can hold any more (oldest: the oldest generation still
 * running, 0 for none). A close moves the group's last socket into the
 * slot: steer away from it first, so that no connection meets the index
 * in between.
 */
void fd_listening_retire(uint64_t oldest)
{
    group_t *g, *next;
    unsigned i;

    for (g = groups; g; g = next) {
        next = g->next;
        for (i = g->n; i-- > 0;) {
            group_sock_t *gs = &g->socks[i];
            if (gs->retired == 0 || (oldest && oldest < gs->retired))
                continue;
            if (i + 1 < g->n && !g->socks[g->n - 1].retired)
                steer(g, (int)g->n - 1);
            if (g->n == 1) {
                sock_close(gs->fd); /* frees g */
                break;
            }
            sock_close(gs->fd);
            steer(g, -1);
        }
    }
}

/* A new worker: its copies of the retired sockets go (it must not accept
 * there, and its copy would keep a socket open past the master's close). */
void fd_listening_forget_retired(void)
{
    group_t *g;
    unsigned i;

    for (g = groups; g; g = g->next)
        for (i = 0; i < g->n; i++)
            if (g->socks[i].retired)
                close(g->socks[i].fd);
}

void fd_listening_close(fd_cycle_t *cycle)
{
    fd_listening_t *ls;
    unsigned i;

    for (ls = cycle->listening; ls; ls = ls->next) {
        for (i = 0; i < ls->nfds; i++)
            sock_close(ls->fds[i]);
        ls->nfds = 0;
    }
    fd_listening_retire(0);
}
