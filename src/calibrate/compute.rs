//! What a worker's computation costs on this machine, measured with every
//! local worker computing at once: `threads` threads of this process (the
//! threads backend: they share the cores and rayon's pool, as training
//! workers do) or, under MPI, this rank while the node's other ranks run
//! the same (`sync` is then the job's barrier), its kernels in a pool as a
//! lone worker's are (runtime/kernel_pool.rs).
//!
//! Each repetition starts together (a barrier), so the numbers are those of
//! a synchronous step, where all workers compute at the same time. Per kind
//! of work, the cost model's unit (runtime/sim/spec.rs):
//!
//! - micro-batch: seconds of one forward + backward (`Work::MicroBatch`);
//! - AdamW step over the model: bytes per second at the 28 bytes a
//!   parameter the simulator charges an optimizer step (`Work::Optimizer`);
//! - the DiLoCo outer step (Nesterov over 3 n elements) and pseudo-gradient
//!   (n): bytes per second at 12 bytes an element (`Work::Elementwise`);
//! - DeMo's encode + decode (the strategy's own replicator, `fold` and
//!   `unfold`): FLOP/s at the FLOPs the strategy charges (`Work::Flops`,
//!   `Replicator::flops`).

pub use super::samples::Samples;
use crate::comm::WireDtype;
use crate::model::{Gpt, GptConfig, ParamLayout};
use crate::optim::{AdamW, AdamWConfig, DecaySegments, Optimizer, OuterConfig, OuterOpt};
use crate::runtime::{kernel_pool, Group};
use crate::strategy::detonation::demo::DemoReplicator;
use crate::strategy::detonation::{shard, Exchange, Replicator};
use crate::strategy::DemoSettings;
use anyhow::Result;
use rand::{Rng, SeedableRng};
use std::sync::Barrier;
use std::time::Instant;

/// Bytes the simulator charges per parameter of an optimizer step (AdamW reads p, g, m, v, writes p, m, v).
pub const OPTIMIZER_BYTES: f64 = 28.0;
/// Bytes the simulator charges per element of elementwise work (reads two, writes one).
pub const ELEMENTWISE_BYTES: f64 = 12.0;

/// What is measured and how often.
#[derive(Clone, Debug)]
pub struct ComputeSetup {
    /// The model.
    pub model: GptConfig,
    /// Sequences per micro-batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Threads of this process computing at once (1 under MPI).
    pub threads: usize,
    /// Workers of the node computing at once (the threads, or under MPI
    /// the node's ranks), for the progress lines.
    pub node_workers: usize,
    /// Timed repetitions per worker.
    pub repeats: usize,
    /// Untimed repetitions first.
    pub warmup: usize,
    /// Members whose DeMo payloads a decode places (the job's workers).
    pub demo_members: usize,
}

/// The measured costs.
#[derive(Clone, Debug, Default)]
pub struct ComputeCosts {
    /// Parameters of the model.
    pub params: usize,
    /// Seconds per micro-batch, by set (timed together, minutes from the
    /// next set), each set one series per worker in the order they ran:
    /// [`ComputeCosts::micro_batch`] pools them, calibrate/correlation.rs
    /// reads how a slow one predicts the next, [`ComputeCosts::within_set_cv`]
    /// how far the workers spread at once.
    pub micro_batch_sets: Vec<Vec<Samples>>,
    /// Seconds per AdamW step over all parameters, each right after a micro-batch.
    pub adamw: Samples,
    /// The same steps back to back (caches warm), for comparison only.
    pub adamw_back_to_back: Samples,
    /// Seconds per DiLoCo pseudo-gradient + Nesterov outer step over all parameters.
    pub outer: Samples,
    /// Seconds per DeMo encode + decode over all parameters.
    pub demo: Samples,
    /// FLOPs the strategy charges for one DeMo encode + decode.
    pub demo_flops: f64,
}

impl ComputeCosts {
    /// Adds a set of micro-batches, one series per worker ([`micro_batches`]).
    pub fn add_micro_batches(&mut self, series: Vec<Samples>) {
        self.add_to_set(self.micro_batch_sets.len(), series);
    }
    /// Adds other workers' series to set `set` (the MPI gather: every
    /// rank's first set is timed at once, then every rank's second).
    pub fn add_to_set(&mut self, set: usize, series: Vec<Samples>) {
        if self.micro_batch_sets.len() <= set {
            self.micro_batch_sets.resize(set + 1, Vec::new());
        }
        self.micro_batch_sets[set].extend(series);
    }
    /// Every series of every set.
    pub fn micro_batch_series(&self) -> Vec<Samples> {
        self.micro_batch_sets.iter().flatten().cloned().collect()
    }
    /// Seconds per micro-batch: every sample of every set, pooled.
    pub fn micro_batch(&self) -> Samples {
        pooled(self.micro_batch_series())
    }
    /// The micro-batch's spread as the workers of a run meet it: 1.4826 x
    /// the median of each sample's relative deviation from its own set's
    /// median (all workers of that set), so a drift between sets minutes
    /// apart, which moves every worker at once and makes none wait, is left
    /// out (docs/results/planner-accuracy.md, finding 26). `None` without sets.
    pub fn within_set_cv(&self) -> Option<f64> {
        let dev: Vec<f64> = self.deviations_within_sets(Samples::median).into_iter().map(f64::abs).collect();
        (!dev.is_empty()).then(|| 1.4826 * Samples(dev).median())
    }
    /// The spread within each set as a standard deviation: each sample over
    /// its own set's mean, less 1, and the root mean square of that over
    /// every sample. Unlike [`ComputeCosts::within_set_cv`] it counts a
    /// set's long tail, which makes ranks wait as much as its core does
    /// (planner-accuracy finding 27: 0.028 by the median deviation where the
    /// runs spread 0.13-0.16). Written beside it for comparison.
    pub fn within_set_sd_cv(&self) -> Option<f64> {
        let dev = self.deviations_within_sets(Samples::mean);
        (!dev.is_empty()).then(|| (dev.iter().map(|d| d * d).sum::<f64>() / dev.len() as f64).sqrt())
    }
    /// Each sample's relative deviation `x / c - 1` from `center` (median or
    /// mean) of its own set, all workers of that set together, over every set.
    fn deviations_within_sets(&self, center: fn(&Samples) -> f64) -> Vec<f64> {
        self.micro_batch_sets
            .iter()
            .flat_map(|set| {
                let all = pooled(set.clone());
                let c = center(&all).max(f64::MIN_POSITIVE);
                all.0.into_iter().map(move |x| x / c - 1.0)
            })
            .collect()
    }
    /// Memory bandwidth an AdamW step reaches, bytes/s (28 bytes a parameter).
    pub fn adamw_bandwidth(&self) -> f64 {
        OPTIMIZER_BYTES * self.params as f64 / self.adamw.median()
    }
    /// Memory bandwidth the outer step reaches, bytes/s (12 bytes an element over 4 n elements).
    pub fn outer_bandwidth(&self) -> f64 {
        ELEMENTWISE_BYTES * 4.0 * self.params as f64 / self.outer.median()
    }
    /// FLOP rate DeMo's encode + decode reaches.
    pub fn demo_flops_per_s(&self) -> f64 {
        self.demo_flops / self.demo.median()
    }
}

/// Runs `work` `warmup + repeats` times on each of `threads` threads (one
/// state each, from `setup`), every repetition started together (a barrier
/// between the threads; with one thread, `sync`: the job's barrier under
/// MPI), each after `untimed` (a micro-batch: [`after_a_micro_batch`]).
/// Returns the timed repetitions of every thread, one series each.
fn concurrently<S: Send>(
    threads: usize,
    (warmup, repeats): (usize, usize),
    sync: &dyn Fn(),
    setup: impl Fn(usize) -> S + Sync,
    untimed: impl Fn(&mut S) + Sync,
    work: impl Fn(&mut S) + Sync,
) -> Vec<Samples> {
    // The work runs where a worker's kernels run in training
    // (runtime/kernel_pool.rs); the barrier stays outside.
    let one = |i: usize, before: &dyn Fn()| {
        let pool = kernel_pool::for_participants(threads, &format!("calibrate-{i}"));
        let mut s = setup(i);
        let mut out = Vec::with_capacity(repeats);
        for r in 0..warmup + repeats {
            kernel_pool::run(pool.as_ref(), || untimed(&mut s));
            before();
            let seconds = kernel_pool::run(pool.as_ref(), || {
                let t = Instant::now();
                work(&mut s);
                t.elapsed().as_secs_f64()
            });
            if r >= warmup {
                out.push(seconds);
            }
        }
        out
    };
    if threads <= 1 {
        return vec![Samples(one(0, sync))];
    }
    let bar = Barrier::new(threads);
    let all = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let (one, bar) = (&one, &bar);
                sc.spawn(move || {
                    one(i, &|| {
                        bar.wait();
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| Samples(h.join().expect("calibration thread"))).collect()
    });
    all
}

/// Every thread's samples in one set.
fn pooled(series: Vec<Samples>) -> Samples {
    Samples(series.into_iter().flat_map(|s| s.0).collect())
}

/// Timed micro-batches in a row per worker and set: enough pairs for the
/// lag-1 correlation (calibrate/correlation.rs) at the repeats asked of
/// the other work, 3 x `--repeats` (30 by default, about 2 s of nano).
pub fn micro_batch_repeats(repeats: usize) -> usize {
    3 * repeats
}

/// Random tokens for one micro-batch: inputs and next-token targets.
pub(super) fn tokens(cfg: &GptConfig, b: usize, t: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let data: Vec<u32> = (0..b * (t + 1)).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect();
    let (mut x, mut y) = (Vec::with_capacity(b * t), Vec::with_capacity(b * t));
    for row in data.chunks_exact(t + 1) {
        x.extend_from_slice(&row[..t]);
        y.extend_from_slice(&row[1..]);
    }
    (x, y)
}

/// Seconds of [`micro_batch_repeats`] micro-batches (forward + backward) of
/// every local worker at once, after `s.warmup` untimed, one series per
/// worker. `calibrate --backend mpi` takes a second set after its link
/// phases: this machine's speed drifts over minutes, and one set is a
/// snapshot of a few seconds.
pub fn micro_batches(s: &ComputeSetup, sync: &dyn Fn()) -> Vec<Samples> {
    let reps = (s.warmup, micro_batch_repeats(s.repeats));
    concurrently(s.threads.max(1), reps, sync, |i| MicroBatch::new(s, i), |_| {}, MicroBatch::run)
}

/// One worker's micro-batch: its model and a batch of random tokens.
pub(super) struct MicroBatch {
    model: Gpt,
    tokens: (Vec<u32>, Vec<u32>),
    shape: (usize, usize),
}

impl MicroBatch {
    fn new(s: &ComputeSetup, worker: usize) -> MicroBatch {
        let model = Gpt::new(s.model.clone(), worker as u64).expect("validated");
        MicroBatch { model, tokens: tokens(&s.model, s.batch, s.seq, worker as u64), shape: (s.batch, s.seq) }
    }

    fn run(&mut self) {
        let ((x, y), (b, t)) = (&self.tokens, self.shape);
        self.model.zero_grads();
        std::hint::black_box(self.model.forward_backward(x, y, b, t, 1.0));
    }
}

/// Runs `work` as [`concurrently`] does, each repetition right after an
/// untimed micro-batch of the worker's own model: in a run, an optimizer
/// step, an outer step or DeMo's encode follows a forward + backward, which
/// leaves the caches holding activations, not the optimizer's state. Timed
/// back to back instead, the state stays cached and the step looks faster
/// than any run sees it (docs/results/planner-accuracy.md, finding 18).
fn after_a_micro_batch<S: Send>(
    s: &ComputeSetup,
    sync: &dyn Fn(),
    setup: impl Fn(usize) -> S + Sync,
    work: impl Fn(&mut S) + Sync,
) -> Samples {
    pooled(concurrently(
        s.threads.max(1),
        (s.warmup, s.repeats),
        sync,
        |i| (MicroBatch::new(s, i), setup(i)),
        |(mb, _)| mb.run(),
        |(_, st)| work(st),
    ))
}

/// Measures every cost of [`ComputeCosts`]; `progress` gets one line per kind of work.
pub fn measure(s: &ComputeSetup, sync: &dyn Fn(), progress: &dyn Fn(&str)) -> Result<ComputeCosts> {
    s.model.validate()?;
    anyhow::ensure!(
        s.seq >= 1 && s.seq <= s.model.ctx,
        "--seq-len {} must be in 1..={} (the model's context)",
        s.seq,
        s.model.ctx
    );
    let (b, t, k) = (s.batch, s.seq, s.threads.max(1));
    let at_once = format!("{} worker(s) of the node at once", s.node_workers.max(k));
    let n = Gpt::new(s.model.clone(), 0)?.num_params();
    let mut c = ComputeCosts { params: n, ..ComputeCosts::default() };
    let reps = (s.warmup, s.repeats);
    progress(&format!(
        "micro-batch: forward + backward of {b} x {t} tokens, {at_once}, {} timed in a row + {} warm-up each",
        micro_batch_repeats(reps.1),
        reps.0
    ));
    c.add_micro_batches(micro_batches(s, sync));
    progress(&format!("AdamW step over {n} parameters, {at_once}"));
    let layout = ParamLayout::new(&s.model);
    let adamw_state = |_: usize| {
        (
            AdamW::new(AdamWConfig::default(), n),
            vec![0.1f32; n],
            vec![1e-3f32; n],
            DecaySegments::new(layout.decay_ranges()),
        )
    };
    let adamw_step = |(o, p, g, d): &mut (AdamW, Vec<f32>, Vec<f32>, DecaySegments)| o.step(p, g, 1e-3, d);
    c.adamw = after_a_micro_batch(s, sync, adamw_state, adamw_step);
    c.adamw_back_to_back = pooled(concurrently(k, reps, sync, adamw_state, |_| {}, adamw_step));
    progress(&format!("DiLoCo pseudo-gradient + Nesterov outer step over {n} parameters, {at_once}"));
    c.outer = after_a_micro_batch(
        s,
        sync,
        |_| (OuterOpt::new(OuterConfig::default(), n), vec![0.1f32; n], vec![0.2f32; n], vec![0.0f32; n]),
        |(o, anchor, local, delta)| {
            delta.iter_mut().zip(anchor.iter().zip(local.iter())).for_each(|(d, (a, l))| *d = a - l);
            o.step(anchor, delta);
        },
    );
    let members = s.demo_members.max(2);
    progress(&format!(
        "DeMo encode + decode (chunk 64, top 32, {members} members) over {n} parameters, {k} worker(s) at once"
    ));
    let pieces = shard::pieces(&layout, DemoSettings::default().chunk, &(0..n));
    let rep =
        |_: usize| DemoReplicator::new(&DemoSettings::default(), &pieces, n, Group::World, members, WireDtype::F32);
    c.demo_flops = rep(0).flops();
    let grads: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 * 1e-6 - 5e-4).collect();
    c.demo = after_a_micro_batch(
        s,
        sync,
        |i| (rep(i), vec![0.0f32; n], 0u64),
        |(r, q, step)| {
            *step += 1;
            let Exchange::Gather { group, input, mut output } = r.fold(*step, 1e-3, &grads) else {
                unreachable!("DeMo gathers")
            };
            // Every member sent the same payload: the decode's work, not its values, is what is timed.
            for m in output.chunks_exact_mut(input.len().max(1)) {
                m.copy_from_slice(&input);
            }
            r.unfold(Exchange::Gather { group, input, output }, q);
        },
    );
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_within_a_set_leaves_the_drift_between_sets_out() {
        // Set A: 10, 11 ms (worker 0) and 9 ms (worker 1), median 10; set B,
        // minutes later, twice as slow: 20, 21 and 19, median 20. Relative
        // deviations 0, 0.1, 0.1, 0, 0.05, 0.05: median 0.05 (sorted index 3).
        let mut c = ComputeCosts::default();
        c.add_micro_batches(vec![Samples(vec![0.010, 0.011]), Samples(vec![0.009])]);
        c.add_micro_batches(vec![Samples(vec![0.020, 0.021]), Samples(vec![0.019])]);
        assert!((c.within_set_cv().unwrap() - 1.4826 * 0.05).abs() < 1e-12);
        // Pooled, the drift is spread: median 19 ms, deviations 9, 8, 10, 1,
        // 2, 0 ms, median 8: 1.4826 x 8 / 19.
        assert!((c.micro_batch().robust_cv() - 1.4826 * 8.0 / 19.0).abs() < 1e-12);
        assert_eq!(ComputeCosts::default().within_set_cv(), None);
    }

    #[test]
    fn the_standard_deviation_within_a_set_counts_its_tail() {
        // Set A: 10, 10, 10 and 14 ms, mean 11: deviations -1/11 (x3), 3/11.
        // Set B, twice as slow: the same relative deviations. RMS: sqrt((3 +
        // 9) / 4) / 11 = sqrt(3) / 11. The median deviation sees only the
        // core: 0 (three of four samples at the median).
        let mut c = ComputeCosts::default();
        c.add_micro_batches(vec![Samples(vec![0.010, 0.010]), Samples(vec![0.010, 0.014])]);
        c.add_micro_batches(vec![Samples(vec![0.020, 0.020]), Samples(vec![0.020, 0.028])]);
        assert!((c.within_set_sd_cv().unwrap() - 3f64.sqrt() / 11.0).abs() < 1e-12);
        assert_eq!(c.within_set_cv(), Some(0.0));
        assert_eq!(ComputeCosts::default().within_set_sd_cv(), None);
    }

    #[test]
    fn every_cost_is_measured_positive_on_two_threads() {
        let model = GptConfig::gpt2(37, 16, 1, 2, 8);
        let setup = ComputeSetup {
            model,
            batch: 2,
            seq: 8,
            threads: 2,
            node_workers: 2,
            repeats: 3,
            warmup: 1,
            demo_members: 2,
        };
        let c = measure(&setup, &|| {}, &|_| {}).unwrap();
        // Micro-batches: 3 x the repeats in a row per thread, one series each.
        let series: Vec<usize> = c.micro_batch_series().iter().map(|s| s.0.len()).collect();
        assert_eq!((c.micro_batch().0.len(), series), (18, vec![9, 9]));
        for (what, s, n) in [
            ("micro-batch", &c.micro_batch(), 18),
            ("adamw", &c.adamw, 6),
            ("outer", &c.outer, 6),
            ("demo", &c.demo, 6),
        ] {
            // Every repetition of both threads.
            assert_eq!(s.0.len(), n, "{what}");
            assert!(s.0.iter().all(|x| *x > 0.0 && x.is_finite()), "{what}: {s:?}");
        }
        assert!(c.adamw_bandwidth() > 0.0 && c.outer_bandwidth() > 0.0 && c.demo_flops_per_s() > 0.0);
        let bad = ComputeSetup { seq: 9, ..setup };
        assert!(measure(&bad, &|| {}, &|_| {}).unwrap_err().to_string().contains("--seq-len 9 must be in 1..=8"));
    }
}
