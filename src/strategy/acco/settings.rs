//! Settings of the ACCO paper's methods that have any: DPU's warm-up
//! (`[methods.dpu]`). ddp, zero1, acco-wp and acco take none.

use serde::{Deserialize, Serialize};

/// DPU's settings (`[methods.dpu]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DpuSettings {
    /// Rounds of non-delayed (zero1) updates before the one-step delay
    /// starts; Ren et al. recommend a warmup. Flag: `--dpu-warmup`. Default 0.
    pub warmup_steps: u64,
}
