#!/usr/bin/env bash
# Installs the npm packages the build compiles in: Swagger UI for /docs
# (web/api-viewer, pinned by its package-lock.json). Offline once done:
# it does nothing while node_modules matches the lock.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/web/api-viewer"
stamp="$dir/node_modules/.package-lock.json"
if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ] &&
   [ -f "$dir/node_modules/swagger-ui-dist/swagger-ui-bundle.js" ]; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    echo "npm is missing (scripts/install-deps.sh build installs Debian's npm)" >&2
    exit 1
fi
echo "installing Swagger UI (npm ci in web/api-viewer)" >&2
npm ci --prefix "$dir" --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
