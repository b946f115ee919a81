/* ct_engine_step_test.h - the executor's test hooks: for tests that make a failure happen, not for
 * programs.
 *
 *     #include "ct_engine_step_test.h"
 *     ct_exec_test_poison(x, 3);   step 3's backward runs with an infinite loss scale
 */
#ifndef CT_ENGINE_STEP_TEST_H
#define CT_ENGINE_STEP_TEST_H

#include "ct_engine_step.h"

/* The optimizer step t on this worker runs its backward with an infinite loss scale, so its
 * gradients (and, once reduced, every worker's) are not finite; 0 = off. */
void ct_exec_test_poison(ct_exec *x, int t);

#endif /* CT_ENGINE_STEP_TEST_H */
