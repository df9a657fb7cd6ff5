// FUSE over io_uring on libfuse 3.14: see docdrive_uring.h.
// The kernel's structures (protocol 7.42, <linux/fuse.h> of Linux 6.14) are written out here:
// the installed headers predate them.
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include "docdrive_uring.h"
#include "uring_internal.h"
#include <errno.h>
#include <fuse3/fuse_lowlevel.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#define IN_HEADER_SIZE 40
#define OUT_HEADER_SIZE 16
#define OP_HEADER_MAX 128
#define CMD_REGISTER 1
#define CMD_COMMIT_AND_FETCH 2
/* Room before an entry's payload for the request's header and operation header. */
#define ROOM 256
#define POOL_MAX 64

enum { OP_GETXATTR = 22, OP_SETXATTR = 21, OP_FSYNC = 20, OP_FSYNCDIR = 30, OP_GETLK = 31,
       OP_SETLK = 32, OP_SETLKW = 33, OP_RELEASE = 18, OP_RELEASEDIR = 29, OP_FALLOCATE = 43,
       OP_COPY_FILE_RANGE = 47 };

struct ent_in_out {
    uint64_t flags;
    uint64_t commit_id;
    uint32_t payload_sz;
    uint32_t padding;
    uint64_t reserved;
};

struct req_header {
    char in_out[128];            /* fuse_in_header in, fuse_out_header out */
    char op_in[OP_HEADER_MAX];   /* the operation's header (fuse_open_in, ...) */
    struct ent_in_out ent;
};

struct cmd_req {                 /* in the submission entry's 80-byte command area */
    uint64_t flags;
    uint64_t commit_id;
    uint16_t qid;
    uint8_t padding[6];
};

struct queue;

struct ent {
    struct queue *q;
    struct req_header *hdr;
    char *area;                  /* ROOM bytes, then the payload */
    struct iovec iov[2];
    uint64_t commit_id;
    _Atomic uint64_t unique;     /* of the request it holds (0: none yet) */
    _Atomic uint64_t answered;   /* of the last request answered */
    char *request;               /* the rebuilt request, in `area` */
    size_t length;
    int last_cmd;
    int alive;
    struct ent *next;            /* on the pool's list, or the posted list */
};

struct queue {
    int qid;
    pthread_t tid;
    int started;
    struct io_uring ring;
    int ring_ready;
    int evfd;
    uint64_t evval;
    pthread_mutex_t lock;        /* posted */
    struct ent *posted;          /* answered on other threads, to be handed back */
    struct ent *ents;
    struct req_header *headers;
    int alive;
    atomic_int tid_linux;        /* the thread's id, for its state in /proc */
    atomic_int waiting;          /* 1 while the thread is in its wait */
    atomic_ulong rounds;         /* waits the thread has come back from */
};

static struct {
    struct fuse_session *se;
    int devfd;
    int nq;
    struct queue *qs;
    size_t payload;
    atomic_int state;            /* 0 not asked for or not offered, 1 being set up, 2 serving,
                                    -errno when setting up failed */
    atomic_int asked;            /* prepared: the INIT answer accepts an offer */
    atomic_int offered;
    atomic_int accepted;
    atomic_int stop;
    atomic_int registered;       /* queues whose entries are registered */
    atomic_ullong requests;
    sem_t go;
    dd_uring_report_fn report;
} R = { .devfd = -1 };

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct ent *head, *tail;
    int threads, idle, stop;
    int queued;                  /* requests in the list */
    pthread_t tids[POOL_MAX];
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };

static __thread struct ent *current = NULL;   /* the ring request this thread handles */
static __thread struct queue *owner = NULL;   /* the queue whose thread this is */

static uint32_t get32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void put32(char *p, uint32_t v) { memcpy(p, &v, 4); }

static void report(int error, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int error, const char *fmt, ...) {
    char s[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    if (R.report) R.report(error, s);
}

void dd_uring_set_report(dd_uring_report_fn fn) { R.report = fn; }
uint64_t dd_uring_requests(void) { return atomic_load(&R.requests); }

/* ---- the INIT exchange ---- */

void dd_uring_offered(int yes) { atomic_store(&R.offered, yes); }

void dd_uring_patch_init(char *o, size_t len) {
    if (!atomic_load(&R.asked) || !atomic_load(&R.offered) || len < 40) return;
    /* fuse_init_out: flags at 12, max_write at 20, max_pages at 28, flags2 at 32. */
    put32(o + 12, get32(o + 12) | INIT_EXT);
    put32(o + 32, get32(o + 32) | OVER_IO_URING_FLAG2);
    uint32_t max_write = get32(o + 20);
    uint16_t max_pages;
    memcpy(&max_pages, o + 28, 2);
    size_t p = 8192;   /* FUSE_MIN_READ_BUFFER */
    if (max_write > p) p = max_write;
    if ((size_t)max_pages * 4096 > p) p = (size_t)max_pages * 4096;
    R.payload = p;
    atomic_store(&R.accepted, 1);
}

void dd_uring_init_answered(void) {
    if (!atomic_load(&R.asked)) return;
    if (!atomic_load(&R.accepted)) atomic_store(&R.state, 0);
    else atomic_store(&R.state, 1);
    for (int i = 0; i < R.nq; i++) sem_post(&R.go);
}

/* ---- submissions (on the queue's own thread only) ---- */

static struct io_uring_sqe *sqe_for(struct queue *q) {
    struct io_uring_sqe *s = io_uring_get_sqe(&q->ring);
    if (!s) {   /* cannot happen: an entry has at most one submission outstanding */
        io_uring_submit(&q->ring);
        s = io_uring_get_sqe(&q->ring);
    }
    return s;
}

static void submit_cmd(struct ent *e, int cmd) {
    struct queue *q = e->q;
    struct io_uring_sqe *s = sqe_for(q);
    if (!s) { e->alive = 0; q->alive--; return; }
    memset(s, 0, 128);
    s->opcode = IORING_OP_URING_CMD;
    s->flags = IOSQE_FIXED_FILE;
    s->fd = 0;
    s->cmd_op = (uint32_t)cmd;
    io_uring_sqe_set_data(s, e);
    if (cmd == CMD_REGISTER) {
        s->addr = (uint64_t)(uintptr_t)e->iov;
        s->len = 2;
    }
    struct cmd_req *c = (struct cmd_req *)&s->cmd[0];
    c->qid = (uint16_t)q->qid;
    c->commit_id = cmd == CMD_COMMIT_AND_FETCH ? e->commit_id : 0;
    e->last_cmd = cmd;
}

static void arm_wakeup(struct queue *q) {
    struct io_uring_sqe *s = sqe_for(q);
    if (!s) return;
    io_uring_prep_read(s, 1, &q->evval, sizeof q->evval, 0);
    s->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(s, NULL);
}

/* ---- answers ---- */

static void hand_back(struct ent *e) {
    struct queue *q = e->q;
    atomic_store(&e->answered, atomic_load(&e->unique));
    if (owner == q) {
        submit_cmd(e, CMD_COMMIT_AND_FETCH);   /* submitted when the thread next waits */
        return;
    }
    pthread_mutex_lock(&q->lock);
    e->next = q->posted;
    q->posted = e;
    pthread_mutex_unlock(&q->lock);
    uint64_t one = 1;
    while (write(q->evfd, &one, sizeof one) < 0 && errno == EINTR) {}
}

static struct ent *entry_of(uint64_t unique) {
    struct ent *e = current;
    if (e && atomic_load(&e->unique) == unique && atomic_load(&e->answered) != unique) return e;
    for (int i = 0; i < R.nq; i++) {
        struct queue *q = &R.qs[i];
        if (!q->ents) continue;
        for (int j = 0; j < DD_URING_DEPTH; j++) {
            e = &q->ents[j];
            if (atomic_load(&e->unique) == unique && atomic_load(&e->answered) != unique) return e;
        }
    }
    return NULL;
}

/* The answer's header into the entry; an answer too long for the payload becomes EIO. */
static void finish_answer(struct ent *e, const char *out_header, size_t payload, int fits) {
    char *h = e->hdr->in_out;
    memcpy(h, out_header, OUT_HEADER_SIZE);
    if (!fits) {
        int32_t err = -EIO;
        memcpy(h + 4, &err, 4);
        payload = 0;
    }
    put32(h, (uint32_t)(OUT_HEADER_SIZE + payload));
    e->hdr->ent.payload_sz = (uint32_t)payload;
    hand_back(e);
}

int dd_uring_answer(const struct iovec *iov, int count, ssize_t *written) {
    if (R.qs == NULL || count < 1 || iov[0].iov_len < OUT_HEADER_SIZE) return 0;
    uint64_t unique = get64((const char *)iov[0].iov_base + 8);
    if (unique == 0) return 0;   /* a notification: /dev/fuse */
    struct ent *e = entry_of(unique);
    if (!e) return 0;
    char *p = e->area + ROOM;
    size_t n = 0, total = iov[0].iov_len;
    int fits = iov[0].iov_len == OUT_HEADER_SIZE;
    for (int i = 1; i < count; i++) {
        total += iov[i].iov_len;
        if (!fits || n + iov[i].iov_len > R.payload) { fits = 0; continue; }
        memmove(p + n, iov[i].iov_base, iov[i].iov_len);
        n += iov[i].iov_len;
    }
    finish_answer(e, iov[0].iov_base, n, fits);
    *written = (ssize_t)total;
    return 1;
}

/* Reads exactly `len` bytes of the pipe into `buf` (NULL: drops them); 0, or -1. */
static int read_pipe(int fd, char *buf, size_t len) {
    char sink[4096];
    while (len > 0) {
        size_t want = buf ? len : (len < sizeof sink ? len : sizeof sink);
        ssize_t r = read(fd, buf ? buf : sink, want);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        len -= (size_t)r;
        if (buf) buf += r;
    }
    return 0;
}

int dd_uring_answer_spliced(int fdin, size_t len, ssize_t *written) {
    if (R.qs == NULL || current == NULL || len < OUT_HEADER_SIZE) return 0;
    /* libfuse splices only the answer of the request its thread handles: this one. */
    struct ent *e = current;
    uint64_t unique = atomic_load(&e->unique);
    if (atomic_load(&e->answered) == unique) return 0;
    char header[OUT_HEADER_SIZE];
    size_t payload = len - OUT_HEADER_SIZE;
    int fits = payload <= R.payload;
    int whole = read_pipe(fdin, header, OUT_HEADER_SIZE) == 0;
    if (!whole || get64(header + 8) != unique) {
        /* Not an answer to it: the request gets EIO, and what is left is dropped. */
        if (whole) (void)read_pipe(fdin, NULL, payload);
        memset(header, 0, sizeof header);
        memcpy(header + 8, &unique, 8);
        fits = 0;
    } else if (read_pipe(fdin, fits ? e->area + ROOM : NULL, payload) < 0) {
        fits = 0;
    }
    finish_answer(e, header, payload, fits);
    *written = (ssize_t)len;
    return 1;
}

static int holds_release_before(uint64_t before) {
    for (int i = 0; i < R.nq; i++) {
        struct queue *q = &R.qs[i];
        if (!q->ents) continue;
        for (int j = 0; j < DD_URING_DEPTH; j++) {
            struct ent *e = &q->ents[j];
            if (!e->hdr) continue;
            /* The kernel writes a request's header into the entry before it completes it. */
            const char *h = e->hdr->in_out;
            uint32_t op = __atomic_load_n((const uint32_t *)(const void *)(h + 4), __ATOMIC_ACQUIRE);
            uint64_t u = __atomic_load_n((const uint64_t *)(const void *)(h + 8), __ATOMIC_ACQUIRE);
            if (op == OP_RELEASE && u != 0 && u < before && atomic_load(&e->answered) != u) return 1;
        }
    }
    return 0;
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

/* Whether the kernel may still be writing a request queued earlier into one of q's entries:
   it does so on q's thread (as task work, before that thread's wait returns). Not once the
   thread has come back from a wait begun after `rounds0`, nor while it sleeps in its wait with
   nothing completed (work queued for it would have woken it). */
static int may_be_delivering(struct queue *q, unsigned long rounds0) {
    if (!q->ents || q == owner) return 0;
    if (atomic_load(&q->rounds) != rounds0) return 0;
    if (!atomic_load(&q->waiting)) return 1;
    if (io_uring_cq_ready(&q->ring) > 0) return 1;
    char s = dd_thread_state(atomic_load(&q->tid_linux));
    return s != 'S' && atomic_load(&q->rounds) == rounds0;
}

int dd_uring_await_releases_before(uint64_t before, int timeout_ms) {
    if (!R.qs || atomic_load(&R.state) != 2) return 0;
    long deadline = now_ms() + timeout_ms;
    unsigned long rounds[R.nq];
    for (int i = 0; i < R.nq; i++) rounds[i] = atomic_load(&R.qs[i].rounds);
    for (int i = 0; i < R.nq; i++)
        while (may_be_delivering(&R.qs[i], rounds[i])) {
            if (now_ms() > deadline) return -1;
            usleep(50);
        }
    while (holds_release_before(before)) {
        if (now_ms() > deadline) return -1;
        usleep(50);
    }
    return 0;
}

/* ---- requests ---- */

static void run(struct ent *e) {
    current = e;
    dd_fuse_handling(atomic_load(&e->unique));
    dd_fuse_note_request(e->request, e->length);
    struct fuse_buf b = { .size = e->length, .flags = 0, .mem = e->request, .fd = -1, .pos = 0 };
    fuse_session_process_buf(R.se, &b);
    dd_fuse_handling(0);
    current = NULL;
}

static void *pool_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "dd-ring-wait");
    pthread_mutex_lock(&P.lock);
    for (;;) {
        while (!P.head && !P.stop) {
            P.idle++;
            pthread_cond_wait(&P.wake, &P.lock);
            P.idle--;
        }
        if (!P.head) break;
        struct ent *e = P.head;
        P.head = e->next;
        if (!P.head) P.tail = NULL;
        P.queued--;
        pthread_mutex_unlock(&P.lock);
        run(e);
        pthread_mutex_lock(&P.lock);
    }
    pthread_mutex_unlock(&P.lock);
    return NULL;
}

/* Hands a request to the pool; 0 if the pool has no thread (the ring thread runs it). A
   request never waits in the list for a thread while another could be started: the one it
   would wait for may be waiting for it (a lock holder's unlock behind a waiter's SETLKW). */
static int to_pool(struct ent *e) {
    pthread_mutex_lock(&P.lock);
    if (P.stop) {
        pthread_mutex_unlock(&P.lock);
        return 0;
    }
    e->next = NULL;
    if (P.tail) P.tail->next = e; else P.head = e;
    P.tail = e;
    P.queued++;
    /* An idle thread signalled counts as idle until it wakes: start one more whenever the
       list holds more requests than there are idle threads to take them. */
    if (P.queued > P.idle && P.threads < POOL_MAX
        && pthread_create(&P.tids[P.threads], NULL, pool_main, NULL) == 0)
        P.threads++;
    if (P.threads == 0) {   /* no thread could be started: take it back */
        P.head = P.tail = NULL;
        P.queued = 0;
        pthread_mutex_unlock(&P.lock);
        return 0;
    }
    pthread_cond_signal(&P.wake);
    pthread_mutex_unlock(&P.lock);
    return 1;
}

/* Whether a request may wait for another (which may be queued behind it on this ring). */
static int may_wait(uint32_t opcode, uint64_t nodeid, const char *payload, size_t n) {
    switch (opcode) {
    case OP_GETLK: case OP_SETLK: case OP_SETLKW:
    case OP_FSYNC: case OP_FSYNCDIR: case OP_FALLOCATE: case OP_COPY_FILE_RANGE:
        return 1;
    case OP_RELEASEDIR:
        return nodeid == 1;   /* the release barrier's */
    case OP_GETXATTR: case OP_SETXATTR:
        return n >= 14 && memcmp(payload, "user.docdrive.", 14) == 0;
    default:
        return 0;
    }
}

static void handle(struct ent *e) {
    struct req_header *h = e->hdr;
    const char *in = h->in_out;
    uint32_t len = get32(in), opcode = get32(in + 4);
    uint64_t unique = get64(in + 8), nodeid = get64(in + 16);
    uint32_t payload = h->ent.payload_sz;
    e->commit_id = h->ent.commit_id;
    atomic_store(&e->unique, unique);
    atomic_fetch_add(&R.requests, 1);
    if (len < IN_HEADER_SIZE || payload > R.payload || len - IN_HEADER_SIZE < payload
        || len - IN_HEADER_SIZE - payload > OP_HEADER_MAX) {
        static atomic_int told = 0;
        if (!atomic_exchange(&told, 1))
            report(EPROTO, "the kernel sent a ring request this daemon cannot read (opcode %u, length %u, payload %u): answered EIO", opcode, len, payload);
        char out[OUT_HEADER_SIZE] = { 0 };
        int32_t err = -EIO;
        memcpy(out + 4, &err, 4);
        memcpy(out + 8, &unique, 8);
        current = e;
        finish_answer(e, out, 0, 1);
        current = NULL;
        return;
    }
    size_t op = len - IN_HEADER_SIZE - payload;
    char *start = e->area + ROOM - IN_HEADER_SIZE - op;
    memcpy(start, in, IN_HEADER_SIZE);
    memcpy(start + IN_HEADER_SIZE, h->op_in, op);
    e->request = start;
    e->length = len;
    if (may_wait(opcode, nodeid, e->area + ROOM, payload) && to_pool(e)) return;
    run(e);
}

static void take_posted(struct queue *q) {
    pthread_mutex_lock(&q->lock);
    struct ent *e = q->posted;
    q->posted = NULL;
    pthread_mutex_unlock(&q->lock);
    while (e) {
        struct ent *next = e->next;
        submit_cmd(e, CMD_COMMIT_AND_FETCH);
        e = next;
    }
}

static void *alloc_pages(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Sets up the queue's ring and registers its entries: 0 or -errno. */
static int set_up(struct queue *q) {
    struct io_uring_params params;
    memset(&params, 0, sizeof params);
    params.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
    params.cq_entries = 2 * (DD_URING_DEPTH + 1);
    int r = io_uring_queue_init_params(DD_URING_DEPTH + 1, &q->ring, &params);
    if (r < 0) return r;
    q->ring_ready = 1;
    q->evfd = eventfd(0, EFD_CLOEXEC);
    if (q->evfd < 0) return -errno;
    int files[2] = { R.devfd, q->evfd };
    r = io_uring_register_files(&q->ring, files, 2);
    if (r < 0) return r;
    size_t hsize = sizeof(struct req_header) * DD_URING_DEPTH;
    q->headers = alloc_pages(hsize);
    q->ents = calloc(DD_URING_DEPTH, sizeof(struct ent));
    if (!q->headers || !q->ents) return -ENOMEM;
    for (int j = 0; j < DD_URING_DEPTH; j++) {
        struct ent *e = &q->ents[j];
        e->q = q;
        e->hdr = &q->headers[j];
        e->area = alloc_pages(ROOM + R.payload);   /* pages are touched only as they are used */
        if (!e->area) return -ENOMEM;
        e->iov[0] = (struct iovec){ e->hdr, sizeof(struct req_header) };
        e->iov[1] = (struct iovec){ e->area + ROOM, R.payload };
        e->alive = 1;
    }
    q->alive = DD_URING_DEPTH;
    for (int j = 0; j < DD_URING_DEPTH; j++) submit_cmd(&q->ents[j], CMD_REGISTER);
    arm_wakeup(q);
    r = io_uring_submit(&q->ring);
    return r < 0 ? r : 0;
}

static void *queue_main(void *arg) {
    struct queue *q = arg;
    char name[16];
    snprintf(name, sizeof name, "dd-ring-%d", q->qid);
    pthread_setname_np(pthread_self(), name);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(q->qid, &cpus);
    sched_setaffinity(0, sizeof cpus, &cpus);   /* a processor that is offline keeps it unpinned */
    owner = q;
    atomic_store(&q->tid_linux, (int)gettid());
    sem_wait(&R.go);
    if (atomic_load(&R.stop) || atomic_load(&R.state) != 1) return NULL;
    int r = set_up(q);
    if (r < 0) {
        int expected = 1;
        if (atomic_compare_exchange_strong(&R.state, &expected, r))
            report(-r, "io_uring: the rings cannot be set up (%s); requests come through /dev/fuse", strerror(-r));
        return NULL;
    }
    /* The kernel takes a registration at once (a refusal completes it with an error). */
    struct io_uring_cqe *refused = NULL;
    if (io_uring_peek_cqe(&q->ring, &refused) == 0 && refused && refused->res < 0
        && io_uring_cqe_get_data(refused) != NULL) {
        int err = -refused->res, expected = 1;
        if (atomic_compare_exchange_strong(&R.state, &expected, -err))
            report(err, "io_uring: the kernel refused the rings (%s); requests come through /dev/fuse", strerror(err));
    } else if (atomic_fetch_add(&R.registered, 1) + 1 == R.nq) {
        int expected = 1;
        if (atomic_compare_exchange_strong(&R.state, &expected, 2))
            report(0, "requests come through io_uring: %d rings of %d entries", R.nq, DD_URING_DEPTH);
    }
    while (!atomic_load(&R.stop) && q->alive > 0) {
        atomic_store(&q->waiting, 1);
        r = io_uring_submit_and_wait(&q->ring, 1);
        atomic_store(&q->waiting, 0);
        atomic_fetch_add(&q->rounds, 1);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
            report(-r, "io_uring: waiting on ring %d failed (%s); its requests stop", q->qid, strerror(-r));
            break;
        }
        unsigned head, seen = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&q->ring, head, cqe) {
            seen++;
            struct ent *e = io_uring_cqe_get_data(cqe);
            if (!e) {   /* the wake-up: answers made on other threads */
                take_posted(q);
                if (!atomic_load(&R.stop)) arm_wakeup(q);
                continue;
            }
            if (cqe->res == -EAGAIN || cqe->res == -EINTR) {
                submit_cmd(e, e->last_cmd);
                continue;
            }
            if (cqe->res < 0) {   /* the connection has ended (or the entry was refused) */
                if (e->alive) { e->alive = 0; q->alive--; }
                continue;
            }
            handle(e);
        }
        io_uring_cq_advance(&q->ring, seen);
    }
    io_uring_submit(&q->ring);   /* answers made in the last round */
    return NULL;
}

/* The kernel has a queue per possible processor and puts a request on its sender's. */
int dd_uring_prepare(struct fuse_session *se, int devfd) {
    if (R.qs) return -EBUSY;
    int n = get_nprocs_conf();
    if (n < 1) n = 1;
    R.qs = calloc((size_t)n, sizeof(struct queue));
    if (!R.qs) return -ENOMEM;
    R.se = se;
    R.devfd = devfd;
    R.nq = n;
    sem_init(&R.go, 0, 0);
    for (int i = 0; i < n; i++) {
        struct queue *q = &R.qs[i];
        q->qid = i;
        q->evfd = -1;
        pthread_mutex_init(&q->lock, NULL);
        if (pthread_create(&q->tid, NULL, queue_main, q) == 0) q->started = 1;
        else {
            atomic_store(&R.stop, 1);
            for (int j = 0; j < i; j++) sem_post(&R.go);
            for (int j = 0; j < i; j++) pthread_join(R.qs[j].tid, NULL);
            free(R.qs);
            R.qs = NULL;
            R.nq = 0;
            atomic_store(&R.stop, 0);
            return -EAGAIN;
        }
    }
    atomic_store(&R.asked, 1);
    return 0;
}

void dd_uring_stop(void) {
    if (!R.qs) return;
    atomic_store(&R.stop, 1);
    /* Threads still waiting for the INIT answer (there was none). */
    if (atomic_load(&R.state) == 0 && !atomic_load(&R.accepted))
        for (int i = 0; i < R.nq; i++) sem_post(&R.go);
    for (int i = 0; i < R.nq; i++) {
        struct queue *q = &R.qs[i];
        if (q->evfd >= 0) { uint64_t one = 1; (void)!write(q->evfd, &one, sizeof one); }
    }
    /* The pool first: its requests' answers are posted to the ring threads. */
    pthread_mutex_lock(&P.lock);
    P.stop = 1;
    pthread_cond_broadcast(&P.wake);
    int threads = P.threads;
    pthread_mutex_unlock(&P.lock);
    for (int i = 0; i < threads; i++) pthread_join(P.tids[i], NULL);
    for (int i = 0; i < R.nq; i++) {
        struct queue *q = &R.qs[i];
        if (q->evfd >= 0) { uint64_t one = 1; (void)!write(q->evfd, &one, sizeof one); }
        if (q->started) pthread_join(q->tid, NULL);
    }
    for (int i = 0; i < R.nq; i++) {
        struct queue *q = &R.qs[i];
        if (q->ring_ready) io_uring_queue_exit(&q->ring);
        if (q->evfd >= 0) close(q->evfd);
        if (q->ents) {
            for (int j = 0; j < DD_URING_DEPTH; j++)
                if (q->ents[j].area) munmap(q->ents[j].area, ROOM + R.payload);
            free(q->ents);
        }
        if (q->headers) munmap(q->headers, sizeof(struct req_header) * DD_URING_DEPTH);
        pthread_mutex_destroy(&q->lock);
    }
    free(R.qs);
    R.qs = NULL;
    R.nq = 0;
    atomic_store(&R.asked, 0);
    atomic_store(&R.state, 0);
}
