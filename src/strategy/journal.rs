//! What a participant records as it goes: its own curve (one point per
//! round, so workers need not run in lockstep), progress for whoever
//! watches, and its part of each checkpoint.
//!
//! A strategy calls [`Journal::step`] when a round's update is applied and
//! [`Journal::round_end`] at the round boundary; the latter saves this
//! participant's part when a checkpoint is due (every `checkpoint_every`
//! rounds and at the run's last round). A checkpoint is written only with
//! no communication in flight, so resuming from it continues exactly where
//! the saved run was: in the simulator bit for bit, clocks included. A
//! loss or a saved value that is not finite ends the run (diverged.rs). A
//! stop request (Ctrl-C) makes a checkpoint due at the boundary the
//! participants agree on, after which each ends with `runtime::Stopped`
//! (stop.rs).

use super::diverged::{check_loss, check_state};
use super::faults::FaultRecord;
use super::stop::StopRequest;
use super::worker::{ModelPiece, Worker, WorkerState};
use crate::runtime::{Ctx, Stopped, WorkerTimes};
use anyhow::{ensure, Result};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One round of one participant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepPoint {
    /// Rounds this participant has completed, this one included.
    pub step: u64,
    /// Mean training loss of the micro-batches computed in the round.
    pub loss: f32,
    /// Micro-batches whose gradients this round's update applied.
    pub micro_batches: u64,
    /// When the round ended (virtual seconds in sim).
    pub end_s: f64,
}

/// Watches participants' rounds as they end (a progress bar, a metrics log).
pub trait Observer: Send + Sync {
    /// Participant `p` ended a round.
    fn point(&self, p: usize, point: &StepPoint);

    /// A worker crashed or joined (a run with a fault plan); ignored by default.
    fn fault(&self, _record: &FaultRecord) {}
}

/// What a strategy keeps between rounds, for a checkpoint.
#[derive(Clone, Debug, Default)]
pub struct StrategyState {
    /// Named tensors (optimizer moments, held gradients, shards).
    pub tensors: Vec<(String, Vec<f32>)>,
    /// Numbers (counts, flags), as JSON.
    pub scalars: serde_json::Value,
    /// This participant's piece of the run's model.
    pub model: Option<ModelPiece>,
    /// Optimizer steps committed.
    pub optimizer_steps: u64,
}

impl StrategyState {
    /// The tensor saved as `name`.
    pub fn tensor(&self, name: &str) -> Result<&[f32]> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| &t[..]).ok_or_else(|| {
            anyhow::anyhow!("the checkpoint part lacks tensor `{name}` (saved by another method or version?)")
        })
    }

    /// Copies the tensor saved as `name` into `into`, refusing one of
    /// another length (a checkpoint of another model or shard).
    pub fn copy_into(&self, name: &str, into: &mut [f32]) -> Result<()> {
        let t = self.tensor(name)?;
        anyhow::ensure!(
            t.len() == into.len(),
            "checkpointed `{name}` has {} values, this run's has {} (a checkpoint of another model or shard?)",
            t.len(),
            into.len()
        );
        into.copy_from_slice(t);
        Ok(())
    }

    /// The whole number saved as `key`.
    pub fn count(&self, key: &str) -> Result<u64> {
        self.scalars[key].as_u64().ok_or_else(|| {
            anyhow::anyhow!("the checkpoint part lacks the number `{key}` (saved by another method or version?)")
        })
    }
}

/// One participant's part of a checkpoint.
#[derive(Clone, Debug, Default)]
pub struct SavedPart {
    /// Participant number.
    pub participant: usize,
    /// Rounds completed.
    pub round: u64,
    /// Its clock and accounting when saved.
    pub clock: WorkerTimes,
    /// Its data position and dropout RNG (workers only).
    pub worker: Option<WorkerState>,
    /// Micro-batches whose gradients were applied, over the whole run.
    pub applied: u64,
    /// Its rounds since the previous checkpoint (so a process that does not
    /// see them live, MPI's rank 0, can log them).
    pub points: Vec<StepPoint>,
    /// The `step` of its latest point, in its own numbering (rounds, a
    /// worker's inner steps, a server's updates; 0 before any): a resumed
    /// run's metrics log keeps this participant's lines up to it.
    pub last_step: u64,
    /// The strategy's own state.
    pub state: StrategyState,
}

/// Where participants' parts go: writes a checkpoint once every part of a
/// round is in.
pub trait PartSink: Send + Sync {
    /// Takes this participant's part of round `part.round`.
    fn submit(&self, part: SavedPart) -> Result<()>;
}

/// How and when a run checkpoints.
#[derive(Clone, Default)]
pub struct Checkpointing {
    /// Save every this many rounds (0: only at the end).
    pub every: u64,
    /// Where parts go; `None`: no checkpoints (tests, benchmarks).
    pub sink: Option<Arc<dyn PartSink>>,
    /// Stop with a checkpoint when this is requested (stop.rs); `None`:
    /// run to the end (MPI: the ranks share no memory to agree in).
    pub stop: Option<Arc<StopRequest>>,
}

/// One participant's record of its run.
pub struct Journal {
    participant: usize,
    points: Vec<StepPoint>,
    /// Index in `points` of the first round after the last checkpoint.
    since_save: usize,
    /// `done` of the previous boundary (a checkpoint is due when a boundary
    /// crosses a multiple of `every`: methods whose rounds span several
    /// steps call `round_end` only at their own boundaries).
    last_boundary: u64,
    applied: u64,
    /// The `step` of the latest point (`SavedPart::last_step`).
    last_step: u64,
    /// Crashes and joins of this participant (a worker under a fault plan).
    faults: Vec<FaultRecord>,
    /// Updates this participant sent to a parameter server.
    sent: u64,
    /// Index in `points` of the first round held back by [`Journal::hold`].
    held: Option<usize>,
    /// A boundary another participant decided this one stops at
    /// ([`Journal::stop_at`]).
    told_stop: Option<u64>,
    observer: Option<Arc<dyn Observer>>,
    checkpoints: Checkpointing,
    resumed: Option<SavedPart>,
}

impl Journal {
    /// A journal for participant `p`, continuing from `resumed` if given.
    pub fn new(
        p: usize,
        observer: Option<Arc<dyn Observer>>,
        checkpoints: Checkpointing,
        resumed: Option<SavedPart>,
    ) -> Journal {
        let applied = resumed.as_ref().map_or(0, |r| r.applied);
        let last_boundary = resumed.as_ref().map_or(0, |r| r.round);
        let last_step = resumed.as_ref().map_or(0, |r| r.last_step);
        Journal {
            participant: p,
            points: Vec::new(),
            since_save: 0,
            last_boundary,
            applied,
            last_step,
            faults: Vec::new(),
            sent: 0,
            held: None,
            told_stop: None,
            observer,
            checkpoints,
            resumed,
        }
    }

    /// A journal that only records (no observer, no checkpoints).
    pub fn plain(p: usize) -> Journal {
        Journal::new(p, None, Checkpointing::default(), None)
    }

    /// The first round to run: 0, or the rounds a resumed checkpoint completed.
    pub fn first_round(&self) -> u64 {
        self.resumed.as_ref().map_or(0, |r| r.round)
    }

    /// The strategy's saved state, taken once by the strategy at its start
    /// (`None` for a fresh run).
    pub fn take_resumed(&mut self) -> Option<StrategyState> {
        self.resumed.as_mut().map(|r| std::mem::take(&mut r.state))
    }

    /// Records round `step` (1-based: rounds completed) with its mean
    /// `loss` and the micro-batches its update applied; a loss that is not
    /// finite ends the run here ([`Diverged`]).
    pub fn step<C: Ctx>(&mut self, ctx: &C, step: u64, loss: f32, applied: u64) -> Result<()> {
        check_loss(self.participant, step, loss)?;
        self.last_step = step;
        let point = StepPoint { step, loss, micro_batches: applied, end_s: ctx.now() };
        if self.held.is_none() {
            self.publish(&point);
        }
        self.points.push(point);
        Ok(())
    }

    /// Counts `point` as applied and shows it to the observer.
    fn publish(&mut self, point: &StepPoint) {
        self.applied += point.micro_batches;
        if let Some(o) = &self.observer {
            o.point(self.participant, point);
        }
    }

    /// Holds back the rounds recorded from now on (neither counted as
    /// applied nor shown to the observer) until [`Journal::settle`] says
    /// whether their update reached the model. For a worker that may crash:
    /// a round a crash cuts short is never sent, and its micro-batches must
    /// not count in the run's tokens.
    pub fn hold(&mut self) {
        self.held.get_or_insert(self.points.len());
    }

    /// Ends a [`Journal::hold`]: `applied` false keeps the held rounds'
    /// losses (they were computed) with `micro_batches` 0. No-op when
    /// nothing is held.
    pub fn settle(&mut self, applied: bool) {
        let Some(from) = self.held.take() else { return };
        let mut held = self.points.split_off(from);
        for point in &mut held {
            if !applied {
                point.micro_batches = 0;
            }
            self.publish(point);
        }
        self.points.append(&mut held);
    }

    /// Records a crash or a join of this worker.
    pub fn fault(&mut self, record: FaultRecord) {
        if let Some(o) = &self.observer {
            o.fault(&record);
        }
        self.faults.push(record);
    }

    /// Counts one update sent to the parameter server.
    pub fn sent_update(&mut self) {
        self.sent += 1;
    }

    /// This participant's crashes and joins, and the updates it sent.
    pub fn membership(&self) -> (Vec<FaultRecord>, u64) {
        (self.faults.clone(), self.sent)
    }

    /// Whether the run stops at boundary `done` on request (before `end`).
    pub fn stopping(&self, done: u64, end: u64) -> bool {
        done < end
            && self.checkpoints.sink.is_some()
            && (self.told_stop == Some(done) || self.checkpoints.stop.as_ref().is_some_and(|s| s.stops_at(done)))
    }

    /// Makes this participant stop at boundary `done` (its next
    /// [`Journal::round_end`] there saves and ends with [`Stopped`]): for a
    /// worker whose server decided the stop (async DiLoCo over MPI, where
    /// the processes share no [`StopRequest`]).
    pub fn stop_at(&mut self, done: u64) {
        self.told_stop = Some(done);
    }

    /// A quiet boundary after `done` rounds (or steps) of a run that stops
    /// at `end`: saves this participant's part when a checkpoint is due
    /// (`done == end`, or a multiple of `checkpoint_every` was reached since
    /// the previous boundary, or the run stops here on request: then this
    /// returns [`Stopped`] once the part is saved). `state` builds the
    /// strategy's state only then.
    pub async fn round_end<C: Ctx>(
        &mut self,
        ctx: &C,
        w: Option<&Worker>,
        done: u64,
        end: u64,
        state: impl FnOnce() -> StrategyState,
    ) -> Result<()> {
        let every = self.checkpoints.every;
        let stop = self.stopping(done, end);
        let due = stop || done == end || (every > 0 && done / every > self.last_boundary / every);
        self.last_boundary = done;
        let Some(sink) = self.checkpoints.sink.clone().filter(|_| due) else { return Ok(()) };
        ensure!(
            ctx.in_flight() == 0,
            "participant {}: a checkpoint at round {done} with {} communication task(s) in flight (a strategy must save at a quiet boundary)",
            self.participant,
            ctx.in_flight()
        );
        let state = state();
        check_state(self.participant, done, state.model.as_ref(), &state.tensors)?;
        let points = self.points[self.since_save..].to_vec();
        self.since_save = self.points.len();
        sink.submit(SavedPart {
            participant: self.participant,
            round: done,
            clock: ctx.times(),
            worker: w.map(Worker::state),
            applied: self.applied,
            points,
            last_step: self.last_step,
            state,
        })?;
        match stop {
            true => Err(Stopped { participant: self.participant, round: done }.into()),
            false => Ok(()),
        }
    }

    /// Whether [`Journal::round_end`] after `done` rounds of a run that
    /// stops at `end` will save a part (so a strategy with a task in flight
    /// can bring it in first).
    pub fn checkpoint_due(&self, done: u64, end: u64) -> bool {
        let every = self.checkpoints.every;
        self.checkpoints.sink.is_some()
            && (self.stopping(done, end) || done == end || (every > 0 && done / every > self.last_boundary / every))
    }

    /// The checkpoint boundary (the multiple of `checkpoint_every` at or
    /// below `done`) reached since the previous boundary, if checkpoints
    /// are taken: for a participant whose progress can jump past a
    /// multiple (async DiLoCo's server counts inner steps of all workers),
    /// which saves under the multiple's number. A stop request makes `done`
    /// itself such a boundary, once it is past the previous one (stop.rs).
    pub fn boundary_reached(&self, done: u64) -> Option<u64> {
        if done > self.last_boundary && self.stopping(done, u64::MAX) {
            return Some(done);
        }
        let every = self.checkpoints.every;
        if self.checkpoints.sink.is_none() || every == 0 || done / every <= self.last_boundary / every {
            return None;
        }
        Some(done / every * every)
    }

    /// The points recorded so far by this run.
    pub fn points(&self) -> &[StepPoint] {
        &self.points
    }

    /// The points recorded by this run (a resumed run's start after the checkpoint).
    pub fn into_points(self) -> Vec<StepPoint> {
        self.points
    }
}

#[cfg(test)]
mod tests {
    use super::StrategyState;

    #[test]
    fn copy_into_restores_a_tensor_and_refuses_another_length() {
        let st = StrategyState { tensors: vec![("u".into(), vec![1.0, 2.0])], ..StrategyState::default() };
        let mut u = [0.0f32; 2];
        st.copy_into("u", &mut u).unwrap();
        assert_eq!(u, [1.0, 2.0]);
        let err = st.copy_into("u", &mut [0.0f32; 3]).unwrap_err().to_string();
        assert!(err.contains("`u` has 2 values, this run's has 3"), "{err}");
        let err = st.copy_into("m", &mut u).unwrap_err().to_string();
        assert!(err.contains("lacks tensor `m`"), "{err}");
    }
}
