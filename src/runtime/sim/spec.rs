//! The cost model of a simulated cluster ([`SimSpec`]): what each kind of
//! work and each link costs in virtual seconds.

use crate::comm::LinkModel;
use crate::runtime::{StartClocks, Topology, Work};

/// The cost model of a simulated cluster.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// Virtual seconds of one micro-batch on a worker of speed 1.
    pub micro_batch_s: f64,
    /// Speed factor per worker (1 nominal, 0.25 = four times slower); the
    /// server, if any, runs at 1.
    pub speeds: Vec<f64>,
    /// Link costs; `None` makes communication free.
    pub link: Option<LinkModel>,
    /// Multiplier from elements communicated or updated to elements costed,
    /// so a small model can be trained under the timing of a big one
    /// (timing-model parameters / real parameters).
    pub comm_scale: f64,
    /// Workers, nodes, server.
    pub topology: Topology,
    /// Device memory bandwidth for memory-bound work ([`Work::Optimizer`],
    /// [`Work::Elementwise`]); `None` makes that work free.
    pub memory_bytes_per_s: Option<f64>,
    /// Device FLOP/s for [`Work::Flops`]; `None` makes that work free.
    pub flops_per_s: Option<f64>,
    /// How computation and communication slow each other on one worker
    /// when they overlap (none by default).
    pub interference: Interference,
    /// Where each participant's clock starts (empty: at zero).
    pub start: StartClocks,
    /// Relative spread of one micro-batch's time (standard deviation over
    /// median): each micro-batch takes `micro_batch_s x (1 + cv z)`, z drawn
    /// per participant and micro-batch (straggle.rs). 0: all take exactly
    /// `micro_batch_s`.
    pub micro_batch_cv: f64,
    /// Lag-1 correlation of one participant's consecutive micro-batch
    /// times, in [0, 1): a slow stretch lasts several micro-batches
    /// (straggle.rs). 0: each drawn on its own.
    pub micro_batch_correlation: f64,
    /// Seed of the micro-batch draws (straggle.rs): the run's `--seed`, so
    /// runs with other seeds meet other slow stretches. 0 (the default)
    /// draws what the simulator drew before runs had their own draws.
    pub draw_seed: u64,
    /// Run the math of participants whose virtual compute intervals
    /// overlap at once, on `min(participants, cores)` job threads
    /// (sim/jobs.rs); `false` runs every compute on the executor's thread,
    /// one at a time, its kernels on all cores. The bits are the same
    /// either way. Default `true` (issue 28: a faster simulator for
    /// many workers); `LOWCOMM_SIM_SEQUENTIAL=1` in the environment forces
    /// `false` for every run of the process.
    pub parallel: bool,
}

impl SimSpec {
    /// A flat cluster of `workers` equal workers, `micro_batch_s` per
    /// micro-batch, `link` (or free communication).
    pub fn flat(workers: usize, micro_batch_s: f64, link: Option<LinkModel>) -> SimSpec {
        SimSpec {
            micro_batch_s,
            speeds: vec![1.0; workers],
            link,
            comm_scale: 1.0,
            topology: Topology::flat(workers),
            memory_bytes_per_s: None,
            flops_per_s: None,
            interference: Interference::NONE,
            start: Vec::new(),
            micro_batch_cv: 0.0,
            micro_batch_correlation: 0.0,
            draw_seed: 0,
            parallel: true,
        }
    }

    /// Virtual seconds `work` takes on a participant of speed `speed`.
    pub fn cost(&self, work: Work, speed: f64) -> f64 {
        // Bytes an element costs: AdamW reads p, g, m, v and writes p, m, v;
        // other elementwise work reads two and writes one.
        let mem = |elems: usize, bytes: f64| {
            self.memory_bytes_per_s.map_or(0.0, |bw| elems as f64 * self.comm_scale * bytes / bw)
        };
        let t = match work {
            Work::MicroBatch => self.micro_batch_s,
            Work::Optimizer { params } => mem(params, 28.0),
            Work::Elementwise { elems, .. } => mem(elems, 12.0),
            Work::Flops { flops, .. } => self.flops_per_s.map_or(0.0, |f| flops * self.comm_scale / f),
        };
        t / speed
    }
}

/// How much computation and communication slow each other while both run
/// on one worker. On CPU workers the network stack and the MPI progress
/// thread share the cores with the math (issue 29, two ranks on two cores
/// over a shaped 100 Mbit/s link: compute 1.26x, communication 1.12x); on
/// GPUs the collectives' kernels take some of the device. `lowcomm calibrate --backend mpi` measures both.
///
/// The simulator applies them at the start of each piece of work, whole:
/// a computation started while its worker's communication lane is busy
/// takes `compute` times as long; a collective (or message) that starts
/// while a member computes takes `comm` times as long.
///
/// `beside` is for ranks that share one machine's cores (an emulated
/// cluster: network namespaces on one VM, bench/netns): a computation
/// started while this worker's communication is idle but another
/// participant's transfer runs (async DiLoCo's server sending a model to
/// the other worker) takes `beside` times as long, the transfer's MPI
/// progress and kernel work taking a share of the same cores (finding 19
/// of docs/results/planner-accuracy.md). 1 on separate machines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interference {
    /// Factor on computation started while the worker's communication runs.
    pub compute: f64,
    /// Factor on communication started while a member computes.
    pub comm: f64,
    /// Factor on computation started while only other participants'
    /// transfers run, on cores all participants share (1: not shared).
    pub beside: f64,
}

impl Interference {
    /// No interference: overlapped work takes what it takes alone.
    pub const NONE: Interference = Interference { compute: 1.0, comm: 1.0, beside: 1.0 };

    /// Wall seconds of `c` seconds of computation (alone) with `m` seconds
    /// of others' transfers running beside it from its start, on shared
    /// cores: it runs `beside` times slower inside that window. `plan`'s
    /// form of the simulator's rule (which stretches whole pieces).
    pub fn beside_others(&self, c: f64, m: f64) -> f64 {
        let b = self.beside;
        if c * b <= m {
            c * b
        } else {
            c + m * (1.0 - 1.0 / b)
        }
    }

    /// Wall seconds of computation `c` and communication `m` (seconds
    /// alone) started together, by the simulator's rule above, the
    /// computation being pieces of `unit` seconds (a micro-batch, an inner
    /// step): the communication takes `m x comm`; each piece started inside
    /// that window (the first at once) takes `compute` times as long.
    /// `max(c, m)` without interference.
    pub fn overlapped(&self, c: f64, m: f64, unit: f64) -> f64 {
        self.overlapped_with_tail(c, m, unit, 0.0)
    }

    /// [`Interference::overlapped`] with one more piece of `tail` seconds
    /// after the computation (DeMo's gradient clip behind its exchange),
    /// slowed if it starts inside the communication's window.
    pub fn overlapped_with_tail(&self, c: f64, m: f64, unit: f64, tail: f64) -> f64 {
        let m = m * self.comm;
        let end = if !(unit > 0.0 && c > 0.0) {
            c
        } else {
            let inside = (m / (unit * self.compute) * (1.0 - 1e-12)).ceil().max(1.0);
            if inside * unit >= c {
                c * self.compute
            } else {
                c + inside * unit * (self.compute - 1.0)
            }
        };
        let tail = if end < m { tail * self.compute } else { tail };
        (end + tail).max(m)
    }
}
