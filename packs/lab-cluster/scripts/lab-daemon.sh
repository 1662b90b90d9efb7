#!/bin/sh
# opsgraph pack lab-cluster - lab-daemon: the body of every lab "service" (containerd, apiserver,
# cni, kubelet). Not a job: jobs copy it to <node>/bin/lab-daemon and start it with lab_start.
#
#   lab-daemon NAME DIR [NEEDS]
#
# Writes its pid to DIR/run/NAME.pid, copies DIR/etc/NAME.conf (the configuration it "loaded")
# to DIR/run/NAME.loaded, then writes the epoch seconds to DIR/run/NAME.heartbeat every second.
# With NEEDS (another daemon of DIR, such as containerd for kubelet) it beats only while that
# daemon's process is alive, so a dead runtime makes the node NotReady. It exits by itself
# when its pid file no longer names it (stopped, replaced, or the node directory removed).
# No `-e`: a failed write is retried on the next beat.

name=${1:?usage: lab-daemon NAME DIR [NEEDS]}
dir=${2:?usage: lab-daemon NAME DIR [NEEDS]}
needs=${3:-}
run=$dir/run
pidfile=$run/$name.pid
heartbeat=$run/$name.heartbeat

say() { printf '%s %s[%s]: %s\n' "$(date '+%Y-%m-%dT%H:%M:%S')" "$name" "$$" "$*"; }

mkdir -p "$run" || exit 1
echo $$ >"$pidfile.$$" && mv -f "$pidfile.$$" "$pidfile" || exit 1
if [ -f "$dir/etc/$name.conf" ]; then
    cp "$dir/etc/$name.conf" "$run/$name.loaded"
else
    : >"$run/$name.loaded"
fi
trap 'say "stopping"; exit 0' TERM INT
say "started${needs:+, needs $needs}"

# alive PID: a live process, not a zombie left by a PID 1 that does not reap.
alive() {
    [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
    if [ -r "/proc/$1/stat" ] && grep -q ') Z ' "/proc/$1/stat" 2>/dev/null; then
        return 1
    fi
    return 0
}

state=ready
while :; do
    owner=
    read -r owner 2>/dev/null <"$pidfile" || true
    if [ "$owner" != "$$" ]; then
        say "pid file $pidfile no longer names this process: exiting"
        exit 0
    fi
    ok=1
    if [ -n "$needs" ]; then
        dep=
        read -r dep 2>/dev/null <"$run/$needs.pid" || true
        alive "$dep" || ok=0
    fi
    if [ "$ok" = 1 ]; then
        date +%s >"$heartbeat.tmp" && mv -f "$heartbeat.tmp" "$heartbeat"
        [ "$state" = ready ] || say "$needs is back: ready"
        state=ready
    elif [ "$state" = ready ]; then
        say "$needs is not running: not ready"
        state=waiting
    fi
    sleep 1
done
