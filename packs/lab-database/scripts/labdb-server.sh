#!/bin/sh
# opsgraph pack lab-database - labdb-server: the lab database server process. Not a job:
# install-labdb copies it to <node>/labdb/bin/labdb-server and start-labdb starts it.
#
#   labdb-server HOME      (HOME = <node>/labdb)
#
# Reads HOME/data/labdb.conf (PORT=...), writes its pid to HOME/run/labdb-server.pid and the
# port it "listens" on to HOME/run/labdb.port, then writes the epoch seconds to
# HOME/run/labdb-server.heartbeat every second. Exits by itself when its pid file no longer
# names it (stopped, replaced, or the directory removed). No `-e`.

home=${1:?usage: labdb-server HOME}
run=$home/run
pidfile=$run/labdb-server.pid
heartbeat=$run/labdb-server.heartbeat

say() { printf '%s labdb-server[%s]: %s\n' "$(date '+%Y-%m-%dT%H:%M:%S')" "$$" "$*"; }

[ -f "$home/data/LABDB_VERSION" ] || { say "FATAL: $home/data is not a labdb data directory"; exit 1; }
port=$(sed -n 's/^PORT=//p' "$home/data/labdb.conf" 2>/dev/null | head -n 1)
case $port in '' | *[!0-9]*) say "FATAL: no PORT in $home/data/labdb.conf"; exit 1 ;; esac
mkdir -p "$run" || exit 1
echo $$ >"$pidfile.$$" && mv -f "$pidfile.$$" "$pidfile" || exit 1
echo "$port" >"$run/labdb.port"
trap 'say "received fast shutdown request"; exit 0' TERM INT
say "database system is ready to accept connections on port $port"
while :; do
    owner=
    read -r owner 2>/dev/null <"$pidfile" || true
    if [ "$owner" != "$$" ]; then
        say "pid file no longer names this process: shutting down"
        exit 0
    fi
    date +%s >"$heartbeat.tmp" && mv -f "$heartbeat.tmp" "$heartbeat"
    sleep 1
done
