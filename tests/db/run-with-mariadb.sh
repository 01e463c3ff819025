#!/usr/bin/env bash
# run-with-mariadb.sh CMD [ARG...]: runs CMD against a MariaDB server of its
# own, made for this run and removed after it: Debian's server, a fresh data
# directory in a temporary directory, listening on 127.0.0.1 at a free port
# (and a Unix socket there), password authentication over TCP. CMD gets
# SANDLOOM_TEST_DATABASE_URL (database `sandloom`, user `sandloom`, who may
# make more databases) and SANDLOOM_TEST_MYSQL_ADMIN (mariadb client
# arguments for root over the socket) and SANDLOOM_TEST_DB_CTL (stop|start
# the server); its exit status is this script's.
set -euo pipefail

if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then
    echo "run-with-mariadb: Debian's mariadb-server package is not installed (make deps)" >&2
    exit 1
fi
server=$(command -v mariadbd || echo /usr/sbin/mariadbd)
dir=$(mktemp -d /tmp/sl-my-XXXXXX)
chmod 0755 "$dir"
chown mysql: "$dir"
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
password="sl-test-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

# $dir/ctl stop|start: how a test takes this server away and brings it back
# (the outage tests); the server's pid is in $dir/pid.
cat > "$dir/ctl" <<CTL
#!/usr/bin/env bash
set -eu
case "\$1" in
stop)
    p=\$(cat "$dir/pid" 2>/dev/null || true)
    [ -n "\$p" ] || exit 0
    kill "\$p" 2>/dev/null || true
    for _ in \$(seq 300); do kill -0 "\$p" 2>/dev/null || exit 0; sleep 0.1; done
    kill -9 "\$p" 2>/dev/null || true ;;
start)
    # Durability off: a test database need not survive a power cut.
    setsid "$server" --no-defaults --datadir="$dir/data" --user=mysql --socket="$dir/sock" \\
        --port="$port" --bind-address=127.0.0.1 --pid-file="$dir/pid" \\
        --log-error="$dir/server.log" --skip-log-bin --innodb-flush-log-at-trx-commit=0 \\
        --innodb-doublewrite=0 --innodb-buffer-pool-size=128M --max-connections=300 \\
        </dev/null >>"$dir/stdout.log" 2>&1 &
    for _ in \$(seq 300); do
        mariadb-admin --no-defaults --socket="$dir/sock" -uroot ping >/dev/null 2>&1 && exit 0
        sleep 0.1
    done
    echo "mariadb did not start" >&2; cat "$dir/server.log" >&2; exit 1 ;;
esac
CTL
chmod +x "$dir/ctl"

stop() {
    "$dir/ctl" stop || true
    rm -rf "$dir"
}
trap stop EXIT

mariadb-install-db --no-defaults --datadir="$dir/data" --user=mysql --skip-test-db \
    --auth-root-authentication-method=socket >"$dir/install.log" 2>&1 ||
    { cat "$dir/install.log" >&2; exit 1; }
"$dir/ctl" start
admin=(--no-defaults --socket="$dir/sock" -uroot)
mariadb "${admin[@]}" -e "CREATE DATABASE sandloom;
    CREATE USER 'sandloom'@'127.0.0.1' IDENTIFIED BY '$password';
    GRANT ALL ON *.* TO 'sandloom'@'127.0.0.1';"

export SANDLOOM_TEST_DATABASE_URL="mysql://sandloom:$password@127.0.0.1:$port/sandloom"
export SANDLOOM_TEST_MYSQL_ADMIN="${admin[*]}"
export SANDLOOM_TEST_MYSQL_DIR="$dir"
export SANDLOOM_TEST_DB_CTL="$dir/ctl"
set +e
"$@"
rc=$?
set -e
exit $rc
