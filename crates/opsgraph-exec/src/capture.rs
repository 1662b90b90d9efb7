//! Bounded capture of one output stream: the head and the tail, the middle counted.

use std::collections::VecDeque;

pub(crate) struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    /// Keeps at most `cap` bytes: the first `cap - cap / 2` and the last `cap / 2`.
    pub(crate) fn new(cap: usize) -> Capture {
        let tail_cap = cap / 2;
        Capture { head: Vec::new(), tail: VecDeque::new(), head_cap: cap - tail_cap, tail_cap, total: 0 }
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.head.len() < self.head_cap {
            let n = data.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(data);
        }
    }

    pub(crate) fn truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// The kept bytes; when bytes were dropped, a marker line between head and tail says how many.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut out = self.head.clone();
        let omitted = self.total - (self.head.len() + self.tail.len()) as u64;
        if omitted > 0 {
            out.extend_from_slice(format!("\n[opsgraph: {omitted} bytes omitted]\n").as_bytes());
        }
        out.extend(self.tail.iter());
        out
    }
}
