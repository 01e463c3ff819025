#!/usr/bin/env bash
# The choice behind the private network mode (networking issue, item 1):
# what one sandbox's own network costs, built the two ways the issue names,
# measured in the same run on this machine.
#
#   veth    a veth pair from the sandbox's network namespace onto one worker
#           bridge, addresses and a default route, NAT by nftables on the
#           host: kernel objects only, no process per sandbox
#   pasta   passt's namespace mode (`pasta --config-net`): a user-mode TCP/IP
#           stack process per sandbox, attached to its namespace by a tap
#   slirp   slirp4netns --configure: the same idea, libslirp's stack
#
# For each: setup time of one sandbox's network (median of N; the veth row
# runs its `ip` commands in one `ip -batch` process, the closest a shell gets
# to the netlink calls the service would make), memory per sandbox over N
# live ones (kernel: MemAvailable drop; user-mode: the stacks' RSS too), and
# from inside a namespace to a server on the host side: TCP connect latency
# (median of 200) and throughput (256 MiB), beside the same from the host
# over loopback, the baseline of the same run.
#
#   bench/netns_bench.sh [N]      (root; N sandboxes, default 100)
#
# Installs iproute2, nftables, passt and slirp4netns when missing (Debian).
# Everything it makes is named sl-nb-* and removed on the way out.
set -euo pipefail

N=${1:-100}
[[ $(id -u) = 0 ]] || { echo "netns_bench.sh: needs root (it makes namespaces)" >&2; exit 2; }
need=()
for tool in ip:iproute2 nft:nftables pasta:passt slirp4netns:slirp4netns python3:python3; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool##*:}")
done
if ((${#need[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

BR=sl-nb-br0
NET=10.203 # 10.203.0.1 the bridge, sandboxes from 10.203.1.x
WORK=$(mktemp -d /tmp/sl-nb-XXXXXX)
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for ns in $(ip netns list 2>/dev/null | awk '/^sl-nb-/ {print $1}'); do
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$BR" 2>/dev/null || true
    nft delete table inet sl_nb 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

now_us() { date +%s%6N; }
avail_kib() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# The host side: one bridge with NAT for the veth rows.
ip link add "$BR" type bridge
ip addr add "$NET.0.1/16" dev "$BR"
ip link set "$BR" up
sysctl -qw net.ipv4.ip_forward=1
nft -f - <<EOF
table inet sl_nb {
    chain post { type nat hook postrouting priority srcnat; ip saddr $NET.0.0/16 oifname != "$BR" masquerade; }
}
EOF

veth_setup() { # $1 index: a namespace with its own veth onto the bridge
    local i=$1 ns=sl-nb-v$1 host=sl-nb-h$1
    local a=$((i / 250 + 1)) b=$((i % 250 + 2))
    ip -batch - <<EOF
netns add $ns
link add $host type veth peer name eth0 netns $ns
link set $host master $BR up
netns exec $ns ip addr add $NET.$a.$b/16 dev eth0
netns exec $ns ip link set eth0 up
netns exec $ns ip link set lo up
netns exec $ns ip route add default via $NET.0.1
EOF
}

pasta_setup() { # $1 index: a namespace with pasta attached
    local ns=sl-nb-p$1
    ip netns add "$ns"
    # --runas 0: run as root it would switch to nobody, which cannot enter
    # a namespace root made (the service would give it the sandbox's uid).
    pasta --quiet --config-net --runas 0 --netns "/run/netns/$ns" --pid "$WORK/pasta-$1.pid" \
        >/dev/null 2>&1
    PIDS+=("$(cat "$WORK/pasta-$1.pid")")
}

slirp_setup() { # $1 index: a namespace with slirp4netns attached, until it is ready
    local ns=sl-nb-s$1 fifo=$WORK/slirp-$1.ready
    ip netns add "$ns"
    mkfifo "$fifo"
    # The host's loopback stays reachable through 10.0.2.2 here, so the
    # throughput row has a server to reach (the service would refuse it).
    slirp4netns --configure --mtu=65520 --ready-fd=3 --netns-type=path "/run/netns/$ns" tap0 \
        3>"$fifo" >/dev/null 2>&1 &
    PIDS+=("$!")
    head -c1 "$fifo" >/dev/null
}

rss_kib_of() { # total VmRSS of the pids given
    local total=0 p
    for p in "$@"; do
        [[ -r /proc/$p/status ]] || continue
        total=$((total + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status")))
    done
    echo "$total"
}

row_setup() { # $1 kind: N setups; prints "median_ms kib_per_sandbox"
    local kind=$1 before after t0 i times=() rss=0
    before=$(avail_kib)
    local first=${#PIDS[@]}
    for ((i = 0; i < N; i++)); do
        t0=$(now_us)
        "${kind}_setup" "$i"
        times+=($(($(now_us) - t0)))
    done
    sleep 1
    after=$(avail_kib)
    rss=$(rss_kib_of "${PIDS[@]:$first}")
    local med
    med=$(printf '%s\n' "${times[@]}" | median)
    echo "$(awk -v m="$med" 'BEGIN {printf "%.2f", m / 1000}') $(((before - after) / N)) $((rss / N))"
}

# A TCP server on the host side: echo for connects, a sink for throughput.
cat >"$WORK/server.py" <<'EOF'
import socket, sys, threading
def serve(addr, port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(256)
    def one(c):
        while c.recv(1 << 20):
            pass
        c.close()
    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()
for a in sys.argv[1:]:
    host, port = a.rsplit(":", 1)
    threading.Thread(target=serve, args=(host, int(port)), daemon=True).start()
threading.Event().wait()
EOF
cat >"$WORK/client.py" <<'EOF'
import socket, statistics, sys, time
host, port = sys.argv[1], int(sys.argv[2])
lat = []
for _ in range(200):
    t = time.perf_counter(); c = socket.create_connection((host, port)); lat.append(time.perf_counter() - t); c.close()
c = socket.create_connection((host, port)); buf = b"x" * (1 << 20); t = time.perf_counter()
for _ in range(256):
    c.sendall(buf)
c.shutdown(socket.SHUT_WR); c.recv(1); el = time.perf_counter() - t; c.close()
print(f"{statistics.median(lat) * 1e6:.0f} {256 / el:.0f}")
EOF
python3 "$WORK/server.py" "127.0.0.1:18701" "$NET.0.1:18702" "0.0.0.0:18703" &
PIDS+=("$!")
sleep 0.5

echo "netns_bench: $(nproc) cores, $N sandboxes per row, kernel $(uname -r)"
printf '| %-34s | %9s | %11s | %11s | %10s | %9s |\n' "row" "setup ms" "kernel KiB" "process KiB" "connect us" "MiB/s"
printf '|%s|%s|%s|%s|%s|%s|\n' "------------------------------------" "-----------" "-------------" "-------------" "------------" "-----------"
read -r lat tput < <(python3 "$WORK/client.py" 127.0.0.1 18701)
printf '| %-34s | %9s | %11s | %11s | %10s | %9s |\n' "baseline: host loopback" "-" "-" "-" "$lat" "$tput"

read -r ms kib rss < <(row_setup veth)
read -r lat tput < <(ip netns exec sl-nb-v0 python3 "$WORK/client.py" "$NET.0.1" 18702)
printf '| %-34s | %9s | %11s | %11s | %10s | %9s |\n' "veth onto a bridge, NAT (nft)" "$ms" "$kib" "$rss" "$lat" "$tput"

read -r ms kib rss < <(row_setup pasta)
gw=$(ip netns exec sl-nb-p0 ip route show default | awk '{print $3; exit}')
read -r lat tput < <(ip netns exec sl-nb-p0 python3 "$WORK/client.py" "$gw" 18703)
printf '| %-34s | %9s | %11s | %11s | %10s | %9s |\n' "pasta (passt), a process each" "$ms" "$kib" "$rss" "$lat" "$tput"

read -r ms kib rss < <(row_setup slirp)
read -r lat tput < <(ip netns exec sl-nb-s0 python3 "$WORK/client.py" 10.0.2.2 18703)
printf '| %-34s | %9s | %11s | %11s | %10s | %9s |\n' "slirp4netns, a process each" "$ms" "$kib" "$rss" "$lat" "$tput"

cat <<EOF

- setup ms: median of $N, one sandbox's network made ready (veth: one ip -batch process;
  pasta and slirp4netns: the namespace plus the stack process until it is up).
- kernel KiB: MemAvailable's drop over the row divided by $N (noisy on a shared host);
  process KiB: the user-mode stacks' VmRSS per sandbox (0 for veth: no process).
- connect us / MiB/s: from inside the row's first namespace to a server on the host side
  (veth: the bridge address; pasta and slirp: the host through the stack), beside the
  same from the host over loopback measured in this run.
EOF
