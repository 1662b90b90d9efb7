#!/bin/sh
# opsgraph fleet: boots one host (docs/fleet.md). Embedded in the binary; `opsgraph lab fleet up`
# writes it to FLEET_DIR/boot.sh and runs it as root, once per host:
#
#   boot.sh outer HOST_DIR LOWER CGROUP_DIR...
#
# outer: moves itself into the host's own cgroups (made by the caller in every hierarchy, so the
#        host's systemd sees that subtree as its root and never writes into the machine's), then
#        re-runs this script as `inner` in new PID, mount, UTS, IPC, cgroup and network
#        namespaces. --kill-child: when this launcher dies, the host dies with it.
# inner: PID 1 of the new PID namespace. Mounts the host's root (an overlay of the cached root
#        filesystem and HOST_DIR/upper), a private /dev (never the machine's), proc with
#        /proc/sys read-only except /proc/sys/net (the host's own network namespace's
#        settings, as `docker run --sysctl net.*` allows), sysfs read-only, a tmpfs on /run; then execs systemd. Every mount
#        lives in the host's mount namespace: when the host dies, they go with it.
set -eu

phase=$1
host_dir=$2
lower=$3
shift 3

case $phase in
outer)
    for cg in "$@"; do
        echo $$ >"$cg/cgroup.procs"
    done
    exec unshare --pid --fork --kill-child --mount --uts --ipc --cgroup --net --propagation private \
        "$0" inner "$host_dir" "$lower"
    ;;
inner) ;;
*)
    echo "boot.sh: unknown phase '$phase'" >&2
    exit 2
    ;;
esac

root=$host_dir/root
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$host_dir/upper,workdir=$host_dir/work" "$root"

mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount --bind "$root/proc/sys" "$root/proc/sys"
mount -o remount,bind,ro,nosuid,nodev,noexec "$root/proc/sys"
# /proc/sys/net shows this network namespace's own settings (ip_forward, bridge-nf-call-*):
# writable, since they change nothing of the machine's.
mount --bind "$root/proc/sys/net" "$root/proc/sys/net"
mount -o remount,bind,rw,nosuid,nodev,noexec "$root/proc/sys/net"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"

dev=$root/dev
mount -t tmpfs -o mode=0755,nosuid,noexec,size=4m tmpfs "$dev"
mknod -m 0666 "$dev/null" c 1 3
mknod -m 0666 "$dev/zero" c 1 5
mknod -m 0666 "$dev/full" c 1 7
mknod -m 0666 "$dev/random" c 1 8
mknod -m 0666 "$dev/urandom" c 1 9
mknod -m 0666 "$dev/tty" c 5 0
# The console is a null device: the host's systemd may chown and chmod it freely.
mknod -m 0600 "$dev/console" c 1 3
mkdir -m 0755 "$dev/pts"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5,nosuid,noexec devpts "$dev/pts"
ln -s pts/ptmx "$dev/ptmx"
mkdir -m 1777 "$dev/shm"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$dev/shm"
ln -s /proc/self/fd "$dev/fd"
ln -s /proc/self/fd/0 "$dev/stdin"
ln -s /proc/self/fd/1 "$dev/stdout"
ln -s /proc/self/fd/2 "$dev/stderr"

mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$root/run"

exec /usr/bin/env -i container=opsgraph-fleet /usr/sbin/chroot "$root" /lib/systemd/systemd --system
