#!/usr/bin/env python3
"""Opsgraph beside the tools users would pick instead, measured in one run (issue [G], docs/benchmarks.md).

Called by bench/run, which builds the release binaries and the Ansible virtual environment first.
Standard library only. Every figure is a median of interleaved runs; ratios compare figures taken
side by side in this run.

  OPSGRAPH=path/to/opsgraph ANSIBLE_BIN=venv/bin SSHFAN=path/to/sshfan python3 bench/compare.py [--quick]

Groups f and a also take OPSGRAPH_BEFORE (another build of opsgraph, run interleaved with
OPSGRAPH: before/after in one run) and group a RUNTIME_BENCH (the runtime's bench,
`target/release/examples/bench`: its `chain N` run between the CLI's, so the CLI's per-job cost and
the runtime's own are measured side by side, issue [N] 5).
"""

import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

QUICK = "--quick" in sys.argv
# `--only=a,e`: some groups of figures only (f, a, d, e, n, w: the warm part of e alone, l).
ONLY = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), None)


def wanted(group):
    return ONLY is None or group in ONLY
OPSGRAPH = os.environ["OPSGRAPH"]
ANSIBLE_BIN = os.environ.get("ANSIBLE_BIN")
SSHFAN = os.environ.get("SSHFAN")
OPSGRAPH_BEFORE = os.environ.get("OPSGRAPH_BEFORE")
RUNTIME_BENCH = os.environ.get("RUNTIME_BENCH")
ROUNDS = 3 if QUICK else 5
WORK = tempfile.mkdtemp(prefix="opsgraph-bench-")

rows = []  # (group, figure, value, unit, note)


def record(group, figure, value, unit, note=""):
    rows.append((group, figure, value, unit, note))
    print(f"  {figure}: {value:.3f} {unit} {note}".rstrip(), flush=True)


def timed(argv, env=None, cwd=None):
    """Wall time of one command, in seconds; fails loudly when the command fails."""
    t = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:3])} ... failed ({p.returncode}):\n{p.stdout.decode(errors='replace')[-3000:]}")
    return dt


def median_of(fns, rounds=ROUNDS):
    """Runs each function `rounds` times, interleaved; returns the median time of each."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, f in enumerate(fns):
            times[i].append(f())
    return [statistics.median(t) for t in times]


# ---------------------------------------------------------------------------------------------
# Documents: a pack whose template runs N jobs, each `command: [/bin/true]`, chained or fanned
# out over target nodes; an inventory of nodes (local or SSH access); an intent.

def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def bench_pack(root, chain=0, per_node=0, command="[/bin/true]"):
    """chain: a template `chain.run` of `chain` jobs, each after the one before. per_node: a
    template `fan.run` of `per_node` independent jobs, each fanned out over target_nodes, each
    running `command` (a YAML flow list)."""
    write(f"{root}/pack.yaml", """scenario_pack:
  id: bench
  version: 1.0.0
  title: Benchmark pack
  resource_types: [bench.thing]
  actions: [chain, fan]
  plan_templates:
    - {id: bench.chain, entrypoint: c0, action: chain}
    - {id: bench.fan, entrypoint: f0, action: fan}
""")
    jobs = []
    for k in range(max(chain, 1)):
        after = f"\n  after: [c{k - 1}]" if k else ""
        jobs.append(f"""job:
  id: c{k}
  type: noop{after}
  run: {{executor: local, command: [/bin/true]}}
""")
    for k in range(max(per_node, 1)):
        jobs.append(f"""job:
  id: f{k}
  type: noop
  scope: {{resources: [compute_node], target: target_nodes}}
  run: {{command: {command}}}
""")
    write(f"{root}/jobs.yaml", "---\n".join(jobs))
    c_ids = [f"c{k}" for k in range(max(chain, 1))]
    f_ids = [f"f{k}" for k in range(max(per_node, 1))]
    write(f"{root}/templates.yaml", one_stage("bench.chain", "chain", c_ids) + "---\n"
          + one_stage("bench.fan", "fan", f_ids, fanned=True))


def one_stage(template_id, action, ids, fanned=False):
    """A plan_template running the jobs `ids` in one stage; `fanned`: over the target nodes."""
    scopes = "  scopes:\n    target_nodes: {resource_type: compute_node, from: targets.target_nodes, min: 1}\n"
    jobs = ", ".join(ids)
    return f"""plan_template:
  id: {template_id}
  action: {action}
{scopes if fanned else ""}  stages:
    - {{id: all, name: All, jobs: [{jobs}]}}
  jobs: [{jobs}]
"""


def inventory(path, nodes):
    """nodes: list of (name, access dict as YAML flow text)."""
    docs = []
    for name, access in nodes:
        docs.append(f"""resource:
  type: compute_node
  name: {name}
  environment: bench
  provides: [linux.host]
  access: {access}
""")
    write(path, "---\n".join(docs) if docs else "")


def intent(path, action, nodes=()):
    targets = ""
    if nodes:
        targets = "\n  targets:\n    target_nodes: [" + ", ".join(f"compute_node/{n}" for n in nodes) + "]"
    write(path, f"""intent:
  target_resource_type: bench.thing
  action: {action}
  name: bench
  environment: bench{targets}
""")


def opsgraph_apply(pack, intent_file, inv=None, concurrency=8, extra_env=None, binary=None):
    """`opsgraph apply --yes` in a fresh data directory; returns its wall time."""
    data = tempfile.mkdtemp(dir=WORK, prefix="data-")
    argv = [binary or OPSGRAPH, "apply", "--yes", "-f", intent_file, "--packs", pack, "--data-dir", data,
            "--concurrency", str(concurrency)]
    if inv:
        argv += ["--inventory", inv]
    env = dict(os.environ, **(extra_env or {}))
    dt = timed(argv, env=env)
    shutil.rmtree(data, ignore_errors=True)
    return dt


# ---------------------------------------------------------------------------------------------
# Ansible: the same work as playbooks.

def ansible_env():
    env = dict(os.environ)
    env.update({
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
        "ANSIBLE_LOCAL_TEMP": os.path.join(WORK, "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    })
    return env


def ansible_playbook(play, inv, forks, control_dir=None):
    env = ansible_env()
    if control_dir:
        # A fresh control-socket directory per run: connections are opened anew, as for Opsgraph.
        d = tempfile.mkdtemp(dir=WORK, prefix="cp-")
        env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = d
    argv = [os.path.join(ANSIBLE_BIN, "ansible-playbook"), "-i", inv, "-f", str(forks), play]
    return timed(argv, env=env)


def shell_tasks_play(path, n, hosts="all"):
    tasks = "".join(f"    - name: t{k}\n      ansible.builtin.command: /bin/true\n" for k in range(n))
    write(path, f"- hosts: {hosts}\n  gather_facts: false\n  tasks:\n{tasks}")


# ---------------------------------------------------------------------------------------------

def spawn_floor(n):
    """n x /bin/true started and waited for, one after the other, from this process."""
    t = time.perf_counter()
    for _ in range(n):
        subprocess.run(["/bin/true"])
    return time.perf_counter() - t


def runtime_chain(n):
    """One `bench chain N` of the runtime (five runs inside it): its per-job medians (ms), by row."""
    p = subprocess.run([RUNTIME_BENCH, "chain", str(n)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.exit(f"bench: {RUNTIME_BENCH} chain {n} failed:\n{p.stdout.decode(errors='replace')[-3000:]}")
    got = {}
    for line in p.stdout.decode().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2].endswith(" ms"):
            try:
                got[cells[0]] = float(cells[2][:-3])
            except ValueError:
                pass
    return got


def per_job_vs_ansible():
    print("(a) per-job overhead: a chain of N `/bin/true` jobs vs N Ansible shell tasks on localhost", flush=True)
    n_og, n_an = (100, 10) if QUICK else (400, 40)
    big, small = f"{WORK}/chain-big", f"{WORK}/chain-small"
    bench_pack(big, chain=n_og)
    bench_pack(small, chain=1)
    intent(f"{WORK}/chain.yaml", "chain")
    shell_tasks_play(f"{WORK}/an-big.yml", n_an, hosts="localhost")
    shell_tasks_play(f"{WORK}/an-small.yml", 1, hosts="localhost")
    write(f"{WORK}/an-local.ini", "localhost ansible_connection=local\n")
    fns = [
        lambda: opsgraph_apply(big, f"{WORK}/chain.yaml"),
        lambda: opsgraph_apply(small, f"{WORK}/chain.yaml"),
        lambda: spawn_floor(n_og),
    ]
    if ANSIBLE_BIN:
        fns += [
            lambda: ansible_playbook(f"{WORK}/an-big.yml", f"{WORK}/an-local.ini", 5),
            lambda: ansible_playbook(f"{WORK}/an-small.yml", f"{WORK}/an-local.ini", 5),
        ]
    # Side by side in the same rounds: the build before (OPSGRAPH_BEFORE) and the runtime's own
    # bench of the same chain (RUNTIME_BENCH; its figures are medians of its own five runs).
    extra = {}
    if OPSGRAPH_BEFORE:
        extra["before big"] = len(fns)
        fns.append(lambda: opsgraph_apply(big, f"{WORK}/chain.yaml", binary=OPSGRAPH_BEFORE))
        extra["before small"] = len(fns)
        fns.append(lambda: opsgraph_apply(small, f"{WORK}/chain.yaml", binary=OPSGRAPH_BEFORE))
    runtime_rows = []
    if RUNTIME_BENCH:
        extra["runtime"] = len(fns)

        def runtime_round():
            runtime_rows.append(runtime_chain(n_og))
            return 0.0
        fns.append(runtime_round)
    got = median_of(fns)
    og_big, og_small, floor = got[:3]
    og_per = (og_big - og_small) / (n_og - 1)
    spawn = floor / n_og
    over = og_per - spawn
    record("a", f"opsgraph apply, 1 job (whole command)", og_small * 1e3, "ms")
    record("a", f"opsgraph per job ({n_og}-job chain, durable)", og_per * 1e3, "ms")
    record("a", "spawn floor per process (/bin/true)", spawn * 1e3, "ms")
    record("a", "opsgraph orchestration overhead per job", over * 1e3, "ms", "(per job - spawn floor)")
    if OPSGRAPH_BEFORE:
        b_big, b_small = got[extra["before big"]], got[extra["before small"]]
        b_per = (b_big - b_small) / (n_og - 1)
        record("a", "OPSGRAPH_BEFORE: apply, 1 job (whole command)", b_small * 1e3, "ms")
        record("a", f"OPSGRAPH_BEFORE: per job ({n_og}-job chain, durable)", b_per * 1e3, "ms")
        record("a", "per job, after / before", og_per / b_per, "x")
    if RUNTIME_BENCH:
        def med(row):
            return statistics.median(r[row] for r in runtime_rows if row in r)
        rt_per = med("chain driven by the runtime (durable)")
        rt_spawn = med("spawn floor: `/bin/true` exec'd and waited for")
        rt_over = med("orchestration overhead = (chain - spawns) / N")
        record("a", f"runtime bench: per job ({n_og}-job chain, durable)", rt_per, "ms", "(RUNTIME_BENCH chain, same rounds)")
        record("a", "runtime bench: overhead per job (chain - its spawn floor)", rt_over, "ms")
        record("a", "CLI per job / runtime bench per job", og_per * 1e3 / rt_per, "x", "(goal <= 1)")
        record("a", "CLI per job - runtime bench per job", og_per * 1e3 - rt_per, "ms", "(what the CLI adds)")
        record("a", "CLI overhead over the bench's spawn floor", og_per * 1e3 - rt_spawn, "ms",
               "(per job - the runtime bench's spawn floor)")
        if OPSGRAPH_BEFORE:
            record("a", "OPSGRAPH_BEFORE per job / runtime bench per job", b_per * 1e3 / rt_per, "x")
    if not ANSIBLE_BIN:
        print("(a) Ansible: SKIPPED (no ANSIBLE_BIN)", flush=True)
        return
    an_big, an_small = got[3:5]
    an_per = (an_big - an_small) / (n_an - 1)
    record("a", f"ansible-playbook, 1 task (whole command)", an_small * 1e3, "ms")
    record("a", f"ansible per task ({n_an} tasks, connection=local)", an_per * 1e3, "ms")
    record("a", "ansible per task / opsgraph overhead per job", an_per / over, "x", "(target >= 300x)")
    record("a", "ansible per task / opsgraph per job", an_per / og_per, "x")


def fanout_local():
    print("(a) one command fanned out over M hosts (local connection)", flush=True)
    m = 20 if QUICK else 50
    pack = f"{WORK}/fan"
    bench_pack(pack, per_node=1)
    names = [f"h{k}" for k in range(m)]
    inventory(f"{WORK}/fan-inv.yaml", [(n, "{local: true}") for n in names])
    intent(f"{WORK}/fan.yaml", "fan", names)
    write(f"{WORK}/an-fan.ini", "".join(f"{n} ansible_connection=local\n" for n in names))
    shell_tasks_play(f"{WORK}/an-fan.yml", 1)
    og, an = median_of([
        lambda: opsgraph_apply(pack, f"{WORK}/fan.yaml", f"{WORK}/fan-inv.yaml", concurrency=8),
        lambda: ansible_playbook(f"{WORK}/an-fan.yml", f"{WORK}/an-fan.ini", 8),
    ])
    record("a", f"opsgraph: 1 command over {m} hosts, 8 at once (whole command)", og * 1e3, "ms")
    record("a", f"ansible: 1 command over {m} hosts, forks 8 (whole command)", an * 1e3, "ms")
    record("a", "ansible / opsgraph", an / og, "x")


def first_job_latency():
    print("(f) from the command line to the first job started", flush=True)
    root = f"{WORK}/first"
    write(f"{root}/pack.yaml", """scenario_pack:
  id: bench
  version: 1.0.0
  resource_types: [bench.thing]
  actions: [chain]
  plan_templates:
    - {id: bench.chain, entrypoint: c0, action: chain}
""")
    stamp = f"{WORK}/first-stamp"
    write(f"{root}/jobs.yaml", f"""job:
  id: c0
  type: noop
  run: {{executor: local, command: [sh, -c, 'date +%s.%N > {stamp}']}}
""")
    write(f"{root}/templates.yaml", """plan_template:
  id: bench.chain
  action: chain
  stages: [{id: all, name: All, jobs: [c0]}]
  jobs: [c0]
""")
    intent(f"{WORK}/first.yaml", "chain")

    def latency(binary):
        data = tempfile.mkdtemp(dir=WORK, prefix="data-")
        t0 = time.time()
        timed([binary, "apply", "--yes", "-f", f"{WORK}/first.yaml", "--packs", root, "--data-dir", data])
        with open(stamp) as f:
            dt = float(f.read()) - t0
        shutil.rmtree(data, ignore_errors=True)
        return dt

    # The floor: this process starting the job's own `sh` (part of every figure, about one spawn).
    def floor():
        t0 = time.time()
        subprocess.run(["sh", "-c", f"date +%s.%N > {stamp}"], check=True)
        with open(stamp) as f:
            return float(f.read()) - t0
    fns = [lambda: latency(OPSGRAPH), floor]
    if OPSGRAPH_BEFORE:
        fns.append(lambda: latency(OPSGRAPH_BEFORE))
    got = median_of(fns, rounds=ROUNDS * 2 + 1)
    record("f", "command line to first job started (fresh data directory)", got[0] * 1e3, "ms", "(target <= 10 ms)")
    record("f", "floor: the job's `sh` started from here", got[1] * 1e3, "ms")
    if OPSGRAPH_BEFORE:
        record("f", "OPSGRAPH_BEFORE: command line to first job started", got[2] * 1e3, "ms")
        record("f", "after / before", got[0] / got[2], "x")


def memory_10k():
    print("(d) peak memory and time of a 10,000-job and a 100,000-job operation (100 nodes)", flush=True)
    # (jobs per node, nodes, goal for the peak RSS in MB): issue [N] item 1.
    sizes = [(10, 100, 40)] if QUICK else [(100, 100, 40), (1000, 100, 400)]
    for per, m, goal in sizes:
        pack = f"{WORK}/mem-{per}"
        bench_pack(pack, per_node=per)
        names = [f"n{k}" for k in range(m)]
        inventory(f"{WORK}/mem-inv.yaml", [(n, "{local: true}") for n in names])
        intent(f"{WORK}/mem.yaml", "fan", names)
        data = tempfile.mkdtemp(dir=WORK, prefix="data-")
        argv = ["/usr/bin/time", "-f", "%M %e", OPSGRAPH, "apply", "--yes", "-f", f"{WORK}/mem.yaml", "--packs", pack,
                "--inventory", f"{WORK}/mem-inv.yaml", "--data-dir", data, "--concurrency", "8"]
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if p.returncode != 0:
            sys.exit("bench: the memory operation failed:\n" + p.stderr.decode(errors="replace")[-3000:])
        kb, secs = p.stderr.decode().strip().splitlines()[-1].split()
        jobs = per * m
        record("d", f"peak RSS of `opsgraph apply`, {jobs:,} jobs", int(kb) / 1024, "MB", f"(target <= {goal} MB)")
        record("d", f"wall time, {jobs:,} jobs at concurrency 8", float(secs), "s", f"({jobs / float(secs):,.0f} jobs/s)")
        shutil.rmtree(data, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# (e) SSH: 20 real sshd on loopback ports (started by the sshfan example), fresh and warm.

def ssh_base(h):
    return ["ssh", "-i", h["key"], "-p", str(h["port"]), "-o", f"UserKnownHostsFile={h['known_hosts']}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ControlMaster=no"]


def ssh_fanout():
    if not SSHFAN:
        print("(e) SSH fan-out: SKIPPED (no sshfan example: needs root and openssh-server)", flush=True)
        return
    hosts_n = 20
    print(f"(e) one command over {hosts_n} hosts through SSH", flush=True)
    proc = subprocess.Popen([SSHFAN, str(hosts_n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("["):
        proc.kill()
        print(f"(e) SSH fan-out: SKIPPED ({line.strip()})", flush=True)
        return
    hosts = json.loads(line)
    try:
        def floor():
            t = time.perf_counter()
            ps = [subprocess.Popen(ssh_base(h) + [f"{h['user']}@127.0.0.1", "true"]) for h in hosts]
            for p in ps:
                assert p.wait() == 0, "ssh floor failed"
            return time.perf_counter() - t

        pack = f"{WORK}/sshfan"
        bench_pack(pack, per_node=1)
        names = [f"s{k}" for k in range(hosts_n)]
        inventory(f"{WORK}/ssh-inv.yaml", [
            (n, "{ssh: {host: 127.0.0.1, port: %d, user: %s, key: %s, known_hosts: %s}}"
             % (h["port"], h["user"], h["key"], h["known_hosts"])) for n, h in zip(names, hosts)])
        intent(f"{WORK}/sshfan.yaml", "fan", names)
        write(f"{WORK}/an-ssh.ini", "".join(
            f"{n} ansible_host=127.0.0.1 ansible_port={h['port']} ansible_user={h['user']} "
            f"ansible_ssh_private_key_file={h['key']} "
            f"ansible_ssh_common_args='-o UserKnownHostsFile={h['known_hosts']}'\n" for n, h in zip(names, hosts)))
        shell_tasks_play(f"{WORK}/an-ssh.yml", 1)
        fl, og, an = median_of([
            floor,
            lambda: opsgraph_apply(pack, f"{WORK}/sshfan.yaml", f"{WORK}/ssh-inv.yaml", concurrency=hosts_n),
            lambda: ansible_playbook(f"{WORK}/an-ssh.yml", f"{WORK}/an-ssh.ini", hosts_n, control_dir=True),
        ])
        record("e", f"OpenSSH floor: {hosts_n} parallel `ssh host true`, fresh connections", fl * 1e3, "ms")
        record("e", f"opsgraph apply: 1 job over {hosts_n} SSH hosts (whole command)", og * 1e3, "ms")
        record("e", f"ansible-playbook: 1 task over {hosts_n} SSH hosts, forks {hosts_n}", an * 1e3, "ms")
        record("e", "opsgraph / OpenSSH floor", og / fl, "x", "(target <= 1.3x)")
        record("e", "ansible / opsgraph", an / og, "x", "(target >= 3x)")
        ssh_warm(hosts[0])
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


# ---------------------------------------------------------------------------------------------
# (n) Remote agents (issue [N] 2): the same operation through a real `opsgraph serve`, its nodes
# `{local: true}` (the local executor, in the server process) or `{agent: pool}` served by N
# `opsgraph agent` processes on this machine; and how soon an idle agent starts a queued job.

class Served:
    """A data directory with the pack and inventory, an `opsgraph serve`, and agent processes."""

    def __init__(self, name, pack, inv, agents=0, parallel=1, binary=None):
        import socket
        binary = binary or OPSGRAPH
        self.dir = tempfile.mkdtemp(dir=WORK, prefix=f"{name}-")
        data = f"{self.dir}/data"
        self.db = f"{data}/opsgraph.db"
        self.admin = self.token(binary, data, "admin", "platform_admin")
        agent_token = self.token(binary, data, "pool", "agent") if agents else ""
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.procs = []
        log = open(f"{self.dir}/server.log", "w")
        self.procs.append(subprocess.Popen(
            [binary, "--data-dir", data, "--concurrency", "16", "serve", "--listen", f"127.0.0.1:{self.port}",
             "--packs", pack, "--inventory", inv, "--agent-lease", "30s", "--agent-claim-timeout", "60s"],
            stdout=log, stderr=log))
        deadline = time.time() + 30
        while self.call("GET", "/api/v1/health")[0] != 200:
            if time.time() > deadline:
                sys.exit("bench: the server did not start:\n" + open(f"{self.dir}/server.log").read()[-3000:])
            time.sleep(0.05)
        env = dict(os.environ, OPSGRAPH_TOKEN=agent_token)
        for k in range(agents):
            self.procs.append(subprocess.Popen(
                [binary, "--server", f"http://127.0.0.1:{self.port}", "--data-dir", data, "agent",
                 "--work-dir", f"{self.dir}/agent-{k}", "--parallel", str(parallel)],
                env=env, stdout=subprocess.DEVNULL, stderr=open(f"{self.dir}/agent-{k}.log", "w")))

    @staticmethod
    def token(binary, data, name, role):
        p = subprocess.run([binary, "--data-dir", data, "token", "create", "--name", name, "--role", role],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
        return p.stdout.decode().strip().splitlines()[-1]

    def call(self, method, path, body=None):
        import urllib.request
        import urllib.error
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method,
                                     headers={"Authorization": f"Bearer {self.admin}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except OSError:
            return 0, None

    def run(self, intent_text):
        """POST the intent, then wait for the operation to end; returns (seconds, start time)."""
        import sqlite3
        t0 = time.time()
        status, body = self.call("POST", "/api/v1/operations", intent_text.encode())
        if status != 201:
            sys.exit(f"bench: creating the operation failed ({status}): {body}")
        db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        while True:
            row = db.execute("SELECT state_kind FROM operations WHERE id = ?", (body["id"],)).fetchone()
            if row and row[0] in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.005)
        dt = time.time() - t0
        self.last = body["id"]
        db.close()
        if row[0] != "completed":
            sys.exit(f"bench: operation {body['id']} ended {row[0]}:\n"
                     + open(f"{self.dir}/server.log").read()[-3000:])
        return dt, t0

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()


def agent_pack(root, per_node, stamp_dir):
    """`per_node` jobs fanned out over the target nodes: each a script that touches a file,
    proven by one command evidence check (the work of the agents' integration bench)."""
    ids = [f"j{k}" for k in range(per_node)]
    write(f"{root}/pack.yaml", """scenario_pack:
  id: agentbench
  version: 1.0.0
  resource_types: [bench.thing]
  actions: [fan]
  plan_templates: [{id: agentbench.fan, action: fan}]
""")
    write(f"{root}/scripts/step.sh", f'date +%s.%N > "{stamp_dir}/$OPSGRAPH_OPERATION_ID.$OPSGRAPH_JOB_ID"\n')
    write(f"{root}/evidence.yaml", "evidence:\n  - {id: done, source: command, command: 'test -s \"" + stamp_dir
          + "/$OPSGRAPH_OPERATION_ID.$OPSGRAPH_JOB_ID\"'}\n")
    write(f"{root}/jobs.yaml", "---\n".join(
        f"job: {{id: {j}, scope: {{resources: [compute_node], target: target_nodes}}, outputs: {{evidence: [done]}}, "
        f"run: {{script: scripts/step.sh}}}}\n" for j in ids))
    write(f"{root}/templates.yaml", one_stage("agentbench.fan", "fan", ids, fanned=True))


def agents():
    print("(n) remote agents beside the local executor, through `opsgraph serve` (concurrency 16)", flush=True)
    names = [f"w{k}" for k in range(8)]
    per_node = 10 if QUICK else 50
    jobs = per_node * len(names)
    stamps = f"{WORK}/agent-stamps"
    os.makedirs(stamps, exist_ok=True)
    pack = f"{WORK}/agent-pack"
    agent_pack(pack, per_node, stamps)
    one = f"{WORK}/agent-pack-1"
    agent_pack(one, 1, stamps)
    inventory(f"{WORK}/agent-local.yaml", [(n, "{local: true}") for n in names])
    inventory(f"{WORK}/agent-pool.yaml", [(n, "{agent: pool}") for n in names])
    write(f"{WORK}/agent-intent.yaml", "")
    intent(f"{WORK}/agent-intent.yaml", "fan", names)
    intent(f"{WORK}/agent-intent-1.yaml", "fan", names[:1])
    text = open(f"{WORK}/agent-intent.yaml").read()
    text1 = open(f"{WORK}/agent-intent-1.yaml").read()

    # With OPSGRAPH_BEFORE (another build, e.g. main's): every figure for both builds, their
    # rounds interleaved, each build's agents against its own server.
    builds = [("before: ", BEFORE), ("", OPSGRAPH)] if BEFORE else [("", OPSGRAPH)]

    def throughput(binary, inv, n_agents, parallel):
        s = Served("agents", pack, inv, n_agents, parallel=parallel, binary=binary)
        try:
            return s.run(text)[0]
        finally:
            s.close()

    # The local executor runs up to 16 jobs at once (the server's concurrency); 8 agents with
    # `--parallel 1` hold 8 job slots. The last row gives the agents as many slots as the local
    # executor (8 x `--parallel 2`): the comparison at equal parallelism.
    configs = [("local executor", f"{WORK}/agent-local.yaml", 0, 1), ("1 agent", f"{WORK}/agent-pool.yaml", 1, 1),
               ("2 agents", f"{WORK}/agent-pool.yaml", 2, 1), ("8 agents", f"{WORK}/agent-pool.yaml", 8, 1),
               ("8 agents x --parallel 2 (16 slots, as local)", f"{WORK}/agent-pool.yaml", 8, 2)]
    runs = [(label, binary, c) for label, binary in builds for c in configs]
    times = median_of([(lambda b=b, c=c: throughput(b, c[1], c[2], c[3])) for _, b, c in runs],
                      rounds=3 if QUICK else 5)
    for k, (label, _) in enumerate(builds):
        got = times[k * len(configs):(k + 1) * len(configs)]
        for (name, _, _, _), t in zip(configs, got):
            record("n", f"{label}{jobs} jobs over 8 nodes: {name}", jobs / t, "jobs/s",
                   f"({t:.2f} s; {got[0] / t:.2f}x local)")
        record("n", f"{label}8 agents / local executor, jobs/s", got[0] / got[3], "x", "(target >= 0.9x)")
        record("n", f"{label}8 agents x --parallel 2 / local executor, jobs/s (equal slots)", got[0] / got[4], "x",
               "(target >= 0.9x)")

    # Pickup: one job, from the POST to its script's first line, with the agent idle (long-polling);
    # the local executor's server and the agent's run side by side, their rounds interleaved. The
    # agent's is split at its claim (the `agent_claimed` timeline entry's time, in ms).
    def first_start(s):
        _, t0 = s.run(text1)
        newest = max((os.path.join(stamps, f) for f in os.listdir(stamps)), key=os.path.getmtime)
        with open(newest) as f:
            started = float(f.read()) - t0
        time.sleep(0.05)
        return started, t0

    def claimed_at(s):
        import sqlite3
        db = sqlite3.connect(f"file:{s.db}?mode=ro", uri=True, timeout=30)
        row = db.execute("SELECT at FROM timeline WHERE operation = ? AND event = 'agent_claimed'", (s.last,)).fetchone()
        db.close()
        return datetime.datetime.strptime(row[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()

    served = []
    try:
        for _, binary in builds:
            served.append((Served("pickup", one, f"{WORK}/agent-local.yaml", 0, binary=binary),
                           Served("pickup", one, f"{WORK}/agent-pool.yaml", 1, binary=binary)))
        time.sleep(0.3)  # the agents are waiting in their claims
        local = [[] for _ in builds]
        agent = [[] for _ in builds]
        claim = [[] for _ in builds]
        for _ in range(ROUNDS * 4 + 1):
            for k, (ls, ag) in enumerate(served):
                local[k].append(first_start(ls)[0])
                started, t0 = first_start(ag)
                agent[k].append(started)
                claim[k].append(claimed_at(ag) - t0)
    finally:
        for pair in served:
            for s in pair:
                s.close()
    for k, (label, _) in enumerate(builds):
        lm, am = statistics.median(local[k]), statistics.median(agent[k])
        cm = statistics.median(claim[k])
        after = statistics.median(a - c for a, c in zip(agent[k], claim[k]))
        record("n", f"{label}POST to the job's first line: local executor", lm * 1e3, "ms")
        record("n", f"{label}POST to the job's first line: an idle agent", am * 1e3, "ms")
        record("n", f"{label}  of which POST to its claim's timeline entry", cm * 1e3, "ms")
        record("n", f"{label}  of which the claim's entry to the first line", after * 1e3, "ms")
        record("n", f"{label}an idle agent's pickup of a queued job (difference of medians)", (am - lm) * 1e3, "ms",
               "(target <= 5 ms)")


def ssh_warm_only():
    """Group (w): the warm-connection figures of (e) alone, on one light host (as root), whose
    login reads no startup file of this machine's root (here root's .bashrc runs `pyenv init`,
    ~130-200 ms of every command, which buries a few milliseconds under noise); else on one sshd
    on loopback as (e) does."""
    d = f"{WORK}/light-w"
    if os.geteuid() == 0:
        up = subprocess.run([OPSGRAPH, "lab", "fleet", "light", "up", "--count", "1", "--dir", d],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if up.returncode == 0:
            try:
                print("(w) jobs over a warm SSH connection to a light host", flush=True)
                ssh_warm({"host": "10.214.0.11", "port": 22, "user": "root", "key": f"{d}/id_ed25519",
                          "known_hosts": f"{d}/known_hosts"}, rounds=W_ROUNDS)
            finally:
                subprocess.run([OPSGRAPH, "lab", "fleet", "light", "down", "--dir", d],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return
        print(f"(w) light host: {up.stdout.strip()[-500:]}; on loopback instead", flush=True)
    if not SSHFAN:
        print("(w) warm SSH: SKIPPED (no sshfan example: needs root and openssh-server)", flush=True)
        return
    proc = subprocess.Popen([SSHFAN, "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("["):
        proc.kill()
        print(f"(w) warm SSH: SKIPPED ({line.strip()})", flush=True)
        return
    try:
        print("(w) jobs over a warm SSH connection (sshd on loopback)", flush=True)
        ssh_warm(json.loads(line)[0], rounds=W_ROUNDS)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


# OPSGRAPH_BEFORE: another build's binary, measured interleaved with OPSGRAPH in the warm figures and
# group (n).
BEFORE = os.environ.get("OPSGRAPH_BEFORE")


# Group (w)'s rounds (W_ROUNDS=9: more interleaved rounds on a noisy machine).
W_ROUNDS = int(os.environ.get("W_ROUNDS", str(ROUNDS)))


def shell_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


# The remote wrapper around a job `/bin/true` (remote_group::wrap), copied here to time the host's
# side alone through the master: `main` before 6 Dec 2026 (a group file, its subshell and `rm`),
# and the mark (the login shell runs the command itself). The token is fixed: nothing stops them.
_LEADER = """{ read -r l </proc/$$/stat; } 2>/dev/null && set -- ${l##*") "} && [ "$3" = $$ ] && [ "$4" = $$ ]"""
_FILE_SH = ("""(umask 077 && set -C && echo "$$" >"$1") || { echo "opsgraph: cannot record the process group in $1" >&2; """
            """exit 125; }; OPSGRAPH_GROUP_FILE=$1; trap 'rm -f -- "$OPSGRAPH_GROUP_FILE"' EXIT; c=$2; set -- "$1"; """
            'eval "$c"')
_TOKEN = "00000000000000000000000000bench00"
WRAPPED_FILE = (f'f="${{TMPDIR:-/tmp}}/opsgraph-pg.{_TOKEN}"; s=; {_LEADER} || {{ command -v setsid >/dev/null 2>&1 && '
                f"s='setsid -w'; }}; exec $s sh -c {shell_quote(_FILE_SH)} sh \"$f\" {shell_quote(shell_quote('/bin/true'))}")
WRAPPED_MARK = (f": OPSGRAPH_{_TOKEN}; c={shell_quote(shell_quote('/bin/true'))}; if {_LEADER}; then set --; eval \"$c\"; exit; "
                f'fi; f="${{TMPDIR:-/tmp}}/opsgraph-pg.{_TOKEN}"; s=; command -v setsid >/dev/null 2>&1 && s=\'setsid -w\'; '
                f"exec $s sh -c {shell_quote(_FILE_SH)} sh \"$f\" \"$c\"")


def ssh_warm(h, rounds=ROUNDS):
    """A chain of K jobs on one host over its warm connection, against ssh's own multiplexed command."""
    addr = h.get("host", "127.0.0.1")
    # Warm: a chain of K jobs on one host; the second and later jobs reuse the connection.
    k = 20 if QUICK else 50
    warm_pack = f"{WORK}/sshwarm"
    bench_pack(warm_pack, per_node=k)
    # per_node jobs are independent; chain them on the one host with concurrency 1.
    inventory(f"{WORK}/ssh1-inv.yaml", [
        ("s0", "{ssh: {host: %s, port: %d, user: %s, key: %s, known_hosts: %s}}"
         % (addr, h["port"], h["user"], h["key"], h["known_hosts"]))])
    intent(f"{WORK}/sshwarm.yaml", "fan", ["s0"])
    one_pack = f"{WORK}/sshone"
    bench_pack(one_pack, per_node=1)
    ctl = os.path.join(WORK, "mux.sock")
    master = subprocess.Popen(ssh_base(h)[:-2] + ["-o", "ControlMaster=yes", "-o", f"ControlPath={ctl}", "-N",
                                                  f"{h['user']}@{addr}"])
    deadline = time.time() + 10
    while not os.path.exists(ctl):
        assert time.time() < deadline, "ssh master did not start"
        time.sleep(0.02)

    def mux(command, n=20):
        t = time.perf_counter()
        for _ in range(n):
            subprocess.run(["ssh", "-o", f"ControlPath={ctl}", "-p", str(h["port"]), f"{h['user']}@{addr}",
                            command], check=True)
        return (time.perf_counter() - t) / n

    inv1 = f"{WORK}/ssh1-inv.yaml"
    fns = [
        lambda: opsgraph_apply(warm_pack, f"{WORK}/sshwarm.yaml", inv1, concurrency=1),
        lambda: opsgraph_apply(one_pack, f"{WORK}/sshwarm.yaml", inv1, concurrency=1),
        # The login shell's builtin `true` (what this figure measured until 6 Dec), and the job's
        # own program: an exec'd `/bin/true`, which the job pays for too.
        lambda: mux("true"),
        lambda: mux("/bin/true"),
        # The host's side of a job alone: the wrapper around `/bin/true`, both ways.
        lambda: mux(WRAPPED_FILE),
        lambda: mux(WRAPPED_MARK),
    ]
    if BEFORE:
        fns += [
            lambda: opsgraph_apply(warm_pack, f"{WORK}/sshwarm.yaml", inv1, concurrency=1, binary=BEFORE),
            lambda: opsgraph_apply(one_pack, f"{WORK}/sshwarm.yaml", inv1, concurrency=1, binary=BEFORE),
        ]
    got = median_of(fns, rounds=rounds)
    master.terminate()
    big, one, mx, mx_bin, mx_file, mx_mark = got[:6]
    per = (big - one) / (k - 1)
    record("e", "ssh over a warm multiplexed connection, per command (`true`, the shell's builtin)", mx * 1e3, "ms")
    record("e", "ssh over a warm multiplexed connection, per command (`/bin/true`, the job's program)",
           mx_bin * 1e3, "ms")
    record("e", "  the same through the wrapper: a group file (main before 6 Dec), over `/bin/true`",
           (mx_file - mx_bin) * 1e3, "ms")
    record("e", "  the same through the wrapper: the mark (the login shell runs it), over `/bin/true`",
           (mx_mark - mx_bin) * 1e3, "ms")
    record("e", f"opsgraph per job over its warm connection ({k} jobs, one host)", per * 1e3, "ms")
    record("e", "opsgraph warm per job - ssh multiplexed `true`", (per - mx) * 1e3, "ms")
    record("e", "opsgraph warm per job - ssh multiplexed `/bin/true`", (per - mx_bin) * 1e3, "ms", "(target <= 2 ms)")
    if BEFORE:
        per_b = (got[6] - got[7]) / (k - 1)
        record("e", f"OPSGRAPH_BEFORE per job over its warm connection ({k} jobs)", per_b * 1e3, "ms")
        record("e", "OPSGRAPH_BEFORE warm per job - ssh multiplexed `true`", (per_b - mx) * 1e3, "ms")
        record("e", "OPSGRAPH_BEFORE warm per job - ssh multiplexed `/bin/true`", (per_b - mx_bin) * 1e3, "ms")


# ---------------------------------------------------------------------------------------------
# (l) Fan-out at scale (issue [N] 3): one command over LIGHT_HOSTS light hosts (`opsgraph lab fleet
# light up`: a network namespace and one sshd each), LIGHT_PARALLEL at once for all three: plain
# `ssh` through `xargs -P` (the floor), `opsgraph apply` (--concurrency) and an Ansible ad-hoc
# `command` (forks). Each run's output is checked: every host answered with its own hostname.

LIGHT_HOSTS = int(os.environ.get("LIGHT_HOSTS", "50" if QUICK else "500"))
LIGHT_PARALLEL = int(os.environ.get("LIGHT_PARALLEL", "50"))
LIGHT_ROUNDS = int(os.environ.get("LIGHT_ROUNDS", "2" if QUICK else "3"))


def run_out(argv, env=None, stdin=None):
    """Wall time and stdout of one command; fails loudly when the command fails."""
    t = time.perf_counter()
    p = subprocess.run(argv, env=env, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:4])} ... failed ({p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return dt, p.stdout


def light_fanout():
    n, par = LIGHT_HOSTS, LIGHT_PARALLEL
    if os.geteuid() != 0:
        print("(l) fan-out over light hosts: SKIPPED (needs root: namespaces and a bridge)", flush=True)
        return
    print(f"(l) one command over {n} light hosts, {par} at once ({LIGHT_ROUNDS} interleaved rounds)", flush=True)
    d = f"{WORK}/light"
    up = subprocess.run([OPSGRAPH, "lab", "fleet", "light", "up", "--count", str(n), "--dir", d,
                         "--environment", "bench"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if up.returncode != 0:
        print(f"(l) fan-out over light hosts: SKIPPED (light up failed: {up.stdout.strip()[-2000:]})", flush=True)
        subprocess.run([OPSGRAPH, "lab", "fleet", "light", "down", "--dir", d])
        return
    try:
        took = next(l for l in up.stdout.splitlines() if " light hosts are up in " in l)
        record("l", f"opsgraph lab fleet light up --count {n}", float(took.rsplit("(", 1)[1].split(" ")[0]), "s")
        _, status = run_out([OPSGRAPH, "lab", "fleet", "light", "status", "--dir", d, "-o", "json"])
        hosts = json.loads(status)
        assert all(h["sshd"] for h in hosts), "a light host's sshd does not answer"
        record("l", "sshd resident per light host (RSS)", statistics.median(h["rss_kib"] for h in hosts) / 1024, "MiB")
        record("l", "sshd proportional per light host (PSS)", statistics.median(h["pss_kib"] for h in hosts) / 1024,
               "MiB", f"({sum(h['pss_kib'] for h in hosts) / 1024:,.0f} MiB for {n})")
        names = sorted(h["name"] for h in hosts)
        addresses = "".join(h["address"] + "\n" for h in hosts)

        def floor():
            dt, out = run_out(["xargs", "-P", str(par), "-I{}", "ssh", "-i", f"{d}/id_ed25519",
                               "-o", f"UserKnownHostsFile={d}/known_hosts", "-o", "GlobalKnownHostsFile=/dev/null",
                               "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ControlMaster=no",
                               "root@{}", "hostname"], stdin=addresses)
            assert sorted(out.split()) == names, "the floor did not reach every host"
            return dt

        pack = f"{WORK}/lightfan"
        bench_pack(pack, per_node=1, command="[hostname]")
        intent(f"{WORK}/lightfan.yaml", "fan", names)

        def ansible():
            env = ansible_env()
            env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = tempfile.mkdtemp(dir=WORK, prefix="cp-")
            dt, out = run_out([os.path.join(ANSIBLE_BIN, "ansible"), "light", "-i", f"{d}/ansible.ini", "-f", str(par),
                               "-m", "ansible.builtin.command", "-a", "hostname"], env=env)
            answered = [l.split(" | ")[0] for l in out.splitlines() if " | CHANGED | rc=0 >>" in l]
            assert sorted(answered) == names, f"ansible did not reach every host: {out[-2000:]}"
            return dt

        fns = [floor, lambda: opsgraph_apply(pack, f"{WORK}/lightfan.yaml", f"{d}/inventory", concurrency=par)]
        if ANSIBLE_BIN:
            fns.append(ansible)
        got = median_of(fns, rounds=LIGHT_ROUNDS)
        fl, og = got[0], got[1]
        record("l", f"OpenSSH floor: `ssh host hostname` over {n} hosts, xargs -P {par}", fl, "s")
        record("l", f"opsgraph apply: 1 job over {n} hosts, --concurrency {par} (whole command)", og, "s")
        record("l", "opsgraph / OpenSSH floor", og / fl, "x", "(target <= 1.2x)")
        if ANSIBLE_BIN:
            an = got[2]
            record("l", f"ansible ad-hoc `command: hostname` over {n} hosts, forks {par}", an, "s")
            record("l", "ansible / opsgraph", an / og, "x", "(target >= 5x)")
        else:
            print("(l) Ansible: SKIPPED (no ANSIBLE_BIN)", flush=True)
    finally:
        subprocess.run([OPSGRAPH, "lab", "fleet", "light", "down", "--dir", d], stdout=subprocess.DEVNULL)


def main():
    print(f"bench: work directory {WORK}; {ROUNDS} interleaved rounds per figure", flush=True)
    try:
        if wanted("f"):
            first_job_latency()
        if not wanted("a"):
            pass
        elif ANSIBLE_BIN:
            per_job_vs_ansible()
            fanout_local()
        else:
            # The CLI's own per-job figures need no Ansible (issue [N] 5 compares them with the
            # runtime bench's chain).
            per_job_vs_ansible()
            print("(a) fan-out beside Ansible: SKIPPED (no Ansible: bench/run installs ansible-core into a virtual environment)")
        if wanted("d"):
            memory_10k()
        if wanted("e"):
            ssh_fanout()
        if wanted("n"):
            agents()
        if wanted("w"):
            ssh_warm_only()
        if wanted("l"):
            light_fanout()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    print()
    print("| group | figure | value | note |")
    print("|---|---|---|---|")
    for group, figure, value, unit, note in rows:
        print(f"| {group} | {figure} | {value:,.3f} {unit} | {note} |")


if __name__ == "__main__":
    main()
