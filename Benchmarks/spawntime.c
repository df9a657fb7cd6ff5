// spawntime: process timings for querystart.py, in C so that the harness adds as little as it can.
//
//   spawntime N CMD ARGS...   runs CMD N times (posix_spawn, then wait; stdout to /dev/null) and
//                             prints the median, fastest and 90th percentile in milliseconds
//   spawntime serve SOCKET    answers every connection on the Unix socket SOCKET at once with a
//                             raw query answer of 3 paths (QueryWire.rawAnswer's form), to time
//                             the `docdrive` front without a daemon's work
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int serve(const char *path) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {0};
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path) { fprintf(stderr, "spawntime: socket path too long\n"); return 1; }
    strcpy(a.sun_path, path);
    unlink(path);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 64) != 0) { perror("spawntime: bind"); return 1; }
    static const char answer[] = "=2\0/m\0a/Zebra-0.odt\0a/Zebra-1.odt\0a/Zebra-2.odt\0";
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) continue;
        char buf[4096];
        if (read(c, buf, sizeof buf) > 0 && write(c, answer, sizeof answer - 1) < 0) perror("spawntime: write");
        close(c);
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "serve") == 0) return serve(argv[2]);
    if (argc < 3) { fprintf(stderr, "usage: spawntime N CMD ARGS... | spawntime serve SOCKET\n"); return 64; }
    int n = atoi(argv[1]);
    if (n < 1) return 64;
    double *t = malloc((size_t)n * sizeof *t);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    for (int i = 0; i < n; i++) {
        struct timespec a, b;
        pid_t p;
        int st;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (posix_spawn(&p, argv[2], &fa, NULL, argv + 2, environ) != 0) { perror("spawntime: spawn"); return 1; }
        waitpid(p, &st, 0);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { fprintf(stderr, "spawntime: %s failed\n", argv[2]); return 1; }
        t[i] = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    }
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("%.2f %.2f %.2f\n", t[n / 2], t[0], t[n * 9 / 10]);
    return 0;
}
