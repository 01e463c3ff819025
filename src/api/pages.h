/* Self-contained HTML pages: no external script, style or font (COMPAT.md §2). */
#ifndef SL_API_PAGES_H
#define SL_API_PAGES_H

/* /docs: renders /openapi.json (same origin) as a route reference. */
#define SL_PAGE_DOCS                                                                              \
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"                          \
    "<title>Sandloom API</title><style>body{font:14px system-ui,sans-serif;margin:2em;"           \
    "max-width:60em}code{background:#f3f3f3;padding:1px 4px}.m{display:inline-block;width:5em;"  \
    "font-weight:bold}</style></head><body><h1>Sandloom API</h1>"                                \
    "<p>Machine-readable: <a href=\"/openapi.json\">/openapi.json</a>. Every "                    \
    "<code>/api/v1</code> route needs <code>Authorization: Bearer &lt;token&gt;</code>.</p>"     \
    "<div id=\"routes\">loading&hellip;</div><script>"                                           \
    "fetch('/openapi.json').then(r=>r.json()).then(d=>{const el=document.getElementById("        \
    "'routes');el.textContent='';for(const [p,ops] of Object.entries(d.paths)){for(const "       \
    "[m,op] of Object.entries(ops)){const row=document.createElement('div');const "              \
    "b=document.createElement('span');b.className='m';b.textContent=m.toUpperCase();"            \
    "row.appendChild(b);const c=document.createElement('code');c.textContent=p;"                 \
    "row.appendChild(c);row.appendChild(document.createTextNode(' '+(op.summary||'')));"        \
    "el.appendChild(row);}}});</script></body></html>\n"

/* /admin: the operator console. This build's console looks up a sandbox's
 * route and audit trail and shows worker health; the full console arrives
 * with the operator issue. The token lives in sessionStorage only. */
#define SL_PAGE_ADMIN                                                                             \
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"                          \
    "<title>Sandloom console</title><style>body{font:14px system-ui,sans-serif;margin:2em}"      \
    "pre{background:#f6f6f6;padding:1em;overflow:auto;max-height:30em}input{margin:0 .5em}"       \
    "</style></head><body><h1>Sandloom console</h1>"                                             \
    "<p><label>Token<input id=\"tok\" type=\"password\" size=\"48\"></label>"                    \
    "<button id=\"save\">Use token</button></p>"                                                 \
    "<p><label>Sandbox id<input id=\"sid\" size=\"32\"></label>"                                 \
    "<button id=\"route\">Route</button><button id=\"audit\">Audit</button>"                     \
    "<button id=\"health\">Worker health</button></p><pre id=\"out\"></pre><script>"            \
    "const $=i=>document.getElementById(i);$('tok').value=sessionStorage.getItem('sl-token')"    \
    "||'';$('save').onclick=()=>sessionStorage.setItem('sl-token',$('tok').value);"              \
    "async function show(url,auth){const h=auth?{Authorization:'Bearer '+(sessionStorage."      \
    "getItem('sl-token')||'')}:{};const r=await fetch(url,{headers:h});$('out').textContent="    \
    "r.status+'\\n'+JSON.stringify(await r.json(),null,2);}"                                     \
    "$('route').onclick=()=>show('/api/v1/sandboxes/'+encodeURIComponent($('sid').value),1);"    \
    "$('audit').onclick=()=>show('/api/v1/sandboxes/'+encodeURIComponent($('sid').value)+"       \
    "'/audit',1);$('health').onclick=()=>show('/healthz',0);</script></body></html>\n"

#endif
