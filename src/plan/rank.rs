//! The recommendation: methods that fit (or whose fit is unknown) first,
//! by tokens per second; those that do not fit last. Tokens/s counts
//! applied tokens, not progress in loss: local-update methods average only
//! every tau steps and delayed methods apply stale gradients, so their
//! reason says so; `lowcomm compare` measures the loss.

use super::{Costing, MethodPlan};

/// Sorts `plans` best first (see the module docs); ties keep their order.
pub fn rank(plans: &mut [MethodPlan]) {
    plans.sort_by(|a, b| {
        let fit = |p: &MethodPlan| p.fits == Some(false);
        fit(a).cmp(&fit(b)).then(b.tokens_per_s.total_cmp(&a.tokens_per_s))
    });
}

/// Bytes as GB with one decimal (or more for small models).
pub fn gb(bytes: f64) -> String {
    let g = bytes / 1e9;
    if g >= 10.0 {
        format!("{g:.0} GB")
    } else if g >= 0.1 {
        format!("{g:.1} GB")
    } else {
        format!("{:.1} MB", bytes / 1e6)
    }
}

/// One line: what the method hides, what it costs, whether it fits.
pub fn reason(p: &MethodPlan, c: &Costing) -> String {
    let t = &p.time;
    let hidden = if t.comm_s <= 0.0 {
        "no communication".to_string()
    } else if t.exposed_s <= 1e-9 * t.round_s {
        "hides all communication".to_string()
    } else {
        let share = (1.0 - t.exposed_s / t.comm_s).clamp(0.0, 1.0);
        format!("hides {:.0}% of communication ({:.3} s exposed per round)", 100.0 * share, t.exposed_s)
    };
    let caveat = match p.method.as_str() {
        "dpu" | "acco-wp" => ", gradients one step stale",
        "local-sgd" | "overlap-local-sgd" | "slowmo" | "co2" => ", averages every tau steps (check the loss)",
        "diloco" => ", an outer step every H steps (check the loss)",
        "demo" | "flexdemo" => ", compressed exchange (check the loss)",
        _ => "",
    };
    let fit = match (p.fits, c.device_memory) {
        (Some(true), Some(m)) => format!("fits in {}", gb(m)),
        (Some(false), Some(m)) => format!("does not fit in {}", gb(m)),
        _ => "fit unknown (no [device] memory in the profile)".to_string(),
    };
    let estimate = if t.exact { "" } else { " (estimate)" };
    format!("{}: {hidden}{caveat}{estimate}, {}: {fit}", p.label, gb(p.memory_total))
}
