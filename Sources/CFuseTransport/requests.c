// The release barrier's record of what each libfuse worker holds: see docdrive_requests.h.
#define _GNU_SOURCE
#include "docdrive_requests.h"
#include "uring_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FUSE_RELEASE_OPCODE 18
#define IN_HEADER_SIZE 40   /* struct fuse_in_header: len, opcode, unique, ... */
#define MAX_WORKERS 256     /* libfuse's limit is 64 (FuseSession.run) */

/* WAITING: before the read(2) of /dev/fuse (polling it, see `spin`); it has taken nothing in
   this generation. READING: in the read, or just out of it. HOLDING: it has
   recorded the request it read. */
enum { READING = 1, HOLDING = 2, WAITING = 3 };

/* One per worker thread. `gen` moves when the worker starts a read; opcode and unique are
   those of the request it read in that generation, valid once state is HOLDING. */
struct worker {
    atomic_int tid;   /* 0: free */
    atomic_ulong gen;
    atomic_int state;
    atomic_uint opcode;
    atomic_ullong unique;
};

static struct worker workers[MAX_WORKERS];
static atomic_int untracked = 0;
static __thread struct worker *me = NULL;
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void free_slot(void *p) {
    struct worker *w = p;
    atomic_store(&w->state, HOLDING);
    atomic_store(&w->opcode, 0);
    atomic_store(&w->tid, 0);
}

static void make_key(void) { pthread_key_create(&exit_key, free_slot); }

static struct worker *slot(void) {
    if (me) return me;
    pthread_once(&key_once, make_key);
    int tid = (int)gettid();
    for (int i = 0; i < MAX_WORKERS; i++) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&workers[i].tid, &expected, tid)) {
            me = &workers[i];
            pthread_setspecific(exit_key, me);
            return me;
        }
    }
    atomic_store(&untracked, 1);
    return NULL;
}

static void worker_waiting(void) {
    struct worker *w = slot();
    if (!w) return;
    atomic_fetch_add(&w->gen, 1);
    atomic_store(&w->state, WAITING);
}

static void worker_reading(void) {
    if (me) atomic_store(&me->state, READING);
}

static void worker_read(const void *buf, ssize_t n) {
    struct worker *w = me;
    if (!w) return;
    uint32_t opcode = 0;
    uint64_t unique = 0;
    if (n >= IN_HEADER_SIZE) {
        memcpy(&opcode, (const char *)buf + 4, 4);
        memcpy(&unique, (const char *)buf + 8, 8);
    }
    atomic_store(&w->opcode, opcode);
    atomic_store(&w->unique, unique);
    atomic_store(&w->state, HOLDING);
}

/* The poll before the read (see docdrive_requests.h). One worker at a time polls: `spinning`
   is 1 while one does; the others go straight to read(2), as before. */
static atomic_int spinning = 0;
static atomic_int spin_us = DD_FUSE_SPIN_US;

void dd_fuse_set_spin_us(int us) { atomic_store(&spin_us, us < 0 ? 0 : us); }

static long now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000L + t.tv_nsec / 1000L;
}

static void stop_spinning(void *unused) {
    (void)unused;
    atomic_store(&spinning, 0);
}

/* Polls the device without sleeping for up to `spin_us`, unless another worker does: a request
   that comes meanwhile is read with no wake-up. Returns at once when one is there (or when the
   device has gone: poll then reports an error). poll is a cancellation point, and libfuse ends
   its workers with pthread_cancel: the handler lets the next worker poll. */
static void spin(int fd) {
    long us = atomic_load(&spin_us);
    if (us <= 0) return;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&spinning, &expected, 1)) return;
    pthread_cleanup_push(stop_spinning, NULL);
    long end = now_us() + us;
    do {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 0) != 0) break;
    } while (now_us() < end);
    pthread_cleanup_pop(1);
}

ssize_t dd_fuse_read_request(int fd, void *buf, size_t len) {
    worker_waiting();
    spin(fd);
    worker_reading();
    ssize_t n = read(fd, buf, len);
    int e = errno;
    worker_read(buf, n);
    errno = e;
    return n;
}

/* The scheduler state of thread `tid` of this process ('S' sleeping, 'R' running, ...), or 0. */
char dd_thread_state(int tid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');  /* the name may hold spaces and parentheses */
    return p && p[1] == ' ' ? p[2] : 0;
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

/* Whether worker `w` may still hold a RELEASE queued before `before`: it holds one (until it
   starts its next read), or it is in its read but not asleep there (it may have taken a request
   from the kernel and not yet recorded it). A worker asleep in its read has taken nothing.
   -1: cannot tell (its state in /proc cannot be read). */
static int may_hold_earlier_release(struct worker *w, uint64_t before) {
    int tid = atomic_load(&w->tid);
    if (tid == 0) return 0;
    unsigned long g1 = atomic_load(&w->gen);
    int state = atomic_load(&w->state);
    unsigned op = atomic_load(&w->opcode);
    uint64_t unique = atomic_load(&w->unique);
    if (atomic_load(&w->gen) != g1) return 1;  /* moving: look again */
    /* Not yet in its read: whatever it reads was queued after `before`. */
    if (state == WAITING) return 0;
    if (state == HOLDING) return op == FUSE_RELEASE_OPCODE && unique < before;
    char s = dd_thread_state(tid);
    if (s == 0) return atomic_load(&w->tid) == tid ? -1 : 0;  /* or the thread has just ended */
    if (s != 'S') return 1;
    return atomic_load(&w->gen) != g1 || atomic_load(&w->state) != READING;
}

/* The ring request the calling thread handles (uring.c): ring and pool threads have no slot. */
static __thread uint64_t handling = 0;

void dd_fuse_handling(uint64_t unique) { handling = unique; }

int dd_fuse_await_earlier_releases(int timeout_ms) {
    struct worker *self = handling ? NULL : me;
    if ((!handling && !self) || atomic_load(&untracked)) return -2;
    uint64_t before = handling ? handling : atomic_load(&self->unique);
    long deadline = now_ms() + timeout_ms;
    /* A RELEASE the rings have delivered, or are about to, and not seen answered. */
    if (dd_uring_await_releases_before(before, timeout_ms) < 0) return -1;
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &workers[i];
        if (w == self) continue;
        int held;
        while ((held = may_hold_earlier_release(w, before)) != 0) {
            if (held < 0) return -2;
            if (now_ms() > deadline) return -1;
            usleep(50);
        }
    }
    return 0;
}

int dd_gettid(void) { return (int)gettid(); }
