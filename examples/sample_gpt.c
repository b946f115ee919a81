/* sample_gpt - generate from a saved model: an llm.c GPT-2 model file, a safetensors file or a
 * Hugging Face GPT-2 directory (--model), or a cltrain
 * checkpoint (--checkpoint, a file or a --save directory). Prints the prompt and what follows
 * it as bytes (byte vocabulary), as text through an llm.c tokenizer (--tokenizer), or as token
 * ids. Exit status 2 on bad input (flags, files, prompt), 1 on a device failure. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_engine.h"
#include "ct_engine_io.h"
#include "ct_engine_train.h"

typedef struct sample_params {
    const char *model, *checkpoint, *prompt, *tokenizer, *device;
    int len, top_k, seed, context;
    double temperature;
} sample_params;

static const ct_opt opts[] = {
    {"model", CT_OPT_STR, offsetof(sample_params, model), "",
     "a model: llm.c GPT-2 file (fp32 or bf16), .safetensors, or a Hugging Face GPT-2 or Llama directory"},
    {"checkpoint", CT_OPT_STR, offsetof(sample_params, checkpoint), "",
     "cltrain checkpoint file or --save directory (instead of --model)"},
    {"prompt", CT_OPT_STR, offsetof(sample_params, prompt), "",
     "text (byte vocabulary) or comma-separated token ids; default: newline / end-of-text"},
    {"len", CT_OPT_INT, offsetof(sample_params, len), "256", "tokens to generate"},
    {"temperature", CT_OPT_FLOAT, offsetof(sample_params, temperature), "0.8",
     "sampling temperature; 0 = greedy"},
    {"top-k", CT_OPT_INT, offsetof(sample_params, top_k), "40", "draw among the k most likely; 0 = all"},
    {"seed", CT_OPT_INT, offsetof(sample_params, seed), "1337", "seed of the draws"},
    {"context", CT_OPT_INT, offsetof(sample_params, context), "0",
     "tokens of context per forward; 0 = min(maxT, 256)"},
    {"tokenizer", CT_OPT_STR, offsetof(sample_params, tokenizer), "",
     "llm.c GPT-2 tokenizer file to print text"},
    {"device", CT_OPT_STR, offsetof(sample_params, device), "",
     "OpenCL device (as train_gpt); default $CT_DEVICE or auto"},
};
static const int nopts = (int)(sizeof opts / sizeof opts[0]);

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sample_gpt: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(code);
}

int main(int argc, char **argv) {
    sample_params p;
    memset(&p, 0, sizeof p);
    ct_opts_defaults(opts, nopts, &p);
    if (ct_opts_wants_help(argc - 1, argv + 1)) {
        printf("usage: sample_gpt (--model FILE | --checkpoint PATH) [--flag VALUE]...\n");
        ct_opts_help(stdout, opts, nopts);
        return 0;
    }
    ct_err err = {0};
    if (ct_opts_parse(opts, nopts, &p, NULL, argc - 1, argv + 1, &err)) die(2, "%s", err.msg);
    if (!p.model[0] == !p.checkpoint[0]) die(2, "give exactly one of --model FILE and --checkpoint PATH");
    if (p.len < 0 || p.top_k < 0 || p.temperature < 0 || p.context < 0)
        die(2, "--len, --top-k, --temperature and --context must be >= 0");

    ct_gpt_config cfg;
    float *params = NULL;
    size_t n = 0;
    if (p.model[0]) {
        if (ct_model_file_read(p.model, &cfg, &params, &n, &err)) die(2, "%s", err.msg);
    } else {
        char path[1300];
        ct_checkpoint ck;
        if (ct_checkpoint_find(p.checkpoint, path, sizeof path, &err) ||
            ct_checkpoint_read(path, &ck, &err))
            die(2, "%s", err.msg);
        cfg = ck.cfg;
        n = ck.nparams;
        params = ck.params;
        ck.params = NULL;
        ct_checkpoint_release(&ck);
    }
    int T = p.context ? p.context : (cfg.max_seq < 256 ? cfg.max_seq : 256);
    if (T > cfg.max_seq) die(2, "--context %d is above the model's maxT %d", T, cfg.max_seq);
    ct_tokenizer *tok = NULL;
    if (p.tokenizer[0] && ct_tokenizer_open(&tok, p.tokenizer, &err)) die(2, "%s", err.msg);
    int cap = p.len + 4096;
    int *tokens = (int *)malloc((size_t)cap * sizeof(int));
    int np = 0;
    if (!tokens) die(1, "no memory");
    if (ct_prompt_parse(p.prompt, cfg.vocab, tok ? ct_tokenizer_eot(tok) : -1, tokens, 4096, &np,
                        &err))
        die(2, "%s", err.msg);

    ct_device_info *list = NULL;
    int ndev = 0, pick = 0, npick = 0;
    if (ct_device_list(&list, &ndev, &err) ||
        ct_device_select(list, ndev, p.device[0] ? p.device : ct_device_spec_env(), 1, &pick,
                         &npick, &err))
        die(2, "%s", err.msg);
    ct_device_opts dopts = ct_device_opts_default();
    ct_device *dev = NULL;
    if (ct_device_open(&dev, &list[pick], &dopts, &err)) die(2, "%s", err.msg);
    ct_layout layout = {1, 1, 1, 0, 1};
    ct_coords coords = {0, 0, 0, 0};
    ct_model *m = NULL;
    if (ct_model_create(&m, &cfg, &layout, &coords, dev, 1, T, &err))
        die(2, "cannot build the model on %s: %s", list[pick].name, err.msg);
    if (ct_model_num_params(m) != n) die(2, "the file holds %zu parameters, the model %zu", n,
                                         ct_model_num_params(m));
    if (ct_model_set_params(m, params, n)) die(1, "%s", ct_model_errmsg(m));
    free(params);
    ct_rng rng;
    ct_rng_seed(&rng, (uint64_t)p.seed);
    if (ct_generate(ct_model_next_logits, m, &cfg, tokens, np, np + p.len, T, p.temperature,
                    p.top_k, &rng, &err))
        die(1, "%s", err.msg);
    ct_print_tokens(stdout, tokens, np + p.len, cfg.vocab, tok);
    free(tokens);
    ct_tokenizer_free(tok);
    ct_model_free(m);
    ct_device_free(dev);
    ct_device_list_free(list);
    return 0;
}
