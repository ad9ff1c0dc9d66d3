/*
 * Unit tests: upstream groups (core/http/fd_upstream.c) without the proxy:
 * groups parsed through the [upstream] keys, the balancers and their
 * distribution, backups, consistent hashing, passive health, the status
 * counters, and the keep-alive pool over socketpairs on a real epoll.
 */
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_upstream.h"
#include "tap.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static fd_conf_t cf;
static fd_cycle_t cycle;       /* holds the implicit groups */
static fd_worker_t worker;

/* A group as [upstream name] with these "key = value" lines would make;
 * NULL (and the error on stderr) when the configuration is refused. */
static fd_upstream_t *group(const char *name, const char *const *kv)
{
    fd_upstream_t *up = fd_pcalloc(cf.pool, sizeof(*up));

    if (up == NULL || fd_conf_defaults(&cf, fd_upstream_directives, up))
        return NULL;
    for (; kv[0]; kv += 2) {
        const fd_directive_t *d = fd_conf_find(fd_upstream_directives, kv[0]);
        if (d == NULL || fd_conf_set(&cf, d, up, kv[1]) != FD_OK) {
            diag("%s = %s: %s", kv[0], kv[1], d ? cf.err : "unknown key");
            return NULL;
        }
    }
    if (fd_upstream_init_section(&cf, name, up) != FD_OK) {
        diag("[upstream %s]: %s", name, cf.err);
        return NULL;
    }
    return up;
}

static unsigned peer_of(fd_upstream_t *up, const fd_upstream_peer_t *p)
{
    return p ? p->index : up->npeers;
}

/* The epoll turn of the worker loop, for the upstream connections. */
static int loop_turn(void)
{
    struct epoll_event ev[16];
    int n = epoll_wait(worker.epfd, ev, 16, 0), i;

    for (i = 0; i < n; i++) {
        fd_event_t *e = (fd_event_t *)((uintptr_t)ev[i].data.ptr &
                                       ~(uintptr_t)1);
        if (e->fd >= 0)
            e->handler(e, ev[i].events);
    }
    return n;
}

static void test_round_robin(void)
{
    static const char *const kv[] = {"server", "127.0.0.1:8001 weight=5",
                                     "server", "127.0.0.1:8002",
                                     "server", "127.0.0.1:8003", NULL};
    fd_upstream_t *up = group("rr", kv);
    uint64_t tried[1] = {0};
    unsigned n[4] = {0}, i, run = 0, max_run = 0, last = 9;

    if (!ok(up != NULL && up->npeers == 3, "rr: 3 servers"))
        return;
    for (i = 0; i < 700; i++) {
        unsigned k = peer_of(up, fd_upstream_pick(up, tried, 0));
        n[k]++;
        run = k == last ? run + 1 : 1;
        last = k;
        if (k != 0 && run > max_run)
            max_run = run;
    }
    is_int(n[0], 500, "rr: weight 5 gets 5 in 7");
    is_int(n[1], 100, "rr: weight 1 gets 1 in 7");
    is_int(n[2], 100, "rr: the other weight 1 too");
    is_int(max_run, 1, "rr: smooth, no light server twice in a row");

    fd_upstream_set_tried(tried, &up->peers[0], 1);
    for (i = 0; i < 10; i++)
        if (fd_upstream_pick(up, tried, 0) == &up->peers[0])
            break;
    is_int(i, 10, "rr: a tried server is not picked again");
    fd_upstream_set_tried(tried, &up->peers[1], 1);
    fd_upstream_set_tried(tried, &up->peers[2], 1);
    ok(fd_upstream_pick(up, tried, 0) == NULL, "rr: all tried: none");
    ok(!fd_upstream_has_candidate(up, tried), "rr: and no candidate");
    fd_upstream_set_tried(tried, &up->peers[1], 0);
    ok(fd_upstream_has_candidate(up, tried), "rr: one untried: a candidate");
}

static void test_least_conn(void)
{
    static const char *const kv[] = {"balance", "least_conn",
                                     "server", "127.0.0.1:8001",
                                     "server", "127.0.0.1:8002 weight=2",
                                     NULL};
    fd_upstream_t *up = group("lc", kv);
    uint64_t tried[1] = {0};
    fd_upstream_peer_t *p;
    unsigned i, n[3] = {0};

    if (!ok(up != NULL, "least_conn group"))
        return;
    /* each pick stays in progress: 6 requests spread 2:4 by weight */
    for (i = 0; i < 6; i++) {
        p = fd_upstream_pick(up, tried, 0);
        n[peer_of(up, p)]++;
        fd_upstream_peer_acquire(p);
    }
    is_int(n[0], 2, "least_conn: weight 1 holds 2 of 6");
    is_int(n[1], 4, "least_conn: weight 2 holds 4 of 6");
    for (i = 0; i < 4; i++)
        fd_upstream_peer_release(&up->peers[1]);
    ok(fd_upstream_pick(up, tried, 0) == &up->peers[1],
       "least_conn: the server whose requests ended is next");
}

static void test_backup(void)
{
    static const char *const kv[] = {"server", "127.0.0.1:8001",
                                     "server", "127.0.0.1:8002",
                                     "server", "127.0.0.1:8009 backup", NULL};
    static const char *const all_backup[] = {
        "server", "127.0.0.1:8001 backup", NULL};
    fd_upstream_t *up = group("bk", kv);
    uint64_t tried[1] = {0};
    unsigned i, used = 0;

    if (!ok(up != NULL, "backup group"))
        return;
    for (i = 0; i < 50; i++)
        used += fd_upstream_pick(up, tried, 0) == &up->peers[2];
    is_int(used, 0, "backup: unused while a primary is up");
    fd_upstream_set_tried(tried, &up->peers[0], 1);
    ok(fd_upstream_pick(up, tried, 0) == &up->peers[1],
       "backup: the other primary first");
    fd_upstream_set_tried(tried, &up->peers[1], 1);
    ok(fd_upstream_pick(up, tried, 0) == &up->peers[2],
       "backup: taken when every primary was tried");
    tried[0] = 0;
    fd_upstream_peer_failed(&up->peers[0]);
    fd_upstream_peer_failed(&up->peers[1]);
    ok(fd_upstream_pick(up, tried, 0) == &up->peers[2],
       "backup: taken when every primary is down");
    fd_upstream_peer_ok(&up->peers[0]);
    fd_upstream_peer_ok(&up->peers[1]);
    ok(group("allbk", all_backup) == NULL, "a group of backups only is "
       "refused");
}

/* Which server each of n keys goes to, by name (groups may differ). */
static void hash_map(fd_upstream_t *up, const uint64_t *tried,
                     const char **map, unsigned n)
{
    char key[32];
    unsigned i;

    for (i = 0; i < n; i++) {
        int len = snprintf(key, sizeof(key), "10.0.%u.%u", i / 250, i % 250);
        fd_upstream_peer_t *p = fd_upstream_pick(
            up, tried, fd_upstream_hash(key, (size_t)len));
        map[i] = p ? p->name : NULL;
    }
}

#define KEYS 4000

static void test_hash(void)
{
    static const char *const four[] = {"balance", "hash",
                                       "server", "127.0.0.1:8001",
                                       "server", "127.0.0.1:8002",
                                       "server", "127.0.0.1:8003",
                                       "server", "127.0.0.1:8004", NULL};
    static const char *const three[] = {"balance", "hash",
                                        "server", "127.0.0.1:8001",
                                        "server", "127.0.0.1:8002",
                                        "server", "127.0.0.1:8004", NULL};
    static const char *const bad[] = {"hash_key", "$uri",
                                      "server", "127.0.0.1:8001", NULL};
    static const char *a[KEYS], *b[KEYS], *c[KEYS];
    const char *gone = "127.0.0.1:8003";
    fd_upstream_t *up4 = group("h4", four), *up3 = group("h3", three);
    uint64_t tried[1] = {0};
    unsigned i, k, share[4] = {0}, same = 1, moved = 0, stray = 0;
    unsigned min = KEYS, max = 0;

    if (!ok(up4 != NULL && up3 != NULL, "hash groups"))
        return;
    hash_map(up4, tried, a, KEYS);
    hash_map(up4, tried, b, KEYS);
    for (i = 0; i < KEYS; i++) {
        same &= a[i] != NULL && strcmp(a[i], b[i]) == 0;
        for (k = 0; k < 4; k++)
            share[k] += strcmp(a[i], up4->peers[k].name) == 0;
    }
    ok(same, "hash: the same key goes to the same server");
    for (k = 0; k < 4; k++) {
        min = fd_min(min, share[k]);
        max = fd_max(max, share[k]);
    }
    ok(min > KEYS / 8 && max < KEYS / 2, "hash: every server gets a share "
       "(%u to %u of %u keys)", min, max, KEYS);

    /* a group without one server: only that server's keys move */
    hash_map(up3, tried, c, KEYS);
    for (i = 0; i < KEYS; i++) {
        if (strcmp(a[i], gone) == 0)
            moved += strcmp(c[i], gone) != 0;
        else
            stray += strcmp(a[i], c[i]) != 0;
    }
    is_int(moved, share[2], "hash: the removed server's keys all moved");
    is_int(stray, 0, "hash: no other key moved");

    /* a server out of use (tried, or down) is passed like a removed one */
    fd_upstream_set_tried(tried, &up4->peers[2], 1);
    hash_map(up4, tried, b, KEYS);
    for (i = 0, same = 1; i < KEYS; i++)
        same &= strcmp(b[i], c[i]) == 0;
    ok(same, "hash: a tried server's keys go where its removal sends them");

    ok(group("hk", bad) == NULL, "hash_key without balance = hash is "
       "refused");
}

static void test_health(void)
{
    static const char *const kv[] = {
        "server", "127.0.0.1:8001 max_fails=2 fail_timeout=10s",
        "server", "127.0.0.1:8002 max_fails=0",
        "server", "127.0.0.1:8003 down", NULL};
    static const char *const sole[] = {"server", "127.0.0.1:8001", NULL};
    fd_upstream_t *up = group("hc", kv), *one = group("one", sole), *imp;
    fd_upstream_peer_t *p;
    uint64_t tried[1] = {0};
    unsigned i;

    if (!ok(up != NULL && one != NULL, "health groups"))
        return;
    p = &up->peers[0];
    fd_current_msec = 100000;
    fd_upstream_peer_failed(p);
    ok(fd_upstream_peer_usable(p), "health: one failure of max_fails=2: up");
    fd_current_msec += 10001;
    fd_upstream_peer_failed(p);
    ok(fd_upstream_peer_usable(p), "health: failures further apart than "
       "fail_timeout do not add up");
    fd_current_msec += 5000;
    fd_upstream_peer_failed(p);
    ok(!fd_upstream_peer_usable(p), "health: two within fail_timeout: down");
    for (i = 0; i < 20; i++)
        if (fd_upstream_pick(up, tried, 0) == p)
            break;
    is_int(i, 20, "health: a down server is not picked");
    fd_current_msec += 10000;
    ok(!fd_upstream_peer_usable(p), "health: still down at fail_timeout");
    fd_current_msec += 1;
    ok(fd_upstream_peer_usable(p), "health: back after fail_timeout");
    fd_upstream_peer_failed(p);
    fd_upstream_peer_ok(p);
    fd_upstream_peer_failed(p);
    ok(fd_upstream_peer_usable(p), "health: a success starts the count "
       "again");

    for (i = 0; i < 10; i++)
        fd_upstream_peer_failed(&up->peers[1]);
    ok(fd_upstream_peer_usable(&up->peers[1]), "health: max_fails=0 is "
       "never down");
    ok(!fd_upstream_peer_usable(&up->peers[2]), "health: down is never "
       "used");

    for (i = 0; i < 10; i++)
        fd_upstream_peer_failed(&one->peers[0]);
    ok(fd_upstream_peer_usable(&one->peers[0]), "health: a sole server is "
       "never down");

    imp = fd_upstream_implicit(&cf, "127.0.0.1:8005", "max_fails=3");
    ok(imp != NULL && imp->npeers == 1, "implicit group of pass =");
    ok(imp == fd_upstream_implicit(&cf, "127.0.0.1:8005", "max_fails=3"),
       "implicit: the same address and options share a group");
    ok(imp != fd_upstream_implicit(&cf, "127.0.0.1:8005", ""),
       "implicit: other options, another group");
    for (i = 0; imp && i < 10; i++)
        fd_upstream_peer_failed(&imp->peers[0]);
    ok(imp && fd_upstream_peer_usable(&imp->peers[0]), "implicit: its sole "
       "server is never down");
    ok(fd_upstream_implicit(&cf, "127.0.0.1:8005", "weight=2") == NULL,
       "implicit: weight= needs an [upstream]");
}

/* health_check: its options, its errors, and a reload's group finding
 * the same shared entries (the state goes on) */
static void test_health_check(void)
{
    static const char *const kv[] = {
        "server", "127.0.0.1:8101", "server", "127.0.0.1:8102",
        "health_check", "/hz interval=1s timeout=5s fails=2 passes=3 "
                        "status=200-204 port=9000", NULL};
    static const char *const bad[][2] = {
        {"hz", "needs a URI"}, {"/hz interval=50ms", "interval=50ms"},
        {"/hz passes=1001", "passes=1001"}, {"/hz status=99", "status=99"},
        {"/hz status=204-200", "status=204-200"}, {"/hz port=0", "port=0"},
        {"/h\x01z", "control character"}, {"/hz x=1", "unknown option"}};
    fd_upstream_t *up = group("checked", kv), *again = group("checked", kv);
    const fd_upstream_health_t *hc;
    unsigned i;

    if (!ok(up && up->health && again, "health_check: parsed"))
        return;
    hc = up->health;
    ok(strcmp(hc->uri, "/hz") == 0 && hc->interval == 1000 &&
       hc->fails == 2 && hc->passes == 3 && hc->status_lo == 200 &&
       hc->status_hi == 204 && hc->port == 9000,
       "health_check: every option");
    is_int(hc->timeout, 1000, "health_check: timeout no longer than the "
           "interval");
    ok(up->peers[0].health >= 0 && up->peers[1].health >= 0 &&
       up->peers[0].health != up->peers[1].health,
       "health_check: an entry per server");
    ok(again->peers[0].health == up->peers[0].health &&
       again->peers[1].health == up->peers[1].health,
       "health_check: a reload's group finds the same entries");
    ok(fd_upstream_health_ok(&up->peers[0]) &&
       fd_upstream_peer_usable(&up->peers[0]),
       "health_check: a server is up until probes say otherwise");
    for (i = 0; i < fd_nelems(bad); i++) {
        const char *const b[] = {"server", "127.0.0.1:8103",
                                 "health_check", bad[i][0], NULL};
        fd_upstream_t *x = fd_pcalloc(cf.pool, sizeof(*x));
        const fd_directive_t *d;
        int rc = fd_conf_defaults(&cf, fd_upstream_directives, x);
        for (const char *const *k = b; rc == FD_OK && k[0]; k += 2) {
            d = fd_conf_find(fd_upstream_directives, k[0]);
            rc = fd_conf_set(&cf, d, x, k[1]);
        }
        if (rc == FD_OK)
            rc = fd_upstream_init_section(&cf, "bad", x);
        ok(rc != FD_OK && strstr(cf.err, bad[i][1]) != NULL,
           "health_check = %s: refused (%s)", bad[i][0], cf.err);
    }
}

static void test_status(void)
{
    static const char *const kv[] = {"server", "127.0.0.1:8001",
                                     "server", "127.0.0.1:8002 down", NULL};
    static fd_upstream_shm_t area, retired;
    fd_upstream_t *up = group("app", kv);
    fd_upstream_peer_t *p;

    if (!ok(up != NULL, "status group"))
        return;
    p = &up->peers[0];
    memset(&area, 0xff, sizeof(area)); /* a worker starts from zero */
    fd_upstream_init_worker(&up, 1, &area);
    is_str(area.peer[0].upstream, "app", "status: the group's name");
    is_str(area.peer[1].server, "127.0.0.1:8002", "status: the server's");
    is_int(area.peer[0].healthy, 1, "status: up is healthy");
    is_int(area.peer[1].healthy, 0, "status: down is not");
    ok(area.peer[2].upstream[0] == '\0', "status: the rest is empty");
    fd_upstream_peer_acquire(p);
    fd_upstream_peer_response(p, 7);
    fd_upstream_peer_failed(p);
    is_int(area.peer[0].requests, 1, "status: a request");
    is_int(area.peer[0].active, 1, "status: in progress");
    is_int(area.peer[0].responses, 1, "status: a response");
    is_int(area.peer[0].response_msec, 7, "status: its time");
    is_int(area.peer[0].fails, 1, "status: a failure");
    is_int(area.peer[0].healthy, 0, "status: max_fails reached");
    fd_upstream_peer_release(p);
    is_int(area.peer[0].active, 0, "status: no longer in progress");
    fd_upstream_peer_ok(p);
    fd_upstream_retire(&retired, &area);
    fd_upstream_retire(&retired, &area);
    is_int(retired.peer[0].requests, 2, "status: an exited worker's "
           "counters add up by name");
    fd_upstream_init_worker(NULL, 0, NULL);
}

/* A connection to p over a socketpair; the other end in *far. */
static fd_upstream_conn_t *conn(fd_upstream_peer_t *p, int *far)
{
    int sv[2];
    fd_upstream_conn_t *uc;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0) {
        perror("socketpair");
        _exit(1);
    }
    *far = sv[1];
    uc = fd_upstream_conn_add(p, sv[0], 0);
    if (uc) {
        uc->data = p; /* in use: anything not NULL */
        uc->requests = 1;
    }
    return uc;
}

/* 1 when the far end of a connection saw it closed (a reset when it was
 * closed with bytes unread) */
static int closed_at(int far)
{
    char ch;
    ssize_t n = recv(far, &ch, 1, MSG_DONTWAIT);

    return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void test_keepalive(void)
{
    static const char *const kv[] = {"keepalive", "2",
                                     "keepalive_timeout", "5s",
                                     "keepalive_requests", "3",
                                     "server", "127.0.0.1:8001",
                                     "server", "127.0.0.1:8002", NULL};
    static const char *const none[] = {"server", "127.0.0.1:8001", NULL};
    fd_upstream_t *up = group("ka", kv), *up0 = group("noka", none);
    fd_upstream_peer_t *p, *q;
    fd_upstream_conn_t *a, *b, *c;
    int fa, fb, fc;

    if (!ok(up != NULL && up0 != NULL, "keep-alive groups"))
        return;
    p = &up->peers[0];
    q = &up->peers[1];
    fd_current_msec = 1000000;

    a = conn(p, &fa);
    if (!ok(a != NULL, "a connection over a socketpair"))
        return;
    fd_upstream_keepalive_put(a);
    ok(p->idle == a && up->nidle == 1 && a->data == NULL,
       "put: idle in the pool");
    ok(fd_upstream_keepalive_get(q, NULL, 1) == NULL, "get: none to "
       "another server");
    ok(fd_upstream_keepalive_get(p, NULL, 1) == a && a->reused && !a->idle,
       "get: the same connection back, marked reused");
    ok(p->idle == NULL && up->nidle == 0, "get: out of the pool");
    ok(fd_upstream_keepalive_get(p, NULL, 1) == NULL, "get: then none");

    /* made for another user (a TLS client): not given for plain TCP */
    a->data = p;
    a->key = up;
    fd_upstream_keepalive_put(a);
    ok(fd_upstream_keepalive_get(p, NULL, 1) == NULL && up->nidle == 1,
       "get: none made for another key");
    ok(fd_upstream_keepalive_get(p, up, 1) == a, "get: the one of its key");
    a->key = NULL;

    /* the upstream closes an idle connection: the event closes it */
    a->data = p;
    fd_upstream_keepalive_put(a);
    close(fa);
    ok(loop_turn() == 1 && p->idle == NULL && up->nidle == 0,
       "an idle connection the upstream closed leaves the pool");

    /* one whose FIN the loop has not seen yet: found by the peek */
    a = conn(p, &fa);
    fd_upstream_keepalive_put(a);
    close(fa);
    ok(fd_upstream_keepalive_get(p, NULL, 1) == NULL && up->nidle == 0,
       "get: a careful get peeks and drops a closed one");
    a = conn(p, &fa);
    fd_upstream_keepalive_put(a);
    close(fa);
    ok(fd_upstream_keepalive_get(p, NULL, 0) == a, "get: a connection idle "
       "under a second is not peeked at unless careful");
    fd_upstream_conn_close(a);

    /* bytes nobody asked for close it too */
    a = conn(p, &fa);
    fd_upstream_keepalive_put(a);
    (void)!write(fa, "x", 1);
    loop_turn();
    ok(p->idle == NULL && closed_at(fa), "an idle connection that turns "
       "readable is closed");
    close(fa);

    /* the cap: keepalive = 2 per group, least recently used out */
    a = conn(p, &fa);
    b = conn(q, &fb);
    c = conn(p, &fc);
    fd_upstream_keepalive_put(a);
    fd_current_msec += 10;
    fd_upstream_keepalive_put(b);
    fd_current_msec += 10;
    fd_upstream_keepalive_put(c);
    is_int(up->nidle, 2, "cap: two idle in the group");
    ok(closed_at(fa), "cap: the least recently used was closed");
    ok(p->idle == c && q->idle == b, "cap: the newer two stay");

    /* the idle timer: keepalive_timeout */
    fd_current_msec += 4980;
    fd_timer_expire();
    is_int(up->nidle, 2, "timeout: not before keepalive_timeout");
    fd_current_msec += 10;
    fd_timer_expire();
    ok(up->nidle == 1 && q->idle == NULL && closed_at(fb),
       "timeout: the older one closed after keepalive_timeout");
    fd_current_msec += 10;
    fd_timer_expire();
    ok(up->nidle == 0 && closed_at(fc), "timeout: then the other");
    close(fa);
    close(fb);
    close(fc);

    /* what is not kept */
    a = conn(p, &fa);
    a->requests = 3;
    fd_upstream_keepalive_put(a);
    ok(up->nidle == 0 && closed_at(fa), "keepalive_requests reached: closed");
    close(fa);
    a = conn(p, &fa);
    a->s.eof = 1;
    fd_upstream_keepalive_put(a);
    ok(up->nidle == 0 && closed_at(fa), "the upstream's end seen: closed");
    close(fa);
    a = conn(&up0->peers[0], &fa);
    fd_upstream_keepalive_put(a);
    ok(up0->nidle == 0 && closed_at(fa), "keepalive = 0: closed");
    close(fa);
    worker.quitting = 1;
    a = conn(p, &fa);
    fd_upstream_keepalive_put(a);
    ok(up->nidle == 0 && closed_at(fa), "the worker stops: closed");
    close(fa);
    worker.quitting = 0;

    /* the siblings of a dead one */
    a = conn(p, &fa);
    b = conn(p, &fb);
    fd_upstream_keepalive_put(a);
    fd_upstream_keepalive_put(b);
    fd_upstream_keepalive_close_peer(p);
    ok(up->nidle == 0 && closed_at(fa) && closed_at(fb),
       "close_peer: every idle connection to the server closed");
    close(fa);
    close(fb);
}

static fd_upstream_addr_t v4(unsigned last)
{
    fd_upstream_addr_t a = {.family = AF_INET, .addr = {10, 0, 0, 0}};

    a.addr[3] = (uint8_t)last;
    return a;
}

static int slot_is(const fd_upstream_addr_t *s, unsigned last)
{
    return s->family == AF_INET && s->addr[3] == last;
}

/* server = NAME:PORT resolve: how an answer lands in a name's slots */
static void test_resolve_merge(void)
{
    fd_upstream_addr_t s[FD_UPSTREAM_RESOLVE_MAX], got[FD_UPSTREAM_RESOLVE_MAX];
    fd_upstream_addr_t six = {.family = AF_INET6, .addr = {0x20, 0x01}};
    unsigned i, n;

    memset(s, 0, sizeof(s));
    got[0] = v4(1);
    got[1] = v4(2);
    is_int(fd_upstream_resolve_merge(s, FD_UPSTREAM_RESOLVE_MAX, got, 2, 10),
           1, "merge: a first answer changes the set");
    ok(slot_is(&s[0], 1) && slot_is(&s[1], 2) && s[2].family == 0,
       "merge: its addresses take the first slots");
    is_int(fd_upstream_resolve_merge(s, FD_UPSTREAM_RESOLVE_MAX, got, 2, 20),
           0, "merge: the same answer changes nothing");
    got[0] = v4(2);
    got[1] = v4(1);
    is_int(fd_upstream_resolve_merge(s, FD_UPSTREAM_RESOLVE_MAX, got, 2, 20),
           0, "merge: nor does the same set in another order");
    got[0] = v4(2);
    got[1] = v4(3);
    is_int(fd_upstream_resolve_merge(s, FD_UPSTREAM_RESOLVE_MAX, got, 2, 30),
           1, "merge: one address gone, one new: a change");
    ok(s[0].family == 0 && s[0].vacated == 30, "merge: the gone one's slot "
       "is emptied (and when)");
    ok(slot_is(&s[1], 2), "merge: the address that stays keeps its slot");
    ok(slot_is(&s[2], 3), "merge: the new one takes a never used slot, not "
       "the one just emptied (requests may be in flight there)");
    got[2] = six;
    is_int(fd_upstream_resolve_merge(s, FD_UPSTREAM_RESOLVE_MAX, got, 3, 40),
           1, "merge: an IPv6 address joins");
    ok(s[3].family == AF_INET6 && s[3].addr[0] == 0x20, "merge: in the next "
       "free slot");
    /* a full answer: every slot used, the emptied one last */
    for (n = 0; n < FD_UPSTREAM_RESOLVE_MAX; n++)
        got[n] = v4(100 + n);
    fd_upstream_resolve_merge(s, FD_UPSTREAM_RESOLVE_MAX, got, n, 50);
    for (i = 0; i < FD_UPSTREAM_RESOLVE_MAX && s[i].family == AF_INET &&
                s[i].addr[3] >= 100;
         i++)
        ;
    is_int(i, FD_UPSTREAM_RESOLVE_MAX, "merge: 16 new addresses fill the "
           "16 slots");
    got[0] = v4(1);
    is_int(fd_upstream_resolve_merge(s, FD_UPSTREAM_RESOLVE_MAX, got, 1, 60),
           1, "merge: down to one address");
    for (i = n = 0; i < FD_UPSTREAM_RESOLVE_MAX; i++)
        n += s[i].family != 0;
    is_int(n, 1, "merge: the 16 others are emptied");
}

/* server = NAME:PORT resolve at load: 16 empty slots, no fatal error for
 * a name that needs no lookup yet, and the lines that are refused */
static void test_resolve_conf(void)
{
    static const char *const kv[] = {"resolver", "127.0.0.1:5353",
                                     "resolver", "[::1]",
                                     "server", "app.test:8080 resolve "
                                               "weight=3 max_fails=2",
                                     NULL};
    static const char *const mixed[] = {"resolver", "127.0.0.1",
                                        "server", "127.0.0.1:8001",
                                        "server", "app.test:80 resolve",
                                        NULL};
    static const char *const no_resolver[] = {"server", "app.test:80 resolve",
                                              NULL};
    static const char *const by_name[] = {"resolver", "dns.example",
                                          "server", "app.test:80 resolve",
                                          NULL};
    static const char *const bad_port[] = {"resolver", "127.0.0.1:0",
                                           "server", "app.test:80 resolve",
                                           NULL};
    static const char *const address[] = {"resolver", "127.0.0.1",
                                          "server", "10.0.0.1:80 resolve",
                                          NULL};
    uint64_t tried[1] = {0};
    fd_upstream_t *up = group("rs", kv);
    unsigned i, absent = 0, opts = 0;

    if (!ok(up != NULL, "resolve: a group of a name and two resolvers"))
        return;
    is_str(up->resolvers, "127.0.0.1:5353,[::1]:53",
           "resolve: resolvers for c-ares (port 53 by default)");
    is_int(up->npeers, FD_UPSTREAM_RESOLVE_MAX, "resolve: 16 slots");
    for (i = 0; i < up->npeers; i++) {
        absent += up->peers[i].absent;
        opts += up->peers[i].weight == 3 && up->peers[i].max_fails == 2 &&
                up->peers[i].resolve != NULL;
    }
    is_int(absent, FD_UPSTREAM_RESOLVE_MAX, "resolve: all empty until an "
           "answer");
    is_int(opts, FD_UPSTREAM_RESOLVE_MAX, "resolve: each with the line's "
           "options");
    ok(fd_upstream_pick(up, tried, 0) == NULL &&
       !fd_upstream_has_candidate(up, tried),
       "resolve: no address: nothing to pick (502)");
    is_str(up->peers[0].name, "app.test:8080", "resolve: an empty slot is "
           "named for its line");

    up = group("mixed", mixed);
    ok(up != NULL && up->npeers == 1 + FD_UPSTREAM_RESOLVE_MAX,
       "resolve: a fixed server beside a resolved name");
    ok(up && fd_upstream_pick(up, tried, 0) == &up->peers[0] &&
       fd_upstream_pick(up, tried, 0) == &up->peers[0],
       "resolve: the fixed one serves alone while the name has no address");
    ok(up && up->nlive == 1, "resolve: the only live server (never taken "
       "out)");

    ok(group("nores", no_resolver) == NULL && strstr(cf.err, "resolver"),
       "resolve: refused without a resolver");
    ok(group("byname", by_name) == NULL && strstr(cf.err, "bad \"resolver\""),
       "resolve: refused: a resolver by name");
    ok(group("badport", bad_port) == NULL &&
       strstr(cf.err, "bad \"resolver\""),
       "resolve: refused: a resolver on port 0");
    ok(group("addr", address) == NULL && strstr(cf.err, "host name"),
       "resolve: refused on an address");
}

int main(void)
{
    cf.pool = fd_pool_create(16384);
    cf.cycle = &cycle;
    worker.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (cf.pool == NULL || worker.epfd < 0 || fd_timer_init() != FD_OK) {
        perror("setup");
        return 1;
    }
    fd_worker = &worker;
    fd_current_msec = 1000;

    test_round_robin();
    test_least_conn();
    test_backup();
    test_hash();
    test_health();
    test_health_check();
    test_status();
    test_keepalive();
    test_resolve_merge();
    test_resolve_conf();

    fd_pool_destroy(cf.pool);
    return done_testing();
}
