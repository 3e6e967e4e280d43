//! `lowcomm bench --what sim-parallel`: how much faster the simulator runs
//! many workers when the math of participants whose virtual compute
//! intervals overlap runs on rayon's pool at once (runtime/sim/jobs.rs)
//! than when it runs one compute at a time on the executor's thread
//! (`SimSpec::parallel` off). Both in the same process, alternated, the
//! fastest of each kept; the ideal speed-up is the machine's cores, which
//! the sequential simulator's kernels already share out for larger models.
//! The two runs' parameters are compared too: any bit of difference is an
//! error.

use super::bench_shape;
use crate::model::{Gpt, ParamLayout};
use crate::optim::{DecaySegments, LrSchedule, OptimizerConfig};
use crate::runtime::sim::SimSpec;
use crate::strategy::{run_cluster, DilocoSettings, Method, Plan, Runtime, Worker};
use anyhow::{ensure, Result};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Instant;

/// One configuration's measurement.
#[derive(Clone, Debug)]
pub struct Row {
    /// Model preset (nano, micro).
    pub preset: String,
    /// Data-parallel workers.
    pub workers: usize,
    /// Method name.
    pub method: String,
    /// Steps each worker trains.
    pub steps: u64,
    /// Seconds of the fastest sequential run.
    pub sequential_s: f64,
    /// Seconds of the fastest parallel run.
    pub parallel_s: f64,
    /// CPU seconds (user + system, every thread) of the sequential and the
    /// parallel run that were fastest: the work each did, whatever else
    /// ran on the machine.
    pub cpu_s: [f64; 2],
}

impl Row {
    /// Worker-steps per second of a run that took `secs`.
    fn rate(&self, secs: f64) -> f64 {
        (self.workers as u64 * self.steps) as f64 / secs
    }

    /// The bench's line, with the ratio and the ideal (`cores`).
    pub fn line(&self, cores: usize) -> String {
        let ratio = self.sequential_s / self.parallel_s;
        format!(
            "RESULT sim_parallel preset={} workers={} method={} steps={} sequential_worker_steps_per_s={:.2} parallel_worker_steps_per_s={:.2} speedup={ratio:.2} ideal={cores} (cores) of_ideal={:.0}% cpu_s_per_worker_step={:.3}/{:.3} bits=identical",
            self.preset,
            self.workers,
            self.method,
            self.steps,
            self.rate(self.sequential_s),
            self.rate(self.parallel_s),
            100.0 * ratio / cores as f64,
            self.cpu_s[0] / (self.workers as u64 * self.steps) as f64,
            self.cpu_s[1] / (self.workers as u64 * self.steps) as f64,
        )
    }
}

/// The cores rayon's pool uses: the ideal speed-up.
pub fn cores() -> usize {
    rayon::current_num_threads()
}

/// Measures DDP and DiLoCo (its default H = 50) on 4 and 16 equal workers
/// of nano and micro, `steps` steps each, `rounds` alternations of the two
/// simulators; prints each line as it is measured.
pub fn run(steps: u64, rounds: usize) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for preset in ["nano", "micro"] {
        for workers in [4, 16] {
            for method in [Method::Ddp, Method::Diloco(DilocoSettings::default())] {
                let row = measure(preset, workers, &method, steps, rounds)?;
                println!("{}", row.line(cores()));
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// One configuration: sequential and parallel, `rounds` times each,
/// alternated; the fastest of each, after checking they gave the same bits.
fn measure(preset: &str, world: usize, method: &Method, steps: u64, rounds: usize) -> Result<Row> {
    let (cfg, batch) = bench_shape(preset)?;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(1);
    let tokens: Arc<Vec<u32>> = Arc::new((0..400_000).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect());
    let workers = || -> Result<Vec<Worker>> {
        (0..world)
            .map(|r| {
                let shard = crate::data::sampler::shard_range(tokens.len(), r, world);
                Worker::new(Gpt::new(cfg.clone(), 0)?, tokens.clone(), shard, batch, cfg.ctx, 7, r)
            })
            .collect()
    };
    let layout = ParamLayout::new(&cfg);
    let plan = Plan::new(
        steps,
        LrSchedule::constant(1e-3),
        OptimizerConfig::default(),
        DecaySegments::new(layout.decay_ranges()),
    );
    let spec = |parallel| Runtime::Sim(SimSpec { parallel, ..SimSpec::flat(world, 1.0, None) });
    let (mut best, mut cpu, mut want) = ([f64::MAX; 2], [0.0; 2], None);
    for _ in 0..rounds.max(1) {
        for (i, parallel) in [false, true].into_iter().enumerate() {
            let ws = workers()?;
            let (t0, c0) = (Instant::now(), cpu_seconds());
            let reports = run_cluster(method, &spec(parallel), ws, &plan, &Default::default())?;
            let secs = t0.elapsed().as_secs_f64();
            if secs < best[i] {
                (best[i], cpu[i]) = (secs, cpu_seconds() - c0);
            }
            let bits: Vec<Vec<u32>> = reports.iter().map(|r| r.params.iter().map(|x| x.to_bits()).collect()).collect();
            match &want {
                None => want = Some(bits),
                Some(w) => ensure!(
                    *w == bits,
                    "{preset}, {world} workers, {method}: the parallel simulator gave other bits than the sequential one (a bug: rerun with LOWCOMM_SIM_SEQUENTIAL=1 and report it)"
                ),
            }
        }
    }
    Ok(Row {
        preset: preset.into(),
        workers: world,
        method: method.name().into(),
        steps,
        sequential_s: best[0],
        parallel_s: best[1],
        cpu_s: cpu,
    })
}

/// CPU seconds this process has used (user + system, all threads), from
/// /proc/self/stat (0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the command name (which may hold spaces) start at field 3;
    // utime and stime are fields 14 and 15, in clock ticks of 1/100 s.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().skip(11).take(2).filter_map(|x| x.parse().ok()).collect();
    f.iter().sum::<f64>() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_reports_rates_ratio_and_share_of_the_ideal_by_hand() {
        // 4 workers x 10 steps = 40 worker-steps: 8 s -> 5/s, 5 s -> 8/s;
        // 8 / 5 = 1.6 of an ideal 2 = 80%.
        let r = Row {
            preset: "nano".into(),
            workers: 4,
            method: "ddp".into(),
            steps: 10,
            sequential_s: 8.0,
            parallel_s: 5.0,
            cpu_s: [16.0, 8.0],
        };
        let line = r.line(2);
        for part in [
            "sequential_worker_steps_per_s=5.00",
            "parallel_worker_steps_per_s=8.00",
            "speedup=1.60",
            "ideal=2 (cores)",
            "of_ideal=80%",
            "cpu_s_per_worker_step=0.400/0.200",
        ] {
            assert!(line.contains(part), "{part} missing from {line}");
        }
    }
}
