//! Quoting for POSIX shells: the one place a string becomes a shell word (SSH remote commands).

/// `s` as one word for any POSIX shell: inside single quotes, with each `'` written `'\''`.
/// Every string comes back as exactly itself: empty (`''`), newlines, a leading `-` (quoting does
/// not stop a program from reading it as an option: pass `--` where that matters), `$`, `` ` ``,
/// `\`, globs. (A NUL cannot be in an argument or an environment value at all.)
pub fn shell_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}
