/* ct_engine.h - the engine's public header: the GPT-2 config and parameter table, the device ops,
 * the parameter layout, tensor parallelism's pieces and the model's stage entry points, the step
 * executor and what it drives (gradients, ZeRO, the optimizer, state, traces), the memory model,
 * training I/O and the trainer.
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
#include "ct_engine_ops_llama.h"
#include "ct_engine_gemm.h"
#include "ct_engine_params.h"
#include "ct_engine_tp.h"
#include "ct_engine_moe.h"
#include "ct_engine_model.h"
#include "ct_engine_step.h"
#include "ct_engine_mem.h"
#include "ct_engine_io.h"
#include "ct_engine_train.h"
#include "ct_engine_plan.h"

#endif /* CT_ENGINE_H */
