//! Stopping a remote command when its run times out or is cancelled.
//!
//! Killing the local `ssh` client does not stop the remote command: without a terminal, `sshd`
//! only closes the session's pipes, and a command that neither reads stdin nor writes output
//! (`apt-get update` waiting on a mirror, `sleep 600`) runs on, holding its locks. OpenSSH can
//! send a signal over a session, but `sshd` ignores such requests. So the remote command is
//! wrapped ([`wrap`]):
//!
//! ```text
//! exec setsid -w sh -c '(umask 077 && set -C && echo "$$" >"$1") || exit 125; OPSGRAPH_GROUP_FILE=$1; trap '\''rm -f -- "$OPSGRAPH_GROUP_FILE"'\'' EXIT; c=$2; set -- "$1"; eval "$c"' \
//!     sh "${TMPDIR:-/tmp}/opsgraph-pg.<token>" '<command>'
//! ```
//!
//! A command longer than 16 KiB once quoted comes on a here-document instead (`3<<'OPSGRAPH_<token>'`,
//! read with `c=$(cat <&3)`), so quoting it once more cannot push it past the one argument a
//! shell takes.
//!
//! `setsid` makes the `sh` the leader of a new session and process group (its pid is both ids)
//! whatever the login shell's job control does, and that pid is written to a file named by a
//! 128-bit random token of this attempt (created exclusively, `0600`: a file planted under that
//! name fails the run instead of being trusted). The wrapper removes the file when the command
//! ends (an `EXIT` trap: the command may `exit` itself; the name is kept in a variable when the
//! trap is set, so a command that runs `set -- …` does not change what is removed). When the login
//! shell already leads a session and process group of its own — OpenSSH's `sshd` starts every
//! command without a terminal so, and `/proc/$$/stat` says it with builtins alone — the `sh` is
//! exec'd in place instead (the same pid and group, without `setsid -w`'s exec and fork); so it is
//! when the host has no `setsid` (it is in util-linux, essential on Debian).
//!
//! On timeout or cancel, after the local client was stopped, a second `ssh` (through the same
//! multiplexing master when there is one) runs [`kill_script`]: it reads the file, sends SIGTERM
//! to the group and to every process of the session (a process that made a group of its own, as
//! a shell with job control does, is still in the session), waits the run's grace, sends SIGKILL
//! to what is left, checks that nothing of it is alive (zombies do not count) and removes the
//! file. What it did comes back as [`Run::remote_stop`](crate::Run::remote_stop), which names
//! the group and the host, and says so when stopping failed and why: never silently.
//!
//! Limits: a process that left the session (`setsid` of its own, a daemon) is not followed; and
//! when the client was stopped before the host started the command, there is no file yet and
//! nothing is found (the command may then start and run alone: it is reported as "nothing
//! recorded").

use std::time::Duration;

use crate::quote::shell_quote;

/// Where the per-attempt file lives on the host, and its name before the token.
const FILE_PREFIX: &str = "${TMPDIR:-/tmp}/opsgraph-pg.";
/// What the wrapper's `sh` runs: `$1` the file; the command comes on descriptor 3. Exit 125
/// when the file cannot be made or the command not read (nothing ran).
const WRAPPER: &str = r#"(umask 077 && set -C && echo "$$" >"$1") || { echo "opsgraph: cannot record the process group in $1" >&2; exit 125; }; OPSGRAPH_GROUP_FILE=$1; trap 'rm -f -- "$OPSGRAPH_GROUP_FILE"' EXIT; c=$(cat <&3) || exit 125; exec 3<&-; eval "$c""#;

/// A fresh random token for one run's file: 32 hex digits from the kernel's generator.
pub(crate) fn token() -> Result<String, String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The wrapper of a short command, which comes quoted as `$2`: no `cat` to start on the host.
const WRAPPER_INLINE: &str = r#"(umask 077 && set -C && echo "$$" >"$1") || { echo "opsgraph: cannot record the process group in $1" >&2; exit 125; }; OPSGRAPH_GROUP_FILE=$1; trap 'rm -f -- "$OPSGRAPH_GROUP_FILE"' EXIT; c=$2; set -- "$1"; eval "$c""#;
/// Whether the login shell already leads its own session and process group (its pid is both ids,
/// fields 5 and 6 of `/proc/$$/stat`), as OpenSSH's `sshd` makes every command without a terminal:
/// then the wrapper's `sh` is exec'd in place, and `setsid -w` (an exec and a fork on the host,
/// about 3 ms of a warm job under load) is not needed. Builtins only; where it cannot tell (no
/// `/proc`, a shell that does not split the fields), `setsid` is used as before.
const LEADER: &str =
    r#"{ read -r l </proc/$$/stat; } 2>/dev/null && set -- ${l##*") "} && [ "$3" = $$ ] && [ "$4" = $$ ]"#;
/// The longest command (quoted once more) that travels as an argument of the wrapper; longer ones
/// come on a here-document.
const INLINE_MAX: usize = 16 * 1024;

/// The remote command that runs `command` (a string for a POSIX shell) in a session of its own
/// and records its process group id in the file of `token`. A short command travels as one more
/// quoted argument of the wrapper (most do: a job's argv or a script of a few KiB). A longer one
/// travels as a here-document on descriptor 3 (its delimiter holds the token, so no line of the
/// command can end it), read with `cat`: quoting it again would make a quote-heavy command up to
/// four times longer than the one argument a shell can take. The `cat`, a fork and an exec on the
/// host, was about 1 ms of every warm SSH job.
pub(crate) fn wrap(command: &str, token: &str) -> String {
    let start = format!("f=\"{FILE_PREFIX}{token}\"; s=; {LEADER} || {{ command -v setsid >/dev/null 2>&1 && s='setsid -w'; }}; exec $s sh -c");
    let quoted = shell_quote(command);
    if quoted.len() <= INLINE_MAX {
        return format!("{start} {} sh \"$f\" {quoted}", shell_quote(WRAPPER_INLINE));
    }
    format!("{start} {} sh \"$f\" 3<<'OPSGRAPH_{token}'\n{command}\nOPSGRAPH_{token}\n", shell_quote(WRAPPER))
}

/// The script that stops the group recorded under `token` (TERM, `grace`, KILL). It prints one
/// word on stdout: `none` (no file: the command ended, or never started), `gone` (the group had
/// already ended), `term` (it ended on SIGTERM) or `kill` (it needed SIGKILL), after the group
/// id and a space; on failure it says why on stderr and exits 1.
pub(crate) fn kill_script(token: &str, grace: Duration) -> String {
    // Steps of 50 ms; at least one.
    let steps = (grace.as_millis() / 50).max(1);
    format!(
        r#"f="{FILE_PREFIX}{token}"
[ -e "$f" ] || {{ echo "- none"; exit 0; }}
read -r p <"$f" || {{ echo "cannot read $f" >&2; exit 1; }}
case $p in ''|*[!0-9]*|0|1) echo "$f holds no process group id" >&2; exit 1 ;; esac
members() {{
  [ -r /proc/self/stat ] || {{ kill -0 -- "-$p" 2>/dev/null && echo "-$p"; return; }}
  for s in /proc/[0-9]*/stat; do
    read -r l <"$s" 2>/dev/null || continue
    set -- ${{l##*) }}
    [ "$1" = Z ] || [ "$1" = X ] && continue
    [ "$3" = "$p" ] || [ "$4" = "$p" ] || continue
    q=${{s#/proc/}}; echo "${{q%/stat}}"
  done
}}
m=$(members)
if [ -z "$m" ]; then rm -f -- "$f"; echo "$p gone"; exit 0; fi
kill -s TERM -- "-$p" $m 2>/dev/null
i=0
while [ "$i" -lt {steps} ]; do
  m=$(members); [ -z "$m" ] && break
  sleep 0.05; i=$((i + 1))
done
if [ -z "$m" ]; then rm -f -- "$f"; echo "$p term"; exit 0; fi
e=$(kill -s KILL -- "-$p" $m 2>&1)
i=0
while [ "$i" -lt 40 ]; do
  m=$(members); [ -z "$m" ] && break
  sleep 0.05; i=$((i + 1))
done
if [ -z "$m" ]; then rm -f -- "$f"; echo "$p kill"; exit 0; fi
echo "processes $(echo $m) of group $p are still alive after SIGKILL${{e:+ ($e)}}" >&2
exit 1
"#
    )
}

/// The sentence for what [`kill_script`] answered (`Ok(stdout)`) or why it failed (`Err`).
pub(crate) fn describe(host: &str, answer: Result<String, String>) -> String {
    let answer = match answer {
        Ok(out) => out,
        Err(why) => return format!("stopping the remote process group on {host} failed: {why}"),
    };
    let mut words = answer.split_whitespace();
    match (words.next(), words.next()) {
        (Some(_), Some("none")) => {
            format!("no remote process group was recorded on {host} (the command ended, or had not started)")
        }
        (Some(pg), Some("gone")) => format!("the remote process group {pg} on {host} had already ended"),
        (Some(pg), Some("term")) => format!("the remote process group {pg} on {host} was terminated (SIGTERM)"),
        (Some(pg), Some("kill")) => {
            format!("the remote process group {pg} on {host} was killed (SIGKILL after SIGTERM and the grace)")
        }
        _ => format!("stopping the remote process group on {host} failed: unexpected answer `{}`", answer.trim()),
    }
}
