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

use super::compute::{tokens, Samples};
use crate::comm::{Communicator, ReduceOp, WireDtype};
use crate::model::{Gpt, GptConfig};
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// A micro-batch's seconds while the all-reduces run (alone: the
    /// compute phase's micro-batch samples).
    pub compute_overlapped: Samples,
}

impl Overlap {
    /// `overlap_comm_factor`: overlapped over alone, at least 1 (below 1 is noise).
    pub fn comm_factor(&self) -> f64 {
        (self.comm_overlapped.median() / self.comm_alone.median()).max(1.0)
    }

    /// `overlap_compute_factor`, against `alone`'s median micro-batch; at least 1.
    pub fn compute_factor(&self, alone: &Samples) -> f64 {
        (self.compute_overlapped.median() / alone.median()).max(1.0)
    }
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

/// Measures on `comm` (every member calls it): `repeats` pairs of
/// all-reduces of `bytes`, the first of each pair alone and the second
/// while a thread computes micro-batches of `model` (`batch` x `seq`
/// tokens). The pairs interleave, so that a link whose rate drifts or
/// jitters (a shared network, `mpirun_shaped.sh --jitter`) slows both kinds
/// alike: timed as two blocks, one after the other, the blocks saw
/// different rates and a slowdown of 1.2-1.5x in training measured as none
/// (docs/results/planner-accuracy.md, finding 2). Micro-batches that did
/// not both start and end inside an overlapped all-reduce are dropped.
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
    // The compute thread runs micro-batches while `computing` is set and
    // sleeps otherwise (a spinning thread would load the "alone" samples).
    let (computing, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let (mut alone, mut windows) = (vec![], vec![]);
    let spans = std::thread::scope(|sc| {
        let worker = sc.spawn(|| {
            // The weights do not matter for timing: seed 0.
            let mut m = Gpt::new(model.clone(), 0).expect("validated by the compute phase");
            let (x, y) = tokens(model, batch, seq, 0);
            let mut spans = Vec::new();
            while !stop.load(Ordering::Acquire) {
                if !computing.load(Ordering::Acquire) {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    continue;
                }
                let t = Instant::now();
                m.zero_grads();
                std::hint::black_box(m.forward_backward(&x, &y, batch, seq, 1.0));
                spans.push((t, Instant::now()));
            }
            spans
        });
        for _ in 0..repeats {
            alone.push(all_reduce(comm, &mut buf));
            computing.store(true, Ordering::Release);
            windows.push(all_reduce(comm, &mut buf));
            computing.store(false, Ordering::Release);
        }
        stop.store(true, Ordering::Release);
        worker.join().expect("the overlap's compute thread")
    });
    let inside = |(a, b): &(Instant, Instant)| windows.iter().any(|(s, e)| a >= s && b <= e);
    Overlap {
        bytes,
        members,
        comm_alone: Samples(alone.iter().map(secs).collect()),
        comm_overlapped: Samples(windows.iter().map(secs).collect()),
        compute_overlapped: Samples(spans.iter().filter(|s| inside(s)).map(secs).collect()),
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
            compute_overlapped: Samples(vec![0.3, 0.2, 0.1]),
        };
        // Medians: comm 2.5 / 2 = 1.25; compute 0.2 / 0.1 = 2.
        assert_eq!(o.comm_factor(), 1.25);
        assert_eq!(o.compute_factor(&Samples(vec![0.1, 0.1, 0.2])), 2.0);
        // Faster while overlapped is noise: 1.
        assert_eq!(o.compute_factor(&Samples(vec![1.0])), 1.0);
    }

    #[test]
    fn overlap_is_measured_on_a_communicator_of_one() {
        // A group of one: the all-reduce is a no-op, but the threads, the
        // window and the samples are exercised.
        let mut g = crate::comm::LocalGroup::new(1).pop().expect("one member");
        let model = GptConfig::gpt2(37, 16, 1, 2, 8);
        let o = measure(&mut g, &model, (2, 8), 1 << 20, 3);
        assert_eq!((o.comm_alone.0.len(), o.comm_overlapped.0.len(), o.members), (3, 3, 1));
        assert!(o.compute_overlapped.0.iter().all(|&s| s > 0.0));
    }
}
