//! Checkpoints of data-parallel runs: one part file per participant beside
//! the run's model, and resuming from them.
//!
//! ```text
//! RUN/checkpoints/step-000200/model.safetensors   the run's model (assembled from the parts' pieces)
//! RUN/checkpoints/step-000200/part-000.safetensors participant 0: optimizer shard, held gradients, ...
//! RUN/checkpoints/step-000200/part-001.safetensors   ... with its sampler, RNG, clock and counters as metadata
//! RUN/checkpoints/step-000200/state.json          the run's shape and every file's sha256
//! ```
//! The same atomic protocol as single-worker checkpoints: a temp directory
//! renamed into place, then `latest`. In-process runs write every part from
//! the participant that completes the set; under MPI each rank writes its
//! own part and rank 0 the rest (train/parallel/mpi.rs).

use crate::checkpoint::{self, ParallelCheckpoint, Staging, TrainState};
use crate::model::GptConfig;
use crate::runtime::{Topology, WorkerTimes};
use crate::strategy::{assemble_model, ModelPiece, PartSink, SavedPart, StepPoint, StrategyState, WorkerState};
use crate::train::config::RunConfig;
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The metadata key holding a part's non-tensor state.
const PART_META: &str = "lowcomm_part";

/// A part's state besides its tensors, as JSON in the file's metadata.
#[derive(Serialize, Deserialize)]
struct PartMeta {
    participant: usize,
    round: u64,
    clock: WorkerTimes,
    worker: Option<WorkerState>,
    applied: u64,
    points: Vec<StepPoint>,
    /// Absent in parts written before it was added: then the last point's.
    #[serde(default)]
    last_step: Option<u64>,
    scalars: serde_json::Value,
    optimizer_steps: u64,
    model_offset: Option<usize>,
}

/// File name of participant `p`'s part.
pub fn part_file(p: usize) -> String {
    format!("part-{p:03}.safetensors")
}

/// Writes `part` into `dir`; returns its file name.
pub fn write_part(dir: &Path, part: &SavedPart) -> Result<String> {
    let s = &part.state;
    let meta = PartMeta {
        participant: part.participant,
        round: part.round,
        clock: part.clock.clone(),
        worker: part.worker.clone(),
        applied: part.applied,
        points: part.points.clone(),
        last_step: Some(part.last_step),
        scalars: s.scalars.clone(),
        optimizer_steps: s.optimizer_steps,
        model_offset: s.model.as_ref().map(|m| m.offset),
    };
    let names: Vec<String> = s.tensors.iter().map(|(n, _)| format!("state.{n}")).collect();
    let mut tensors: Vec<(&str, Vec<usize>, &[f32])> =
        names.iter().zip(&s.tensors).map(|(n, (_, t))| (n.as_str(), vec![t.len()], &t[..])).collect();
    if let Some(m) = &s.model {
        tensors.push(("model_piece", vec![m.values.len()], &m.values));
    }
    let file = part_file(part.participant);
    let metadata = HashMap::from([(PART_META.to_string(), serde_json::to_string(&meta)?)]);
    checkpoint::write_f32_tensors_with_metadata(&dir.join(&file), &tensors, Some(metadata))?;
    Ok(file)
}

/// Reads a part written by [`write_part`].
pub fn read_part(path: &Path) -> Result<SavedPart> {
    let (tensors, meta) = checkpoint::read_f32_tensors_with_metadata(path)?;
    let text = meta
        .get(PART_META)
        .with_context(|| format!("{} is not a lowcomm checkpoint part (no {PART_META} metadata)", path.display()))?;
    let m: PartMeta =
        serde_json::from_str(text).with_context(|| format!("{}: its part metadata does not parse", path.display()))?;
    let mut state =
        StrategyState { scalars: m.scalars, optimizer_steps: m.optimizer_steps, ..StrategyState::default() };
    for (name, _, data) in tensors {
        if let Some(n) = name.strip_prefix("state.") {
            state.tensors.push((n.to_string(), data));
        } else if name == "model_piece" {
            let offset =
                m.model_offset.with_context(|| format!("{}: a model piece without an offset", path.display()))?;
            state.model = Some(ModelPiece { offset, values: data });
        }
    }
    Ok(SavedPart {
        participant: m.participant,
        round: m.round,
        clock: m.clock,
        worker: m.worker,
        applied: m.applied,
        last_step: m.last_step.or_else(|| m.points.last().map(|p| p.step)).unwrap_or(m.round),
        points: m.points,
        state,
    })
}

/// What every checkpoint of one run shares.
#[derive(Clone)]
pub struct RunIdentity {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The run's configuration (saved in each checkpoint).
    pub cfg: RunConfig,
    /// The model's shape.
    pub model: GptConfig,
    /// The method's name.
    pub method: String,
    /// Workers, nodes, server.
    pub topology: Topology,
    /// The tokenizer, saved so a checkpoint stands alone.
    pub tokenizer_json: String,
    /// Tokens per micro-batch (for tokens_seen).
    pub tokens_per_micro_batch: u64,
}

impl RunIdentity {
    /// Writes the model, tokenizer and `state.json` of round `round` into
    /// `staging`, whose part files `parts` are already written, and commits.
    pub fn finalize(
        &self,
        staging: Staging,
        round: u64,
        model: &[f32],
        summary: &PartsSummary,
        parts: Vec<String>,
    ) -> Result<PathBuf> {
        staging.write_core(&self.model, model, &[], &self.tokenizer_json)?;
        let t = &self.topology;
        let state = TrainState {
            format_version: checkpoint::FORMAT_VERSION,
            step: round,
            tokens_seen: summary.applied * self.tokens_per_micro_batch,
            model: self.model.clone(),
            run_config: self.cfg.to_toml(),
            optimizer_kind: format!("{} (per participant, in the parts)", optimizer_name(&self.cfg)),
            optimizer_steps: summary.optimizer_steps,
            // The sampler of a fresh single-worker stream: parts hold the workers' own.
            sampler: crate::data::sampler::WindowSampler::new(0..2, 1, 0, 0).expect("a valid sampler").state(),
            dropout_rng: rand::SeedableRng::seed_from_u64(0),
            wall_s: summary.wall_s,
            files: Default::default(),
            parallel: Some(ParallelCheckpoint {
                method: self.method.clone(),
                workers: t.workers,
                per_node: t.per_node,
                server: t.server,
                parts: parts.clone(),
                last_steps: summary.last_steps.clone(),
            }),
        };
        staging.commit(state, &parts, self.cfg.train.keep_checkpoints)
    }
}

fn optimizer_name(cfg: &RunConfig) -> &'static str {
    match cfg.optimizer {
        crate::optim::OptimizerConfig::AdamW(_) => "adamw",
        crate::optim::OptimizerConfig::Sgd(_) => "sgd",
    }
}

/// What `state.json` records of all parts together.
pub struct PartsSummary {
    /// Micro-batches applied by all participants.
    pub applied: u64,
    /// The latest clock among participants.
    pub wall_s: f64,
    /// Participant 0's committed optimizer steps.
    pub optimizer_steps: u64,
    /// Each participant's `last_step`.
    pub last_steps: Vec<u64>,
}

impl PartsSummary {
    /// From every participant's part.
    pub fn of(parts: &[SavedPart]) -> PartsSummary {
        PartsSummary {
            applied: parts.iter().map(|p| p.applied).sum(),
            wall_s: parts.iter().map(|p| p.clock.total_s).fold(0.0, f64::max),
            optimizer_steps: parts.first().map_or(0, |p| p.state.optimizer_steps),
            last_steps: parts.iter().map(|p| p.last_step).collect(),
        }
    }
}

/// The in-process [`PartSink`]: collects every participant's part of a
/// round, then writes the checkpoint (from whichever thread completed it).
pub struct CheckpointWriter {
    id: RunIdentity,
    n_params: usize,
    pending: Mutex<BTreeMap<u64, Vec<Option<SavedPart>>>>,
    written: Mutex<Vec<(u64, PathBuf)>>,
}

impl CheckpointWriter {
    /// A writer for the run `id` of a model with `n_params` parameters.
    pub fn new(id: RunIdentity, n_params: usize) -> CheckpointWriter {
        CheckpointWriter { id, n_params, pending: Mutex::new(BTreeMap::new()), written: Mutex::new(Vec::new()) }
    }

    /// The checkpoints written so far: (round, directory).
    pub fn written(&self) -> Vec<(u64, PathBuf)> {
        self.written.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn write(&self, round: u64, parts: Vec<SavedPart>) -> Result<PathBuf> {
        let staging = Staging::begin(&self.id.run_dir, round)?;
        let names = parts.iter().map(|p| write_part(staging.path(), p)).collect::<Result<Vec<_>>>()?;
        let model = assemble_model(self.n_params, parts.iter().filter_map(|p| p.state.model.clone()))?;
        self.id.finalize(staging, round, &model, &PartsSummary::of(&parts), names)
    }
}

impl PartSink for CheckpointWriter {
    fn submit(&self, part: SavedPart) -> Result<()> {
        let n = self.id.topology.participants();
        let (round, p) = (part.round, part.participant);
        let complete = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let slots = pending.entry(round).or_insert_with(|| (0..n).map(|_| None).collect());
            ensure!(slots[p].is_none(), "participant {p} saved round {round} twice");
            slots[p] = Some(part);
            if slots.iter().all(Option::is_some) {
                pending.remove(&round).map(|s| s.into_iter().map(|p| p.expect("all in")).collect::<Vec<_>>())
            } else {
                None
            }
        };
        if let Some(parts) = complete {
            let dir = self.write(round, parts)?;
            self.written.lock().unwrap_or_else(|e| e.into_inner()).push((round, dir));
        }
        Ok(())
    }
}

/// A data-parallel checkpoint opened for resuming.
pub struct Resumed {
    /// Where it was loaded from.
    pub dir: PathBuf,
    /// Rounds completed.
    pub round: u64,
    /// Tokens applied so far.
    pub tokens_seen: u64,
    /// The run's model (every replica's starting point).
    pub params: Vec<f32>,
    /// The run's shape when saved.
    pub shape: ParallelCheckpoint,
    /// The checkpoint's directory, for reading parts.
    parts_dir: PathBuf,
}

impl Resumed {
    /// Opens the checkpoint at `path` (a run or checkpoint directory) and
    /// checks it can continue `method` on `topology` with `model`.
    pub fn open(path: &Path, method: &str, topology: Topology, model: &GptConfig) -> Result<Resumed> {
        let dir = checkpoint::resolve(path)?;
        let ck = checkpoint::load(&dir)?;
        let st = ck.state;
        let Some(shape) = st.parallel else {
            bail!("checkpoint {} is from a single-worker run: resume it without --method (or start a new data-parallel run with --out)", dir.display());
        };
        if shape.method != method {
            bail!("checkpoint {} was trained with method {} but this run asks for {method}: resume with --method {} (or start a new run with --out)", dir.display(), shape.method, shape.method);
        }
        if shape.workers != topology.workers || shape.per_node != topology.per_node || shape.server != topology.server {
            bail!(
                "checkpoint {} was trained on {} workers ({} per node{}) but this run has {} ({} per node{}): resume on the same workers",
                dir.display(),
                shape.workers,
                shape.per_node,
                if shape.server { ", with a server" } else { "" },
                topology.workers,
                topology.per_node,
                if topology.server { ", with a server" } else { "" }
            );
        }
        if &st.model != model {
            bail!(
                "checkpoint {} was trained with another model: {}; resume with the same model settings",
                dir.display(),
                crate::train::rundir::model_change(&st.model, model)
            );
        }
        Ok(Resumed {
            parts_dir: dir.clone(),
            dir,
            round: st.step,
            tokens_seen: st.tokens_seen,
            params: ck.params,
            shape,
        })
    }

    /// Participant `p`'s part.
    pub fn part(&self, p: usize) -> Result<SavedPart> {
        let name = self
            .shape
            .parts
            .get(p)
            .with_context(|| format!("checkpoint {} names no part for participant {p}", self.dir.display()))?;
        let part = read_part(&self.parts_dir.join(name))?;
        ensure!(
            part.participant == p && part.round == self.round,
            "{}: part of participant {} at round {}, expected participant {p} at round {}",
            name,
            part.participant,
            part.round,
            self.round
        );
        Ok(part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resumed simulation continues from the saved clock; serde_json's
    /// default float parser is off by one ulp on values like 10 x 0.1
    /// (0.9999999999999999 read back as 1.0), which made every later
    /// `end_s` of a resumed run differ from the uninterrupted one.
    #[test]
    fn a_part_reads_back_its_clock_and_scalars_bit_for_bit() {
        let tmp = tempfile::tempdir().unwrap();
        let mut sum = 0.0f64;
        for round in 1..=40u64 {
            sum += 0.1;
            let clock = WorkerTimes { compute_s: sum, idle_s: sum / 3.0, total_s: sum, ..Default::default() };
            let state = StrategyState { scalars: serde_json::json!({ "lr": sum * 0.7 }), ..Default::default() };
            let part = SavedPart {
                participant: 0,
                round,
                clock: clock.clone(),
                worker: None,
                applied: 0,
                points: Vec::new(),
                last_step: round,
                state,
            };
            let file = write_part(tmp.path(), &part).unwrap();
            let back = read_part(&tmp.path().join(file)).unwrap();
            assert_eq!(back.clock.total_s.to_bits(), sum.to_bits(), "round {round}: total_s {sum:?}");
            assert_eq!(back.clock.idle_s.to_bits(), (sum / 3.0).to_bits(), "round {round}: idle_s");
            assert_eq!(back.state.scalars["lr"].as_f64().unwrap().to_bits(), (sum * 0.7).to_bits(), "round {round}");
        }
    }
}
