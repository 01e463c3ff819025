#!/usr/bin/env bash
# Installs the npm packages the build compiles in, each pinned by its
# package-lock.json: Swagger UI for /docs (web/api-viewer) and xterm.js for
# the console's terminal (web/console). Offline once done: it does nothing
# while each node_modules matches its lock.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

# install DIR WHAT FILE: npm ci in DIR unless FILE (under node_modules) is
# there and the install is newer than the lock.
install() {
    local dir="$root/$1" what="$2" file="$3"
    local stamp="$dir/node_modules/.package-lock.json"
    if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ] &&
       [ -f "$dir/node_modules/$file" ]; then
        return 0
    fi
    if ! command -v npm >/dev/null; then
        echo "npm is missing (scripts/install-deps.sh build installs Debian's npm)" >&2
        exit 1
    fi
    echo "installing $what (npm ci in $1)" >&2
    npm ci --prefix "$dir" --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
}

install web/api-viewer "Swagger UI" swagger-ui-dist/swagger-ui-bundle.js
install web/console "xterm.js" @xterm/xterm/lib/xterm.js
