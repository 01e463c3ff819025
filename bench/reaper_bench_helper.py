#!/usr/bin/env python3
"""Helper of bench/reaper_bench.sh (standard library only).

The shell script owns the daemons (start, stop, clean-up); this file does
the rest, one subcommand per step:

  template   against the set-up daemon: resolve + connect + suspend one
             sandbox, so the database holds a route the daemon wrote itself
  prepare    copy the set-up database, drop the template route and insert N
             SUSPENDED routes cloned from it (one transaction), each with a
             workspace directory cloned from the template's; not measured
  owner      rewrite the owner worker id (only when the port had to change)
  measure    watch one daemon from its start (started first; the script
             spawns the daemon once it is ready and hands over the pid):
             VmRSS every 100 ms (10 ms until the maintenance thread
             starts), /healthz every 250 ms
             (one record per maintenance pass), until the scenario is done;
             then check the database; writes a JSON result
  report     one table over all results; exit 1 if anything failed

Timestamps are written as the daemon writes them (src/store/sqlite.c
ts_format: naive UTC "YYYY-MM-DD HH:MM:SS.ffffff"), compared as text.
"""
import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request

ROUTE_TABLE = "agent_sandbox_route"
WORKER_TABLE = "agent_sandbox_worker"
# FLEET.md §2.2 columns holding timestamps (shifted together when cloning).
TS_COLUMNS = ("last_active_at", "generation_started_at", "ready_at", "last_released_at",
              "created_at", "updated_at")
TS_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
SCOPE = "reaper-bench"


# ---- small utilities -------------------------------------------------------

def die(msg, code=2):
    print(f"reaper_bench: {msg}", file=sys.stderr)
    sys.exit(code)


class Http:
    """Keep-alive-free, tiny JSON client; counts failures."""

    def __init__(self, port, token):
        self.base = f"http://127.0.0.1:{port}"
        self.token = token
        self.failures = []

    def call(self, method, path, body=None, timeout=30, record=True):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read().decode()
                return r.status, (json.loads(text) if text.strip().startswith(("{", "[")) else text)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            if record:
                self.failures.append(f"{method} {path}: HTTP {e.code}: {text[:200]}")
            return e.code, None
        except (OSError, ValueError) as e:
            if record:
                self.failures.append(f"{method} {path}: {e}")
            return None, None


def rss_kib(pid):
    """(VmRSS, VmHWM) in KiB, None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = hwm = None
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
            return (rss, hwm) if rss is not None else None
    except OSError:
        return None


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] not in "ZX"
    except OSError:
        return False


def parse_iso(text):
    """ISO-8601 of /healthz (…+00:00) to epoch seconds."""
    return dt.datetime.fromisoformat(text).timestamp()


def file_has(path, needle):
    try:
        with open(path, errors="replace") as f:
            return needle in f.read()
    except OSError:
        return False


# ---- template --------------------------------------------------------------

def cmd_template(a):
    http = Http(a.port, a.token)
    sid = a.sandbox_id
    st, doc = http.call("POST", "/api/v1/sandboxes/resolve",
                        {"sandbox_id": sid, "workspace_scope_id": SCOPE})
    if st != 200 or not isinstance(doc, dict) or doc.get("generation") != 1:
        die(f"resolve of the template sandbox failed: {http.failures or doc}", 1)
    st, doc = http.call("POST", f"/api/v1/sandboxes/{sid}", {"generation": 1})
    if st != 200 or doc.get("status") != "READY":
        die(f"connect of the template sandbox failed: {http.failures or doc}", 1)
    st, doc = http.call("POST", f"/api/v1/sandboxes/{sid}/suspend", {"generation": 1})
    if st != 200 or doc.get("status") != "SUSPENDED":
        die(f"suspend of the template sandbox failed: {http.failures or doc}", 1)


# ---- prepare ---------------------------------------------------------------

def clone_tree(src, dst, tmpl_uid, uid):
    """The template's workspace directory for another sandbox: same entries,
    modes and contents; entries the sandbox uid owned go to the new uid."""
    def own(st):
        u = uid if st.st_uid == tmpl_uid else st.st_uid
        g = uid if st.st_gid == tmpl_uid else st.st_gid
        return u, g

    st = os.lstat(src)
    os.mkdir(dst)
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        out = dst if rel == "." else os.path.join(dst, rel)
        for d in dirs:
            s = os.lstat(os.path.join(root, d))
            p = os.path.join(out, d)
            os.mkdir(p)
            os.chmod(p, s.st_mode & 0o7777)
            os.lchown(p, *own(s))
        for fn in files:
            sp = os.path.join(root, fn)
            s = os.lstat(sp)
            p = os.path.join(out, fn)
            if os.path.islink(sp):
                os.symlink(os.readlink(sp), p)
            else:
                shutil.copyfile(sp, p)
                os.chmod(p, s.st_mode & 0o7777)
            os.lchown(p, *own(s))
    os.chmod(dst, st.st_mode & 0o7777)
    os.lchown(dst, *own(st))


def cmd_prepare(a):
    # A consistent copy of the set-up database (the daemon has stopped; the
    # backup API also folds in any WAL content).
    src = sqlite3.connect(f"file:{a.setup_db}?mode=ro", uri=True)
    if os.path.exists(a.db):
        os.unlink(a.db)
    dst = sqlite3.connect(a.db)
    src.backup(dst)
    src.close()
    dst.row_factory = sqlite3.Row
    workers = dst.execute(f"SELECT worker_id FROM {WORKER_TABLE}").fetchall()
    if len(workers) != 1:
        die(f"expected one worker row in the set-up database, found {len(workers)}")
    worker_id = a.worker_id or workers[0]["worker_id"]
    tmpl = dst.execute(f"SELECT * FROM {ROUTE_TABLE} WHERE sandbox_id = ?",
                       (a.template_id,)).fetchone()
    if tmpl is None or tmpl["status"] != "SUSPENDED" or tmpl["worker_id"] != workers[0]["worker_id"]:
        die("the template route is missing or not SUSPENDED on the set-up worker")
    cols = list(tmpl.keys())
    tmpl = dict(tmpl)
    tmpl_uid = tmpl["sandbox_uid"]
    tmpl_dir = os.path.join(a.setup_root, a.template_id)
    if not os.path.isdir(tmpl_dir):
        die(f"the template's workspace directory {tmpl_dir} is missing")
    if a.uid_start + a.n - 1 > a.uid_end:
        die(f"uid range {a.uid_start}-{a.uid_end} cannot hold {a.n} sandboxes")

    # The retention clock (last_active_at of a SUSPENDED route) of route i:
    # idle  suspended between 1 h and ~1 h + n s ago (retention 30 days:
    #       nothing expires);
    # expired  suspended 40 days ago, 1 s apart (retention 1 s: all expire).
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    base = now - (dt.timedelta(hours=1) if a.scenario == "idle" else dt.timedelta(days=40))
    t_suspend = dt.datetime.strptime(tmpl["last_active_at"], TS_FORMAT)

    def shifted(value, delta):
        if value is None:
            return None
        return (dt.datetime.strptime(value, TS_FORMAT) + delta).strftime(TS_FORMAT)

    rows = []
    for i in range(a.n):
        sid = f"rb-{a.scenario}-{i:05d}"
        when = base - dt.timedelta(seconds=a.n - i)
        delta = when - t_suspend
        r = dict(tmpl)
        for c in TS_COLUMNS:
            r[c] = shifted(tmpl[c], delta)
        r["sandbox_id"] = sid
        r["sandbox_uid"] = a.uid_start + i
        r["worker_id"] = worker_id
        rows.append(tuple(r[c] for c in cols))
    placeholders = ", ".join("?" for _ in cols)
    with dst:  # one transaction
        dst.execute(f"DELETE FROM {ROUTE_TABLE} WHERE sandbox_id = ?", (a.template_id,))
        dst.executemany(f"INSERT INTO {ROUTE_TABLE} ({', '.join(cols)}) VALUES ({placeholders})",
                        rows)
    got = dst.execute(f"SELECT COUNT(*) FROM {ROUTE_TABLE} WHERE status = 'SUSPENDED' "
                      "AND worker_id = ?", (worker_id,)).fetchone()[0]
    dst.close()
    if got != a.n:
        die(f"inserted {got} routes, expected {a.n}")

    os.makedirs(a.root, mode=0o755, exist_ok=True)
    for i in range(a.n):
        clone_tree(tmpl_dir, os.path.join(a.root, f"rb-{a.scenario}-{i:05d}"), tmpl_uid,
                   a.uid_start + i)
    print(worker_id)


def cmd_owner(a):
    db = sqlite3.connect(a.db)
    with db:
        db.execute(f"UPDATE {ROUTE_TABLE} SET worker_id = ?", (a.worker_id,))
    db.close()


# ---- measure ---------------------------------------------------------------

class Sampler(threading.Thread):
    """VmRSS of the daemon: every 10 ms until the maintenance thread exists
    (the startup log's "phase=uvicorn" line is written right after it is
    created), then every 100 ms."""

    def __init__(self, pid, startup_log):
        super().__init__(daemon=True)
        self.pid, self.log = pid, startup_log
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.before_first_pass = None  # last sample taken before the thread existed
        self.peak = 0
        self.hwm = None
        self.samples = 0
        self.last = None

    def run(self):
        started = False
        while not self.stop.is_set():
            v = rss_kib(self.pid)
            if v is None:
                break
            if not started:
                # The sample came first: if the line is still absent, the
                # sample predates the maintenance thread.
                if file_has(self.log, "phase=uvicorn"):
                    started = True
                else:
                    self.before_first_pass = v[0]
            with self.lock:
                self.peak = max(self.peak, v[0])
                self.hwm = v[1]
                self.last = v[0]
                self.samples += 1
            self.stop.wait(0.1 if started else 0.01)


def median(xs):
    return statistics.median(xs) if xs else None


def cmd_measure(a):
    # Handshake with the script: ready before the daemon exists, so the
    # first samples of its startup are ours; then its pid and spawn time.
    with open(a.ready_file, "w") as f:
        f.write("ready\n")
    deadline = time.time() + 60
    while not os.path.exists(a.pid_file):
        if time.time() > deadline:
            die("no daemon pid from the script", 2)
        time.sleep(0.002)
    with open(a.pid_file) as f:
        pid, spawned = f.read().split()
    a.pid, a.spawned_at = int(pid), float(spawned)
    http = Http(a.port, a.token)
    res = {"scenario": a.scenario, "n": a.n, "batch": a.batch, "interval_s": a.interval,
           "errors": []}
    sampler = Sampler(a.pid, a.startup_log)
    sampler.start()

    # Up: the listener answers /health.
    deadline = time.time() + a.startup_timeout
    ready_at = None
    while time.time() < deadline:
        if not alive(a.pid):
            print("reaper_bench: the daemon exited during startup", file=sys.stderr)
            sys.exit(3)
        st, body = http.call("GET", "/health", timeout=2, record=False)
        if st == 200 and body == "ok":
            ready_at = time.time()
            break
        time.sleep(0.02)
    if ready_at is None:
        die(f"the daemon did not answer /health within {a.startup_timeout} s", 2)
    res["startup_s"] = ready_at - a.spawned_at
    res["rss_ready_kib"] = sampler.last

    passes = {}  # last_run_at -> record
    level = None
    t_end = time.time() + a.timeout
    quiet_after_done = 0
    all_released_at = None
    while True:
        if not alive(a.pid):
            res["errors"].append("the daemon died while measured")
            break
        st, doc = http.call("GET", "/healthz", timeout=10)
        if st != 200 or not isinstance(doc, dict):
            res["errors"].append(f"/healthz answered {st}")
            break
        w = doc.get("worker", {})
        if w.get("id") != a.worker_id:
            res["errors"].append(f"the daemon is worker {w.get('id')}, the routes {a.worker_id}'s")
            break
        level = w.get("capabilities", {}).get("selected_level", level)
        rs = w.get("orphan_reaper", {})
        at = rs.get("last_run_at")
        if at and at not in passes:
            passes[at] = {
                "at": parse_iso(at),
                "ms": rs.get("last_duration_ms"),
                "released": rs.get("last_released"),
                "released_total": rs.get("released_total"),
                "failures_total": rs.get("failures_total"),
                "already_gone_total": rs.get("already_gone_total"),
            }
            if a.scenario == "expired" and rs.get("released_total") == a.n and all_released_at is None:
                all_released_at = parse_iso(at) + (rs.get("last_duration_ms") or 0) / 1000
            if all_released_at is not None or a.scenario == "idle":
                quiet_after_done += 1
        if a.scenario == "idle" and len(passes) >= a.passes:
            break
        if a.scenario == "expired" and all_released_at is not None and quiet_after_done >= 4:
            break
        if time.time() > t_end:
            res["errors"].append(f"timed out after {a.timeout} s")
            break
        time.sleep(0.25)
    time.sleep(0.15)
    sampler.stop.set()
    sampler.join()

    recs = sorted(passes.values(), key=lambda r: r["at"])
    # Gaps: a pass we did not see shows as a last_run_at step > 1.5 intervals.
    missed = 0
    deltas = []  # released_total steps between passes observed back to back
    for prev, cur in zip(recs, recs[1:]):
        # The next pass starts an interval after the previous one started,
        # or right after it ended when it took longer than that.
        expect = max(a.interval, (prev["ms"] or 0) / 1000)
        gap = cur["at"] - prev["at"]
        if gap > expect + 0.5 * a.interval:
            missed += max(1, round((gap - expect) / a.interval))
        else:
            deltas.append(cur["released_total"] - prev["released_total"])
    if recs and recs[0]["released_total"] == recs[0]["released"]:
        deltas.append(recs[0]["released_total"])  # the first pass since the start
    durations = [r["ms"] for r in recs if r["ms"] is not None]
    releasing = [r for r in recs if (r["released"] or 0) > 0]
    res.update({
        "level": level,
        "passes_seen": len(recs),
        "passes_missed": missed,
        "ms_median": median(durations),
        "ms_max": max(durations) if durations else None,
        "ms_median_releasing": median([r["ms"] for r in releasing]),
        "ms_max_releasing": max((r["ms"] for r in releasing), default=None),
        "releasing_passes": len(releasing),
        "released_per_pass_max": max((r["released"] for r in recs), default=0),
        "released_per_pass_min_full": min((r["released"] for r in releasing), default=0),
        "delta_max": max(deltas, default=None),
        "deltas_seen": len(deltas),
        "released_total": recs[-1]["released_total"] if recs else None,
        "failures_total": recs[-1]["failures_total"] if recs else None,
        "already_gone_total": recs[-1]["already_gone_total"] if recs else None,
        "rss_before_first_pass_kib": sampler.before_first_pass,
        "rss_peak_kib": sampler.peak,
        "vm_hwm_kib": sampler.hwm,
        "rss_samples": sampler.samples,
        "all_released_s": (all_released_at - a.spawned_at) if all_released_at else None,
        "passes": recs,
    })
    if all_released_at:
        after = [r["ms"] for r in recs if r["at"] > all_released_at and r["ms"] is not None]
        res["ms_median_after"] = median(after)
        res["ms_max_after"] = max(after, default=None)
        if releasing:
            res["release_span_s"] = all_released_at - releasing[0]["at"]
    if res["failures_total"]:
        res["errors"].append(f"reaper failures_total = {res['failures_total']}")

    # The database agrees?
    db = sqlite3.connect(f"file:{a.db}?mode=ro", uri=True)
    counts = dict(db.execute(f"SELECT status, COUNT(*) FROM {ROUTE_TABLE} GROUP BY status"))
    reasons = dict(db.execute(f"SELECT last_release_reason, COUNT(*) FROM {ROUTE_TABLE} "
                              "WHERE status = 'RELEASED' GROUP BY last_release_reason"))
    db.close()
    res["db_status"] = counts
    res["db_release_reasons"] = {str(k): v for k, v in reasons.items()}
    dirs_left = sum(1 for e in os.listdir(a.root) if not e.startswith("."))
    res["dirs_left"] = dirs_left
    if a.scenario == "idle":
        if counts != {"SUSPENDED": a.n} or res["released_total"]:
            res["errors"].append(f"idle scenario changed routes: {counts}")
        if dirs_left != a.n:
            res["errors"].append(f"idle scenario: {dirs_left} of {a.n} directories left")
    else:
        if counts != {"RELEASED": a.n} or res["db_release_reasons"] != {"SUSPEND_EXPIRED": a.n}:
            res["errors"].append(f"expired scenario: routes {counts}, reasons {reasons}")
        if res["released_per_pass_max"] > a.batch or (res["delta_max"] or 0) > a.batch:
            res["errors"].append("a pass released more than the batch size")
        if all_released_at is None:
            res["errors"].append("not everything was released")
    res["http_failures"] = http.failures
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    if res["errors"] or http.failures:
        for e in res["errors"] + http.failures:
            print(f"reaper_bench: {a.scenario} n={a.n}: {e}", file=sys.stderr)
        sys.exit(1)


# ---- report ----------------------------------------------------------------

def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def ratio(x, y):
    if x is None or y is None or y == 0:
        return "-"
    return f"{x / y:.2f}x"


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1048576:.1f} GiB"
    except OSError:
        pass
    return (f"{os.cpu_count()} cores ({model}), {mem} RAM, kernel {platform.release()}")


def cmd_report(a):
    runs = {}
    for path in a.results:
        with open(path) as f:
            r = json.load(f)
        runs[(r["scenario"], r["n"])] = r
    small, big = a.small, a.big
    ia, ib = runs.get(("idle", small)), runs.get(("idle", big))
    ea, eb = runs.get(("expired", small)), runs.get(("expired", big))
    any_run = next((r for r in runs.values() if r), {})
    print(f"reaper_bench: {machine()}")
    print(f"state dir on {a.fs}; isolation level {any_run.get('level', '?')}; "
          f"SANDBOX_MAINTENANCE_INTERVAL_SECONDS={any_run.get('interval_s')}, "
          f"SANDBOX_ORPHAN_REAPER_BATCH_SIZE={any_run.get('batch')}")
    print("(a) idle: SUSPENDED routes within retention (2592000 s): passes find nothing to do")
    print("(b) expired: SUSPENDED routes 40 days old, retention 1 s: every route is released "
          "(SUSPEND_EXPIRED)")
    print(f"Every route has a workspace directory cloned from a real suspended sandbox's.\n")

    def kib(k):
        return lambda r: None if r.get(k) is None else r[k] / 1024

    def passes(r):
        return f"{r['passes_seen']} ({r['passes_missed']})"

    # (label, key or function, format, ratio column?)
    def dur(idle_key, expired_key):
        return lambda r: r.get(idle_key if r["scenario"] == "idle" else expired_key)

    # (label, key or function, format, ratio column?)
    rows = [
        ("startup: spawn to /health answering (s)", "startup_s", ".2f", True),
        ("passes observed (missed)", passes, "", False),
        ("pass duration, median (ms) *", dur("ms_median", "ms_median_releasing"), ".2f", True),
        ("pass duration, max (ms) *", dur("ms_max", "ms_max_releasing"), ".2f", True),
        ("releasing passes", "releasing_passes", "d", False),
        ("released in one pass, max (last_released)", "released_per_pass_max", "d", False),
        ("released_total step between passes, max", "delta_max", "d", False),
        ("released_total at the end", "released_total", "d", False),
        ("spawn to all released (s)", "all_released_s", ".1f", True),
        ("first releasing pass start to all released (s)", "release_span_s", ".1f", False),
        ("passes after all released: median (ms)", "ms_median_after", ".2f", True),
        ("VmRSS before the first pass (MiB)", kib("rss_before_first_pass_kib"), ".1f", True),
        ("VmRSS when /health first answered (MiB)", kib("rss_ready_kib"), ".1f", True),
        ("VmRSS peak, 100 ms samples (MiB)", kib("rss_peak_kib"), ".1f", True),
        ("VmHWM at the end (MiB)", kib("vm_hwm_kib"), ".1f", True),
    ]
    w0 = 46
    print(f"| {'figure':<{w0}} | {'(a) ' + str(small):>10} | {'(a) ' + str(big):>10} | "
          f"{'ratio':>7} | {'(b) ' + str(small):>10} | {'(b) ' + str(big):>10} | {'ratio':>7} |")
    print("|" + "-" * (w0 + 2) + "|" + "-----------:|" * 2 + "--------:|" + "-----------:|" * 2
          + "--------:|")
    for name, key, spec, with_ratio in rows:
        vals = []
        for r in (ia, ib, ea, eb):
            if r is None:
                vals.append(None)
            elif callable(key):
                vals.append(key(r))
            else:
                vals.append(r.get(key))
        cells = [v if isinstance(v, str) else fmt(v, spec) for v in vals]
        r1 = ratio(vals[1], vals[0]) if with_ratio else ""
        r2 = ratio(vals[3], vals[2]) if with_ratio else ""
        print(f"| {name:<{w0}} | {cells[0]:>10} | {cells[1]:>10} | {r1:>7} | {cells[2]:>10} | "
              f"{cells[3]:>10} | {r2:>7} |")
    print(f"\nratio = {big} routes against {small} routes, same scenario, same run.")
    print("* (a): every pass observed (each finds nothing); (b): the passes that released routes.")

    failed = False
    for (scen, n), r in sorted(runs.items()):
        errs = r.get("errors", []) + r.get("http_failures", [])
        if errs:
            failed = True
            for e in errs:
                print(f"FAILED: ({'a' if scen == 'idle' else 'b'}) n={n}: {e}")
    for key in (("idle", small), ("idle", big), ("expired", small), ("expired", big)):
        if key not in runs:
            failed = True
            print(f"FAILED: no result for {key[0]} n={key[1]}")
    if eb:
        per = [r["released"] for r in eb["passes"] if r["released"]]
        print(f"(b) {big}: released per pass, in order: "
              + (" ".join(str(x) for x in per[:12]) + (" ..." if len(per) > 12 else "")))
    if not failed:
        print("all requests answered; routes and directories checked in the database and on disk")
    sys.exit(1 if failed else 0)


def main():
    p = argparse.ArgumentParser(prog="reaper_bench_helper.py")
    sub = p.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("template")
    t.add_argument("--port", type=int, required=True)
    t.add_argument("--token", required=True)
    t.add_argument("--sandbox-id", required=True)

    q = sub.add_parser("prepare")
    q.add_argument("--setup-db", required=True)
    q.add_argument("--setup-root", required=True)
    q.add_argument("--template-id", required=True)
    q.add_argument("--db", required=True)
    q.add_argument("--root", required=True)
    q.add_argument("--n", type=int, required=True)
    q.add_argument("--scenario", choices=("idle", "expired"), required=True)
    q.add_argument("--uid-start", type=int, required=True)
    q.add_argument("--uid-end", type=int, required=True)
    q.add_argument("--worker-id")

    o = sub.add_parser("owner")
    o.add_argument("--db", required=True)
    o.add_argument("--worker-id", required=True)

    m = sub.add_parser("measure")
    m.add_argument("--pid-file", required=True, help="'PID SPAWN_EPOCH', written by the script")
    m.add_argument("--ready-file", required=True)
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--token", required=True)
    m.add_argument("--startup-log", required=True)
    m.add_argument("--db", required=True)
    m.add_argument("--root", required=True)
    m.add_argument("--worker-id", required=True)
    m.add_argument("--n", type=int, required=True)
    m.add_argument("--scenario", choices=("idle", "expired"), required=True)
    m.add_argument("--batch", type=int, required=True)
    m.add_argument("--interval", type=float, required=True)
    m.add_argument("--passes", type=int, default=10)
    m.add_argument("--startup-timeout", type=float, default=600)
    m.add_argument("--timeout", type=float, default=900)
    m.add_argument("--out", required=True)

    r = sub.add_parser("report")
    r.add_argument("--small", type=int, required=True)
    r.add_argument("--big", type=int, required=True)
    r.add_argument("--fs", default="?")
    r.add_argument("results", nargs="+")

    a = p.parse_args()
    {"template": cmd_template, "prepare": cmd_prepare, "owner": cmd_owner,
     "measure": cmd_measure, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
