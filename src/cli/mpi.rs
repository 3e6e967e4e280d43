//! `lowcomm comm-check` and `lowcomm bench --what comm`, on the in-process
//! backend or (feature `mpi`) across the ranks of an MPI job.

use super::{BenchArgs, CommCheckArgs};
use crate::comm::bench::{time_collectives_local, COLLECTIVES};
use crate::comm::{conformance, LocalFabric, LocalGroup};
use crate::train::{parallel::ParallelSummary, RunConfig, RunOptions};
use anyhow::{bail, Result};

/// One line per collective: `RESULT comm backend=.. ranks=.. op=.. ...`.
fn print_rates(backend: &str, ranks: usize, mib: usize, secs: [f64; 3]) {
    for (op, s) in COLLECTIVES.iter().zip(secs) {
        let gbps = (mib << 20) as f64 / s / 1e9;
        println!("RESULT comm backend={backend} ranks={ranks} op={op} MiB={mib} ms={:.2} GBps={gbps:.3}", s * 1e3);
    }
}

pub fn comm_check(a: &CommCheckArgs) -> Result<()> {
    match a.backend.as_str() {
        "local" => {
            for p in 1..=a.workers.max(1) {
                let results = std::thread::scope(|s| {
                    let hs: Vec<_> = LocalGroup::new(p)
                        .into_iter()
                        .map(|mut c| s.spawn(move || conformance::check(&mut c)))
                        .collect();
                    hs.into_iter().map(|h| h.join().expect("check thread")).collect::<Result<Vec<_>>>()
                })?;
                let fabric = std::thread::scope(|s| {
                    let hs: Vec<_> = LocalFabric::job(p)
                        .into_iter()
                        .map(|mut f| s.spawn(move || conformance::check_fabric(&mut f)))
                        .collect();
                    hs.into_iter().map(|h| h.join().expect("check thread")).collect::<Result<Vec<_>>>()
                })?;
                println!(
                    "comm-check local: {p} workers: {} collective and {} fabric checks passed on every rank",
                    results[0], fabric[0]
                );
            }
            crate::runtime::conformance::check_runtimes(a.workers.max(2))?;
            println!("comm-check local: the engine's primitives agree on the simulated and the real runtime");
            Ok(())
        }
        "mpi" => mpi_impl::comm_check(),
        other => bail!("unknown backend `{other}`: use --backend local or --backend mpi"),
    }
}

pub fn bench_collectives(a: &BenchArgs) -> Result<()> {
    let (iters, mib) = (a.steps, a.mib());
    match a.backend() {
        "local" => {
            for world in [2, 4] {
                print_rates("local", world, mib, time_collectives_local(world, mib, iters));
            }
            Ok(())
        }
        "mpi" => mpi_impl::bench(mib, iters),
        other => bail!("unknown backend `{other}`: use --backend local or --backend mpi"),
    }
}

/// One data-parallel training: `None` on MPI ranks other than 0.
pub type RunFn = Box<dyn FnMut(RunConfig, &RunOptions) -> Result<Option<ParallelSummary>>>;

/// Runs one data-parallel training; `None` on MPI ranks other than 0 (rank
/// 0 owns the outputs).
pub struct Runner {
    /// This process owns the outputs and the progress lines (rank 0, or
    /// the only process).
    pub root: bool,
    pub run: RunFn,
}

/// The runner of `backend`: in-process threads, or this process's rank of
/// an MPI job (MPI is initialised once, here, for every run that follows).
pub fn runner(backend: &str) -> Result<Runner> {
    match backend {
        "local" => Ok(Runner {
            root: true,
            run: Box::new(|cfg, opts| crate::train::parallel::run_parallel(cfg, opts).map(Some)),
        }),
        "mpi" => mpi_impl::runner(),
        other => bail!("unknown backend `{other}`: use --backend local (threads) or --backend mpi (under mpirun)"),
    }
}

#[cfg(feature = "mpi")]
mod mpi_impl {
    use super::*;
    use crate::comm::bench::time_collectives;
    use crate::comm::mpi::MpiProcess;

    pub fn runner() -> Result<Runner> {
        let mpi = crate::train::parallel::mpi::init()?;
        Ok(Runner {
            root: mpi.rank() == 0,
            run: Box::new(move |cfg, opts| crate::train::parallel::mpi::run_parallel_mpi(&mpi, cfg, opts)),
        })
    }

    pub fn comm_check() -> Result<()> {
        let mpi = MpiProcess::init()?;
        let (rank, size) = (mpi.rank(), mpi.size());
        let per_node = mpi.ranks_per_node(size.saturating_sub(1).max(1))?;
        let mut fabric = mpi.fabric();
        let runs = [
            ("collectives", conformance::check(&mut mpi.comm())),
            ("groups and messages", conformance::check_fabric(&mut fabric)),
        ];
        drop(fabric);
        for (what, r) in runs {
            match r {
                Ok(n) if rank == 0 => {
                    println!("comm-check mpi: {size} ranks ({per_node} per node), {what}: {n} checks passed on rank 0")
                }
                Ok(_) => {}
                Err(e) => mpi.abort(&format!("comm-check failed: {e:#}")),
            }
        }
        // The engine's primitives on the real runtime over MPI, against the
        // simulator run here on this rank alone.
        if let Err(e) = crate::runtime::conformance::check_mpi(&mpi, per_node) {
            mpi.abort(&format!("comm-check failed: {e:#}"));
        }
        // Every rank's checks must pass, not only rank 0's.
        mpi.barrier();
        if rank == 0 {
            println!("comm-check mpi: all {size} ranks passed");
        }
        Ok(())
    }

    pub fn bench(mib: usize, iters: usize) -> Result<()> {
        let mpi = MpiProcess::init()?;
        let secs = time_collectives(&mut mpi.comm(), mib, iters);
        if mpi.rank() == 0 {
            print_rates("mpi", mpi.size(), mib, secs);
        }
        Ok(())
    }
}

#[cfg(not(feature = "mpi"))]
mod mpi_impl {
    use super::*;

    fn missing() -> Result<()> {
        bail!("this lowcomm was built without MPI: install MPICH and libclang (apt-get install libmpich-dev mpich libclang-dev), then cargo build --release --features mpi (docs/mpi.md)")
    }
    pub fn runner() -> Result<Runner> {
        missing().map(|_| unreachable!())
    }
    pub fn comm_check() -> Result<()> {
        missing()
    }
    pub fn bench(_: usize, _: usize) -> Result<()> {
        missing()
    }
}
