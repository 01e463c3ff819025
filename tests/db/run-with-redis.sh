#!/usr/bin/env bash
# run-with-redis.sh CMD [ARG...]: runs CMD beside a Redis server of its own,
# made for this run and removed after it: Debian's redis-server, no
# persistence, listening on 127.0.0.1 at a free port with a password. CMD
# gets SANDLOOM_TEST_REDIS_URL and SANDLOOM_TEST_REDIS_CTL (stop|start the
# server: the outage tests); its exit status is this script's. It composes
# with the database wrappers: run-with-postgres.sh run-with-redis.sh CMD.
set -euo pipefail

server=$(command -v redis-server || echo /usr/bin/redis-server)
if [ ! -x "$server" ]; then
    echo "run-with-redis: Debian's redis-server package is not installed (make deps)" >&2
    exit 1
fi
dir=$(mktemp -d /tmp/sl-redis-XXXXXX)
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
password="sl-test-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

cat > "$dir/ctl" <<CTL
#!/usr/bin/env bash
set -eu
case "\$1" in
stop)
    p=\$(cat "$dir/pid" 2>/dev/null || true)
    [ -n "\$p" ] || exit 0
    kill "\$p" 2>/dev/null || true
    for _ in \$(seq 100); do kill -0 "\$p" 2>/dev/null || exit 0; sleep 0.05; done
    kill -9 "\$p" 2>/dev/null || true ;;
start)
    setsid "$server" --bind 127.0.0.1 --port "$port" --requirepass "$password" \\
        --save "" --appendonly no --dir "$dir" --pidfile "$dir/pid" --daemonize no \\
        --logfile "$dir/server.log" </dev/null >/dev/null 2>&1 &
    for _ in \$(seq 200); do
        redis-cli -h 127.0.0.1 -p "$port" -a "$password" --no-auth-warning ping 2>/dev/null |
            grep -q PONG && exit 0
        sleep 0.05
    done
    echo "redis did not start" >&2; cat "$dir/server.log" >&2; exit 1 ;;
esac
CTL
chmod +x "$dir/ctl"
stop() {
    "$dir/ctl" stop || true
    rm -rf "$dir"
}
trap stop EXIT
"$dir/ctl" start

export SANDLOOM_TEST_REDIS_URL="redis://:$password@127.0.0.1:$port/0"
export SANDLOOM_TEST_REDIS_CTL="$dir/ctl"
set +e
"$@"
rc=$?
set -e
exit $rc
