//! The printed plan: a header (model, cluster, formulas) and one table,
//! best method first.

use super::rank::gb;
use super::{Precision, Report};
use std::fmt::Write;

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
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| # | method | memory/worker (params+grads+comm+opt+outer) | fits | s/round (steps) | exposed comm s | tokens/s | scal. | MB/round intra | MB/round inter |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
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
            "| {} | {} | {} ({}+{}+{}+{}+{}) | {fits} | {est}{:.4} ({}) | {:.4} | {est}{:.0} | {:.2} | {:.1} | {:.1} |",
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
