//! Bytes of model states per worker, by category (params, grads, comm
//! buffers, optimizer state, outer state), for every method.
//!
//! - `Precision::F32`: the buffers this engine allocates, all f32, counted
//!   as each method's `Outcome.memory` counts them (tests_sim.rs checks
//!   equality with a run). `s` optimizer values per parameter (AdamW 2),
//!   `m = padded(n, N) / N` a shard; a sharded optimizer also keeps its
//!   shard of master parameters.
//! - `Precision::Mixed`: the ACCO paper's Table 1 accounting: parameters,
//!   gradients, communication buffers and model copies of the outer state
//!   in bf16 (2 bytes), and `K = 4 + 4 s` bytes per parameter of optimizer
//!   state (fp32 master copy plus the fp32 state: AdamW's K = 12), divided
//!   by N when sharded. For the Table 1 methods (ddp, zero1, dpu, acco-wp,
//!   acco, slowmo, co2 without its penalty) the sum is
//!   `strategy::table1_bytes`; the others use the same rules on the copies
//!   they hold (local-sgd: DDP's row, as co2.txt App. B.2 says;
//!   overlap-local-sgd: the anchor and the average in flight; co2's
//!   penalty adds x_{t-1,1} and x_{t,1}).

use super::{Costing, Precision};
use crate::comm::{codec::sender_copies, padded_len, WireDtype};
use crate::strategy::detonation::settings::DemoSettings;
use crate::strategy::{MemoryBytes, Method};
use anyhow::Result;

/// Element counts per category, and how the optimizer row is counted.
struct Copies {
    comm: f64,
    outer: f64,
    /// Parameters whose optimizer state this worker holds (n, or a shard m).
    opt_params: f64,
    /// Whether those also hold a master copy in f32 (a sharded optimizer's theta shard).
    master: bool,
    /// Extra bytes held as is (DeMo's packed payloads).
    raw_bytes: f64,
    /// Extra f32 values of optimizer-like state (DeMo's momentum, its shard theta).
    opt_extra: f64,
}

impl Copies {
    fn new(opt_params: f64) -> Copies {
        Copies { comm: 0.0, outer: 0.0, opt_params, master: false, raw_bytes: 0.0, opt_extra: 0.0 }
    }
}

/// Bytes per worker of `method` under `c`, in `c.precision`.
pub fn memory(method: &Method, c: &Costing) -> Result<MemoryBytes> {
    let s = c.state_per_param()? as f64;
    let (n, world) = (c.params, c.workers());
    let nf = n as f64;
    let padded = padded_len(n, world) as f64;
    let m = padded / world as f64;
    let mixed = c.precision == Precision::Mixed;
    let delta = c.wire == WireDtype::Bf16;
    let sharded = |comm: f64| Copies { comm, master: true, ..Copies::new(m) };
    let cp = match method {
        Method::Ddp => Copies::new(nf),
        // f32: the padded flat vector and the two shard scratch buffers; Table 1: none.
        Method::Zero1 => sharded(if mixed { 0.0 } else { padded + 2.0 * m }),
        // Plus the gradients held for the next round (g~, g(t-1)); Table 1: one buffer.
        Method::Dpu(_) | Method::AccoWp | Method::Acco => sharded(if mixed { nf } else { padded + 2.0 * m + nf }),
        // With a bf16 wire the engine keeps the last synchronised parameters (the delta's reference).
        Method::LocalSgd(_) => Copies { outer: if delta && !mixed { nf } else { 0.0 }, ..Copies::new(nf) },
        // The anchor z, and the average in flight.
        Method::OverlapLocalSgd(_) => Copies { comm: nf, outer: nf, ..Copies::new(nf) },
        // u and x_0.
        Method::SlowMo(_) => Copies { outer: 2.0 * nf, ..Copies::new(nf) },
        // The released code (mode = "reference"): x_old and m, as SlowMo.
        Method::Co2(s) if s.is_reference() => Copies { outer: 2.0 * nf, ..Copies::new(nf) },
        // x_{t,0}, x_{t-1,0}, m (+ x_{t-1,1}, x_{t,1} with the penalty); the buffer in flight (+ its bf16 reference).
        Method::Co2(s) if !s.shard_outer => {
            let outer = if s.penalty { 5.0 } else { 3.0 } * nf;
            Copies { comm: nf * if delta && !mixed { 2.0 } else { 1.0 }, outer, ..Copies::new(nf) }
        }
        // The same state on a shard; the padded reduce-scatter input and its output slice (+ bf16 reference slice).
        Method::Co2(s) => {
            let outer = if s.penalty { 5.0 } else { 3.0 } * m;
            Copies { comm: padded + m + if delta && !mixed { m } else { 0.0 }, outer, ..Copies::new(nf) }
        }
        Method::Demo(d) => demo(d, c, false)?,
        Method::FlexDemo(d) => demo(d, c, true)?,
        // theta (the round's start) and the outer optimizer's state; the
        // pseudo-gradient reuses the replica's buffer.
        // A compressed outer_wire adds the staged message and a decode buffer, and the residual with error feedback.
        Method::Diloco(s) => {
            let codec = sender_copies(s.outer_wire, s.error_feedback) as f64;
            Copies { outer: (1 + s.outer.state_copies()) as f64 * nf + codec * nf, ..Copies::new(nf) }
        }
        // DiLoCo's theta_old and outer state (per fragment, n in all) and codec buffers, plus the
        // outer gradient in flight: training goes on, so it is its own buffer (the largest fragment).
        Method::StreamingDiloco(s) => {
            let codec = sender_copies(s.outer_wire, s.error_feedback) as f64;
            let sizes = super::streaming::sizes(s, c)?;
            let largest = sizes.into_iter().max().unwrap_or(0) as f64;
            let comm = if s.same_offset { nf } else { largest };
            // Eager: the others' share (n), and g~, theta~ and the outer state's copy of the fragment in flight.
            let eager = if s.eager { nf + largest * (2 + s.outer.state_copies()) as f64 } else { 0.0 };
            Copies { comm, outer: (1 + s.outer.state_copies()) as f64 * nf + codec * nf + eager, ..Copies::new(nf) }
        }
        // Worker and server: plan_method takes async_diloco.rs's rows instead.
        Method::AsyncDiloco(_) => anyhow::bail!("async-diloco's memory is planned by plan::async_diloco"),
    };
    let (small, opt_k) = if mixed { (2.0, 4.0 + 4.0 * s) } else { (4.0, 4.0 * s + if cp.master { 4.0 } else { 0.0 }) };
    let bytes = |x: f64| x.round() as usize;
    Ok(MemoryBytes {
        params: bytes(small * nf),
        grads: bytes(small * nf),
        comm_buffers: bytes(small * cp.comm + cp.raw_bytes),
        optimizer: bytes(opt_k * cp.opt_params + 4.0 * cp.opt_extra),
        outer: bytes(small * cp.outer),
    })
}

/// DeMo / FlexDeMo: worker 0's buffers as flexdemo.rs counts them (demo.rs).
fn demo(d: &DemoSettings, c: &Costing, flex: bool) -> Result<Copies> {
    let (comm, raw_bytes, opt_extra) = super::demo::buffers(d, c, flex)?;
    Ok(Copies { comm, raw_bytes, opt_extra, ..Copies::new(0.0) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::sim::SimSpec;
    use crate::strategy::{table1_bytes, Co2Settings};

    fn costing(params: usize, workers: usize, precision: Precision) -> Costing {
        Costing::for_test(params, SimSpec::flat(workers, 1.0, None), WireDtype::Bf16, precision)
    }

    #[test]
    fn mixed_precision_rows_are_table_1_on_the_papers_example() {
        // ACCO paper, Table 1's example: 7.5B parameters, 64 workers, K = 12
        // (AdamW). 7.5e9 is a multiple of 64, so shards need no padding.
        let c = costing(7_500_000_000, 64, Precision::Mixed);
        let co2 = Method::Co2(Co2Settings { penalty: false, ..Co2Settings::default() });
        for method in [
            Method::Ddp,
            Method::Zero1,
            Method::Dpu(Default::default()),
            Method::AccoWp,
            Method::Acco,
            Method::LocalSgd(Default::default()),
            Method::OverlapLocalSgd(Default::default()),
            Method::SlowMo(Default::default()),
            co2,
        ] {
            let got = memory(&method, &c).unwrap().total() as f64;
            let want = table1_bytes(&method, 7.5e9, 64.0, 12.0);
            assert_eq!(got, want, "{method:?}");
        }
        // By hand: DDP (2 + 2 + 12) x 7.5e9 = 120 GB; ACCO (2 + 2 + 2 + 12/64) x 7.5e9 = 46.40625 GB.
        assert_eq!(memory(&Method::Ddp, &c).unwrap().total(), 120_000_000_000);
        let acco = memory(&Method::Acco, &c).unwrap();
        assert_eq!((acco.comm_buffers, acco.optimizer), (15_000_000_000, 1_406_250_000));
        // CO2's penalty adds two bf16 copies: 2 x 2 x 7.5e9 = 30 GB more than Table 1.
        let penalty = memory(&Method::Co2(Co2Settings::default()), &c).unwrap().total() as f64;
        assert_eq!(penalty - table1_bytes(&Method::Co2(Co2Settings::default()), 7.5e9, 64.0, 12.0), 30e9);
    }

    #[test]
    fn f32_rows_count_the_engines_buffers_by_hand() {
        // 10 parameters on 4 workers: padded 12, shard 3; AdamW s = 2.
        let c = costing(10, 4, Precision::F32);
        let z = memory(&Method::Zero1, &c).unwrap();
        assert_eq!((z.params, z.grads, z.comm_buffers, z.optimizer, z.outer), (40, 40, 4 * (12 + 6), 4 * 9, 0));
        let a = memory(&Method::Acco, &c).unwrap();
        assert_eq!(a.comm_buffers, 4 * (12 + 6 + 10));
        let d = memory(&Method::Ddp, &c).unwrap();
        assert_eq!(d.optimizer, 4 * 20);
        // bf16 wire: co2 keeps the delta's reference; penalty on: 5 outer copies.
        let co2 = memory(&Method::Co2(Co2Settings::default()), &c).unwrap();
        assert_eq!((co2.comm_buffers, co2.outer), (4 * 20, 4 * 50));
        let sharded = memory(&Method::Co2(Co2Settings { shard_outer: true, ..Co2Settings::default() }), &c).unwrap();
        assert_eq!((sharded.comm_buffers, sharded.outer), (4 * (12 + 3 + 3), 4 * 15));
    }
}
