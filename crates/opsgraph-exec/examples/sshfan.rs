//! Starts N real sshd on loopback ports for `bench/compare.py` (issue [G], SSH fan-out), prints
//! them as one JSON line (`[{"port", "user", "key", "known_hosts"}, ...]`), and keeps them up
//! until its standard input closes. Prints `unavailable: <why>` instead when sshd cannot run
//! here (it needs root and openssh-server).
//!
//!     cargo build --release -p opsgraph-exec --features testing --example sshfan

use std::io::Read as _;

use opsgraph_exec::testing::Sshd;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    if let Some(why) = Sshd::unavailable() {
        println!("unavailable: {why}");
        return;
    }
    let hosts: Vec<Sshd> = (0..n).map(|_| Sshd::start()).collect();
    let described: Vec<String> = hosts
        .iter()
        .map(|h| {
            format!(
                "{{\"port\": {}, \"user\": {:?}, \"key\": {:?}, \"known_hosts\": {:?}}}",
                h.port,
                h.user,
                h.key.display().to_string(),
                h.known_hosts.display().to_string()
            )
        })
        .collect();
    println!("[{}]", described.join(", "));
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}
