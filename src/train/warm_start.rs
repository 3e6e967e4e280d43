//! `--init-from`: start a run from a model trained earlier (the async
//! Local-SGD paper and DiLoCo fine-tune a pretrained model).
//!
//! Only the weights come along: the optimizer state, the step count, the
//! schedule and the data order start fresh, as they would for a new run on
//! a pretrained model. Every worker of a data-parallel run starts from the
//! same weights, exactly as from a fresh initialisation.
//!
//!   lowcomm train --preset micro --steps 2000 --out runs/pretrained
//!   lowcomm train --preset micro --method diloco --workers 4 --init-from runs/pretrained

use super::config::TrainSection;
use crate::data::Tokenizer;
use crate::model::GptConfig;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// The weights a fresh run starts from, if not its own initialisation:
/// `train.init_from` (a lowcomm run or checkpoint) or `train.init_from_hf`
/// (a Hugging Face directory, [`crate::import::hf`]), checked to fit a
/// model of `model` trained with `tokenizer`.
pub fn initial(t: &TrainSection, model: &GptConfig, tokenizer: &Tokenizer) -> Result<Option<Vec<f32>>> {
    match (&t.init_from, &t.init_from_hf) {
        (Some(_), Some(_)) => bail!(
            "train.init_from (--init-from) and train.init_from_hf (--init-from-hf) are both set: give one, --init-from for a lowcomm run or --init-from-hf for a Hugging Face directory"
        ),
        (Some(from), None) => weights(from, model, tokenizer).map(Some),
        (None, Some(dir)) => crate::import::hf::weights(dir, model, tokenizer).map(Some),
        (None, None) => Ok(None),
    }
}

/// The weights of the checkpoint at `path` (a run directory: its latest
/// checkpoint; or a `checkpoints/step-N` directory), checked to fit a model
/// of `model` trained with `tokenizer`.
pub fn weights(path: &Path, model: &GptConfig, tokenizer: &Tokenizer) -> Result<Vec<f32>> {
    let (ck, _) = crate::checkpoint::load_for_inference(path)
        .with_context(|| format!("--init-from {}: cannot load its model", path.display()))?;
    if &ck.state.model != model {
        bail!(
            "--init-from {}: its model has another shape ({}); start from a model of the same shape, or set this run's model to the checkpoint's (its config.toml's [model])",
            path.display(),
            super::rundir::model_change(&ck.state.model, model)
        );
    }
    let theirs = Tokenizer::from_json(&ck.tokenizer_json)?.to_json()?;
    if theirs != tokenizer.to_json()? {
        bail!(
            "--init-from {}: it was trained with another tokenizer (another corpus or vocabulary); pass the --data it was trained on",
            path.display()
        );
    }
    Ok(ck.params)
}
