#!/usr/bin/env bash
# `make run`: starts sandloomd on its embedded defaults (SQLite, the
# in-process registry, local workspaces), all under one state directory.
# Usage: scripts/run.sh BUILD HOST PORT STATE   (make passes its variables)
#
# For each variable below, the first of these wins:
#   1. the process environment (SANDBOX_PORT=9000 make run)
#   2. make's command line (make run PORT=9000, make run STATE=/srv/sl)
#   3. .env in the working directory (which sandloomd reads itself)
#   4. the default make passes (127.0.0.1:8080, ./state)
# SL_RUN_GIVEN lists the make variables given on its command line.
set -euo pipefail
build="$1" host="$2" port="$3" state="$4"
given=" ${SL_RUN_GIVEN:-} "

in_dotenv() {
    [ -f .env ] && grep -Eq "^[[:space:]]*(export[[:space:]]+)?$1[[:space:]]*=" .env
}

# default NAME VALUE MAKEVAR: export NAME=VALUE unless something above wins.
default() {
    local name="$1" value="$2" makevar="$3"
    [ -n "${!name+x}" ] && return 0
    if [[ "$given" != *" $makevar "* ]] && in_dotenv "$name"; then
        return 0
    fi
    export "$name=$value"
}

default SANDBOX_HOST "$host" HOST
default SANDBOX_PORT "$port" PORT
default SANDBOX_ADVERTISE_HOST 127.0.0.1 HOST
default SANDBOX_LOCAL_ROOT "$state/sandboxes" STATE
default SANDBOX_DATABASE_URL "sqlite:///$state/sandloom.db" STATE
default SANDBOX_STARTUP_LOG_PATH "$state/startup.log" STATE
mkdir -p "$state"
exec "$build/sandloomd"
