//! Stopping a remote command when its run times out or is cancelled.
//!
//! Killing the local `ssh` client does not stop the remote command: without a terminal, `sshd`
//! only closes the session's pipes, and a command that neither reads stdin nor writes output
//! (`apt-get update` waiting on a mirror, `sleep 600`) runs on, holding its locks. OpenSSH can
//! send a signal over a session, but `sshd` ignores such requests. So the remote command is
//! wrapped ([`wrap`]) so that it runs in a session and process group of its own that a second
//! `ssh` can find and stop ([`kill_script`]).
//!
//! **The mark (OpenSSH's case).** `sshd` starts every command without a terminal as
//! `<login shell> -c '<string>'` in a session and process group of its own, led by that shell
//! (its pid is both ids). The string begins with `: OPSGRAPH_<token>` (a 128-bit random token of
//! this attempt), so the shell's own command line (`/proc/<pid>/cmdline`) names the job for as
//! long as it lives, and nothing needs to be written on the host. When `/proc/$$/stat` says (with
//! builtins alone) that the login shell leads its session and group, it runs the command itself
//! (`eval`, then `exit`): the shell stays the command's parent and never execs the command in its
//! place, so the mark stays on the session's leader until the command ends.
//!
//! ```text
//! : OPSGRAPH_<token>; c='<command>'; if <leads its session and group>; then set --; eval "$c"; exit; fi; <the file, below>
//! ```
//!
//! **The file (elsewhere).** Where that cannot be told (no `/proc`, a shell that does not split
//! the fields, a login shell that does not lead its group), the command runs under
//! `setsid -w sh -c` (in place without `setsid` on the host), whose `sh` writes its pid to
//! `${TMPDIR:-/tmp}/opsgraph-pg.<token>` (created exclusively, `0600`: a file planted under that
//! name fails the run with exit 125 instead of being trusted) and removes it when the command ends
//! (an `EXIT` trap; the name is kept in a variable when the trap is set, so a command that runs
//! `set -- …` does not change what is removed). That was every job's way until 6 Dec 2026: an exec,
//! a subshell for the `umask`, a fork for the command and `rm`'s fork and exec on the host per job.
//!
//! A command longer than 16 KiB once quoted comes on a here-document instead
//! (`3<<'OPSGRAPH_<token>'`, read with `c=$(cat <&3)`), so quoting it once more cannot push it
//! past the one argument a shell takes.
//!
//! **Stopping.** On timeout or cancel, after the local client was stopped, a second `ssh` (through
//! the same multiplexing master when there is one) runs [`kill_script`]. It takes the group from
//! the file when there is one; else it looks for the session leader that carries the mark: a
//! process that leads its own session and group, has the kill script's own uid (the whole `Uid:`
//! line of `/proc/<pid>/status`), and whose command line holds `OPSGRAPH_<token>` (the script
//! never writes the mark whole, so it does not find itself). Two such processes (someone copied
//! the mark from the job's command line into a session of their own) and it stops neither and
//! fails; none, and it answers that nothing was found. It then sends SIGTERM to the group and to
//! every process of the session (a process that made a group of its own, as a shell with job
//! control does, is still in the session), waits the run's grace, sends SIGKILL to what is left,
//! checks that nothing of it is alive (zombies do not count) and removes the file if there was
//! one. Pid reuse: Linux does not hand out a pid while a process still has it as its session or
//! group id, so the ids stay the job's while any process of it lives; the leader's start time is
//! noted when it is found, and a process under the leader's pid with another start time (the job
//! ended and the pid came round again) ends the stop without a signal. What it did comes back as
//! [`Run::remote_stop`](crate::Run::remote_stop), which names the group and the host, and says so
//! when stopping failed and why: never silently.
//!
//! Limits: a process that left the session (`setsid` of its own, a daemon) is not followed; and
//! when the client was stopped before the host started the command, nothing is found (the command
//! may then start and run alone: it is reported as "no remote process group of the job was
//! found").

use std::time::Duration;

use crate::quote::shell_quote;

/// Where the per-attempt file lives on the host, and its name before the token.
const FILE_PREFIX: &str = "${TMPDIR:-/tmp}/opsgraph-pg.";
/// What the login shell's command line begins with, before the token: the job's mark.
const MARK: &str = "OPSGRAPH_";

/// A fresh random token for one run: 32 hex digits from the kernel's generator.
pub(crate) fn token() -> Result<String, String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `token` is one [`token`] could have made: it is written into shell scripts unquoted.
pub(crate) fn is_token(token: &str) -> bool {
    token.len() == 32 && token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The file wrapper's `sh`: `$1` the file, `$2` the command. Exit 125 when the file cannot be
/// made (nothing ran).
const WRAPPER_FILE: &str = r#"(umask 077 && set -C && echo "$$" >"$1") || { echo "opsgraph: cannot record the process group in $1" >&2; exit 125; }; OPSGRAPH_GROUP_FILE=$1; trap 'rm -f -- "$OPSGRAPH_GROUP_FILE"' EXIT; c=$2; set -- "$1"; eval "$c""#;
/// Whether the login shell already leads its own session and process group (its pid is both ids,
/// fields 5 and 6 of `/proc/$$/stat`), as OpenSSH's `sshd` makes every command without a terminal:
/// then the command runs in it, found by the mark. Builtins only; where it cannot tell (no
/// `/proc`, a shell that does not split the fields), the file is used.
const LEADER: &str =
    r#"{ read -r l </proc/$$/stat; } 2>/dev/null && set -- ${l##*") "} && [ "$3" = $$ ] && [ "$4" = $$ ]"#;
/// The longest command (quoted once more) that travels as an argument of the wrapper; longer ones
/// come on a here-document.
const INLINE_MAX: usize = 16 * 1024;

/// The remote command that runs `command` (a string for a POSIX shell) in a session of its own,
/// findable by `token` (see the module doc). A short command travels quoted, as `c='…'` (most do:
/// a job's argv or a script of a few KiB). A longer one travels as a here-document on descriptor 3
/// (its delimiter holds the token, so no line of the command can end it), read with `cat`:
/// quoting it again would make a quote-heavy command up to four times longer than the one
/// argument a shell can take.
pub(crate) fn wrap(command: &str, token: &str) -> String {
    let run = format!(
        "if {LEADER}; then set --; eval \"$c\"; exit; fi; f=\"{FILE_PREFIX}{token}\"; s=; \
         command -v setsid >/dev/null 2>&1 && s='setsid -w'; exec $s sh -c {} sh \"$f\" \"$c\"",
        shell_quote(WRAPPER_FILE)
    );
    let quoted = shell_quote(command);
    if quoted.len() <= INLINE_MAX {
        return format!(": {MARK}{token}; c={quoted}; {run}");
    }
    format!(": {MARK}{token}; {{ c=$(cat <&3) || exit 125; exec 3<&-; {run}; }} 3<<'{MARK}{token}'\n{command}\n{MARK}{token}\n")
}

/// The script that stops the job of `token` (TERM, `grace`, KILL): its group from the file, else
/// the session leader carrying the mark. It prints one word on stdout: `none` (nothing found: the
/// command ended, or never started), `gone` (the group had already ended), `term` (it ended on
/// SIGTERM) or `kill` (it needed SIGKILL), after the group id and a space; on failure it says why
/// on stderr and exits 1.
pub(crate) fn kill_script(token: &str, grace: Duration) -> String {
    // Steps of 50 ms; at least one.
    let steps = (grace.as_millis() / 50).max(1);
    let (mark_head, mark_tail) = MARK.split_at(MARK.len() - 1);
    format!(
        r#"f="{FILE_PREFIX}{token}"
# The mark, never written whole here: this script's own command line does not carry it.
mk="{mark_head}"; mk="${{mk}}{mark_tail}{token}"
# The fields of /proc/<pid>/stat after the command's name are $1 (state), $3 (group), $4 (session), ${{20}} (start).
uid_of() {{ {{ while read -r k v; do [ "$k" = Uid: ] && {{ echo "$v"; break; }}; done <"/proc/$1/status"; }} 2>/dev/null; }}
start_of() {{ {{ read -r l <"/proc/$1/stat"; }} 2>/dev/null || return 1; set -- ${{l##*) }}; echo "${{20}}"; }}
if [ -e "$f" ]; then
  read -r p <"$f" || {{ echo "cannot read $f" >&2; exit 1; }}
  case $p in ''|*[!0-9]*|0|1) echo "$f holds no process group id" >&2; exit 1 ;; esac
elif [ -r /proc/self/stat ]; then
  command -v grep >/dev/null 2>&1 || {{ echo "no grep on the host to find the job's session" >&2; exit 1; }}
  c=
  for s in /proc/[0-9]*/stat; do
    {{ read -r l <"$s"; }} 2>/dev/null || continue
    q=${{s#/proc/}}; q=${{q%/stat}}
    set -- ${{l##*) }}
    [ "$1" = Z ] || [ "$1" = X ] || [ "$q" = $$ ] && continue
    [ "$3" = "$q" ] && [ "$4" = "$q" ] && c="$c /proc/$q/cmdline"
  done
  h=
  case $mk in OPSGRAPH_????????????????????????????????) ;; *) echo "no mark to look for" >&2; exit 1 ;; esac
  [ -n "$c" ] && h=$(grep -lF -e "$mk" $c 2>/dev/null)
  me=$(uid_of $$)
  p=
  for q in $h; do
    q=${{q#/proc/}}; q=${{q%/cmdline}}
    [ -n "$me" ] && [ "$(uid_of "$q")" = "$me" ] || continue
    [ -z "$p" ] || {{ echo "processes $p and $q both carry the job's mark: stopping neither" >&2; exit 1; }}
    p=$q
  done
  [ -n "$p" ] || {{ echo "- none"; exit 0; }}
else
  echo "- none"; exit 0
fi
st=$(start_of "$p")
members() {{
  [ -r /proc/self/stat ] || {{ kill -0 -- "-$p" 2>/dev/null && echo "-$p"; return; }}
  # A process under the leader's pid that is not the one found: the job ended and the pid came round.
  t=$(start_of "$p") && [ "$t" != "$st" ] && return
  for s in /proc/[0-9]*/stat; do
    {{ read -r l <"$s"; }} 2>/dev/null || continue
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
            format!("no remote process group of the job was found on {host} (the command ended, or had not started)")
        }
        (Some(pg), Some("gone")) => format!("the remote process group {pg} on {host} had already ended"),
        (Some(pg), Some("term")) => format!("the remote process group {pg} on {host} was terminated (SIGTERM)"),
        (Some(pg), Some("kill")) => {
            format!("the remote process group {pg} on {host} was killed (SIGKILL after SIGTERM and the grace)")
        }
        _ => format!("stopping the remote process group on {host} failed: unexpected answer `{}`", answer.trim()),
    }
}
