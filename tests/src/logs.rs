//! What the code under test logs, captured: a subscriber writing into memory is the default while
//! a body runs on a current-thread runtime. Use it in a test binary of its own — tracing caches
//! per-callsite interest process-wide, so threads without the capture would hide callsites from it.

use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `body` with every event at `level` and above captured; the log, without colours.
///
/// # Panics
/// When the runtime cannot be built or the log is not UTF-8.
pub fn logged<F: Future<Output = ()>>(level: tracing::Level, body: impl FnOnce() -> F) -> String {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    tracing::subscriber::with_default(subscriber, || rt.block_on(body()));
    let bytes = buf.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
    String::from_utf8(bytes).expect("a UTF-8 log")
}
