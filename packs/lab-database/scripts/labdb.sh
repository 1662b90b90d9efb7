#!/bin/sh
# opsgraph pack lab-database - the labdb client. Not a job: install-labdb copies it to
# <node>/labdb/bin/labdb.
#
#   labdb [-d DATABASE] [-U USER] version | ping | query SQL
#   labdb createuser USER          (password from LABDB_PASSWORD)
#   labdb createdb DATABASE OWNER
#
# Every command but `version` talks to the server: it answers only while the labdb-server
# process of this installation is alive and beating (<labdb>/run/labdb-server.pid and
# .heartbeat). With -U the password comes from LABDB_PASSWORD (never from argv) and is checked
# against the user's salted SHA-256; with -d the database must exist and be owned by the user.
# Queries: select 1, select current_database(), select current_user, select version().
set -eu
case $0 in */*) bindir=${0%/*} ;; *) bindir=. ;; esac
home=$(cd "$bindir/.." && pwd)
data=$home/data
run=$home/run
VERSION="labdb 1.0.0"

die() {
    printf 'labdb: %s\n' "$*" >&2
    exit 2
}
name_ok() { printf '%s\n' "$1" | grep -Eqx '[a-z_][a-z0-9_]{0,62}'; }
hash_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        printf '%s:%s' "$1" "$2" | sha256sum | cut -d' ' -f1
    else
        printf '%s:%s' "$1" "$2" | cksum | cut -d' ' -f1
    fi
}
server_up() {
    pid=$(head -n 1 "$run/labdb-server.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    if [ -r "/proc/$pid/stat" ] && grep -q ') Z ' "/proc/$pid/stat" 2>/dev/null; then return 1; fi
    hb=$(head -n 1 "$run/labdb-server.heartbeat" 2>/dev/null || echo 0)
    [ $(($(date +%s) - ${hb:-0})) -le 3 ]
}
connect() {
    server_up && return 0
    port=$(sed -n 's/^PORT=//p' "$data/labdb.conf" 2>/dev/null | head -n 1)
    die "could not connect to server: Connection refused
	Is the server running on host \"127.0.0.1\" and accepting TCP/IP connections on port ${port:-?}?"
}

DB=
USER_NAME=
while [ $# -gt 0 ]; do
    case $1 in
        -d) DB=${2:?-d needs a database}; shift 2 ;;
        -U) USER_NAME=${2:?-U needs a user}; shift 2 ;;
        *) break ;;
    esac
done
cmd=${1:-}
[ $# -gt 0 ] && shift

case $cmd in
    version) echo "$VERSION"; exit 0 ;;
    '') die "usage: labdb [-d DATABASE] [-U USER] version | ping | query SQL | createuser USER | createdb DATABASE OWNER" ;;
esac
[ -f "$data/LABDB_VERSION" ] || die "$data is not a labdb data directory"
connect

if [ -n "$USER_NAME" ]; then
    name_ok "$USER_NAME" || die "FATAL:  invalid user name \"$USER_NAME\""
    ufile=$data/users/$USER_NAME
    [ -f "$ufile" ] || die "FATAL:  password authentication failed for user \"$USER_NAME\""
    salt=$(sed -n 's/^SALT=//p' "$ufile")
    want=$(sed -n 's/^HASH=//p' "$ufile")
    [ "$(hash_of "$salt" "${LABDB_PASSWORD:-}")" = "$want" ] ||
        die "FATAL:  password authentication failed for user \"$USER_NAME\""
fi
if [ -n "$DB" ]; then
    name_ok "$DB" || die "FATAL:  invalid database name \"$DB\""
    [ -d "$data/databases/$DB" ] || die "FATAL:  database \"$DB\" does not exist"
    if [ -n "$USER_NAME" ] && [ "$(sed -n 's/^OWNER=//p' "$data/databases/$DB/OWNER" 2>/dev/null)" != "$USER_NAME" ]; then
        die "FATAL:  permission denied for database \"$DB\""
    fi
fi

case $cmd in
    ping) echo "accepting connections" ;;
    query)
        sql=$(printf '%s' "${1:-}" | tr '[:upper:]' '[:lower:]' | sed -e 's/;[[:space:]]*$//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/[[:space:]][[:space:]]*/ /g')
        case $sql in
            "select 1") echo 1 ;;
            "select current_database()") echo "${DB:-labdb}" ;;
            "select current_user") echo "${USER_NAME:-labdb}" ;;
            "select version()") echo "$VERSION (lab)" ;;
            *)
                printf 'ERROR:  syntax error at or near "%s"\n' "${sql%% *}" >&2
                exit 1
                ;;
        esac
        ;;
    createuser)
        u=${1:-}
        name_ok "$u" || die "ERROR:  invalid user name \"$u\""
        [ -n "${LABDB_PASSWORD:-}" ] || die "ERROR:  createuser needs LABDB_PASSWORD"
        mkdir -p "$data/users"
        salt=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
        (
            umask 077
            printf 'SALT=%s\nHASH=%s\n' "$salt" "$(hash_of "$salt" "$LABDB_PASSWORD")" >"$data/users/.$u.tmp"
        )
        mv -f "$data/users/.$u.tmp" "$data/users/$u"
        echo "CREATE ROLE"
        ;;
    createdb)
        d=${1:-}
        o=${2:-}
        name_ok "$d" || die "ERROR:  invalid database name \"$d\""
        [ -f "$data/users/$o" ] || die "ERROR:  role \"$o\" does not exist"
        if [ -d "$data/databases/$d" ]; then
            [ "$(sed -n 's/^OWNER=//p' "$data/databases/$d/OWNER")" = "$o" ] ||
                die "ERROR:  database \"$d\" already exists with another owner"
        else
            mkdir -p "$data/databases/$d"
            printf 'OWNER=%s\n' "$o" >"$data/databases/$d/OWNER"
        fi
        echo "CREATE DATABASE"
        ;;
    *) die "unknown command '$cmd'" ;;
esac
