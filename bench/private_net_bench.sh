#!/usr/bin/env bash
# The private network mode (SANDBOX_NETWORK_MODE=private) against the host
# and isolated modes, measured in the same run on this machine: one
# throwaway sandloomd per mode, started one after another (free loopback
# port, fresh state directory, random token, a uid range of the bench's
# own), driven over the HTTP API like any client.
#
#   1. session start: S fresh sandboxes per mode (resolve + create, not
#      timed); the first exec of `true` (starts the warm session: in private
#      mode its namespace's veth pair, address and nftables chain too), then
#      a second one (the warm session). Medians; first-exec ratios
#      private/isolated and private/host.
#   2. memory per idle session (isolated and private): N sandboxes, one
#      `true` each, their sessions left running (SANDBOX_SESSION_IDLE_SECONDS
#      3600); before and after, per session: host memory (MemTotal -
#      MemAvailable: all of this machine, so whatever else runs shows), the
#      daemon's VmRSS, and what the memory cgroup the bench gives each
#      daemon (a child of its own, its sessions' cgroups below it) is
#      charged, kernel part apart. private - isolated is the network's cost.
#      Then the sessions are released: ms per sandbox.
#   3. TCP from a private sandbox to a server in the bench's test namespace
#      (198.51.100.10: a sink and an accept-and-close server), beside the
#      same client from the host, in alternating rounds (and the same for a
#      host-mode sandbox): connect latency (median of C connects) and
#      throughput (M MiB), medians of R rounds.
#      Goals: throughput >= 50% of the host's, latency <= 2x the host's.
#   4. policy update: P PUT /network calls on a private sandbox whose
#      session runs, alternating {"default":"allow"} and
#      {"default":"deny","allow":["198.51.100.10"]}: median and p90, with
#      that session alone, with B other private sessions alive, and with N.
#
#   bench/private_net_bench.sh [BUILD_DIR] [options]   (root; BUILD_DIR: build)
#     --sessions N   idle sessions of row 2 (default 1000)
#     --sandboxes S  sandboxes of row 1 per mode (default 30)
#     --connects C   connects of row 3 (default 500)
#     --mib M        MiB sent per throughput run of row 3 (default 1024)
#     --puts P       policy updates per measurement of row 4 (default 50)
#     --busy B       other private sessions alive in row 4's second case (default 200)
#     --threads T    concurrent requests while starting row 2's sessions (default 8)
#     --rounds R     host / sandbox rounds of row 3 (default 3)
#
# The test namespace is slt-pnb-<n> (veth slt-pnbh<n> on the host,
# 198.51.100.1/24 here, .10 inside; when another program on this host holds
# 198.51.100.0/24 already, a pair of /32s: .201 here, .200 inside), with a dnsmasq on 127.0.0.1 (the private
# mode's upstream resolver; it answers server.test). Nothing leaves this
# machine. Everything (daemons, namespace, servers, dnsmasq, the memory
# cgroups, the sb-<uid> cgroups the daemons leave in the bench's uid range,
# the state directory under /tmp) goes on the way out, whatever happens.
#
# Exit status: 0; 1 when a request or a check failed; 2 when a daemon did
# not come up or something is missing.
set -euo pipefail

BUILD=build
if [[ $# -gt 0 && $1 != -* ]]; then
    BUILD=$1
    shift
fi
SESSIONS=1000 SANDBOXES=30 CONNECTS=500 MIB=1024 PUTS=50 BUSY=200 THREADS=8 ROUNDS=3
while [[ $# -gt 0 ]]; do
    case $1 in
        --sessions) SESSIONS=$2; shift 2 ;;
        --sandboxes) SANDBOXES=$2; shift 2 ;;
        --connects) CONNECTS=$2; shift 2 ;;
        --mib) MIB=$2; shift 2 ;;
        --puts) PUTS=$2; shift 2 ;;
        --busy) BUSY=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "private_net_bench.sh: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
done
for v in SESSIONS SANDBOXES CONNECTS MIB PUTS BUSY THREADS ROUNDS; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "private_net_bench.sh: ${v,,} must be a positive integer" >&2; exit 2; }
done
((BUSY < SESSIONS)) || BUSY=$((SESSIONS / 2 > 0 ? SESSIONS / 2 : 1))

DAEMON=$BUILD/sandloomd
for f in "$DAEMON" "$BUILD/sandloom-init"; do
    [[ -x $f ]] || { echo "private_net_bench.sh: $f missing: build first (ninja -C $BUILD)" >&2; exit 2; }
done
[[ $(id -u) = 0 ]] || { echo "private_net_bench.sh: needs root (namespaces, the daemon's sandboxes)" >&2; exit 2; }
DNSMASQ=$(command -v dnsmasq || echo /usr/sbin/dnsmasq)
for tool in ip nft "$DNSMASQ"; do
    command -v "$tool" >/dev/null || { echo "private_net_bench.sh: $tool missing" >&2; exit 2; }
done
# The interpreter itself, not a version manager's shim (a shim costs ~0.3 s a call).
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) ||
    { echo "private_net_bench.sh: needs python3" >&2; exit 2; }
# The host's TCP client runs on the interpreter the sandboxes see (/usr).
HOST_PY=/usr/bin/python3
[[ -x $HOST_PY ]] || HOST_PY=$PY

# A uid range of its own, outside the daemons' default (20000-59999), the
# test daemons' blocks (100000-199999), api_bench's and reaper_bench's:
# sandbox cgroups are named by uid and the startup sweep kills by uid.
# 340000-359999 unless a run needs more; every sb-<uid> cgroup of the range
# the daemons leave behind is removed on the way out.
UID_START=340000
UID_END=$((UID_START + (SESSIONS + SANDBOXES + 1000 > 19999 ? SESSIONS + SANDBOXES + 1000 : 19999)))
# The test internet: 198.51.100.0/24 (TEST-NET-2; this host uses the other two).
NET_GW=198.51.100.1 NET_SRV=198.51.100.10
SINK_PORT=5001 ACCEPT_PORT=5002
N=$(($$ % 1000))
TNS=slt-pnb-$N
TIF=slt-pnbh$N

STATE=$(mktemp -d /tmp/sandloom-privnetbench-XXXXXX)
chmod 0711 "$STATE" # like /var/lib: traversable by the sandbox uids, not listable
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
PID=
CG=
CHILD=
SRV_PID=
DNS_PID=
NS_MADE=
PRIV_CIDR=

stop() { # the current daemon: SIGTERM, then SIGKILL after 120 s
    if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
        kill -TERM "$PID"
        for _ in $(seq 1200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$PID" 2>/dev/null; then
            echo "private_net_bench.sh: sandloomd $PID did not stop in 120 s: SIGKILL" >&2
            kill -KILL "$PID"
        fi
        wait "$PID" 2>/dev/null || true
    fi
    PID=
}
leftovers() { # what a private daemon on $PRIV_CIDR left behind, removed; prints a count
    local n=0 tag link
    [[ -n $PRIV_CIDR ]] || { echo 0; return; }
    tag=$(fnv_tag "$PRIV_CIDR")
    if nft list table inet "sandloom_$tag" >/dev/null 2>&1; then
        nft delete table inet "sandloom_$tag" 2>/dev/null || true
        n=$((n + 1))
    fi
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^sl${tag}[0-9]" || true); do
        ip link del "$link" 2>/dev/null || true
        n=$((n + 1))
    done
    echo "$n"
}
# The memory cgroup this shell is in (v1's memory hierarchy, else v2's); the
# bench puts each daemon in a child of its own there (slt-pnb-<n>-<mode>), so
# row 2 can also read what that daemon and its sessions are charged,
# whatever else this machine runs.
CG_BASE=
if [[ -d /sys/fs/cgroup/memory ]]; then
    own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
    [[ -n $own ]] && CG_BASE=/sys/fs/cgroup/memory${own%/}
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    own=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
    CG_BASE=/sys/fs/cgroup${own%/}
fi
rm_cgroup_tree() { # $1: a cgroup directory of the bench's, with what the daemon made below it
    [[ -n $1 && -d $1 ]] || return 0
    find "$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
}
rm_sandbox_cgroups() { # the daemons' sb-<uid> cgroups of the bench's uid range, in every hierarchy
    local ctl path dir d u
    while IFS=: read -r _ ctl path; do
        for dir in /sys/fs/cgroup/"${ctl:-}"*"${path%/}"/sandloom-sandboxes /sys/fs/cgroup"${path%/}"/sandloom-sandboxes; do
            [[ -d $dir ]] || continue
            for d in "$dir"/sb-*; do
                u=${d##*/sb-}
                [[ $u =~ ^[0-9]+$ ]] && ((u >= UID_START && u <= UID_END)) && rm_cgroup_tree "$d"
            done
        done
    done </proc/self/cgroup
}
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [[ -n $CHILD ]] && kill -0 "$CHILD" 2>/dev/null; then
        kill -TERM "$CHILD" 2>/dev/null || true
        wait "$CHILD" 2>/dev/null || true
    fi
    stop
    rm_cgroup_tree "$CG"
    rm_sandbox_cgroups
    [[ -n $PRIV_CIDR ]] && leftovers >/dev/null
    for p in $SRV_PID $DNS_PID; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [[ -n $NS_MADE ]]; then
        ip link del "$TIF" 2>/dev/null || true
        ip netns del "$TNS" 2>/dev/null || true
    fi
    rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fnv_tag() { # the daemon's tag of a subnet (net/privnet.c: FNV-1a of its text, low 16 bits)
    "$PY" -c '
import sys
h = 2166136261
for b in sys.argv[1].encode():
    h = ((h ^ b) * 16777619) & 0xffffffff
print("%04x" % (h & 0xffff))' "$1"
}

in_use() { # does this host have an address, or a route at least /${2:-0} long, in $1?
    "$PY" -c '
import ipaddress, subprocess, sys
net, longest = ipaddress.ip_network(sys.argv[1]), int(sys.argv[2])
for line in subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout.splitlines():
    if ipaddress.ip_interface(line.split()[3]).ip in net: sys.exit(0)
for line in subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout.splitlines():
    d = line.split()[0]
    if d == "default": continue
    d = ipaddress.ip_network(d, strict=False)
    if d.prefixlen >= longest and d.overlaps(net): sys.exit(0)
sys.exit(1)' "$1" "${2:-0}"
}

health() {
    local answer
    { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
    printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
    answer=$(timeout 2 cat <&3 || true)
    exec 3>&-
    [[ $answer == *$'\r\n\r\nok' ]]
}

port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# start_daemon MODE VAR=value...: a daemon on $STATE/MODE; sets PID and PORT.
start_daemon() {
    local mode=$1 dir=$STATE/$1
    shift
    mkdir -p "$dir"
    chmod 0711 "$dir"
    CG=
    if [[ -n $CG_BASE ]] && mkdir "$CG_BASE/slt-pnb-$N-$mode" 2>/dev/null; then
        CG=$CG_BASE/slt-pnb-$N-$mode
        if [[ ! -f $CG/memory.usage_in_bytes && ! -f $CG/memory.current ]]; then
            rmdir "$CG"
            CG=
        fi
    fi
    [[ -n $CG ]] || echo "private_net_bench.sh: no memory cgroup of its own for the $mode daemon: host-wide figures only" >&2
    for attempt in 1 2 3 4 5; do
        PORT=$((20000 + RANDOM % 30000))
        port_free "$PORT" || continue
        # The daemon starts in its memory cgroup: sh writes its own pid there,
        # then execs it (the inner shell's own $0, $$ and $@).
        # shellcheck disable=SC2016
        env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            SANDBOX_HOST=127.0.0.1 SANDBOX_PORT="$PORT" SANDBOX_ADVERTISE_HOST=127.0.0.1 \
            SANDBOX_LOCAL_ROOT="$dir/sandboxes" \
            SANDBOX_DATABASE_URL="sqlite:///$dir/sandloom.db" \
            SANDBOX_STARTUP_LOG_PATH="$dir/startup.log" \
            SANDBOX_INTERNAL_TOKEN="$TOKEN" \
            SANDBOX_UID_START=$UID_START SANDBOX_UID_END=$UID_END \
            SANDBOX_WORKER_CAPACITY=100000 \
            SANDBOX_SESSION_IDLE_SECONDS=3600 SANDBOX_IDLE_TTL_SECONDS=86400 \
            SANDBOX_NETWORK_MODE="$mode" "$@" \
            setsid /bin/sh -c '[ -z "$0" ] || echo $$ >"$0/cgroup.procs" || exit 99; exec "$@"' "$CG" \
            "$DAEMON" </dev/null >"$dir/daemon.stdout" 2>"$dir/daemon.stderr" &
        PID=$!
        for _ in $(seq 300); do
            kill -0 "$PID" 2>/dev/null || break
            health "$PORT" && break
            sleep 0.1
        done
        if kill -0 "$PID" 2>/dev/null && health "$PORT"; then
            return 0
        fi
        echo "private_net_bench.sh: sandloomd ($mode) did not come up on port $PORT (attempt $attempt):" >&2
        tail -n 20 "$dir/daemon.stderr" >&2 || true
        stop
    done
    echo "private_net_bench.sh: no $mode daemon, giving up" >&2
    exit 2
}

# ---- the scripts -----------------------------------------------------------
# The test server (in the namespace): a sink (reads to EOF, answers one byte)
# and an accept-and-close server.
cat >"$STATE/server.py" <<'EOF'
import socket, sys, threading
addr, sink_port, accept_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def listener(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(1024)
    return s
def drain(c):
    buf = bytearray(1 << 20)
    try:
        while c.recv_into(buf):
            pass
        c.sendall(b"k")
    finally:
        c.close()
def sink(s):
    while True:
        c, _ = s.accept()
        threading.Thread(target=drain, args=(c,), daemon=True).start()
def accept_close(s):
    while True:
        c, _ = s.accept()
        c.close()
a, b = listener(sink_port), listener(accept_port)
threading.Thread(target=sink, args=(a,), daemon=True).start()
print("ready", flush=True)
accept_close(b)
EOF
# The TCP client: the same file on the host and in the sandboxes.
cat >"$STATE/tcp_client.py" <<'EOF'
# One round: warm-up, n connects (accept-and-close port), mib MiB to the sink.
import json, socket, statistics, sys, time
host, sink, acc, n, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
buf = b"x" * (1 << 20)
def send(size):
    c = socket.create_connection((host, sink), 5)
    t = time.perf_counter()
    for _ in range(size):
        c.sendall(buf)
    c.shutdown(socket.SHUT_WR)
    assert c.recv(1) == b"k"
    el = time.perf_counter() - t
    c.close()
    return size / el
for _ in range(20):  # warm-up: neighbours, conntrack, caches
    socket.create_connection((host, acc), 5).close()
send(max(1, mib // 8))
lat = []
for _ in range(n):
    t = time.perf_counter()
    c = socket.create_connection((host, acc), 5)
    lat.append((time.perf_counter() - t) * 1e6)
    c.close()
lat.sort()
print(json.dumps({"connect_us": statistics.median(lat), "connect_p90_us": lat[int(len(lat) * 0.9)],
                  "mib_s": send(mib), "python": sys.version.split()[0]}))
EOF
# The driver: one run per daemon, results as JSON; and the report.
cat >"$STATE/driver.py" <<'EOF'
import base64, concurrent.futures, http.client, json, os, statistics, subprocess, sys, threading, time, uuid

API = "/api/v1/sandboxes"


class Failed(Exception):
    pass


class Client:
    def __init__(self, port, token):
        self.port, self.token, self.local = port, token, threading.local()

    def req(self, method, path, body=None, timeout=600):
        data = json.dumps(body).encode() if body is not None else None
        hdr = {"Authorization": "Bearer " + self.token}
        if data is not None:
            hdr["Content-Type"] = "application/json"
        for attempt in (0, 1):
            c = getattr(self.local, "c", None)
            if c is None:
                c = self.local.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                c.request(method, path, body=data, headers=hdr)
                r = c.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, OSError):
                # A keep-alive connection the server closed while idle.
                c.close()
                self.local.c = None
                if attempt:
                    raise
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = raw.decode(errors="replace")
        return r.status, doc


def check(cond, what, doc=None):
    if not cond:
        raise Failed(f"{what}: {json.dumps(doc)[:600] if doc is not None else ''}")


class Sandbox:
    seq = 0
    lock = threading.Lock()

    def __init__(self, api, tag, egress=None):
        with Sandbox.lock:
            Sandbox.seq += 1
            n = Sandbox.seq
        self.api = api
        self.id = f"pnb-{tag}-{n}-{uuid.uuid4().hex[:8]}"
        st, doc = api.req("POST", f"{API}/resolve",
                          {"sandbox_id": self.id, "workspace_scope_id": "pnb-scope"})
        check(st == 200, f"resolve {self.id}: {st}", doc)
        self.gen = doc["generation"]
        body = {"generation": self.gen}
        if egress is not None:
            body["egress"] = egress
        st, doc = api.req("POST", f"{API}/{self.id}", body)
        check(st in (200, 201), f"create {self.id}: {st}", doc)

    def exec(self, argv, scope="pnb", timeout=None):
        body = {"exec_id": "x-" + uuid.uuid4().hex, "generation": self.gen, "argv": argv,
                "background": False, "exec_scope": scope}
        if timeout:
            body["timeout_seconds"] = timeout
        t = time.perf_counter()
        st, doc = self.api.req("POST", f"{API}/{self.id}/exec", body)
        dt = (time.perf_counter() - t) * 1000
        check(st == 200 and isinstance(doc, dict) and doc.get("exit_code") == 0,
              f"exec {argv[:2]} in {self.id}: {st}", doc)
        return dt, doc

    def write(self, path, content):
        st, doc = self.api.req("PUT", f"{API}/{self.id}/files", {
            "generation": self.gen, "path": path,
            "content_base64": base64.b64encode(content).decode()})
        check(st == 200, f"write {path}: {st}", doc)

    def network(self):
        st, doc = self.api.req("GET", f"{API}/{self.id}/network")
        check(st == 200, f"GET network: {st}", doc)
        return doc

    def set_egress(self, egress):
        t = time.perf_counter()
        st, doc = self.api.req("PUT", f"{API}/{self.id}/network",
                               {"generation": self.gen, "egress": egress})
        dt = (time.perf_counter() - t) * 1000
        check(st == 200 and isinstance(doc, dict) and doc.get("state") == "connected",
              f"PUT network: {st}", doc)
        return dt

    def release(self):
        st, doc = self.api.req("DELETE", f"{API}/{self.id}")
        check(st in (200, 202, 204), f"release {self.id}: {st}", doc)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def used_kib():
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            m[k] = int(v.split()[0])
    return m["MemTotal"] - m["MemAvailable"]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memcg_kib(path):
    """(total, kernel) KiB charged to the daemon's own memory cgroup (its
    sessions' cgroups are below it), or (None, None)."""
    if not path:
        return None, None
    try:
        if os.path.exists(os.path.join(path, "memory.usage_in_bytes")):  # v1
            total = int(open(os.path.join(path, "memory.usage_in_bytes")).read())
            kmem = int(open(os.path.join(path, "memory.kmem.usage_in_bytes")).read())
        else:  # v2
            total = int(open(os.path.join(path, "memory.current")).read())
            stat = dict(l.split() for l in open(os.path.join(path, "memory.stat")))
            kmem = int(stat.get("kernel", 0))
        return total / 1024, kmem / 1024
    except (OSError, ValueError):
        return None, None


def settle_memory(timeout=20):
    """Until Used moves less than 2 MiB over 2 s (pages being freed, dying
    namespaces going), at most timeout s."""
    deadline, last = time.time() + timeout, used_kib()
    while time.time() < deadline:
        time.sleep(2)
        now = used_kib()
        if abs(now - last) < 2048:
            return
        last = now


def links(prefix):
    if not prefix:
        return 0
    return sum(1 for n in os.listdir("/sys/class/net") if n.startswith(prefix))


def log(*a):
    print("  ", *a, file=sys.stderr, flush=True)


def phase_start(api, mode, n):
    """Row 1: n fresh sandboxes, first exec (session start) and a warm one."""
    first, warm, first_srv, warm_srv = [], [], [], []
    made = []
    for _ in range(n):
        sb = Sandbox(api, mode[:3] + "s")
        made.append(sb)
        dt, doc = sb.exec(["true"])
        first.append(dt)
        first_srv.append(doc.get("duration_ms"))
        dt, doc = sb.exec(["true"])
        warm.append(dt)
        warm_srv.append(doc.get("duration_ms"))
    for sb in made:
        sb.release()
    out = {"first_ms": statistics.median(first), "first_p90_ms": pct(first, 0.9),
           "warm_ms": statistics.median(warm), "warm_p90_ms": pct(warm, 0.9)}
    srv = [x for x in first_srv if isinstance(x, (int, float))]
    if srv:
        out["first_srv_ms"] = statistics.median(srv)
    srv = [x for x in warm_srv if isinstance(x, (int, float))]
    if srv:
        out["warm_srv_ms"] = statistics.median(srv)
    log(f"{mode}: first exec {out['first_ms']:.1f} ms, warm {out['warm_ms']:.1f} ms (medians of {n})")
    return out


def summarize(rounds):
    return {"connect_us": statistics.median(r["connect_us"] for r in rounds),
            "connect_p90_us": statistics.median(r["connect_p90_us"] for r in rounds),
            "mib_s": statistics.median(r["mib_s"] for r in rounds),
            "mib_s_all": [round(r["mib_s"]) for r in rounds],
            "connect_us_all": [round(r["connect_us"]) for r in rounds],
            "python": rounds[0]["python"], "rounds": len(rounds)}


def phase_tcp(api, mode, a):
    """Row 3: the TCP client in a sandbox of this mode and on the host, in
    alternating rounds (host first), so both see the same machine."""
    sb = Sandbox(api, mode[:3] + "t")
    with open(a["client"], "rb") as f:
        sb.write("/workspace/tcp_client.py", f.read())
    argv = [a["server"], str(a["sink_port"]), str(a["accept_port"]), str(a["connects"]), str(a["mib"])]
    host, inside = [], []
    for _ in range(a["rounds"]):
        out = subprocess.run([a["host_py"], a["client"], *argv], check=True, capture_output=True,
                             text=True).stdout
        host.append(json.loads(out))
        _, doc = sb.exec(["python3", "/workspace/tcp_client.py", *argv], scope="tcp", timeout=600)
        inside.append(json.loads(doc["stdout"]))
    h, r = summarize(host), summarize(inside)
    log(f"{mode} sandbox: connect {r['connect_us']:.0f} us, {r['mib_s']:.0f} MiB/s; "
        f"host beside it: {h['connect_us']:.0f} us, {h['mib_s']:.0f} MiB/s")
    return sb, r, h


POLICIES = [{"default": "allow"}, None]


def phase_policy(sb, puts, label):
    """Row 4: puts policy updates on sb's running session, alternating."""
    times = []
    for i in range(puts):
        times.append(sb.set_egress(POLICIES[i % 2]))
    sb.set_egress(POLICIES[0])  # back to open, for whatever comes next
    r = {"median_ms": statistics.median(times), "p90_ms": pct(times, 0.9), "max_ms": max(times),
         "puts": puts}
    log(f"policy updates, {label}: median {r['median_ms']:.2f} ms, p90 {r['p90_ms']:.2f} ms")
    return r


def start_sessions(api, mode, count, threads):
    def one(_):
        sb = Sandbox(api, mode[:3] + "m")
        sb.exec(["true"])
        return sb
    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        made = list(pool.map(one, range(count)))
    return made, time.perf_counter() - t


def settle(prefix, want, timeout=30):
    """Until the daemon's links number `want` (private mode), then a moment."""
    deadline = time.time() + timeout
    while prefix and links(prefix) != want and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(2)


def run(a):
    api = Client(a["port"], a["token"])
    mode, pid, prefix, cg = a["mode"], a["pid"], a.get("prefix") or "", a.get("memcg") or ""
    res = {"mode": mode}
    res["start"] = phase_start(api, mode, a["sandboxes"])
    settle(prefix, 0)
    if mode == "host":
        _, res["tcp_sandbox"], res["tcp_host"] = phase_tcp(api, mode, a)
        return res
    tcp_sb = None
    if mode == "private":
        tcp_sb, res["tcp_sandbox"], res["tcp_host"] = phase_tcp(api, mode, a)
        view = tcp_sb.network()
        check(view.get("state") == "connected", "the tcp sandbox's network", view)
        res["address"] = view.get("address")
        # The second policy: nothing but the test server.
        POLICIES[1] = {"default": "deny", "allow": [a["server"]]}
        res["policy"] = [dict(phase_policy(tcp_sb, a["puts"], "alone"), others=0)]
    # Row 2 (and row 4 with others alive).
    base_links = 1 if tcp_sb else 0
    settle(prefix, base_links)
    settle_memory()
    u0, r0, (c0, k0) = used_kib(), rss_kib(pid), memcg_kib(cg)
    n, busy = a["sessions"], a["busy"]
    made, el = [], 0.0
    steps = [busy, n - busy] if mode == "private" else [n]
    for step in steps:
        m, dt = start_sessions(api, mode, step, a["threads"])
        made += m
        el += dt
        log(f"{mode}: {len(made)} idle sessions ({len(made) / el:.1f}/s)")
        if mode == "private":
            got = links(prefix) - base_links
            check(got == len(made), f"{got} sandbox links for {len(made)} sessions")
            res["policy"].append(dict(phase_policy(tcp_sb, a["puts"], f"{len(made)} others alive"),
                                      others=len(made)))
    time.sleep(2)
    u1, r1, (c1, k1) = used_kib(), rss_kib(pid), memcg_kib(cg)
    mem = {"sessions": n, "used_kib": (u1 - u0) / n, "rss_kib": (r1 - r0) / n, "rate": n / el}
    if c0 is not None and c1 is not None:
        mem["memcg_kib"], mem["kmem_kib"] = (c1 - c0) / n, (k1 - k0) / n
    res["memory"] = mem
    log(f"{mode}: per session: {mem['used_kib']:.0f} KiB host Used, {mem['rss_kib']:.1f} KiB daemon RSS"
        + (f", {mem['memcg_kib']:.0f} KiB its memory cgroup ({mem['kmem_kib']:.0f} kernel)"
           if "memcg_kib" in mem else ""))
    # How long the sessions take to go, released one by one (row 2's extra).
    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(a["threads"]) as pool:
        list(pool.map(lambda sb: sb.release(), made))
    mem["release_ms"] = (time.perf_counter() - t) * 1000 / n
    log(f"{mode}: released {n} in {(time.perf_counter() - t):.1f} s")
    return res


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def ratio(a, b):
    return None if a is None or not b else a / b


def report(d):
    host, iso, priv = d.get("host", {}), d.get("isolated", {}), d.get("private", {})
    meta = d["meta"]
    print()
    print(f"private_net_bench: {meta['cores']} cores, kernel {meta['kernel']}, "
          f"{meta['sandboxes']} sandboxes a mode (row 1), {meta['sessions']} idle sessions (row 2), "
          f"python {priv.get('tcp_sandbox', {}).get('python', '?')}")
    print()
    print("1. session start: first exec of `true` (starts the session) and a warm one, ms, client side"
          " (server: the answer's duration_ms)")
    w = "| {:<10} | {:>13} | {:>9} | {:>12} | {:>8} | {:>14} |"
    print(w.format("mode", "first median", "first p90", "warm median", "warm p90", "first: server"))
    print("|" + "|".join("-" * (k + 2) for k in (10, 13, 9, 12, 8, 14)) + "|")
    for name, m in (("host", host), ("isolated", iso), ("private", priv)):
        s = m.get("start", {})
        print(w.format(name, fmt(s.get("first_ms"), ".1f"), fmt(s.get("first_p90_ms"), ".1f"),
                       fmt(s.get("warm_ms"), ".1f"), fmt(s.get("warm_p90_ms"), ".1f"),
                       fmt(s.get("first_srv_ms"), ".1f")))
    pf = priv.get("start", {}).get("first_ms")
    r_iso = ratio(pf, iso.get("start", {}).get("first_ms"))
    r_host = ratio(pf, host.get("start", {}).get("first_ms"))
    print(f"   first exec private/isolated: {fmt(r_iso, '.2f')}x   private/host: {fmt(r_host, '.2f')}x"
          f"   (private - isolated: {fmt(None if r_iso is None else pf - iso['start']['first_ms'], '.1f')} ms)")
    print()
    print("2. memory per idle session: after - before, / sessions, KiB (host Used = MemTotal - MemAvailable,")
    print("   all of this machine; memory cgroup = the daemon's own, its sessions' below it, kernel part apart)")
    w = "| {:<20} | {:>8} | {:>9} | {:>11} | {:>11} | {:>11} | {:>10} | {:>12} |"
    print(w.format("mode", "sessions", "host Used", "daemon RSS", "memory cg", "of it kernel",
                   "started/s", "release ms/sb"))
    print("|" + "|".join("-" * (k + 2) for k in (20, 8, 9, 11, 11, 12, 10, 13)) + "|")
    mi, mp = iso.get("memory", {}), priv.get("memory", {})
    for name, m in (("isolated", mi), ("private", mp)):
        print(w.format(name, m.get("sessions", "-"), fmt(m.get("used_kib"), ".0f"),
                       fmt(m.get("rss_kib"), ".1f"), fmt(m.get("memcg_kib"), ".0f"),
                       fmt(m.get("kmem_kib"), ".0f"), fmt(m.get("rate"), ".1f"),
                       fmt(m.get("release_ms"), ".1f")))
    diff = lambda k: None if mi.get(k) is None or mp.get(k) is None else mp[k] - mi[k]
    du, dr, dc, dk = diff("used_kib"), diff("rss_kib"), diff("memcg_kib"), diff("kmem_kib")
    print(w.format("private - isolated", "", fmt(du, ".0f"), fmt(dr, ".1f"), fmt(dc, ".0f"),
                   fmt(dk, ".0f"), "", fmt(diff("release_ms"), ".1f")))
    print()
    print(f"3. TCP to {meta['server']} (the bench's test namespace): connect latency (median of "
          f"{meta['connects']}), throughput ({meta['mib']} MiB); median of {meta['rounds']} round(s), "
          "each host round just before the sandbox's")
    w = "| {:<34} | {:>10} | {:>14} | {:>8} | {:>10} | {:>10} |"
    print(w.format("client", "connect us", "connect p90 us", "MiB/s", "lat / host", "tput/host"))
    print("|" + "|".join("-" * (k + 2) for k in (34, 10, 14, 8, 10, 10)) + "|")
    rows = (("host (root namespace)", priv.get("tcp_host", {}), priv.get("tcp_host", {})),
            ("private-mode sandbox", priv.get("tcp_sandbox", {}), priv.get("tcp_host", {})),
            ("host, beside the host-mode run", host.get("tcp_host", {}), host.get("tcp_host", {})),
            ("host-mode sandbox", host.get("tcp_sandbox", {}), host.get("tcp_host", {})))
    for name, m, base in rows:
        print(w.format(name, fmt(m.get("connect_us"), ".0f"), fmt(m.get("connect_p90_us"), ".0f"),
                       fmt(m.get("mib_s"), ".0f"),
                       fmt(ratio(m.get("connect_us"), base.get("connect_us")), ".2f"),
                       fmt(ratio(m.get("mib_s"), base.get("mib_s")), ".2f")))
    hc = priv.get("tcp_host", {})
    hl, ht = hc.get("connect_us"), hc.get("mib_s")
    print()
    print(f"4. policy update: PUT /network alternating allow-all / deny-but-{meta['server']}, "
          f"ms (client side, {meta['puts']} each)")
    w = "| {:<30} | {:>8} | {:>7} | {:>7} | {:>14} |"
    print(w.format("live private sessions", "median", "p90", "max", "median / alone"))
    print("|" + "|".join("-" * (k + 2) for k in (30, 8, 7, 7, 14)) + "|")
    pol = priv.get("policy", [])
    alone = pol[0]["median_ms"] if pol else None
    for p in pol:
        name = "its own only" if p["others"] == 0 else f"its own + {p['others']} others"
        print(w.format(name, fmt(p["median_ms"], ".2f"), fmt(p["p90_ms"], ".2f"),
                       fmt(p["max_ms"], ".2f"), fmt(ratio(p["median_ms"], alone), ".2f")))
    print()
    ps = priv.get("tcp_sandbox", {})
    rt, rl = ratio(ps.get("mib_s"), ht), ratio(ps.get("connect_us"), hl)
    ok = lambda c: "met" if c else "NOT met"
    print("goals:")
    print(f"  throughput private >= 50% of host: {fmt(None if rt is None else rt * 100, '.0f')}% "
          f"-> {ok(rt is not None and rt >= 0.5)}")
    print(f"  connect latency private <= 2x host: {fmt(rl, '.2f')}x -> {ok(rl is not None and rl <= 2)}")
    if len(pol) > 1:
        worst = max(p["median_ms"] for p in pol[1:])
        print(f"  (not a goal) policy update with {pol[-1]['others']} others alive: "
              f"{fmt(ratio(worst, alone), '.2f')}x its time alone")
    if du is not None:
        print(f"  (not a goal) the network of one idle session: {du:.0f} KiB host Used, "
              f"{dr:.1f} KiB daemon RSS" + (f", {dc:.0f} KiB memory cgroup" if dc is not None else ""))


if __name__ == "__main__":
    try:
        if sys.argv[1] == "run":
            a = json.loads(sys.argv[2])
            json.dump(run(a), open(a["out"], "w"))
        elif sys.argv[1] == "report":
            d = {}
            for p in sys.argv[3:]:
                d[os.path.basename(p)[:-5]] = json.load(open(p))
            d["meta"] = json.loads(sys.argv[2])
            report(d)
    except Failed as e:
        print(f"private_net_bench: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
EOF

# ---- the test internet -----------------------------------------------------
# 198.51.100.1/24 here, .10 there; when something else on this host holds
# 198.51.100.0/24 already (a test run's own test internet), a point-to-point
# pair of /32s at the top of the range instead (.201 here, .200 there), whose
# routes are more specific and touch none of the addresses that run uses.
ip netns del "$TNS" 2>/dev/null || true
ip link del "$TIF" 2>/dev/null || true
if in_use 198.51.100.0/24; then
    NET_GW=198.51.100.201 NET_SRV=198.51.100.200
    if in_use 198.51.100.192/27 25; then
        echo "private_net_bench.sh: 198.51.100.0/24 is in use on this host, .192/27 too: no test namespace" >&2
        exit 2
    fi
    echo "private_net_bench: 198.51.100.0/24 is in use on this host: the test server is $NET_SRV (a /32)" >&2
    GW_ADDR=(local "$NET_GW/32" peer "$NET_SRV/32") SRV_ADDR=(local "$NET_SRV/32" peer "$NET_GW/32")
else
    GW_ADDR=("$NET_GW/24") SRV_ADDR=("$NET_SRV/24")
fi
NS_MADE=1
ip netns add "$TNS"
ip link add "$TIF" type veth peer name eth0 netns "$TNS"
ip addr add "${GW_ADDR[@]}" dev "$TIF"
ip link set "$TIF" up
ip -n "$TNS" link set lo up
ip -n "$TNS" link set eth0 up
ip -n "$TNS" addr add "${SRV_ADDR[@]}" dev eth0
ip -n "$TNS" route add default via "$NET_GW"
exec {srv_out}< <(exec ip netns exec "$TNS" "$HOST_PY" "$STATE/server.py" "$NET_SRV" "$SINK_PORT" "$ACCEPT_PORT" 2>"$STATE/server.stderr")
SRV_PID=$!
line=
read -r -t 10 line <&"$srv_out" || true
[[ $line == ready ]] ||
    { echo "private_net_bench.sh: the test server did not start:" >&2; cat "$STATE/server.stderr" >&2; exit 2; }
DNS_PORT=$("$PY" -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "$NET_SRV server.test" >"$STATE/hosts"
"$DNSMASQ" --no-daemon --port "$DNS_PORT" --listen-address=127.0.0.1 --bind-interfaces --no-resolv \
    --no-hosts --addn-hosts "$STATE/hosts" --local-ttl=1 --pid-file= --log-facility=- \
    >/dev/null 2>"$STATE/dnsmasq.stderr" &
DNS_PID=$!
sleep 0.3
kill -0 "$DNS_PID" 2>/dev/null || { echo "private_net_bench.sh: dnsmasq did not start:" >&2; cat "$STATE/dnsmasq.stderr" >&2; exit 2; }

# A free /16 of 10.2xx for the private daemon (the daemon refuses one that
# overlaps a route of this host).
for b in 252 253 254 251 250 249 248 247 246 245; do
    in_use "10.$b.0.0/16" || { PRIV_CIDR=10.$b.0.0/16; break; }
done
[[ -n $PRIV_CIDR ]] || { echo "private_net_bench.sh: no free 10.2xx.0.0/16" >&2; exit 2; }
PREFIX=sl$(fnv_tag "$PRIV_CIDR")

echo "private_net_bench: test namespace $TNS ($NET_SRV), dnsmasq 127.0.0.1:$DNS_PORT," \
     "private subnet $PRIV_CIDR (links $PREFIX*), state $STATE" >&2

# ---- the runs ----------------------------------------------------------------
args() { # the driver's arguments for mode $1
    "$PY" -c 'import json, sys; print(json.dumps(dict(zip(sys.argv[1::2], sys.argv[2::2]))))' \
        mode "$1" out "$STATE/$1.json" client "$STATE/tcp_client.py" server "$NET_SRV" prefix "${2:-}" \
        token "$TOKEN" memcg "$CG" host_py "$HOST_PY" |
        "$PY" -c '
import json, sys
a = json.load(sys.stdin)
for k, v in zip(sys.argv[1::2], sys.argv[2::2]):
    a[k] = int(v)
print(json.dumps(a))' port "$PORT" pid "$PID" sandboxes "$SANDBOXES" sessions "$SESSIONS" busy "$BUSY" \
        threads "$THREADS" puts "$PUTS" connects "$CONNECTS" mib "$MIB" rounds "$ROUNDS" sink_port "$SINK_PORT" accept_port "$ACCEPT_PORT"
}

rc=0
run_mode() { # $1 mode, then the daemon's extra settings
    local mode=$1 t0 t1
    shift
    echo "== $mode" >&2
    start_daemon "$mode" "$@"
    local prefix=
    [[ $mode == private ]] && prefix=$PREFIX
    # In the background and waited for: a signal to this script is acted on
    # at once (the trap), not when the driver is done.
    "$PY" "$STATE/driver.py" run "$(args "$mode" "$prefix")" &
    CHILD=$!
    if ! wait "$CHILD"; then
        rc=1
        echo "--- sandloomd ($mode) stderr (last 20 lines) ---" >&2
        tail -n 20 "$STATE/$mode/daemon.stderr" >&2 || true
    fi
    CHILD=
    t0=$(date +%s%N)
    stop
    t1=$(date +%s%N)
    echo "   $mode: daemon stopped in $(( (t1 - t0) / 1000000 )) ms" >&2
    rm_cgroup_tree "$CG"
    CG=
    rm_sandbox_cgroups
    if [[ $mode == private ]]; then
        local left
        left=$(leftovers)
        ((left == 0)) || echo "   private: the daemon left $left links/tables behind (removed)" >&2
    fi
}

run_mode host
run_mode isolated
run_mode private SANDBOX_PRIVATE_NETWORK_CIDR="$PRIV_CIDR" SANDBOX_DNS_SERVERS="127.0.0.1:$DNS_PORT"

results=()
for m in host isolated private; do
    [[ -s $STATE/$m.json ]] && results+=("$STATE/$m.json")
done
meta=$("$PY" -c 'import json, sys; print(json.dumps(dict(cores=int(sys.argv[1]), kernel=sys.argv[2], sandboxes=int(sys.argv[3]), sessions=int(sys.argv[4]), connects=int(sys.argv[5]), mib=int(sys.argv[6]), puts=int(sys.argv[7]), server=sys.argv[8], rounds=int(sys.argv[9]))))' \
    "$(nproc)" "$(uname -r)" "$SANDBOXES" "$SESSIONS" "$CONNECTS" "$MIB" "$PUTS" "$NET_SRV" "$ROUNDS")
"$PY" "$STATE/driver.py" report "$meta" "${results[@]}"
exit "$rc"
