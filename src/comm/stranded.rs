//! A peer's failure is reported once, by that peer; the threads it strands
//! unwind quietly.
//!
//! When one participant fails (a checkpoint write hits a full disk, its
//! program returns an error), every peer blocked on it in a collective or a
//! receive must stop too, and does so by unwinding. Those unwinds are
//! consequences, not causes: printed by the default panic hook they buried
//! the one error that mattered under half a dozen backtraces. They carry a
//! [`Stranded`] payload, which the hook installed here leaves unprinted; the
//! runtime still sees them (`join` returns the payload) and reports the
//! first real error.

use std::any::Any;
use std::fmt;
use std::sync::Once;

/// Payload of the unwind of a participant (or its communication thread)
/// stranded by a peer that failed or left.
#[derive(Debug, Clone)]
pub struct Stranded(pub String);

impl fmt::Display for Stranded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Unwinds this thread with a [`Stranded`] payload saying `why`, without
/// printing it.
pub fn stranded(why: String) -> ! {
    quiet_hook();
    std::panic::panic_any(Stranded(why))
}

/// Installs (once per process) a panic hook that skips [`Stranded`]
/// payloads and hands every other panic to the hook that was there before.
pub fn quiet_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Stranded>() {
                previous(info)
            }
        }));
    });
}

/// The text of a panic payload: a [`Stranded`] reason, a `String` or a `&str`.
pub fn panic_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<Stranded>() {
        return s.0.clone();
    }
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stranded_thread_unwinds_with_its_reason_and_other_panics_keep_their_text() {
        let stranded_payload = std::thread::spawn(|| stranded("peer 1 left".into())).join().unwrap_err();
        assert!(stranded_payload.is::<Stranded>());
        assert_eq!(panic_text(&*stranded_payload), "peer 1 left");
        let plain = std::thread::spawn(|| panic!("plain {}", 7)).join().unwrap_err();
        assert_eq!(panic_text(&*plain), "plain 7");
    }
}
