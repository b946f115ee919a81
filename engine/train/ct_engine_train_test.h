/* ct_engine_train_test.h - the trainer's test hooks: for tests that make a failure happen (a
 * worker killed at a chosen point of a checkpoint), not for programs' ordinary use.
 *
 *     #include "ct_engine_train_test.h"
 *     ct_trainer_test_save_hook(t, at_point, &kill_spec);   at_point(user, point, step)
 */
#ifndef CT_ENGINE_TRAIN_TEST_H
#define CT_ENGINE_TRAIN_TEST_H

#include <stdint.h>

#include "ct_engine_train.h"

/* Points of a sharded save where the hook is called (ckpt.c). */
typedef enum ct_save_point {
    CT_SAVE_AT_SHARD = 1,    /* this worker's shard is on disk; the exchange has not begun */
    CT_SAVE_AT_MANIFEST = 2, /* worker 0: every shard is on disk; the manifest not written */
} ct_save_point;

/* fn(user, point, step) is called by this worker's sharded saves at each point (on the save's
 * thread under --save-async); NULL: none. */
void ct_trainer_test_save_hook(ct_trainer *t, void (*fn)(void *user, int point, int64_t step),
                               void *user);

#endif /* CT_ENGINE_TRAIN_TEST_H */
