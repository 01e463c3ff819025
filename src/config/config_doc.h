/* The prose of docs/CONFIGURATION.md, one entry per variable the service
 * reads (config_doc.c), in the order and sections of the document. */
#ifndef SL_CONFIG_DOC_H
#define SL_CONFIG_DOC_H

#include <stdbool.h>
#include <stddef.h>

struct sl_config_doc {
    const char *section; /* set: a heading, nothing else in the entry */
    const char *name;
    bool ours;  /* beyond the reference (COMPAT.md) */
    bool extra; /* read outside the configuration table: def, accepts given */
    const char *def, *accepts;
    const char *doc;
};

extern const struct sl_config_doc sl_config_docs[];
extern const size_t sl_config_docs_len;

#endif
