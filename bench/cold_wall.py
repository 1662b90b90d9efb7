#!/usr/bin/env python3
r"""Wall and CPU time of a cold `opsgraph apply` (issue [N] 5, docs/benchmarks.md): for each binary
given, ROUNDS runs of one job on a fresh data directory, the binaries alternated (their order
reversed every other round); the median time from the command line to the job's first
instruction (its `date` stamp), of the whole command, and its CPU time (user + sys of the
command and what it waited for). Standard library only.

  python3 bench/cold_wall.py ROUNDS before after
  LD_PRELOAD=/tmp/nofsync.so python3 bench/cold_wall.py ROUNDS before after   # fsync made free, with
  printf 'int fsync(int f){return 0;}\nint fdatasync(int f){return 0;}\n' | gcc -shared -fPIC -x c - -o /tmp/nofsync.so
"""
import resource, os, subprocess, sys, tempfile, time, statistics, shutil

rounds=int(sys.argv[1]); bins=sys.argv[2:]
W=tempfile.mkdtemp(prefix="opsgraph-cold-wall-")
os.makedirs(f"{W}/pack")
stamp=f"{W}/stamp"
open(f"{W}/pack/pack.yaml","w").write("scenario_pack: {id: bench, version: 1.0.0, resource_types: [bench.thing], actions: [chain], plan_templates: [{id: bench.chain, entrypoint: c0, action: chain}]}\n")
open(f"{W}/pack/jobs.yaml","w").write("job: {id: c0, type: noop, run: {executor: local, command: [sh, -c, 'date +%%s.%%N > %s']}}\n" % stamp)
open(f"{W}/pack/templates.yaml","w").write("plan_template: {id: bench.chain, action: chain, stages: [{id: all, name: All, jobs: [c0]}], jobs: [c0]}\n")
open(f"{W}/intent.yaml","w").write("intent: {target_resource_type: bench.thing, action: chain, name: bench, environment: bench}\n")
first={b:[] for b in bins}; whole={b:[] for b in bins}; cpu={b:[] for b in bins}
for r in range(rounds):
    for b in (bins if r%2==0 else bins[::-1]):
        d=tempfile.mkdtemp(dir=W)
        ru=resource.getrusage(resource.RUSAGE_CHILDREN); c0=ru.ru_utime+ru.ru_stime
        t0=time.time(); p=time.perf_counter()
        subprocess.run([b,"apply","--yes","-f",f"{W}/intent.yaml","--packs",f"{W}/pack","--data-dir",d],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL,check=True)
        whole[b].append((time.perf_counter()-p)*1e3)
        ru=resource.getrusage(resource.RUSAGE_CHILDREN); cpu[b].append((ru.ru_utime+ru.ru_stime-c0)*1e3)
        first[b].append((float(open(stamp).read())-t0)*1e3)
        shutil.rmtree(d)
for b in bins:
    print(f"{b}: first job median {statistics.median(first[b]):.2f} ms (min {min(first[b]):.2f}), whole command median {statistics.median(whole[b]):.2f} ms (min {min(whole[b]):.2f}), cpu median {statistics.median(cpu[b]):.2f} ms, n={rounds}")
if len(bins)==2:
    a,b=bins
    print(f"ratio {b}/{a}: first {statistics.median(first[b])/statistics.median(first[a]):.3f}, whole {statistics.median(whole[b])/statistics.median(whole[a]):.3f}")
shutil.rmtree(W)
