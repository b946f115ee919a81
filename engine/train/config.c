/* config.c - the model's shape a run trains: a checkpoint's (--resume), a model file's (--init)
 * or the shape flags', resolved in one place (ct__train_config_load) for ct_train_config and
 * ct_train_run_open; and what a mixture of experts' layouts support. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

/* A new model's shape from the flags. */
static ct_status config_of_flags(const ct_train_params *p, ct_gpt_config *cfg, ct_err *err) {
    int V = p->vocab ? p->vocab : (p->data[0] ? 50257 : 256);
    cfg->vocab = V;
    cfg->padded_vocab = (V + 127) / 128 * 128;
    cfg->layers = p->layers;
    cfg->heads = p->heads;
    cfg->channels = p->dim;
    cfg->max_seq = p->max_seq ? p->max_seq : p->seq;
    cfg->experts = p->experts;
    cfg->top_k = p->experts > 0 ? p->top_k : 0;
    if (p->experts > 0 && p->top_k > p->experts)
        return CT_ERR(err, CT_ERR_ARG, "--top-k %d is above --experts %d (each token goes to K "
                                       "distinct experts)",
                      p->top_k, p->experts);
    if (ct_arch_parse(p->arch, &cfg->arch) != CT_OK)
        return CT_ERR(err, CT_ERR_ARG, "--arch must be gpt2 or llama (got '%s')", p->arch);
    if (ct_gpt_is_llama(cfg)) {
        cfg->kv_heads = p->kv_heads ? p->kv_heads : p->heads;
        cfg->ffn_dim = p->ffn_dim ? p->ffn_dim : 4 * p->dim;
        cfg->rope_theta = (float)p->rope_theta;
        cfg->norm_eps = (float)p->norm_eps;
        cfg->tie_embeddings = p->tie_embeddings;
        if (p->heads > 0 && cfg->kv_heads > 0 && p->heads % cfg->kv_heads)
            return CT_ERR(err, CT_ERR_ARG,
                          "--kv-heads %d does not divide --heads %d (each kv head serves NH / "
                          "NKV query heads)",
                          cfg->kv_heads, p->heads);
    }
    if (p->dim % p->heads != 0)
        return CT_ERR(err, CT_ERR_ARG, "--heads %d does not divide --dim %d (the head size must be whole)",
                      p->heads, p->dim);
    return ct_gpt_config_check(cfg, "the model of the flags", err);
}

/* A shape flag given beside a model file or checkpoint must agree with it. */
static ct_status config_vs_flags(const ct_train_params *p,
                                 const ct_gpt_config *cfg, const char *origin, ct_err *err) {
    if (!p->resume[0] && !p->init[0]) return CT_OK;
    struct {
        const char *flag;
        int given, file;
    } f[] = {{"layers", p->layers, cfg->layers}, {"heads", p->heads, cfg->heads},
             {"dim", p->dim, cfg->channels},     {"vocab", p->vocab, cfg->vocab},
             {"max-seq", p->max_seq, cfg->max_seq}, {"experts", p->experts, cfg->experts},
             {"top-k", p->top_k, cfg->top_k}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (ct_train_given(p, f[i].flag) && f[i].given != f[i].file &&
            !(!strcmp(f[i].flag, "top-k") && cfg->experts == 0)) /* no K without experts */
            return CT_ERR(err, CT_ERR_ARG, "--%s %d contradicts the model of %s (%d); leave it out",
                          f[i].flag, f[i].given, origin, f[i].file);
    int arch = 0;
    if (ct_train_given(p, "arch") && ct_arch_parse(p->arch, &arch) == CT_OK && arch != cfg->arch)
        return CT_ERR(err, CT_ERR_ARG, "--arch %s contradicts the model of %s (%s); leave it out",
                      p->arch, origin, ct_arch_name(cfg->arch));
    if (ct_gpt_is_llama(cfg)) {
        struct {
            const char *flag;
            double given, file;
        } g[] = {{"kv-heads", p->kv_heads, cfg->kv_heads},
                 {"ffn-dim", p->ffn_dim, cfg->ffn_dim},
                 {"rope-theta", (float)p->rope_theta, cfg->rope_theta},
                 {"norm-eps", (float)p->norm_eps, cfg->norm_eps},
                 {"tie-embeddings", p->tie_embeddings, cfg->tie_embeddings}};
        for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
            if (ct_train_given(p, g[i].flag) && g[i].given != g[i].file)
                return CT_ERR(err, CT_ERR_ARG,
                              "--%s %g contradicts the model of %s (%g); leave it out", g[i].flag,
                              g[i].given, origin, g[i].file);
    }
    return CT_OK;
}

ct_status ct__train_source_load(const ct_train_params *p, int keep, ct__train_source *src,
                                ct_err *err) {
    ct_status st;
    memset(src, 0, sizeof *src);
    ct_gpt_config *cfg = &src->cfg;
    if (p->resume[0]) {
        if ((st = ct_checkpoint_find(p->resume, src->ckpath, sizeof src->ckpath, err)) != CT_OK)
            return st;
        /* a sharded checkpoint: the manifest here, each worker's runs in ckpt.c */
        if (ct_checkpoint_is_sharded(src->ckpath))
            st = ct_shards_open(&src->shards, src->ckpath, &src->ck, err);
        else
            st = ct_checkpoint_read(src->ckpath, &src->ck, err);
        if (st != CT_OK) return st;
        *cfg = src->ck.cfg;
        if (!keep) {
            ct_checkpoint_release(&src->ck);
            ct_shards_close(src->shards);
            src->shards = NULL;
        }
        snprintf(src->origin, sizeof src->origin, "%s", src->ckpath);
    } else if (p->init[0]) {
        st = keep ? ct_model_file_read(p->init, cfg, &src->init_params, &src->init_n, err)
                  : ct_model_file_read_config(p->init, cfg, err);
        if (st != CT_OK) return st;
        snprintf(src->origin, sizeof src->origin, "%s", p->init);
    } else {
        if ((st = config_of_flags(p, cfg, err)) != CT_OK) return st;
        snprintf(src->origin, sizeof src->origin, "random init");
    }
    return config_vs_flags(p, cfg, src->origin, err);
}

void ct__train_source_release(ct__train_source *src) {
    ct_checkpoint_release(&src->ck);
    ct_shards_close(src->shards);
    src->shards = NULL;
    free(src->init_params);
    src->init_params = NULL;
}

ct_status ct_train_config(const ct_train_params *p, ct_gpt_config *cfg, ct_err *err) {
    ct__train_source src;
    ct_status st = ct__train_source_load(p, 0, &src, err);
    *cfg = src.cfg;
    ct__train_source_release(&src);
    return st;
}

ct_status ct_train_moe_check(const ct_train_params *p, const ct_gpt_config *cfg, ct_sched_kind kind,
                             ct_err *err) {
    char m[400];
    if (ct_gpt_is_llama(cfg)) { /* llm.c's file has no place for a Llama model */
        if (p->save_model[0] && !ct_model_file_is_safetensors(p->save_model) &&
            !ct_model_file_is_hf_dir(p->save_model)) {
            snprintf(m, sizeof m, "--save-model %s: llm.c's model format is GPT-2's and has no "
                                  "place for a Llama model; name a *.safetensors file or a "
                                  "Hugging Face directory DIR/",
                     p->save_model);
            return CT_ERR(err, CT_ERR_ARG, "%s", m);
        }
    }
    if (cfg->experts == 0 && p->ep > 1)
        return CT_ERR(err, CT_ERR_ARG,
                      "--ep needs a mixture of experts (--experts E, or a model file with experts)");
    if (cfg->experts == 0) return CT_OK;
    if (cfg->experts % p->ep)
        return CT_ERR(err, CT_ERR_ARG, "--ep %d does not divide the %d experts (each worker of an EP "
                                       "group holds E / ep of them)",
                      p->ep, cfg->experts);
    if (p->ep > 1 && cfg->channels % 2 && p->precision && !strcmp(p->precision, "bf16"))
        return CT_ERR(err, CT_ERR_ARG,
                      "--precision bf16 with --ep %d needs an even --dim (got %d): a row of bf16 "
                      "crosses the EP link as 4-byte pairs",
                      p->ep, cfg->channels);
    if (kind == CT_SCHED_ZB1)
        return CT_ERR(err, CT_ERR_ARG,
                      "experts with --schedule zb1 are not built (the MoE layer's backward runs its "
                      "all-to-alls in one piece, not split in two halves); use gpipe, 1f1b or "
                      "interleaved");
    if (p->save_model[0] && !ct_model_file_is_safetensors(p->save_model)) {
        snprintf(m, sizeof m, "--save-model %s: llm.c's model format has no place for experts "
                              "(nor has a Hugging Face GPT-2 directory); name the file "
                              "*.safetensors",
                 p->save_model);
        return CT_ERR(err, CT_ERR_ARG, "%s", m);
    }
    return CT_OK;
}
