/* ct_engine.h - the engine's public header: GPT-2 config and parameter table, the device ops,
 * the model, and (once they exist) the I/O and training parts.
 *
 *     #include "ct_engine.h"
 *     ct_model *m = NULL;
 *     if (ct_model_create(&m, &cfg, &layout, &coords, dev, B, T, &err)) puts(err.msg);
 *     ct_model_init_random(m, 1337);
 *     float loss; ct_model_forward(m, tokens, targets, B, T, &loss);
 */
#ifndef CT_ENGINE_H
#define CT_ENGINE_H

#include "ct_gpt_config.h"
#include "ct_engine_ops.h"
#include "ct_engine_model.h"

#if defined(__has_include)
#if __has_include("ct_engine_io.h")
#include "ct_engine_io.h"
#endif
#if __has_include("ct_engine_train.h")
#include "ct_engine_train.h"
#endif
#if __has_include("ct_engine_dp.h")
#include "ct_engine_dp.h"
#endif
#endif

#endif /* CT_ENGINE_H */
