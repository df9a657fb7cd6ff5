/* The crash guard: when a fault kills the daemon (a trap of the Swift runtime is SIGILL or
   SIGTRAP, a bad access SIGSEGV or SIGBUS, an abort SIGABRT) on a thread that works for a store,
   a marker naming the store and the signal is written before the process dies, so that the next
   mount keeps that store offline rather than dying in it again (Sync/CrashGuard.swift). Only
   async-signal-safe calls in the handler: open, write, close, sigaction, raise. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "docdrive_sys.h"

#define DD_STORE_NAME_MAX 256
static __thread char thread_store[DD_STORE_NAME_MAX];
static char marker_folder[4096];
static const int guarded[] = { SIGILL, SIGTRAP, SIGSEGV, SIGBUS, SIGFPE, SIGABRT };
static struct sigaction previous[sizeof guarded / sizeof guarded[0]];

static void put(char *buf, size_t *at, size_t cap, const char *s) {
    while (*s && *at + 1 < cap) buf[(*at)++] = *s++;
    buf[*at] = 0;
}

static void on_fault(int sig) {
    int saved = errno;
    if (thread_store[0] && marker_folder[0]) {
        char path[4096 + DD_STORE_NAME_MAX + 2];
        size_t n = 0;
        put(path, &n, sizeof path, marker_folder);
        put(path, &n, sizeof path, "/");
        put(path, &n, sizeof path, thread_store);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0) {
            char line[32];
            size_t m = 0;
            char digits[12];
            int d = 0, v = sig;
            do { digits[d++] = (char)('0' + v % 10); v /= 10; } while (v > 0 && d < 11);
            put(line, &m, sizeof line, "signal ");
            while (d > 0 && m + 1 < sizeof line) line[m++] = digits[--d];
            line[m++] = '\n';
            ssize_t w = write(fd, line, m);
            (void)w;
            close(fd);
        }
    }
    /* The fault goes on as it would have: the handler that was there before (the Swift
       runtime's backtracer, which prints the backtrace into the log) gets the same signal;
       whatever it does after, the process then ends by it, as with no handler. */
    for (size_t i = 0; i < sizeof guarded / sizeof guarded[0]; i++) {
        if (guarded[i] == sig) sigaction(sig, &previous[i], NULL);
    }
    raise(sig);
    signal(sig, SIG_DFL);
    errno = saved;
    raise(sig);
}

int dd_crash_guard_install(const char *folder) {
    size_t len = strlen(folder);
    if (len == 0 || len >= sizeof marker_folder) { errno = ENAMETOOLONG; return -1; }
    memcpy(marker_folder, folder, len + 1);
    for (size_t i = 0; i < sizeof guarded / sizeof guarded[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fault;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_NODEFER;
        if (sigaction(guarded[i], &sa, &previous[i]) != 0) return -1;
    }
    return 0;
}

void dd_crash_guard_thread_store(const char *name) {
    if (!name) { thread_store[0] = 0; return; }
    size_t len = strlen(name);
    if (len >= DD_STORE_NAME_MAX || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        thread_store[0] = 0;
        return;
    }
    memcpy(thread_store, name, len + 1);
}

const char *dd_crash_guard_current_store(void) {
    return thread_store;
}
