/* train_report.h - train_gpt's text of the engine's reports: the start-up report
 * (ct_train_report) and a pipeline's bubble (ct_pipeline_bubble), formatted for a terminal. The
 * engine gives them as data; the programs that print them share these functions, so the text
 * (which tests grep) has one source.
 *
 *     ct_train_report rep;
 *     if (ct_trainer_report(t, &rep) != CT_OK) ...;
 *     if (ct_trainer_leader(t)) train_report_print(stdout, &rep);
 *     ct_train_report_free(&rep);
 */
#ifndef CT_TRAIN_REPORT_H
#define CT_TRAIN_REPORT_H

#include <stdio.h>

#include "ct_engine.h"

/* "train_gpt: configuration", the effective flags, the layout, model, data, memory per worker. */
void train_report_print(FILE *f, const ct_train_report *r);
/* The bubble per stage, measured beside simulated; nothing when b->steps is 0. */
void train_bubble_print(FILE *f, const ct_pipeline_bubble *b);

#endif /* CT_TRAIN_REPORT_H */
