/* lr.c - learning-rate schedules: warm-up, then cosine, linear or constant decay. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_train.h"

/* ---------------------------------------------------------------- learning rate */

ct_status ct_lr_schedule_parse(const char *name, ct_lr_schedule *out, ct_err *err) {
    if (name && !strcmp(name, "cosine")) *out = CT_LR_COSINE;
    else if (name && !strcmp(name, "constant")) *out = CT_LR_CONSTANT;
    else if (name && !strcmp(name, "linear")) *out = CT_LR_LINEAR;
    else
        return CT_ERR(err, CT_ERR_ARG,
                      "--lr-schedule: '%s' is not one of cosine, constant, linear",
                      name ? name : "");
    return CT_OK;
}

double ct_lr_at(ct_lr_schedule s, double lr, int warmup, int steps, double min_frac, int64_t step) {
    if (step < warmup) return lr * (double)(step + 1) / (double)warmup;
    if (s == CT_LR_CONSTANT) return lr;
    double span = (double)(steps - warmup);
    double r = span > 0 ? (double)(step - warmup) / span : 1.0;
    if (r < 0) r = 0;
    if (r > 1) r = 1;
    double lo = lr * min_frac;
    double c = s == CT_LR_COSINE ? 0.5 * (1.0 + cos(3.14159265358979323846 * r)) : 1.0 - r;
    return lo + c * (lr - lo);
}
