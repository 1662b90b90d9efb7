//! Helpers for tests, here and in other crates (feature `testing`): temporary directories, a
//! throwaway `sshd` on loopback, a tiny HTTP server, and the injection corpus.
//!
//! ```ignore
//! let Some(sshd) = Sshd::start_or_skip("ssh_runs_commands") else { return };
//! let run = sshd.executor().run(&Spec::argv(["true"]), &Cancel::new());
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::SshExecutor;

/// A directory under the system's temp dir, removed on drop. Its path is short (`/tmp/og-…`), so
/// it can hold SSH control sockets.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new() -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("og-{}-{n}-{nanos:x}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("failed to create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Default for TempDir {
    fn default() -> TempDir {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

const SSHD: &str = "/usr/sbin/sshd";

/// An `sshd` on 127.0.0.1 and a free port, with a fresh host key and user key, that lets the
/// current user in with that key only. Killed on drop.
pub struct Sshd {
    dir: TempDir,
    child: Child,
    pub port: u16,
    pub user: String,
    pub key: PathBuf,
    pub known_hosts: PathBuf,
}

impl Sshd {
    /// Why an sshd cannot be started here (`None`: it can). Tests skip with this reason.
    pub fn unavailable() -> Option<String> {
        if !nix::unistd::geteuid().is_root() {
            return Some("not running as root (sshd needs root to switch users)".to_owned());
        }
        if !Path::new(SSHD).exists() {
            return Some(format!("{SSHD} does not exist (apt-get install -y openssh-server)"));
        }
        for tool in ["ssh", "ssh-keygen"] {
            let found = Command::new(tool).arg("-V").stderr(Stdio::null()).stdout(Stdio::null()).status().is_ok()
                || Command::new("sh")
                    .args(["-c", &format!("command -v {tool}")])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
            if !found {
                return Some(format!("`{tool}` is not installed (apt-get install -y openssh-client)"));
            }
        }
        None
    }

    /// Starts it when it can be ([`Sshd::unavailable`]); else says on standard error that `test`
    /// is skipped, and why.
    pub fn start_or_skip(test: &str) -> Option<Sshd> {
        match Sshd::unavailable() {
            Some(why) => {
                eprintln!("SKIPPED {test}: {why}");
                None
            }
            None => Some(Sshd::start()),
        }
    }

    /// Starts it; panics with sshd's log when it does not come up. Check [`Sshd::unavailable`]
    /// first.
    pub fn start() -> Sshd {
        let dir = TempDir::new();
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| "root".to_owned());
        let host_key = dir.join("host_ed25519");
        let key = dir.join("id_ed25519");
        for file in [&host_key, &key] {
            let status = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "opsgraph-test", "-f"])
                .arg(file)
                .stdin(Stdio::null())
                .status()
                .expect("failed to run ssh-keygen");
            assert!(status.success(), "ssh-keygen failed for {}", file.display());
        }
        std::fs::copy(key.with_extension("pub"), dir.join("authorized_keys")).expect("failed to write authorized_keys");
        // sshd refuses to start without its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let host_pub = std::fs::read_to_string(host_key.with_extension("pub")).expect("failed to read the host key");
        let host_pub: Vec<&str> = host_pub.split_whitespace().take(2).collect();

        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let config = dir.join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "ListenAddress 127.0.0.1\nPort {port}\nHostKey {host_key}\nAuthorizedKeysFile {keys}\n\
                     PidFile none\nUsePAM no\nStrictModes no\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
                     PermitRootLogin prohibit-password\nAllowUsers {user}\nMaxSessions 200\n\
                     MaxStartups 200:30:400\nUseDNS no\nPrintMotd no\nPrintLastLog no\nLogLevel INFO\n",
                    host_key = host_key.display(),
                    keys = dir.join("authorized_keys").display(),
                ),
            )
            .expect("failed to write sshd_config");
            let log_path = dir.join("sshd.log");
            let log = std::fs::File::create(&log_path).expect("failed to create sshd.log");
            let mut child = Command::new(SSHD)
                .args(["-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("failed to spawn sshd");
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut up = false;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                    // The banner proves it is our sshd and not whoever took the port.
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut banner = [0u8; 7];
                    if s.read_exact(&mut banner).is_ok() && &banner == b"SSH-2.0" {
                        up = true;
                        break;
                    }
                }
                thread::sleep(Duration::from_millis(20));
            }
            if up {
                let known_hosts = dir.join("known_hosts");
                std::fs::write(&known_hosts, format!("[127.0.0.1]:{port} {}\n", host_pub.join(" ")))
                    .expect("failed to write known_hosts");
                return Sshd { dir, child, port, user, key, known_hosts };
            }
            let _ = child.kill();
            let _ = child.wait();
            last_log = std::fs::read_to_string(&log_path).unwrap_or_default();
        }
        panic!("sshd did not start; its log:\n{last_log}");
    }

    /// An executor for it: known_hosts checked, its key, no multiplexing.
    pub fn executor(&self) -> SshExecutor {
        SshExecutor {
            host: "127.0.0.1".to_owned(),
            port: self.port,
            user: Some(self.user.clone()),
            key: Some(self.key.clone()),
            known_hosts: Some(self.known_hosts.clone()),
            control_dir: None,
        }
    }

    /// An executor for it that multiplexes over one connection (sockets in this sshd's dir).
    pub fn multiplexed_executor(&self) -> SshExecutor {
        SshExecutor { control_dir: Some(self.dir.join("ctl")), ..self.executor() }
    }

    /// The temp dir holding its keys and config; removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How many connections sshd accepted so far (from its log).
    pub fn connections(&self) -> usize {
        self.log().matches("Accepted publickey").count()
    }

    /// sshd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Connections are served by children in sessions of their own: stop them first, so that
        // multiplexing masters connected to them end too.
        let listener = self.child.id().to_string();
        for pid in children_of(&listener) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes whose parent is `parent`, from `/proc`.
fn children_of(parent: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            (rest.split_whitespace().nth(1)? == parent).then_some(pid)
        })
        .collect()
}

/// A port nobody listened on a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("failed to bind 127.0.0.1:0")
}

/// A loopback port that refuses connections for as long as this value lives: a socket bound to
/// it and never listening, so that no other test's server can take the port meanwhile (a port
/// `free_port` found free may be another test's by the time it is dialled).
pub struct ClosedPort {
    _socket: std::os::fd::OwnedFd,
    pub port: u16,
}

pub fn closed_port() -> ClosedPort {
    use rustix::net::{bind, getsockname, socket, AddressFamily, SocketType};
    let bound = socket(AddressFamily::INET, SocketType::STREAM, None).and_then(|fd| {
        bind(&fd, &std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0))?;
        Ok((getsockname(&fd)?, fd))
    });
    let (addr, socket) = bound.expect("failed to bind a socket to 127.0.0.1:0");
    let port = std::net::SocketAddrV4::try_from(addr).expect("an IPv4 address").port();
    ClosedPort { _socket: socket, port }
}

/// A request as [`HttpServer`] saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

type Handler = dyn Fn(&Request) -> Vec<u8> + Send + Sync;

/// A tiny HTTP/1.1 server on 127.0.0.1:0, one thread, one connection at a time. The handler
/// returns the raw response bytes (see [`HttpServer::response`]), so tests can also send
/// chunked, cut-off or malformed responses.
pub struct HttpServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    pub fn start(handler: impl Fn(&Request) -> Vec<u8> + Send + Sync + 'static) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("failed to bind 127.0.0.1:0");
        let port = listener.local_addr().expect("no local address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let thread = {
            let stop = stop.clone();
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let _ = serve(stream, &*handler);
                }
            })
        };
        HttpServer { port, stop, thread: Some(thread) }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// A complete response with `Content-Length`.
    pub fn response(status: u16, body: &str) -> Vec<u8> {
        format!("HTTP/1.1 {status} S\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).into_bytes()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(stream: TcpStream, handler: &Handler) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let response = handler(&Request { method, path, headers, body });
    let mut stream = stream;
    stream.write_all(&response)?;
    stream.flush()
}

/// Strings that would do something if a shell ever parsed them: each would create `marker` (a
/// file path) when executed. Run them through every parameter slot; the marker must never
/// appear and the program must receive exactly these bytes. (NUL is not here: no argument or
/// environment value can hold one, the OS API stops at it.)
pub fn injection_corpus(marker: &Path) -> Vec<String> {
    let m = marker.display().to_string();
    let mut corpus: Vec<String> = [
        format!("; touch {m}"),
        format!(";touch {m};"),
        format!("$(touch {m})"),
        format!("`touch {m}`"),
        format!("| touch {m}"),
        format!("|| touch {m}"),
        format!("&& touch {m}"),
        format!("& touch {m} &"),
        format!("\ntouch {m}\n"),
        format!("\r\ntouch {m}"),
        format!("x\n; touch {m}"),
        format!("> {m}"),
        format!(">> {m}"),
        format!("x > {m}"),
        format!("' ; touch {m} ; '"),
        format!("\" ; touch {m} ; \""),
        format!("'; touch {m}; echo '"),
        format!("\"; touch {m}; echo \""),
        format!("'\\''; touch {m}; '\\''"),
        format!("\\'; touch {m}; \\'"),
        format!("$'\\n'touch {m}"),
        format!("${{IFS}}touch${{IFS}}{m}"),
        format!("$(touch${{IFS}}{m})"),
        format!("() {{ :; }}; touch {m}"),
        format!("(touch {m})"),
        format!("{{ touch {m}; }}"),
        format!("<(touch {m})"),
        format!(">(touch {m})"),
        format!("$(<{m})"),
        format!("\"$(touch {m})\""),
        format!("'$(touch {m})'"),
        format!("\\$(touch {m})"),
        format!("a=$(touch {m})"),
        format!("--output={m}"),
        format!("-o{m}"),
        format!("；touch {m}"),
        format!("%0atouch {m}"),
        format!("{{{{ touch {m} }}}}"),
        format!("$((`touch {m}`))"),
    ]
    .into();
    corpus.extend(
        [
            "",
            " ",
            "  leading and trailing  ",
            "\t",
            "\n",
            "\r",
            "'",
            "\"",
            "`",
            "\\",
            "\\\\",
            "''",
            "\"\"",
            "' \" `",
            "*",
            "?",
            "[a]",
            "/*",
            "~",
            "~root",
            "-",
            "--",
            "-n",
            "-e",
            "--help",
            "-rf /",
            "%s%s%n",
            "%",
            "$HOME",
            "${HOME}",
            "$?",
            "$$",
            "$0",
            "$1",
            "$@",
            "$*",
            "$#",
            "$((1+1))",
            "$[1+1]",
            "{a,b}",
            "!",
            "!!",
            "!$",
            "#",
            "# comment",
            "a=b",
            "PATH=/nonexistent",
            "=",
            "ünïcødé",
            "日本語のテキスト",
            "🦀🦀",
            "\u{202e}gnp.exe",
            "a\u{200d}b",
            "\u{7f}\u{1}\u{1b}[31mred",
            "\u{feff}bom",
        ]
        .map(str::to_owned),
    );
    corpus.push("a".repeat(4096));
    corpus.push("'\"$`\\\n ".repeat(10_000));
    // Combinations: each way a shell would start a command, with each spelling of the command,
    // after each way of leaving a quoting context (an argument that lands inside quotes in
    // someone's template, or after a backslash).
    let commands = [
        format!("touch {m}"),
        format!("/usr/bin/touch {m}"),
        format!("t''ouch {m}"),
        format!("sh -c 'touch {m}'"),
        format!("$(printf touch) {m}"),
    ];
    let starts = [";", "|", "||", "&&", "&", "\n", "\r\n", "$(", "`", "$((", "<(", ">(", "${IFS}", "\u{1}"];
    let leaves = ["", "'", "\"", "\\", "')", "\")", "x"];
    for command in &commands {
        for start in starts {
            let close = match start {
                "$(" | "<(" | ">(" => ")",
                "`" => "`",
                "$((" => "))",
                _ => "",
            };
            for leave in leaves {
                corpus.push(format!("{leave}{start}{command}{close}"));
            }
        }
    }
    corpus.sort();
    corpus.dedup();
    corpus
}
