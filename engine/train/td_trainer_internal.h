/* What the evaluator reads of a trainer. */
#ifndef TD_TRAINER_INTERNAL_H
#define TD_TRAINER_INTERNAL_H

#include "tandem/train.h"
#include "td_program_internal.h"

/* The host master copy of the parameters, laid out as the trainer
 * program's parameter buffer: the values the devices hold between steps. */
const float *td_trainer_master(const td_trainer *t);
const td_program *td_trainer_program(const td_trainer *t);
/* TD_ERR_STATE naming `fn` when the trainer was released with its mesh or
 * context, else TD_OK. */
td_status td_trainer_check_live(const td_trainer *t, const char *fn);

#endif
