#include "net/nft.h"

#include <errno.h>
#include <nftables/libnftables.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sl_nft {
    struct nft_ctx *ctx;
};

/* Reverse lookups of addresses and services in listings would ask DNS.
 * JSON output is set for listings only: with it on, libnftables tries to
 * read every command as JSON first. */
#define OUTPUT_FLAGS NFT_CTX_OUTPUT_NUMERIC_ALL

int sl_nft_open(struct sl_nft **out, struct sl_error *err)
{
    struct sl_nft *n = calloc(1, sizeof(*n));
    if (!n)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    n->ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!n->ctx || nft_ctx_buffer_output(n->ctx) < 0 || nft_ctx_buffer_error(n->ctx) < 0) {
        sl_nft_close(n);
        return sl_error_set(err, SL_E_RUNTIME, ENOMEM, "cannot start libnftables");
    }
    nft_ctx_output_set_flags(n->ctx, OUTPUT_FLAGS);
    *out = n;
    return 0;
}

void sl_nft_close(struct sl_nft *n)
{
    if (!n)
        return;
    if (n->ctx)
        nft_ctx_free(n->ctx);
    free(n);
}

/* nft's first error line, without its "Error: " and the echo of the
 * command it prints below. */
static void first_error(struct sl_nft *n, char *out, size_t size)
{
    const char *e = nft_ctx_get_error_buffer(n->ctx);
    if (!e || !*e) {
        snprintf(out, size, "no detail");
        return;
    }
    if (strncmp(e, "Error: ", 7) == 0)
        e += 7;
    size_t len = strcspn(e, "\n");
    snprintf(out, size, "%.*s", (int)(len < size ? len : size - 1), e);
}

int sl_nft_run(struct sl_nft *n, const char *cmds, const char *what, struct sl_error *err)
{
    int rc = nft_run_cmd_from_buffer(n->ctx, cmds);
    (void)nft_ctx_get_output_buffer(n->ctx); /* drained: it would grow */
    if (rc == 0)
        return 0;
    char why[256];
    first_error(n, why, sizeof(why));
    int errnum = strstr(why, "No such file") ? ENOENT : strstr(why, "File exists") ? EEXIST : EIO;
    return sl_error_set(err, SL_E_RUNTIME, errnum, "%s: nftables refused: %s", what, why);
}

int sl_nft_list_json(struct sl_nft *n, const char *cmd, json_t **out, struct sl_error *err)
{
    *out = NULL;
    nft_ctx_output_set_flags(n->ctx, OUTPUT_FLAGS | NFT_CTX_OUTPUT_JSON);
    int rc = nft_run_cmd_from_buffer(n->ctx, cmd);
    nft_ctx_output_set_flags(n->ctx, OUTPUT_FLAGS);
    if (rc != 0) {
        char why[256];
        first_error(n, why, sizeof(why));
        int errnum = strstr(why, "No such file") ? ENOENT : EIO;
        return sl_error_set(err, SL_E_RUNTIME, errnum, "nftables: %s: %s", cmd, why);
    }
    json_error_t jerr;
    json_t *doc = json_loads(nft_ctx_get_output_buffer(n->ctx), 0, &jerr);
    json_t *list = json_object_get(doc, "nftables");
    if (!json_is_array(list)) {
        json_decref(doc);
        return sl_error_set(err, SL_E_RUNTIME, EIO, "nftables: %s: unreadable answer", cmd);
    }
    *out = json_incref(list);
    json_decref(doc);
    return 0;
}
