/* nftables from this process, through libnftables (the library the `nft`
 * command is built on): a command text in, the kernel's answer out, with
 * no process started. A batch of commands in one call is one netlink
 * transaction, applied whole or not at all, which is what lets a policy
 * change replace a sandbox's rules with no moment in between.
 *
 * One context per owner, used under the owner's lock (libnftables keeps a
 * cache and buffers in it and is not thread-safe). */
#ifndef SL_NET_NFT_H
#define SL_NET_NFT_H

#include <jansson.h>
#include <stdint.h>

#include "common/error.h"

struct sl_nft;

int sl_nft_open(struct sl_nft **out, struct sl_error *err);
void sl_nft_close(struct sl_nft *n);

/* Run `cmds` (nft syntax, one transaction). On failure err carries
 * `what` and nft's first error line, SANDBOX_RUNTIME_ERROR. */
int sl_nft_run(struct sl_nft *n, const char *cmds, const char *what, struct sl_error *err);

/* The packets counted by named counter `name` of table `inet <table>`,
 * asked of the kernel directly (one nf_tables GETOBJ): its cost does not
 * grow with the table, as a listing through libnftables does. ENOENT when
 * there is no such counter. */
int sl_nft_counter_packets(struct sl_nft *n, const char *table, const char *name,
                           uint64_t *packets, struct sl_error *err);

/* 1 when chain `chain` of table `inet <table>` exists, 0 when it (or the
 * table) does not, -1; one nf_tables GETCHAIN. */
int sl_nft_chain_exists(struct sl_nft *n, const char *table, const char *chain,
                        struct sl_error *err);

/* Run a list command with JSON output; *out is the parsed "nftables"
 * array (the caller's reference). ENOENT when the object does not exist. */
int sl_nft_list_json(struct sl_nft *n, const char *cmd, json_t **out, struct sl_error *err);

#endif
