"""GET /admin and GET /docs: self-contained pages compiled in at build time
(API.md §3.3, §3.4; COMPAT.md §2). The browser behaviour of the console is
tested in test_console_browser.py."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = {"/admin": REPO / "src" / "api" / "console.html",
         "/docs": REPO / "src" / "api" / "docs.html"}

# Any attribute that makes the browser load or navigate somewhere.
URL_ATTR = re.compile(r"""\b(?:src|href|action|srcset|poster|data)\s*=\s*["']?\s*([^"'\s>]*)""",
                      re.IGNORECASE)
ABSOLUTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


@pytest.fixture(scope="module", params=sorted(PAGES))
def page(request, client):
    r = client.get(request.param, auth=False)
    return request.param, r


def test_page_is_served_without_token_as_html(page):
    path, r = page
    assert r.status == 200, r
    assert r.content_type == "text/html; charset=utf-8", r
    assert r.raw.startswith(b"<!DOCTYPE html>"), r


def test_served_bytes_are_the_source_file(page):
    """Proves the build-time embedding: the daemon serves exactly the bytes
    of the checked-in source file (rebuild after editing it)."""
    path, r = page
    src = PAGES[path].read_bytes()
    assert r.raw == src, (f"{path} differs from {PAGES[path]} ({len(r.raw)} vs {len(src)} bytes): "
                          f"is the daemon built from this tree?")


def test_no_external_resource_or_link(page):
    path, r = page
    html = r.raw.decode("utf-8")
    for m in URL_ATTR.finditer(html):
        url = m.group(1)
        assert not re.match(r"^https?:", url, re.IGNORECASE) and not ABSOLUTE.match(url), \
            f"{path}: external URL in {m.group(0)!r}"
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*https?://""", html, re.IGNORECASE)
    # No stylesheet import or font from elsewhere either.
    assert "@import" not in html and "@font-face" not in html
    assert not re.search(r"url\(\s*['\"]?\s*(?:https?:)?//", html, re.IGNORECASE)


def test_every_fetch_is_relative(client):
    """The console's own fetches (/docs has none: Swagger UI loads
    /openapi.json, test_docs_loads_swagger_ui_from_this_server)."""
    path = "/admin"
    r = client.get(path, auth=False)
    html = r.raw.decode("utf-8")
    calls = re.findall(r"\bfetch\(\s*([^,)]*)", html)
    assert calls, f"{path}: expected the page to call fetch()"
    for arg in calls:
        arg = arg.strip()
        literal = re.match(r"""^(['"`])(.*?)\1?$""", arg)
        if literal:  # a literal URL must be an absolute path on this origin
            assert literal.group(2).startswith("/") and not literal.group(2).startswith("//"), \
                f"{path}: fetch of a non-relative URL {arg!r}"
        else:  # a variable: where it is built, it starts with '/'
            assert re.fullmatch(r"[A-Za-z_$][\w$]*", arg), f"{path}: unexpected fetch({arg!r})"
    assert not re.search(r"https?://", re.sub(r"<!--.*?-->", "", html, flags=re.S)), \
        f"{path}: contains an http(s):// URL"
    for api in ("XMLHttpRequest", "EventSource", "sendBeacon", "importScripts"):
        assert api not in html, f"{path}: uses {api}"
    # Its one WebSocket (the terminal) goes to this origin's host.
    sockets = re.findall(r"new WebSocket\(([^,]*),", html)
    assert len(sockets) == 1, sockets
    built = re.search(r"const url = \(location\.protocol === 'https:' \? 'wss://' : 'ws://'\) "
                      r"\+ location\.host \+\s*'/api/v1/sandboxes/'", html)
    assert sockets[0].strip() == "url" and built, "the terminal's WebSocket is not same-origin"


def test_console_keeps_the_token_in_session_storage_only(client):
    html = client.get("/admin", auth=False).raw.decode("utf-8")
    assert "sessionStorage" in html
    assert "localStorage" not in html
    assert "document.cookie" not in html
    # Server data reaches the page as text, never as markup.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in html, f"/admin uses {sink}"
    # Every path the console calls is a same-origin API path.
    for url in re.findall(r"""api\(\s*'[A-Z]+',\s*[`'"]([^`'"]*)""", html):
        assert url.startswith("/api/v1/"), url


def test_console_loads_xterm_from_this_server(client):
    """The console's terminal emulator (npm @xterm/xterm, pinned in
    web/console, compiled in) comes from this server, never a CDN."""
    html = client.get("/admin", auth=False).raw.decode("utf-8")
    assert '<script src="/admin/xterm.js"></script>' in html
    assert '<link rel="stylesheet" href="/admin/xterm.css">' in html
    dist = REPO / "web" / "console" / "node_modules" / "@xterm" / "xterm"
    js = client.get("/admin/xterm.js", auth=False)
    assert js.status == 200 and js.content_type == "text/javascript; charset=utf-8", js
    assert js.raw == (dist / "lib" / "xterm.js").read_bytes(), "not the pinned xterm.js"
    css = client.get("/admin/xterm.css", auth=False)
    assert css.status == 200 and css.raw == (dist / "css" / "xterm.css").read_bytes()


def test_docs_loads_swagger_ui_from_this_server(client):
    """/docs is Swagger UI (npm swagger-ui-dist, compiled in) over
    /openapi.json; its script and stylesheet come from this server, and
    its validator (a call to an outside service) is off. The browser test
    drives it and fails on any request that leaves loopback."""
    html = client.get("/docs", auth=False).raw.decode("utf-8")
    assert '<script src="/docs/swagger-ui-bundle.js"></script>' in html
    assert '<link rel="stylesheet" href="/docs/swagger-ui.css">' in html
    assert "url: '/openapi.json'" in html and "validatorUrl: null" in html
    js = client.get("/docs/swagger-ui-bundle.js", auth=False)
    assert js.status == 200 and js.content_type == "text/javascript; charset=utf-8", js
    assert b"SwaggerUIBundle" in js.raw and len(js.raw) > 500_000
    assert js.headers.get("Cache-Control") == "public, max-age=3600", js.headers
    dist = REPO / "web" / "api-viewer" / "node_modules" / "swagger-ui-dist"
    assert js.raw == (dist / "swagger-ui-bundle.js").read_bytes(), "not the pinned bundle"
    css = client.get("/docs/swagger-ui.css", auth=False)
    assert css.status == 200 and css.content_type == "text/css; charset=utf-8", css
    assert css.raw == (dist / "swagger-ui.css").read_bytes()
