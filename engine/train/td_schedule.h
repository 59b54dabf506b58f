/* Learning-rate schedules (tandem/optim.h): the validation the trainer
 * shares with td_schedule_value, and evaluation without it. */
#ifndef TD_SCHEDULE_H
#define TD_SCHEDULE_H

#include "tandem/optim.h"

/* TD_OK, or TD_ERR_INVALID_ARGUMENT with a message that starts with `fn`
 * and names the bad field and its value. */
td_status td_schedule_check(td_context *ctx, const td_schedule *schedule, const char *fn);

/* The schedule's value at `step`; the schedule must have passed the check. */
float td_schedule_eval(const td_schedule *schedule, uint64_t step);

#endif
