/*
 * Loaded before Debian's libfaketime 0.9.10 into redis-server, for the clock-jump trials.
 *
 * Without it redis-server hangs at start: jemalloc's initialisation calls pthread_cond_init
 * (and reads the clock), libfaketime intercepts the call, initialises itself, and its dlsym
 * allocates, which waits for jemalloc's own initialisation lock. Until this library's
 * constructor has run (after jemalloc has initialised), those calls go straight to the
 * kernel or glibc's defaults; after it, to libfaketime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int ready;
static int (*next_clock_gettime)(clockid_t, struct timespec *);
static time_t (*next_time)(time_t *);
static int (*next_cond_init)(pthread_cond_t *, const pthread_condattr_t *);

__attribute__((constructor)) static void resolve(void)
{
    next_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    next_time = dlsym(RTLD_NEXT, "time");
    next_cond_init = dlvsym(RTLD_NEXT, "pthread_cond_init", "GLIBC_2.3.2");
    ready = 1;
}

int clock_gettime(clockid_t clock, struct timespec *now)
{
    if (!ready)
        return syscall(SYS_clock_gettime, clock, now);
    return next_clock_gettime(clock, now);
}

time_t time(time_t *now)
{
    struct timespec real;

    if (ready)
        return next_time(now);
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &real);
    if (now != NULL)
        *now = real.tv_sec;
    return real.tv_sec;
}

/* jemalloc initialises its condition variables with default attributes. */
int pthread_cond_init(pthread_cond_t *cond, const pthread_condattr_t *attributes)
{
    if (!ready && attributes == NULL) {
        *cond = (pthread_cond_t) PTHREAD_COND_INITIALIZER;
        return 0;
    }
    return next_cond_init(cond, attributes);
}
