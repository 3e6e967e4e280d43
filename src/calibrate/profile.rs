//! The cluster profile calibrate writes: TOML that
//! `runtime::cluster::ClusterProfile` reads, every number with where it
//! came from in the comments above it (configs/clusters/README.md has the keys).

use super::compute::{Samples, ELEMENTWISE_BYTES, OPTIMIZER_BYTES};
use super::fit::{tier_spec, AlphaBeta};
use super::overlap::{Overlap, CHAINED_COVER, HOST_DRIFT_WARNING};
use super::{size_text, Calibration, Measured, TierSource};
use crate::comm::link_measured::MAX_POINTS;
use std::fmt::Write;

/// The machine: CPU model, logical CPUs, OS and architecture, host name.
pub fn machine() -> String {
    let cpu = crate::util::cpu_model().unwrap_or_else(|| "unknown CPU".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map_or("unknown".into(), |h| h.trim().to_string());
    format!("{cpu}, {}, host {host}", crate::util::cpus_and_os())
}

/// Now, as `YYYY-MM-DD HH:MM UTC` (days to civil date: H. Hinnant's algorithm).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}

/// `median X ms, mean Y (min .. max over N samples, spread S%)`.
fn stats(s: &Samples, unit: f64, unit_name: &str) -> String {
    if s.0.is_empty() {
        // An all-reduce shorter than a micro-batch: nothing fitted beside it.
        return "no samples".into();
    }
    let (lo, hi) = s.range();
    format!(
        "median {:.4} {unit_name}, mean {:.4} ({:.4} .. {:.4} over {} samples, spread {:.0}%)",
        s.median() * unit,
        s.mean() * unit,
        lo * unit,
        hi * unit,
        s.0.len(),
        100.0 * s.spread()
    )
}

/// TOML text of a string (quoted, escaped).
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The comment lines of one sweep: size, time, the fit's time.
fn sweep_lines(out: &mut String, what: &str, sweep: &[(f64, f64)], f: &AlphaBeta) {
    let _ = writeln!(out, "# {what}: {}", f.describe());
    for &(b, t) in sweep {
        let _ = writeln!(
            out,
            "#   {:>8}: {:>10.4} ms measured, {:>10.4} ms fitted",
            size_text(b as usize),
            t * 1e3,
            (f.alpha + f.beta * b) * 1e3
        );
    }
}

/// The `[links.KEY_sweep]` table of a measured tier: the all-reduce sweep's
/// own numbers, which the simulator and `plan` interpolate
/// (comm/link_measured.rs). At most its largest `MAX_POINTS` sizes.
fn sweep_table(out: &mut String, key: &str, members: usize, sweep: &[(f64, f64)], ping_pong: Option<&[(f64, f64)]>) {
    let _ = writeln!(out, "\n[links.{key}_sweep]");
    let _ = writeln!(
        out,
        "# The {key} all-reduce sweep above, as measured ([bytes, median seconds] over {members} ranks): the simulator\n\
         # and `plan` cost each message on this tier at these times, straight lines between the sizes and\n\
         # the last segment's slope past them, not at the fitted line (comm/link_measured.rs)."
    );
    let _ = writeln!(out, "members = {members}");
    pairs(out, "all_reduce", sweep);
    if let Some(pp) = ping_pong {
        let _ = writeln!(
            out,
            "# The ping-pong above ([bytes, median seconds one way]): a point-to-point message (async DiLoCo's\n\
             # updates and models) costs these times; half an all-reduce is not one message."
        );
        pairs(out, "ping_pong", pp);
    }
}

/// `key = [[bytes, seconds], ...]` of the largest `MAX_POINTS` sizes.
fn pairs(out: &mut String, key: &str, sizes: &[(f64, f64)]) {
    let _ = writeln!(out, "{key} = [");
    for &(b, t) in &sizes[sizes.len().saturating_sub(MAX_POINTS)..] {
        let _ = writeln!(out, "  [{b:e}, {t:e}],");
    }
    let _ = writeln!(out, "]");
}

/// The comments and the key of one link tier; its sweep table (written
/// after every key of `[links]`) when it was measured.
fn tier(out: &mut String, key: &str, src: &TierSource) -> Option<String> {
    match src {
        TierSource::Given { spec, why } => {
            let _ = writeln!(out, "# {key}: NOT MEASURED, {why}.");
            let _ = writeln!(out, "{key} = {}", quoted(spec));
            None
        }
        TierSource::Measured(Measured { how, members, all_reduce: (sweep, f), ping_pong }) => {
            let t = f.all_reduce_tier(*members);
            let _ = writeln!(out, "# {key}: measured, {how}.");
            sweep_lines(out, &format!("all-reduce (mean, f32) over {members}"), sweep, f);
            let _ = writeln!(
                out,
                "# The tier whose ring all-reduce over {members} (2(p-1) alpha + 2(p-1)/p B/bw) is that line: alpha = a / {}, bw = {} / ({members} b).",
                2 * (members - 1),
                2 * (members - 1)
            );
            if !f.fits() {
                let _ = writeln!(
                    out,
                    // One line: `plan` and the runs repeat it (runtime/cluster.rs, `warnings`).
                    "# WARNING: the {key} link's all-reduce does not fit alpha-beta; the simulator and `plan` use \
                     its measured sweep ([links.{key}_sweep]) between its sizes, and past the largest its last slope."
                );
            }
            if let Some((pp, pf)) = ping_pong {
                sweep_lines(out, "ping-pong (one way, half a round trip, a lowcomm message)", pp, pf);
                let m = pf.message_tier();
                let _ = writeln!(
                    out,
                    "# For comparison, the ping-pong's link: {} (latency, bandwidth of one message).",
                    tier_spec(&m)
                );
            }
            let _ = writeln!(out, "{key} = {}", quoted(&tier_spec(&t)));
            let mut table = String::new();
            sweep_table(&mut table, key, *members, sweep, ping_pong.as_ref().map(|(pp, _)| pp.as_slice()));
            Some(table)
        }
    }
}

/// The warning of a host whose speed moved while calibrate ran, past
/// [`HOST_DRIFT_WARNING`] (one of [`overlap_warnings`]).
fn host_drift_warning(o: &Overlap, timing: &Samples) -> Option<String> {
    let drift = o.host_drift(timing).filter(|d| d.abs() > HOST_DRIFT_WARNING)?;
    Some(format!(
        "this host's speed moved while calibrate ran: a micro-batch alone took {:.1} ms on average in the \
         overlap phase against {:.1} ms in [timing], timed before and after it ({:+.0}%); predictions from this profile \
         can miss a run's computation by as much. Calibrate again when nothing else runs on these machines \
         (docs/results/planner-accuracy.md, finding 24).",
        o.compute_alone.mean() * 1e3,
        timing.mean() * 1e3,
        100.0 * drift
    ))
}

/// Micro-batches timed beside the all-reduce below which
/// `overlap_compute_factor` is said to rest on too few: on four ranks at
/// 100 Mbit/s one sample gave 2.19, where sets of 55 and 113 gave 1.31 and
/// 1.26 at slower rates and the runs that followed were closer to 1
/// (docs/results/planner-accuracy.md, finding 29).
const FEW_OVERLAPPED: usize = 3;

/// calibrate's warnings on its overlap phase, written as the profile's
/// `# WARNING:` comments (which calibrate's read-back of the profile, plan
/// and the runs say on stderr): the host's drift, and a compute factor
/// from fewer than [`FEW_OVERLAPPED`] micro-batches.
fn overlap_warnings(o: &Overlap, timing: &Samples) -> Vec<String> {
    let n = o.compute_overlapped.0.len();
    let few = (n > 0 && n < FEW_OVERLAPPED).then(|| {
        format!(
            "overlap_compute_factor ({:.2}) rests on {n} micro-batch(es) timed inside the overlapped all-reduces, \
             too few to measure it by (finding 29 of docs/results/planner-accuracy.md: one sample gave 2.19 and put \
             co2 and streaming-diloco 14-21% slow); for methods that compute beside their transfers (acco, co2, \
             streaming-diloco) read the predictions between this profile's and one with overlap_compute_factor = 1.",
            o.compute_factor()
        )
    });
    host_drift_warning(o, timing).into_iter().chain(few).collect()
}

/// The overlap factors (calibrate/overlap.rs) with their samples.
fn overlap_lines(w: &mut String, o: &Overlap, alone: &Samples) {
    let _ = writeln!(
        w,
        "# Overlap (sim/spec.rs Interference): the model's gradient all-reduce ({} over {}),",
        size_text(o.bytes),
        o.members
    );
    let _ = writeln!(w, "# alone and while the rank computes, in turn ({} pairs)", o.comm_alone.0.len());
    let _ = writeln!(w, "# alone:                {}", stats(&o.comm_alone, 1e3, "ms"));
    let _ = writeln!(w, "# while the rank computes: {}", stats(&o.comm_overlapped, 1e3, "ms"));
    let _ = writeln!(
        w,
        "# launched as the last returned, micro-batches started through its first {:.0}% (co2's pattern):",
        100.0 * CHAINED_COVER
    );
    let _ =
        writeln!(w, "#   {}, covered {:.0}%", stats(&o.comm_chained, 1e3, "ms"), 100.0 * o.chained_covered.median());
    let _ = writeln!(w, "# a micro-batch while the all-reduces run: {}", stats(&o.compute_overlapped, 1e3, "ms"));
    let _ = writeln!(w, "# and right after each, as long, alone: {}", stats(&o.compute_alone, 1e3, "ms"));
    let timing = o.compute_overlapped.median() / alone.median().max(f64::MIN_POSITIVE);
    let _ = writeln!(
        w,
        "# (against the [timing] median, {}, minutes away: {timing:.3}; finding 16).",
        stats(alone, 1e3, "ms")
    );
    for warning in overlap_warnings(o, alone) {
        let _ = writeln!(w, "# WARNING: {warning}");
    }
    let _ = writeln!(w, "# Each factor is overlapped over alone, at least 1: the simulator and");
    let _ = writeln!(w, "# `plan` stretch work that overlaps by it.");
    let _ = writeln!(w, "overlap_compute_factor = {}", o.compute_factor());
    let _ = writeln!(w, "overlap_comm_factor = {}", o.comm_factor());
    if let Some(f) = o.one_transfer_factor() {
        let _ = writeln!(w, "# Every rank ran on one kernel (the same boot id): the ranks share this machine's");
        let _ = writeln!(w, "# cores, so another rank's transfer slows a micro-batch too (async DiLoCo's server");
        let _ = writeln!(w, "# sending to the other worker). One transfer of the {} above:", o.members);
        let _ = writeln!(w, "# 1 + (overlap_compute_factor - 1) / {} (calibrate/overlap.rs).", o.members);
        let _ = writeln!(w, "shared_cores_compute_factor = {f}");
    }
}

/// The profile's TOML text, with provenance comments.
pub fn render(c: &Calibration) -> String {
    let o = &c.opts;
    let k = c.workers_per_node;
    let cc = &c.compute;
    let tokens = o.batch * o.seq;
    let fpt = o.model.flops_per_token();
    // The samples' mean, not their median: a run pays for every micro-batch,
    // its host's slow stretches included; over six 144-step runs the mean put
    // every method within 5% by median and lowered every worst case
    // (docs/results/planner-accuracy.md, "The micro-batch's mean").
    let micro_batches = cc.micro_batch();
    let mb = micro_batches.mean();
    let machine = machine();
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "# Measured by `lowcomm calibrate` (lowcomm {}) on {}", env!("CARGO_PKG_VERSION"), utc_now());
    let _ = writeln!(w, "# on {machine};");
    let _ = writeln!(w, "# workers: {} ({} node(s) x {k}).", c.backend, c.nodes);
    let _ = writeln!(w, "#   {}", o.command);
    let _ = writeln!(w, "#");
    let _ = writeln!(w, "# Every [device] and [timing] number is per worker WITH ALL {k} WORKERS OF A NODE");
    let _ = writeln!(w, "# COMPUTING AT ONCE: they share the node's cores and memory, and the numbers");
    let _ = writeln!(w, "# were measured that way (configs/clusters/README.md, \"Shared cores\"). For");
    let _ = writeln!(w, "# another number of workers per node, calibrate again with that number.");
    if c.sharing != k {
        let _ =
            writeln!(w, "# Here {} ranks shared this machine while timed (LOWCOMM_RANKS_PER_NODE groups", c.sharing);
        let _ = writeln!(w, "# them {k} per node): the numbers are those of {} workers computing at once.", c.sharing);
    }
    let name =
        o.name.clone().unwrap_or_else(|| format!("calibrated: {} node(s) x {k} workers, {}", c.nodes, c.backend));
    let _ = writeln!(w, "name = {}", quoted(&name));
    let _ = writeln!(w, "nodes = {}\nworkers_per_node = {k}\nwire = \"f32\"\n\n[device]", c.nodes);
    let _ = writeln!(w, "# A micro-batch's FLOP rate, measured: flops_per_token x tokens / seconds =");
    let _ = writeln!(w, "# {fpt:e} x {tokens} / {mb:e} s. It is the measured rate, not a datasheet");
    let _ = writeln!(w, "# peak, so utilization = 1; a model of another size (`plan --model`) is costed");
    let _ = writeln!(w, "# at the same rate, an extrapolation.");
    let _ = writeln!(w, "peak_flops = {:e}\nutilization = 1.0", fpt * tokens as f64 / mb);
    let _ = writeln!(w, "# AdamW over {} parameters, each right after a micro-batch as in a run:", cc.params);
    let _ = writeln!(w, "#   {}", stats(&cc.adamw, 1e3, "ms"));
    if !cc.adamw_back_to_back.0.is_empty() {
        let _ = writeln!(w, "# (back to back, caches warm: {})", stats(&cc.adamw_back_to_back, 1e3, "ms"));
    }
    let _ = writeln!(w, "# at the {OPTIMIZER_BYTES} bytes a parameter the simulator charges an optimizer step");
    let _ =
        writeln!(w, "# (it charges {ELEMENTWISE_BYTES} bytes an element of other elementwise work). For comparison,");
    let ratio = cc.outer_bandwidth() / cc.adamw_bandwidth();
    let _ = writeln!(
        w,
        "# the DiLoCo pseudo-gradient + Nesterov outer step (12 bytes x 4n):\n#   {}",
        stats(&cc.outer, 1e3, "ms")
    );
    let _ = writeln!(w, "# = {:.3} GB/s, {ratio:.2}x AdamW's rate, which is the one kept.", cc.outer_bandwidth() / 1e9);
    let _ = writeln!(w, "memory_bandwidth = {:e}", cc.adamw_bandwidth());
    let _ = writeln!(
        w,
        "# DeMo's encode + decode (the strategy's replicator, chunk 64, top 32):\n#   {}",
        stats(&cc.demo, 1e3, "ms")
    );
    let _ = writeln!(w, "# for the {:e} FLOPs the strategy charges per encode + decode.", cc.demo_flops);
    let _ = writeln!(w, "sustained_flops = {:e}", cc.demo_flops_per_s());
    if let Some(o) = &c.overlap {
        overlap_lines(w, o, &micro_batches);
    }
    if let Some(m) = c.memory_per_worker {
        let n = c.sharing;
        let _ =
            writeln!(w, "# Host memory (MemTotal) over {n} workers: what `plan` checks fit against.\nmemory = {m:e}");
    }
    let _ = writeln!(w, "\n[links]");
    let mut tables = vec![tier(w, "intra", &c.intra)];
    if let Some(inter) = &c.inter {
        tables.push(tier(w, "inter", inter));
    }
    tables.into_iter().flatten().for_each(|t| w.push_str(&t));
    let _ = writeln!(w, "\n[timing]");
    let _ = writeln!(
        w,
        "# The model measured: preset {} ({} parameters), {} x {} tokens per micro-batch.",
        o.preset, cc.params, o.batch, o.seq
    );
    let _ = writeln!(w, "# A micro-batch (forward + backward): {}.", stats(&micro_batches, 1e3, "ms"));
    let _ = writeln!(w, "# No seconds_per_micro_batch: [device]'s rate gives back this mean for this model.");
    let _ =
        writeln!(w, "params = {:e}\nflops_per_token = {fpt:e}\ntokens_per_micro_batch = {tokens}", cc.params as f64);
    // The spread the workers meet at once: each set's samples about that
    // set's median (finding 26); the pooled spread adds the drift between
    // sets, which moves every worker together.
    let pooled = micro_batches.robust_cv();
    let _ = writeln!(w, "# Its spread, 1.4826 x the median absolute deviation over the median (a normal's sd,");
    let _ = writeln!(w, "# not moved by one stretched sample), each sample about the median of its own set");
    let _ = writeln!(w, "# (every worker's micro-batches timed together): the simulator draws each micro-batch's");
    let _ = writeln!(w, "# time from it, so ranks reach a blocking collective apart (sim/straggle.rs). Over all");
    let _ = writeln!(w, "# {} set(s) pooled, the drift between them included: {pooled:.4}.", cc.micro_batch_sets.len());
    if let Some(sd) = cc.within_set_sd_cv() {
        let _ = writeln!(w, "# Within each set as a standard deviation over the mean, its long tail counted: {sd:.4}.");
    }
    // Kept so that another estimate can be taken from a kept profile (finding 27).
    for (i, set) in cc.micro_batch_sets.iter().enumerate() {
        let workers: Vec<String> =
            set.iter().map(|s| s.0.iter().map(|x| format!("{:.1}", 1e3 * x)).collect::<Vec<_>>().join(" ")).collect();
        let _ = writeln!(w, "# set {} (ms, worker by worker): {}", i + 1, workers.join(" | "));
    }
    let _ = writeln!(w, "micro_batch_cv = {:e}", cc.within_set_cv().unwrap_or(pooled).min(0.5));
    match super::correlation::lag1(&cc.micro_batch_series()) {
        Some(l) => {
            let _ = writeln!(w, "# How much a slow micro-batch predicts the next: their lag-1 correlation over");
            let _ = writeln!(
                w,
                "# {} series of consecutive micro-batches ({} pairs), each on its own mean: {:.3}, corrected",
                l.series, l.pairs, l.raw
            );
            let _ = writeln!(
                w,
                "# for that mean's bias to {:.3} (calibrate/correlation.rs). The simulator draws",
                l.corrected
            );
            let _ = writeln!(w, "# each rank's micro-batches in stretches this long (sim/straggle.rs).");
            let _ = writeln!(w, "micro_batch_correlation = {:e}", l.corrected);
        }
        None => {
            let _ = writeln!(w, "# No micro_batch_correlation: too few micro-batches in a row to measure one.");
        }
    }
    s
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
