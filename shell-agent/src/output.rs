//! A command's output between the PTY reader thread and the async side.
//!
//! The reader thread must never block on anything the network does, so it only appends here: to the
//! *pending* bytes not yet sent as an update (bounded: the oldest are trimmed and counted when the
//! client reads slowly), and to the *kept* output that the final result carries (bounded by the
//! output cap, keeping the tail — T4). The async side takes pending output when it can send it.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

/// Pending (unsent) output kept at most; past it the oldest unsent bytes are dropped and counted.
pub(crate) const PENDING_CAP: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Inner {
    pending: Vec<u8>,
    pending_dropped: u64,
    kept: Vec<u8>,
    kept_dropped: u64,
    total_bytes: u64,
    total_lines: u64,
    last_output: Option<Instant>,
    eof: bool,
}

/// Output shared by the reader thread and the async side.
#[derive(Debug)]
pub(crate) struct Output {
    inner: Mutex<Inner>,
    cap: usize,
    /// Signalled on new output and on end of file.
    pub(crate) changed: Notify,
}

/// Counters for a heartbeat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub total_bytes: u64,
    pub total_lines: u64,
    pub last_output: Option<Instant>,
    pub unsent_dropped: u64,
}

/// The kept output once the command is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The output (the tail, with a notice first when the head was dropped), `\r\n` as `\n`.
    pub text: String,
    /// Whether the head was dropped (T4).
    pub truncated: bool,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Output {
    /// Output keeping at most `cap` bytes of the final result.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            cap: cap.max(1),
            changed: Notify::new(),
        }
    }

    /// Appends bytes read from the PTY (reader thread; never blocks beyond a short lock).
    pub(crate) fn push(&self, chunk: &[u8]) {
        {
            let mut g = lock(&self.inner);
            g.total_bytes += chunk.len() as u64;
            g.total_lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
            g.last_output = Some(Instant::now());
            g.pending.extend_from_slice(chunk);
            if g.pending.len() > PENDING_CAP {
                let excess = g.pending.len() - PENDING_CAP;
                g.pending.drain(..excess);
                g.pending_dropped += excess as u64;
            }
            g.kept.extend_from_slice(chunk);
            // Trim in batches so appends stay amortised O(1).
            if g.kept.len() > self.cap.saturating_mul(2) {
                let excess = g.kept.len() - self.cap;
                g.kept.drain(..excess);
                g.kept_dropped += excess as u64;
            }
        }
        self.changed.notify_one();
    }

    /// Marks the end of the PTY's output.
    pub(crate) fn mark_eof(&self) {
        lock(&self.inner).eof = true;
        self.changed.notify_one();
    }

    /// Whether the PTY reached end of file.
    pub(crate) fn is_eof(&self) -> bool {
        lock(&self.inner).eof
    }

    /// Takes the unsent output as text (an incomplete UTF-8 sequence at the end waits for the next
    /// read); `None` when there is nothing to send.
    pub(crate) fn take_pending(&self) -> Option<String> {
        let mut g = lock(&self.inner);
        if g.pending.is_empty() {
            return None;
        }
        let bytes = std::mem::take(&mut g.pending);
        let (text, rest) = split_utf8(bytes, g.eof);
        g.pending = rest;
        let dropped = std::mem::take(&mut g.pending_dropped);
        drop(g);
        let mut text = normalize(&text);
        if dropped > 0 {
            text.insert_str(
                0,
                &format!("[… {dropped} bytes of output skipped while the client was slow …]\n"),
            );
        }
        (!text.is_empty()).then_some(text)
    }

    /// Counters for heartbeats.
    pub(crate) fn counters(&self) -> Counters {
        let g = lock(&self.inner);
        Counters {
            total_bytes: g.total_bytes,
            total_lines: g.total_lines,
            last_output: g.last_output,
            unsent_dropped: g.pending_dropped,
        }
    }

    /// The kept output, capped to the tail with a notice (T4).
    pub(crate) fn kept(&self) -> Kept {
        let g = lock(&self.inner);
        let start = g.kept.len().saturating_sub(self.cap);
        let mut tail = &g.kept[start..];
        // When the head was cut, never start in the middle of a UTF-8 sequence. Output kept whole
        // is kept whole even when it starts with stray continuation bytes (S4: invalid UTF-8 is
        // shown as U+FFFD, never dropped).
        while start > 0
            && let Some((first, rest)) = tail.split_first()
        {
            if first & 0xC0 == 0x80 {
                tail = rest;
            } else {
                break;
            }
        }
        let dropped = g.kept_dropped + (g.kept.len() - tail.len()) as u64;
        let mut text = normalize(&String::from_utf8_lossy(tail));
        if dropped > 0 {
            text.insert_str(
                0,
                &format!("[output truncated: the first {dropped} bytes were dropped; the last {} bytes are kept]\n", tail.len()),
            );
        }
        Kept {
            text,
            truncated: dropped > 0,
        }
    }
}

/// Splits `bytes` into valid text and a trailing incomplete UTF-8 sequence (kept for the next read
/// unless `eof`). Invalid bytes elsewhere become U+FFFD.
fn split_utf8(bytes: Vec<u8>, eof: bool) -> (String, Vec<u8>) {
    match std::str::from_utf8(&bytes) {
        Ok(_) => (String::from_utf8(bytes).unwrap_or_default(), Vec::new()),
        Err(e) if e.error_len().is_none() && !eof => {
            let valid = e.valid_up_to();
            (
                String::from_utf8_lossy(&bytes[..valid]).into_owned(),
                bytes[valid..].to_vec(),
            )
        }
        Err(_) => (String::from_utf8_lossy(&bytes).into_owned(), Vec::new()),
    }
}

/// PTYs end lines with `\r\n`; chat and logs want `\n`.
fn normalize(s: &str) -> String {
    s.replace("\r\n", "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t4_kept_output_is_the_tail_with_a_notice() {
        let out = Output::new(10);
        for _ in 0..100 {
            out.push(b"0123456789");
        }
        out.push(b"last line\n");
        let kept = out.kept();
        assert!(kept.truncated);
        assert!(
            kept.text.ends_with("]\nlast line\n"),
            "exactly the last 10 bytes: {:?}",
            kept.text
        );
        assert!(
            kept.text
                .starts_with("[output truncated: the first 1000 bytes were dropped"),
            "{:?}",
            kept.text
        );
    }

    #[test]
    fn s4_output_that_starts_with_continuation_bytes_is_kept_whole() {
        let out = Output::new(1 << 20);
        out.push(b"\x80\xbfok\xff");
        assert_eq!(
            out.kept(),
            Kept {
                text: "\u{FFFD}\u{FFFD}ok\u{FFFD}".into(),
                truncated: false
            }
        );
    }

    #[test]
    fn small_output_is_kept_whole_without_a_notice() {
        let out = Output::new(1 << 20);
        out.push(b"hello\r\nworld\r\n");
        assert_eq!(
            out.kept(),
            Kept {
                text: "hello\nworld\n".into(),
                truncated: false
            }
        );
        assert_eq!(out.counters().total_lines, 2);
    }

    #[test]
    fn split_utf8_sequences_wait_for_the_rest() {
        let out = Output::new(100);
        let snow = "☃".as_bytes();
        out.push(&snow[..1]);
        assert_eq!(out.take_pending(), None);
        out.push(&snow[1..]);
        assert_eq!(out.take_pending().as_deref(), Some("☃"));
    }

    #[test]
    fn a_slow_reader_loses_the_oldest_unsent_output_and_is_told() {
        let out = Output::new(1 << 20);
        let chunk = vec![b'x'; 16 * 1024];
        for _ in 0..5 {
            out.push(&chunk);
        }
        let text = out.take_pending().expect("pending");
        assert!(
            text.starts_with("[… 16384 bytes of output skipped"),
            "{}",
            &text[..80]
        );
        // The kept output (the result) lost nothing.
        assert_eq!(out.kept().text.len(), 5 * 16 * 1024);
    }
}
