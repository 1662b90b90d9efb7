#!/usr/bin/env python3
"""What one job costs through the agents, in counts rather than wall-clock (issue [N] 2).

Group (n) of compare.py's operation (400 jobs over 8 nodes through `opsgraph serve
--concurrency 16`), run once per configuration and build, and counted:

- CPU seconds per job: the server's and every agent's user + system time, their reaped children
  (the jobs' `sh`) included, from `/proc/PID/stat`, between the POST and the operation's end;
- `fsync` + `fdatasync` calls per job of the server (`perf stat` on their tracepoints; the
  agents' are counted too, they make none), and the server's `pwrite64` and `pread64` calls per
  job (SQLite's WAL frames written and pages read; the local executor's also count the jobs'
  `sh`, which make none of the first and a few of the second, the loader's) and context
  switches per job of the server and of the agents with their jobs (all counts inherited by
  the threads and processes started after `perf` attached);
- HTTP requests per job the server answered (its `/metrics`, the bench's own polling excluded).

  OPSGRAPH=path/to/opsgraph [OPSGRAPH_BEFORE=path/to/other] python3 bench/agent_costs.py [rounds]

Standard library only (and `perf`, when it can read the tracepoints; else fsyncs are not shown).
"""

import os
import re
import shutil
import subprocess
import sys
import time

sys.argv = [sys.argv[0]] + [a for a in sys.argv[1:]]
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
import compare as c  # noqa: E402  (compare reads OPSGRAPH at import)

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    """User + system seconds of `pid` and its reaped children."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICK


def requests(s):
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{s.port}/metrics",
                                 headers={"Authorization": f"Bearer {s.admin}"})
    text = urllib.request.urlopen(req, timeout=30).read().decode()
    counts = {}
    for m in re.finditer(r'opsgraph_http_requests_total\{method="(\w+)",route="([^"]+)",status="(\d+)"\} (\d+)', text):
        key = f"{m.group(1)} {m.group(2)}"
        if "metrics" in key or key.startswith("GET /api/v1/health"):
            continue
        counts[key] = counts.get(key, 0) + int(m.group(4))
    return counts


def perf_ok():
    p = subprocess.run(["perf", "stat", "-e", "syscalls:sys_enter_fsync", "true"], capture_output=True)
    return p.returncode == 0


def measure(binary, inv, agents, parallel, text, pack, jobs, use_perf):
    s = c.Served("costs", pack, inv, agents, parallel=parallel, binary=binary)
    try:
        time.sleep(0.5)  # the agents are waiting in their claims
        pids = [p.pid for p in s.procs]
        before = [cpu(p) for p in pids]
        req0 = requests(s)
        perfs = []
        if use_perf:
            events = ["syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync,syscalls:sys_enter_pwrite64,"
                      "syscalls:sys_enter_pread64,context-switches"]
            if len(pids) > 1:
                events.append("context-switches")
            for k, (ev, who) in enumerate(zip(events, [pids[:1], pids[1:]])):
                perfs.append(subprocess.Popen(["perf", "stat", "-x", ",", "-e", ev, "-p", ",".join(map(str, who)),
                                               "-o", f"{s.dir}/perf{k}.txt"]))
            time.sleep(0.3)
        took, _ = s.run(text)
        after = [cpu(p) for p in pids]
        req1 = requests(s)
        counts = {}
        for k, perf in enumerate(perfs):
            perf.send_signal(2)
            perf.wait()
            for line in open(f"{s.dir}/perf{k}.txt"):
                parts = line.split(",")
                if len(parts) > 2 and parts[0].strip().isdigit():
                    name = parts[2].strip().replace("syscalls:sys_enter_", "")
                    key = f"{'server' if k == 0 else 'agents'} {name}"
                    counts[key] = counts.get(key, 0) + int(parts[0])
        fsyncs = (counts.get("server fsync", 0) + counts.get("server fdatasync", 0)) if perfs else None
        per = {k: (req1.get(k, 0) - req0.get(k, 0)) / jobs for k in req1 if req1.get(k, 0) != req0.get(k, 0)}
        per.pop("POST /api/v1/operations", None)
        return {
            "jobs/s": jobs / took,
            "server cpu ms/job": (after[0] - before[0]) / jobs * 1e3,
            "agents cpu ms/job": sum(a - b for a, b in zip(after[1:], before[1:])) / jobs * 1e3,
            "fsyncs/job": None if fsyncs is None else fsyncs / jobs,
            "counts/job": {k: v / jobs for k, v in counts.items()},
            "requests/job": sum(per.values()),
            "by route": per,
        }
    finally:
        s.close()
        shutil.rmtree(s.dir, ignore_errors=True)


def main():
    names = [f"w{k}" for k in range(8)]
    per_node = 50
    jobs = per_node * len(names)
    stamps = f"{c.WORK}/agent-stamps"
    os.makedirs(stamps, exist_ok=True)
    pack = f"{c.WORK}/agent-pack"
    c.agent_pack(pack, per_node, stamps)
    c.inventory(f"{c.WORK}/agent-local.yaml", [(n, "{local: true}") for n in names])
    c.inventory(f"{c.WORK}/agent-pool.yaml", [(n, "{agent: pool}") for n in names])
    c.write(f"{c.WORK}/agent-intent.yaml", "")
    c.intent(f"{c.WORK}/agent-intent.yaml", "fan", names)
    text = open(f"{c.WORK}/agent-intent.yaml").read()
    builds = [("before", c.OPSGRAPH_BEFORE), ("after", c.OPSGRAPH)] if c.OPSGRAPH_BEFORE else [("", c.OPSGRAPH)]
    configs = [("local executor", f"{c.WORK}/agent-local.yaml", 0, 1),
               ("8 agents x 1", f"{c.WORK}/agent-pool.yaml", 8, 1),
               ("8 agents x 2", f"{c.WORK}/agent-pool.yaml", 8, 2)]
    use_perf = perf_ok()
    print(f"load {os.getloadavg()[0]:.1f}; perf for fsyncs: {use_perf}", flush=True)
    print("| build | through | jobs/s | server CPU ms/job | agents CPU ms/job | fsyncs/job | server pwrite64, pread64 "
          "/job | switches/job: server, agents | requests/job | by route |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    try:
        for _ in range(ROUNDS):
            for label, binary in builds:
                for name, inv, n, par in configs:
                    r = measure(binary, inv, n, par, text, pack, jobs, use_perf)
                    f = "n/a" if r["fsyncs/job"] is None else f"{r['fsyncs/job']:.2f}"
                    n_ = r["counts/job"]
                    io = f"{n_.get('server pwrite64', 0):.1f}, {n_.get('server pread64', 0):.1f}" if n_ else "n/a"
                    cs = (f"{n_.get('server context-switches', 0):.1f}, {n_.get('agents context-switches', 0):.1f}"
                          if n_ else "n/a")
                    routes = ", ".join(f"{k.split('/')[-1]} {v:.2f}" for k, v in sorted(r["by route"].items()))
                    print(f"| {label} | {name} | {r['jobs/s']:.1f} | {r['server cpu ms/job']:.2f} | "
                          f"{r['agents cpu ms/job']:.2f} | {f} | {io} | {cs} | {r['requests/job']:.2f} | {routes} |",
                          flush=True)
    finally:
        shutil.rmtree(c.WORK, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
