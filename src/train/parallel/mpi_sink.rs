//! The MPI checkpoint sink: each rank writes its part of a checkpoint into
//! a directory every rank shares, and rank 0 hashes the parts into the
//! manifest, writes the model, commits, and logs the other ranks' rounds
//! that travelled in the parts (train/parallel/mpi.rs).

use super::checkpoint::{read_part, write_part, PartsSummary, RunIdentity};
use super::log::RoundLog;
use crate::checkpoint::Staging;
use crate::comm::mpi::MpiComm;
use crate::comm::Communicator;
use crate::strategy::{assemble_model, PartSink, SavedPart};
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The MPI [`PartSink`]: every rank writes its part into the checkpoint's
/// temp directory; rank 0 then reads them all back (their model pieces),
/// hashes them into the manifest and commits.
pub(super) struct MpiSink {
    pub(super) id: RunIdentity,
    pub(super) n_params: usize,
    pub(super) rank: usize,
    pub(super) size: usize,
    /// Rank 0's process id: names the shared temp directory.
    pub(super) job: u32,
    /// Coordination only, on its own communicator (the communication thread
    /// is idle while a checkpoint is written: no task is in flight).
    pub(super) comm: Mutex<MpiComm>,
    /// Rank 0: the run's metrics, fed every participant's rounds from the parts.
    pub(super) metrics: Option<Arc<RoundLog>>,
    pub(super) written: Mutex<Vec<(u64, PathBuf)>>,
}

impl MpiSink {
    /// Every rank says whether its part is written (an all-gather of one
    /// byte each): a barrier that also carries failure.
    fn all_ok(&self, ok: bool) -> Vec<u8> {
        let mut all = vec![0u8; self.size];
        self.comm.lock().unwrap_or_else(|e| e.into_inner()).all_gather_bytes(&[u8::from(ok)], &mut all);
        all
    }
}

impl PartSink for MpiSink {
    fn submit(&self, part: SavedPart) -> Result<()> {
        let round = part.round;
        let mut staging = Staging::begin_shared(&self.id.run_dir, round, &format!("mpi-{}", self.job))?;
        let mine = write_part(staging.path(), &part);
        let all = self.all_ok(mine.is_ok());
        if self.rank == 0 {
            // Every rank is done writing (the all-gather was a barrier): rank 0
            // commits the directory or, failing, removes it.
            staging.own();
        }
        mine?;
        if let Some(bad) = all.iter().position(|&b| b == 0) {
            bail!("rank {bad} could not write its part of the checkpoint at round {round}");
        }
        if self.rank != 0 {
            return Ok(());
        }
        let names: Vec<String> = (0..self.size).map(super::checkpoint::part_file).collect();
        let parts = names.iter().map(|n| read_part(&staging.path().join(n))).collect::<Result<Vec<_>>>()?;
        if let Some(log) = &self.metrics {
            super::log::observe_in_time_order(log.as_ref(), parts.iter().map(|p| (p.participant, &p.points[..])));
        }
        let model = assemble_model(self.n_params, parts.iter().filter_map(|p| p.state.model.clone()))?;
        let dir = self.id.finalize(staging, round, &model, &PartsSummary::of(&parts), names)?;
        self.written.lock().unwrap_or_else(|e| e.into_inner()).push((round, dir));
        Ok(())
    }
}
