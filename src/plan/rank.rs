//! The recommendation: methods that fit (or whose fit is unknown) first,
//! by tokens per second; those that do not fit last. Ties in tokens/s go
//! to synchronous-training updates first, then to less memory. Tokens/s counts
//! applied tokens, not progress in loss: local-update methods average only
//! every tau steps and delayed methods apply stale gradients, so their
//! reason says so; `lowcomm compare` measures the loss.

use super::{Costing, MethodPlan};

/// Sorts `plans` best first (see the module docs). Equal tokens/s (several
/// methods hide all communication) are broken by what the throughput does
/// not show: first the methods whose updates are those of synchronous
/// training (no [`caveat`]: ddp, zero1, acco), then the smaller memory;
/// remaining ties keep their order.
pub fn rank(plans: &mut [MethodPlan]) {
    plans.sort_by(|a, b| {
        let fit = |p: &MethodPlan| p.fits == Some(false);
        let tie = (a.tokens_per_s - b.tokens_per_s).abs() <= 1e-9 * a.tokens_per_s.abs().max(b.tokens_per_s.abs());
        let speed = if tie { std::cmp::Ordering::Equal } else { b.tokens_per_s.total_cmp(&a.tokens_per_s) };
        let caveated = |p: &MethodPlan| !caveat(&p.method).is_empty();
        fit(a)
            .cmp(&fit(b))
            .then(speed)
            .then(caveated(a).cmp(&caveated(b)))
            .then(a.memory_total.total_cmp(&b.memory_total))
    });
}

/// What tokens/s does not say about a method's updates (empty: those of synchronous training).
pub fn caveat(method: &str) -> &'static str {
    match method {
        "dpu" | "acco-wp" => ", gradients one step stale",
        "local-sgd" | "overlap-local-sgd" | "slowmo" | "co2" => ", averages every tau steps (check the loss)",
        "diloco" => ", an outer step every H steps (check the loss)",
        "streaming-diloco" => ", each fragment's outer step every H steps, tau steps late (check the loss)",
        "async-diloco" => ", an outer step per arriving pseudo-gradient, some stale (check the loss)",
        "demo" | "flexdemo" => ", compressed exchange (check the loss)",
        _ => "",
    }
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
    let caveat = caveat(&p.method);
    let fit = match (p.fits, c.device_memory) {
        (Some(true), Some(m)) => format!("fits in {}", gb(m)),
        (Some(false), Some(m)) => format!("does not fit in {}", gb(m)),
        _ => "fit unknown (no [device] memory in the profile)".to_string(),
    };
    let estimate = if t.exact { "" } else { " (estimate)" };
    format!("{}: {hidden}{caveat}{estimate}, {}: {fit}", p.label, gb(p.memory_total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(method: &str, tokens_per_s: f64, memory_total: f64, fits: Option<bool>) -> MethodPlan {
        MethodPlan {
            method: method.into(),
            label: method.into(),
            memory: Default::default(),
            memory_total,
            fits,
            time: Default::default(),
            tokens_per_s,
            scalability: 1.0,
            reason: String::new(),
            server: None,
        }
    }

    #[test]
    fn ties_go_to_synchronous_updates_then_to_less_memory() {
        let mut plans = vec![
            row("ddp", 90.0, 1.0, Some(true)),
            row("co2", 100.0, 3.0, Some(true)),
            row("dpu", 100.0, 2.0, Some(true)),
            row("acco", 100.0, 2.0, Some(true)),
            row("overlap-local-sgd", 100.0, 2.5, Some(true)),
            row("zero1", 200.0, 1.0, Some(false)),
        ];
        rank(&mut plans);
        let order: Vec<&str> = plans.iter().map(|p| p.method.as_str()).collect();
        // acco: as fast as dpu and co2, no caveat; then the caveated ones by memory; slower ddp; what does not fit last.
        assert_eq!(order, ["acco", "dpu", "overlap-local-sgd", "co2", "ddp", "zero1"]);
    }
}
