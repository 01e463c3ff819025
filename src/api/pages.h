/* The HTML pages served without a token: /admin (the operator console) and
 * /docs (the API reference: Swagger UI over /openapi.json, its two assets
 * served by this server too). Nothing loads from anywhere else: no
 * external script, style, font or fetch (COMPAT.md §2). Each page is kept as src/api/<page>.html and compiled in at build time:
 * meson runs scripts/embed-html.py, which writes <page>_html.h into the build
 * directory with the page's bytes as a NUL-terminated array sl_page_<page>[]
 * and its length SL_PAGE_<PAGE>_LEN. The arrays are static: include this
 * header from api/routes.c only. */
#ifndef SL_API_PAGES_H
#define SL_API_PAGES_H

#include <stddef.h>

#include "console_html.h"
#include "docs_html.h"
/* Swagger UI's bundle and stylesheet (npm swagger-ui-dist, Apache-2.0),
 * served under /docs/ for the /docs page. */
#include "sl_asset_swagger_css.h"
#include "sl_asset_swagger_js.h"
/* xterm.js and its stylesheet (npm @xterm/xterm, MIT), served under
 * /admin/ for the console's terminal. */
#include "sl_asset_xterm_css.h"
#include "sl_asset_xterm_js.h"

#endif
