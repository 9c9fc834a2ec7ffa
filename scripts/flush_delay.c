/*
 * flush_delay.c: an LD_PRELOAD shim for benchmarks that makes every flush cost what it
 * costs on a common disk.
 *
 * fsync, fdatasync and fdatasync64 call the real function (found with dlsym(RTLD_NEXT))
 * and then sleep FLUSH_DELAY_US microseconds (read once from the environment; 0 or unset:
 * no delay). Everything that flushes through libc is slowed alike: raw sqlite3, the
 * session-server store and the Agents SDK's SQLiteSession (the same libsqlite3), and the
 * JSONL mirror's os.fsync. The sleep happens inside the call, where Python has released
 * the GIL, as a real flush would. errno and the return value are the real call's.
 *
 * Built by tests/support/flush_shim.py (build_shim): gcc -shared -fPIC -O2 -o flush_delay.so flush_delay.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

typedef int (*sync_fn)(int);

static long delay_us(void) {
    /* A benign race: every thread computes the same value. */
    static long cached = -1;
    if (cached < 0) {
        const char *text = getenv("FLUSH_DELAY_US");
        long value = text ? strtol(text, NULL, 10) : 0;
        cached = value > 0 ? value : 0;
    }
    return cached;
}

static void pause_after_flush(void) {
    long us = delay_us();
    if (us <= 0) {
        return;
    }
    int saved = errno;
    struct timespec left = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&left, &left) == -1 && errno == EINTR) {
    }
    errno = saved;
}

static int call_real(const char *name, sync_fn *slot, int fd) {
    if (*slot == NULL) {
        *slot = (sync_fn)dlsym(RTLD_NEXT, name);
        if (*slot == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }
    int result = (*slot)(fd);
    pause_after_flush();
    return result;
}

int fsync(int fd) {
    static sync_fn real;
    return call_real("fsync", &real, fd);
}

int fdatasync(int fd) {
    static sync_fn real;
    return call_real("fdatasync", &real, fd);
}

int fdatasync64(int fd) {
    static sync_fn real;
    /* glibc has no fdatasync64 symbol; a library built against one that has gets the same. */
    if (real == NULL && dlsym(RTLD_NEXT, "fdatasync64") == NULL) {
        return call_real("fdatasync", &real, fd);
    }
    return call_real("fdatasync64", &real, fd);
}
