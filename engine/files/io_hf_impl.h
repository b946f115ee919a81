/* io_hf_impl.h - what the Hugging Face readers of engine/files share: the Llama config.json
 * (io_hf_llama.c), which io_hf_config.c hands a config whose model_type is "llama". */
#ifndef CT_IO_HF_IMPL_H
#define CT_IO_HF_IMPL_H

#include "ct_engine_io.h"
#include "io_json_impl.h"

/* root: the parsed config.json (an object, model_type "llama"); ignored(key): a field that leaves
 * the computed model alone. The config checked, or a refusal naming the field. */
ct_status ct__hf_llama_parse(const ct_json *root, const char *what,
                             int (*ignored)(const char *key), ct_gpt_config *cfg, ct_err *err);
/* A LlamaForCausalLM config.json for cfg (malloc'd; NULL when out of memory). */
char *ct__hf_llama_format(const ct_gpt_config *cfg, ct_file_dtype dtype);

#endif /* CT_IO_HF_IMPL_H */
