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
    /// Where each participant's clock starts (empty: at zero).
    pub start: StartClocks,
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
            start: Vec::new(),
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
