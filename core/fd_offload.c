/*
 * The worker's offload pool: threads take work items from a queue guarded
 * by a mutex (held only to push/pop, never while work runs), and hand
 * finished items back through a second list and an eventfd that wakes the
 * worker's loop, where done() runs.
 */
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_offload.h"

typedef struct item_s {
    struct item_s *next;
    fd_request_t *r;
    fd_offload_pt work;
    fd_offload_pt done;
} item_t;

typedef struct {
    fd_event_t ev;               /* the eventfd */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    item_t *head, **tail;        /* pending */
    item_t *finished;            /* done, waiting for the loop */
    unsigned threads, busy, pending;
    uint64_t completed;
    int stop;
} pool_t;

static pool_t pool = {.ev.fd = -1};

static void *thread_main(void *arg)
{
    pool_t *p = arg;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        item_t *it;
        uint64_t one = 1;

        while (p->head == NULL && !p->stop)
            pthread_cond_wait(&p->cond, &p->lock);
        if (p->stop)
            break;
        it = p->head;
        p->head = it->next;
        if (p->head == NULL)
            p->tail = &p->head;
        p->pending--;
        p->busy++;
        pthread_mutex_unlock(&p->lock);

        it->work(it->r);

        pthread_mutex_lock(&p->lock);
        p->busy--;
        p->completed++;
        it->next = p->finished;
        p->finished = it;
        if (write(p->ev.fd, &one, sizeof(one)) < 0) {
            /* the counter is saturated only if the loop is gone */
        }
    }
    p->threads--;
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void pool_event(fd_event_t *ev, uint32_t events)
{
    pool_t *p = (pool_t *)ev;
    uint64_t n;
    item_t *list, *rev = NULL, *it;

    (void)events;
    if (read(ev->fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        fd_log_error(FD_LOG_ALERT, errno, "eventfd read() failed");
    pthread_mutex_lock(&p->lock);
    list = p->finished;
    p->finished = NULL;
    pthread_mutex_unlock(&p->lock);
    while (list) { /* restore submission order */
        it = list;
        list = it->next;
        it->next = rev;
        rev = it;
    }
    while (rev) {
        it = rev;
        rev = it->next;
        it->done(it->r);
        free(it);
    }
}

static int pool_start_thread(pool_t *p)
{
    pthread_t t;
    pthread_attr_t attr;
    int rc;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    rc = pthread_create(&t, &attr, thread_main, p);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        fd_log_error(FD_LOG_ALERT, rc, "pthread_create() failed");
        return FD_ERROR;
    }
    p->threads++;
    return FD_OK;
}

int fd_offload(fd_request_t *r, fd_offload_pt work, fd_offload_pt done)
{
    pool_t *p = &pool;
    item_t *it;

    if (p->ev.fd < 0)
        return FD_ERROR;
    it = malloc(sizeof(*it));
    if (it == NULL)
        return FD_ERROR;
    it->r = r;
    it->work = work;
    it->done = done;
    it->next = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->threads == 0 && pool_start_thread(p) != FD_OK) {
        pthread_mutex_unlock(&p->lock);
        free(it);
        return FD_ERROR;
    }
    *p->tail = it;
    p->tail = &it->next;
    p->pending++;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return FD_OK;
}

int fd_offload_init_worker(fd_worker_t *w)
{
    pool_t *p = &pool;
    fd_int_t i;

    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->tail = &p->head;
    p->ev.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->ev.handler = pool_event;
    if (p->ev.fd < 0 || fd_event_add(&p->ev, EPOLLIN) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "offload eventfd setup failed");
        return FD_ERROR;
    }
    /* threads start on first use, so a worker that never offloads has none */
    (void)i;
    (void)w;
    return FD_OK;
}

void fd_offload_exit_worker(fd_worker_t *w)
{
    (void)w;
    pthread_mutex_lock(&pool.lock);
    pool.stop = 1;
    pthread_cond_broadcast(&pool.cond);
    pthread_mutex_unlock(&pool.lock);
}

void fd_offload_stats(fd_offload_stats_t *st)
{
    pthread_mutex_lock(&pool.lock);
    st->threads = pool.threads;
    st->busy = pool.busy;
    st->pending = pool.pending;
    st->completed = pool.completed;
    st->wait_usec_sum = 0;
    pthread_mutex_unlock(&pool.lock);
}
