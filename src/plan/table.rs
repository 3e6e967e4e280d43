//! The printed plan: a header (model, cluster, formulas) and one table,
//! best method first.

use super::rank::gb;
use super::{MethodPlan, Precision, Report};
use crate::strategy::Method;
use std::fmt::Write;

/// Micro-batches per worker in one optimizer step of `p` (of one inner
/// step for the local-update methods, async DiLoCo's included).
pub fn micro_batches_per_step(p: &MethodPlan, r: &Report) -> f64 {
    match Method::from_config(&p.method, None) {
        Ok(m) if m.local_tau().is_some() || m.needs_server() => r.grad_accum as f64,
        _ => p.time.micro_batches / p.time.steps.max(1) as f64,
    }
}

/// The global batch of `p`: tokens per optimizer step over all workers.
pub fn global_batch(p: &MethodPlan, r: &Report) -> f64 {
    r.workers as f64 * micro_batches_per_step(p, r) * r.tokens_per_micro_batch as f64
}

/// `n` with three significant digits and k, M or G: `393k`, `3.93M`.
pub fn short_count(n: f64) -> String {
    let (v, unit) = match n.abs() {
        a if a >= 1e9 => (n / 1e9, "G"),
        a if a >= 1e6 => (n / 1e6, "M"),
        a if a >= 1e3 => (n / 1e3, "k"),
        _ => (n, ""),
    };
    let d = match v.abs() {
        a if a >= 99.95 => 0,
        a if a >= 9.995 => 1,
        _ => 2,
    };
    let d = if unit.is_empty() && v.fract() == 0.0 { 0 } else { d };
    format!("{v:.d$}{unit}")
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let precision = match r.precision {
        Precision::Mixed => "mixed (Table 1: bf16 params/grads/buffers, fp32 master + state)",
        Precision::F32 => "f32 (this engine's buffers)",
    };
    let _ = writeln!(s, "model    {}: {}", r.model.name, r.model.formula);
    let _ = writeln!(
        s,
        "cluster  {}: {} workers ({} per node), wire {:?}, {} tokens per micro-batch{}, {:.4} s per micro-batch",
        r.cluster,
        r.workers,
        r.workers_per_node,
        r.wire,
        r.tokens_per_micro_batch,
        sequences(r),
        r.micro_batch_s
    );
    let mem = r.device_memory.map_or("unknown (no [device] memory in the profile)".to_string(), gb);
    let _ = writeln!(s, "memory   {precision}; device memory {mem}");
    let _ = writeln!(
        s,
        "batch    global batch = tokens per optimizer step over all {} workers: workers x micro-batches per worker x {} tokens; ddp, zero1, demo, flexdemo: grad accum ({}) micro-batches; dpu, acco-wp: those computed while one round runs; acco: 2 stages x those computed while each stage's round runs; local-update methods (local-sgd, overlap-local-sgd, slowmo, co2, diloco, async-diloco, streaming-diloco): per inner step",
        r.workers, r.tokens_per_micro_batch, r.grad_accum
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| # | method | memory/worker (params+grads+comm+opt+outer) | fits | s/round (optimizer steps) | global batch, tokens (micro-batches/worker) | exposed comm s | tokens/s | scal. | MB/round intra | MB/round inter |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, p) in r.methods.iter().enumerate() {
        let m = &p.memory;
        let fits = match p.fits {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "?",
        };
        let est = if p.time.exact { "" } else { "~" };
        let _ = writeln!(
            s,
            "| {} | {} | {} ({}+{}+{}+{}+{}) | {fits} | {est}{:.4} ({}) | {} ({}) | {:.4} | {est}{:.0} | {:.2} | {:.1} | {:.1} |",
            i + 1,
            p.label,
            gb(p.memory_total),
            gb(m.params as f64),
            gb(m.grads as f64),
            gb(m.comm_buffers as f64),
            gb(m.optimizer as f64),
            gb(m.outer as f64),
            p.time.round_s,
            p.time.steps,
            short_count(global_batch(p, r)),
            short_count(micro_batches_per_step(p, r)),
            p.time.exposed_s,
            p.tokens_per_s,
            p.scalability,
            p.time.bytes_intra / 1e6,
            p.time.bytes_inter / 1e6,
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Recommendation (best first; ~ = estimate):");
    for (i, p) in r.methods.iter().enumerate() {
        let _ = writeln!(s, "{}. {}", i + 1, p.reason);
    }
    s
}

/// The micro-batch as sequences of the model's context, when its shape is
/// known: `--batch` and profiles give tokens (24 x 1024 by default), which
/// for nano, whose context is 64, is 384 sequences, not 24.
fn sequences(r: &Report) -> String {
    let Some(ctx) = r.model.gpt.as_ref().map(|g| g.ctx).filter(|&c| c > 0) else {
        return String::new();
    };
    let n = r.tokens_per_micro_batch as f64 / ctx as f64;
    format!(" ({n} sequences of {}'s {ctx}-token context)", r.model.name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_keep_three_significant_digits() {
        use super::short_count;
        assert_eq!(short_count(393216.0), "393k");
        assert_eq!(short_count(3932160.0), "3.93M");
        assert_eq!(short_count(1024.0), "1.02k");
        assert_eq!(short_count(10.0), "10");
        assert_eq!(short_count(2.5), "2.50");
        assert_eq!(short_count(7.5e9), "7.50G");
    }
}
