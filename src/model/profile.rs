//! Per-kernel wall time of a step, for `lowcomm bench --breakdown`.
//!
//! Off by default: a [`Timer`] then holds no clock and every [`Timer::mark`]
//! is one branch. When on, each mark adds the time since the previous mark
//! to its label's total. Kernels are synchronous calls (rayon joins before
//! returning), so wall time between marks is that kernel's time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

static ON: AtomicBool = AtomicBool::new(false);
static TOTALS: Mutex<BTreeMap<&'static str, (f64, u64)>> = Mutex::new(BTreeMap::new());

/// Held by the tests that turn recording on (it is process-wide).
#[cfg(test)]
pub static TEST_LOCK: Mutex<()> = Mutex::new(());

/// Turn recording on or off (process-wide) and clear what was recorded.
pub fn enable(on: bool) {
    ON.store(on, Ordering::Relaxed);
    take();
}

/// What was recorded since the last call, `(label, seconds, calls)`, and clear it.
pub fn take() -> Vec<(&'static str, f64, u64)> {
    let mut t = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    std::mem::take(&mut *t).into_iter().map(|(k, (s, n))| (k, s, n)).collect()
}

/// A running clock between kernel calls (none when recording is off).
pub struct Timer(Option<Instant>);

impl Timer {
    /// Start timing now (a no-op when recording is off).
    pub fn start() -> Timer {
        Timer(ON.load(Ordering::Relaxed).then(Instant::now))
    }

    /// Charge the time since the last mark (or start) to `label`.
    pub fn mark(&mut self, label: &'static str) {
        if let Some(t0) = self.0 {
            let now = Instant::now();
            let mut t = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
            let e = t.entry(label).or_insert((0.0, 0));
            e.0 += (now - t0).as_secs_f64();
            e.1 += 1;
            self.0 = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_split_the_time_between_labels_and_count_calls() {
        let _g = TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        enable(true);
        let mut t = Timer::start();
        std::thread::sleep(std::time::Duration::from_millis(20));
        t.mark("a");
        t.mark("b");
        t.mark("b");
        let got = take();
        enable(false);
        let mut off = Timer::start();
        off.mark("c");
        let a = got.iter().find(|r| r.0 == "a").copied().expect("`a` recorded");
        assert_eq!(a.2, 1);
        assert!(a.1 >= 0.015, "the sleep is charged to `a`: {a:?}");
        assert_eq!(got.iter().find(|r| r.0 == "b").map(|r| r.2), Some(2));
        let got = take();
        assert!(got.iter().all(|r| r.0 != "c"), "nothing is recorded while off");
    }
}
