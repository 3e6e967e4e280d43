//! How much computation and communication slow each other when a worker
//! runs both at once (runtime/sim/spec.rs, `Interference`): the model's
//! all-reduce timed alone and while a second thread of the same rank
//! computes micro-batches back to back (as ACCO, CO2 and streaming DiLoCo
//! run them), the two in turn. On CPU workers the network stack and MPI's
//! progress share the cores with the math (issue 29: over a shaped 100 Mbit/s link the
//! simulator's ACCO rounds were 21% shorter than the real ones, whose
//! micro-batches ran 25% slower than those of the methods that block).
//!
//! Only under MPI: in one process the "link" is a memory copy on the same
//! cores, which says nothing about a network. Every rank calls [`measure`].
//!
//! Both factors are ratios of samples taken in turn, seconds apart: a
//! micro-batch beside an all-reduce against micro-batches timed right after
//! it with no all-reduce running. Held against the compute phase's median
//! instead, minutes earlier, three calibrations measured 1.20-1.98 where
//! the acco runs that followed computed at 1.15-1.29x
//! (docs/results/planner-accuracy.md, findings 15 and 16).
//!
//! A third set times the all-reduce as co2 runs it on a link that bounds
//! it, each launched as the last returns with micro-batches beside its
//! start (`Overlap::comm_chained`). The profile reports it and no factor
//! takes it: co2's all-reduces in training run 1.06-1.11x diloco's at
//! 20 Mbit/s (finding 20), and this pattern, timed here, did not (finding 28).

use super::compute::{tokens, Samples};
use crate::comm::activity::Computing;
use crate::comm::{Communicator, ReduceOp, WireDtype};
use crate::model::{Gpt, GptConfig};
use crate::runtime::kernel_pool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The samples behind the two factors.
#[derive(Clone, Debug)]
pub struct Overlap {
    /// Bytes of the all-reduce timed (the model's f32 gradient, capped at `--max-bytes`).
    pub bytes: usize,
    /// Members of that all-reduce.
    pub members: usize,
    /// Its seconds with nothing else running.
    pub comm_alone: Samples,
    /// Its seconds while this rank computes micro-batches.
    pub comm_overlapped: Samples,
    /// Its seconds launched the moment the previous one returned, this rank
    /// computing micro-batches through the first [`CHAINED_COVER`] of it
    /// (co2's pattern on a link that bounds it: each outer all-reduce
    /// starts as the last ends, its inner steps beside the start). The
    /// all-reduces above start after a barrier, from an idle link.
    pub comm_chained: Samples,
    /// The share of each chained all-reduce that micro-batches covered.
    pub chained_covered: Samples,
    /// A micro-batch's seconds while the all-reduces run.
    pub compute_overlapped: Samples,
    /// A micro-batch's seconds right after each overlapped all-reduce, for
    /// as long as it took, with no all-reduce running: what
    /// `compute_overlapped` is held against.
    pub compute_alone: Samples,
    /// Every rank ran on one kernel (the same boot id): the ranks share one
    /// machine's cores, as network namespaces on one VM do (bench/netns).
    pub shared_cores: bool,
}

impl Overlap {
    /// `overlap_comm_factor`: overlapped over alone, at least 1 (below 1 is noise).
    pub fn comm_factor(&self) -> f64 {
        (self.comm_overlapped.median() / self.comm_alone.median()).max(1.0)
    }

    /// `overlap_compute_factor`: overlapped over alone, medians of the
    /// samples taken in turn; at least 1, and 1 when either set is empty
    /// (all-reduces shorter than a micro-batch: nothing overlapped to time).
    pub fn compute_factor(&self) -> f64 {
        if self.compute_overlapped.0.is_empty() || self.compute_alone.0.is_empty() {
            return 1.0;
        }
        (self.compute_overlapped.median() / self.compute_alone.median()).max(1.0)
    }

    /// `shared_cores_compute_factor` when the ranks share one machine's
    /// cores, else `None`: a micro-batch beside one transfer of another
    /// rank. The timed all-reduce ran `members` transfers at once (each
    /// member sends its stream and drives MPI's progress for it), a
    /// message is one, so it takes one member's share of the slowdown:
    /// `1 + (compute_factor - 1) / members`. A model of the cause, not a
    /// fit: finding 19 of docs/results/planner-accuracy.md measured a
    /// micro-batch beside async DiLoCo's server's sends at 0.95-1.13x.
    pub fn one_transfer_factor(&self) -> Option<f64> {
        self.shared_cores.then(|| 1.0 + (self.compute_factor() - 1.0) / self.members.max(1) as f64)
    }

    /// How far the host's speed moved while calibrate ran: the mean of the
    /// micro-batches timed alone in this phase over the mean of the
    /// `[timing]` ones (timed before the link phases and again after them),
    /// minus 1. The sets are minutes apart, and only
    /// the host moves between them (same model, same batch, no transfer):
    /// within 3% on a quiet VM, 3.5-24% on a busy one, where the runs that
    /// followed missed the profile's compute by up to 23% (finding 24 of
    /// docs/results/planner-accuracy.md). `None` when nothing was timed alone.
    pub fn host_drift(&self, timing: &Samples) -> Option<f64> {
        (!self.compute_alone.0.is_empty() && !timing.0.is_empty())
            .then(|| self.compute_alone.mean() / timing.mean() - 1.0)
    }
}

/// The share of a chained all-reduce (`Overlap::comm_chained`) that the
/// rank computes beside, timed alone: co2's 12 inner steps beside its
/// all-reduce at 20 Mbit/s (39-41%, docs/results/planner-accuracy.md,
/// finding 20, where a fifth and four fifths cost the same).
pub const CHAINED_COVER: f64 = 0.4;

/// All-reduces in each chain; the first (after a barrier) is not kept.
const CHAIN: usize = 3;

/// A host drift ([`Overlap::host_drift`]) past which calibrate warns: a
/// micro-batch off by more than the planner's 5% bar moves every
/// prediction of a compute-bound method past it.
pub const HOST_DRIFT_WARNING: f64 = 0.05;

/// This kernel's boot id (`/proc/sys/kernel/random/boot_id`): ranks that
/// read the same one share a machine's cores, whatever their network
/// namespace or MPI's idea of a node. Empty where it cannot be read.
pub fn boot_id() -> Vec<u8> {
    std::fs::read("/proc/sys/kernel/random/boot_id").map(|b| b.trim_ascii().to_vec()).unwrap_or_default()
}

/// Whether every rank's boot id ([`boot_id`]) is the same known one.
pub fn one_kernel(ids: &[Vec<u8>]) -> bool {
    ids.first().is_some_and(|first| !first.is_empty() && ids.iter().all(|id| id == first))
}

/// One all-reduce of `buf` on `comm` after a barrier: when it started and ended.
fn all_reduce(comm: &mut dyn Communicator, buf: &mut [f32]) -> (Instant, Instant) {
    comm.barrier();
    let t = Instant::now();
    comm.all_reduce(buf, ReduceOp::Mean, WireDtype::F32);
    (t, Instant::now())
}

/// Seconds from the start of a span to its end.
fn secs((a, b): &(Instant, Instant)) -> f64 {
    (*b - *a).as_secs_f64()
}

/// The share of `(start, end)` that the `spans` cover (they do not overlap each other).
fn covered((s, e): &(Instant, Instant), spans: &[(Instant, Instant)]) -> f64 {
    let inside: f64 = spans
        .iter()
        .map(|(a, b)| {
            let (from, to) = ((*a).max(*s), (*b).min(*e));
            if to > from {
                secs(&(from, to))
            } else {
                0.0
            }
        })
        .sum();
    inside / secs(&(*s, *e)).max(f64::MIN_POSITIVE)
}

/// Measures on `comm` (every member calls it): `repeats` rounds of an
/// all-reduce of `bytes` alone, the same all-reduce while a thread computes
/// micro-batches of `model` (`batch` x `seq` tokens), then that thread
/// computing alone for as long as the overlapped all-reduce took, then a
/// chain of [`CHAIN`] all-reduces back to back, each with micro-batches
/// beside its first [`CHAINED_COVER`]. The
/// rounds interleave, so that a link whose rate drifts or jitters (a shared
/// network, `mpirun_shaped.sh --jitter`) slows both all-reduces alike, and
/// cores that a neighbour takes for a while slow both micro-batch sets
/// alike: timed as blocks, one after the other, the blocks saw different
/// rates and a slowdown of 1.2-1.5x in training measured as none
/// (docs/results/planner-accuracy.md, finding 2), or one of 1.15 as 1.98
/// (finding 16). Micro-batches that did not both start and end inside an
/// overlapped all-reduce or a block alone are dropped.
pub fn measure(
    comm: &mut dyn Communicator,
    model: &GptConfig,
    (batch, seq): (usize, usize),
    bytes: usize,
    repeats: usize,
) -> Overlap {
    let members = comm.world();
    let mut buf = vec![1.0f32; (bytes / 4).max(1)];
    // One untimed, to set up the connections.
    comm.all_reduce(&mut buf, ReduceOp::Mean, WireDtype::F32);
    // The compute thread starts micro-batches until the instant in
    // `until`, and sleeps while it is past or unset (a spinning thread
    // would load the "alone" samples); `busy` says a micro-batch is
    // running, so that an all-reduce alone waits for the last one to end.
    let (until, busy, stop) = (Mutex::new(None::<Instant>), AtomicBool::new(false), AtomicBool::new(false));
    let compute_until = |t: Option<Instant>| *until.lock().expect("the overlap's clock") = t;
    let (mut alone, mut windows, mut blocks, mut chained) = (vec![], vec![], vec![], vec![]);
    let compute = || {
        // The weights do not matter for timing: seed 0.
        let mut m = Gpt::new(model.clone(), 0).expect("validated by the compute phase");
        let (x, y) = tokens(model, batch, seq, 0);
        let mut spans = Vec::new();
        while !stop.load(Ordering::Acquire) {
            if !until.lock().expect("the overlap's clock").is_some_and(|u| Instant::now() < u) {
                std::thread::sleep(std::time::Duration::from_micros(200));
                continue;
            }
            busy.store(true, Ordering::Release);
            // As a training run marks it (runtime/real.rs), so the
            // all-reduce waits as it would there (comm/activity.rs).
            let computing = Computing::start();
            let t = Instant::now();
            m.zero_grads();
            std::hint::black_box(m.forward_backward(&x, &y, batch, seq, 1.0));
            spans.push((t, Instant::now()));
            drop(computing);
            busy.store(false, Ordering::Release);
        }
        spans
    };
    let idle = || {
        while busy.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    };
    // Until told otherwise.
    let long = std::time::Duration::from_secs(3600);
    let spans = std::thread::scope(|sc| {
        // The one computing thread, as a lone training worker computes (runtime/kernel_pool.rs).
        let worker = sc.spawn(|| {
            let pool = kernel_pool::for_participants(1, "calibrate-overlap");
            kernel_pool::run(pool.as_ref(), compute)
        });
        for _ in 0..repeats {
            idle();
            alone.push(all_reduce(comm, &mut buf));
            compute_until(Some(Instant::now() + long));
            let (s, e) = all_reduce(comm, &mut buf);
            windows.push((s, e));
            // Every rank computes alone at once, for as long.
            comm.barrier();
            let t = Instant::now();
            std::thread::sleep(e - s);
            blocks.push((t, Instant::now()));
            compute_until(None);
            idle();
            // co2's pattern: each all-reduce launched as the last returns,
            // micro-batches started through its first part (timed alone).
            let cover = Samples(alone.iter().map(secs).collect()).median() * CHAINED_COVER;
            comm.barrier();
            for i in 0..CHAIN {
                let t = Instant::now();
                compute_until(Some(t + std::time::Duration::from_secs_f64(cover)));
                comm.all_reduce(&mut buf, ReduceOp::Mean, WireDtype::F32);
                if i > 0 {
                    chained.push((t, Instant::now()));
                }
            }
            compute_until(None);
        }
        stop.store(true, Ordering::Release);
        worker.join().expect("the overlap's compute thread")
    });
    let within = |stretches: &[(Instant, Instant)]| {
        let inside = |(a, b): &&(Instant, Instant)| stretches.iter().any(|(s, e)| a >= s && b <= e);
        Samples(spans.iter().filter(inside).map(secs).collect())
    };
    Overlap {
        bytes,
        members,
        comm_alone: Samples(alone.iter().map(secs).collect()),
        comm_overlapped: Samples(windows.iter().map(secs).collect()),
        comm_chained: Samples(chained.iter().map(secs).collect()),
        chained_covered: Samples(chained.iter().map(|c| covered(c, &spans)).collect()),
        compute_overlapped: within(&windows),
        compute_alone: within(&blocks),
        shared_cores: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_are_overlapped_over_alone_and_never_below_one() {
        let o = Overlap {
            bytes: 4,
            members: 2,
            comm_alone: Samples(vec![1.0, 2.0, 3.0]),
            comm_overlapped: Samples(vec![2.5, 2.0, 3.0]),
            comm_chained: Samples(vec![2.0]),
            chained_covered: Samples(vec![0.4]),
            compute_overlapped: Samples(vec![0.3, 0.2, 0.1]),
            compute_alone: Samples(vec![0.1, 0.1, 0.2]),
            shared_cores: false,
        };
        // Medians: comm 2.5 / 2 = 1.25; compute 0.2 / 0.1 = 2.
        assert_eq!(o.comm_factor(), 1.25);
        assert_eq!(o.compute_factor(), 2.0);
        // Faster while overlapped is noise: 1.
        let faster = Overlap { compute_alone: Samples(vec![1.0]), ..o.clone() };
        assert_eq!(faster.compute_factor(), 1.0);
        // No micro-batch fitted inside a block: nothing to hold the overlapped ones against.
        let none = Overlap { compute_alone: Samples(vec![]), ..o.clone() };
        assert_eq!(none.compute_factor(), 1.0);
        // On separate machines no factor for others' transfers; on one
        // machine's cores one transfer of the two: 1 + (2 - 1) / 2.
        assert_eq!(o.one_transfer_factor(), None);
        assert_eq!(Overlap { shared_cores: true, ..o.clone() }.one_transfer_factor(), Some(1.5));
        assert_eq!(Overlap { shared_cores: true, members: 4, ..o }.one_transfer_factor(), Some(1.25));
    }

    #[test]
    fn host_drift_is_the_alone_mean_over_the_timing_mean_minus_one() {
        let o = Overlap {
            bytes: 4,
            members: 2,
            comm_alone: Samples(vec![1.0]),
            comm_overlapped: Samples(vec![1.0]),
            comm_chained: Samples(vec![1.0]),
            chained_covered: Samples(vec![0.4]),
            compute_overlapped: Samples(vec![0.2]),
            compute_alone: Samples(vec![0.012, 0.013]),
            shared_cores: false,
        };
        // 12.5 ms over 10 ms: +25%; 7.5 ms over 10 ms: -25%.
        let timing = Samples(vec![0.010, 0.011, 0.009]);
        assert!((o.host_drift(&timing).unwrap() - 0.25).abs() < 1e-12);
        let slower_before = Overlap { compute_alone: Samples(vec![0.0075]), ..o.clone() };
        assert!((slower_before.host_drift(&timing).unwrap() + 0.25).abs() < 1e-12);
        // Nothing timed alone (or no [timing] samples): no drift to say.
        assert_eq!(Overlap { compute_alone: Samples(vec![]), ..o.clone() }.host_drift(&timing), None);
        assert_eq!(o.host_drift(&Samples(vec![])), None);
    }

    #[test]
    fn ranks_share_cores_only_when_every_boot_id_is_the_same_known_one() {
        let id = |s: &str| s.as_bytes().to_vec();
        assert!(one_kernel(&[id("a1"), id("a1"), id("a1")]));
        assert!(!one_kernel(&[id("a1"), id("b2")]));
        // Unreadable (empty) ids say nothing: separate machines assumed.
        assert!(!one_kernel(&[id(""), id("")]));
        assert!(!one_kernel(&[]));
        // This process reads its own kernel's id, the same each time.
        assert_eq!(boot_id(), boot_id());
    }

    #[test]
    fn micro_batches_are_timed_beside_each_all_reduce_and_alone_right_after() {
        // A group of one whose all-reduce takes 60 ms, as a link would,
        // without using the cores.
        let member = crate::comm::LocalGroup::new(1).pop().expect("one member");
        let mut link =
            crate::comm::local::AllReduceBy(member, |m: &mut crate::comm::LocalComm, buf: &mut [f32], op, wire| {
                std::thread::sleep(std::time::Duration::from_millis(60));
                m.all_reduce(buf, op, wire)
            });
        let model = GptConfig::gpt2(37, 16, 1, 2, 8);
        let o = measure(&mut link, &model, (2, 8), 1 << 10, 3);
        assert_eq!((o.comm_alone.0.len(), o.comm_overlapped.0.len()), (3, 3));
        // Each chain's all-reduces but its first: (3 - 1) x 3.
        assert_eq!(o.comm_chained.0.len(), (CHAIN - 1) * 3);
        assert!(o.comm_alone.0.iter().chain(&o.comm_chained.0).all(|&s| s >= 0.06), "{o:?}");
        // Micro-batches start through the first 40% of each (24 ms of 60;
        // the last one may end a little past it): neither none nor all.
        assert!(o.chained_covered.0.iter().all(|&c| c > 0.1 && c < 0.6), "{:?}", o.chained_covered);
        // A micro-batch of this model takes well under a millisecond: both
        // sets hold several per 60 ms stretch, and none longer than one.
        assert!(o.compute_overlapped.0.len() >= 3 && o.compute_alone.0.len() >= 3, "{o:?}");
        assert!(o.compute_overlapped.0.iter().chain(&o.compute_alone.0).all(|&s| s > 0.0 && s < 0.06));
        assert!(o.compute_factor() >= 1.0);
    }

    #[test]
    fn overlap_is_measured_on_a_communicator_of_one() {
        // A group of one: the all-reduce is a no-op, but the threads, the
        // window and the samples are exercised.
        let mut g = crate::comm::LocalGroup::new(1).pop().expect("one member");
        let model = GptConfig::gpt2(37, 16, 1, 2, 8);
        let o = measure(&mut g, &model, (2, 8), 1 << 20, 3);
        assert_eq!((o.comm_alone.0.len(), o.comm_overlapped.0.len(), o.members), (3, 3, 1));
        assert_eq!(o.comm_chained.0.len(), (CHAIN - 1) * 3);
        assert!(o.compute_overlapped.0.iter().chain(&o.compute_alone.0).all(|&s| s > 0.0));
    }
}
