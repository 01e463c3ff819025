#!/usr/bin/env bash
# run-with-postgres.sh CMD [ARG...]: runs CMD against a PostgreSQL server of
# its own, made for this run and removed after it: Debian's server binaries,
# a fresh cluster in a temporary directory, listening on 127.0.0.1 at a free
# port (and a Unix socket in that directory), password authentication over
# TCP. CMD gets SANDLOOM_TEST_DATABASE_URL (a database `sandloom` owned by
# user `sandloom`) and SANDLOOM_TEST_PG_ADMIN (a psql connection string for
# making more databases), SANDLOOM_TEST_PG_CTL and SANDLOOM_TEST_PG_OPTS (to
# stop and start the server); its exit status is this script's.
#
# The server runs as the `postgres` user (it refuses root), with fsync off:
# a test database need not survive a power cut.
set -euo pipefail

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bin" ] || ! id postgres >/dev/null 2>&1; then
    echo "run-with-postgres: Debian's postgresql package is not installed (make deps)" >&2
    exit 1
fi
dir=$(mktemp -d /tmp/sl-pg-XXXXXX)
chmod 0755 "$dir"
chown postgres: "$dir"
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
password="sl-test-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
pg() { runuser -u postgres -- "$@"; }

stop() {
    pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT

printf '%s\n' "$password" > "$dir/pw"
chown postgres: "$dir/pw"
pg "$bin/initdb" -D "$dir/data" -U sandloom --pwfile="$dir/pw" --auth-local=trust \
    --auth-host=scram-sha-256 --no-sync -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
opts="-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$opts" start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
pg "$bin/createdb" -h "$dir" -p "$port" -U sandloom sandloom

export SANDLOOM_TEST_DATABASE_URL="postgresql://sandloom:$password@127.0.0.1:$port/sandloom"
export SANDLOOM_TEST_PG_ADMIN="host=$dir port=$port user=sandloom dbname=sandloom"
export SANDLOOM_TEST_PG_DIR="$dir"
# How a test stops and starts this server (the outage tests): pg_ctl as the
# server's user, and the options it was started with.
export SANDLOOM_TEST_PG_CTL="runuser -u postgres -- $bin/pg_ctl -D $dir/data -l $dir/server.log"
export SANDLOOM_TEST_PG_OPTS="$opts"
cat > "$dir/ctl" <<CTL
#!/usr/bin/env bash
# stop|start: how a test takes this server away and brings it back.
set -eu
case "\$1" in
stop) runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null ;;
start) runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \\
           -o "$opts" start >/dev/null ;;
esac
CTL
chmod +x "$dir/ctl"
export SANDLOOM_TEST_DB_CTL="$dir/ctl"
set +e
"$@"
rc=$?
set -e
exit $rc
