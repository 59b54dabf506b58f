/* Deadlines for the bounded waits (pthread_cond_timedwait on a condition
 * variable set up with CLOCK_MONOTONIC). */
#ifndef TD_CLOCK_H
#define TD_CLOCK_H

#include <stdint.h>
#include <time.h>

/* *deadline = now (monotonic) + ms milliseconds. */
static inline void td_deadline_after_ms(struct timespec *deadline, uint64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, deadline);
    deadline->tv_sec += (time_t)(ms / 1000);
    deadline->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline->tv_nsec >= 1000000000L) {
        deadline->tv_sec++;
        deadline->tv_nsec -= 1000000000L;
    }
}

#endif
