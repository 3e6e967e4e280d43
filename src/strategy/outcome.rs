//! What a strategy hands back from one participant's run: the steps it
//! committed, the model-state bytes it held, its piece of the model, and
//! what a compressing method's exchange sends.

use super::worker::ModelPiece;

/// What a strategy returns from one worker's run.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Optimizer steps committed.
    pub optimizer_steps: u64,
    /// Bytes of model states held.
    pub memory: MemoryBytes,
    /// This participant's piece of the run's model, if it holds one.
    pub model: Option<ModelPiece>,
    /// What one exchange of a compressing method sends (DeMo, FlexDeMo).
    pub exchange: Option<Budget>,
}

/// Bytes of model states held by one worker, by category (ACCO paper,
/// Table 1's columns), measured from the buffers actually allocated.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct MemoryBytes {
    /// The replica's parameters.
    pub params: usize,
    /// The gradient accumulator.
    pub grads: usize,
    /// Buffers that exist for communication (padded flat vector, shards,
    /// the gradients held for the next round).
    pub comm_buffers: usize,
    /// Optimizer state, including the shard of master parameters a sharded
    /// optimizer keeps.
    pub optimizer: usize,
    /// Outer-loop state of local-update methods: outer momentum, saved
    /// parameter versions, anchors.
    #[serde(default)]
    pub outer: usize,
}

impl MemoryBytes {
    /// All categories together.
    pub fn total(&self) -> usize {
        self.params + self.grads + self.comm_buffers + self.optimizer + self.outer
    }
}

/// What a replicator sends, for the report and the compression rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Budget {
    /// Bytes one member puts into one exchange.
    pub payload_bytes: usize,
    /// Exchanges happen every this many steps (diloco), else 1.
    pub every: u64,
    /// Bytes of the same region as a full f32 gradient (4 per element).
    pub dense_bytes: usize,
}

impl Budget {
    /// Bytes sent per step over bytes of a full f32 gradient of the region.
    pub fn compression(&self) -> f64 {
        self.payload_bytes as f64 / (self.every.max(1) as f64 * self.dense_bytes.max(1) as f64)
    }
}
