/*
 * Monotonic time and sleeps for tests, header-only. A test waits on
 * progress (a count it can read), never on a clock: a clock only bounds
 * how long it waits for that progress, or gives a thread the chance to do
 * what it must not.
 */
#ifndef SL_TEST_CLOCK_H
#define SL_TEST_CLOCK_H

#include <time.h>

/* Monotonic seconds, and a sleep. */
static __attribute__((unused)) double bx_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
static __attribute__((unused)) void bx_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#endif
