//! A run whose numbers stopped being finite stops at once, with this error,
//! and never saves them: the journal checks every round's loss as it is
//! recorded and every part's tensors before it goes to the checkpoint sink,
//! so the last checkpoint on disk is the last finite one (a NaN part used
//! to be written, rotate the good ones out, and load silently in `eval`).
//!
//! The error is a type (not only text) so that `compare` can tell a method
//! that diverged from one that failed for another reason, and mark its row.

use super::worker::ModelPiece;

/// Where and how a participant's numbers stopped being finite.
#[derive(Clone, Debug, PartialEq)]
pub struct Diverged {
    /// The participant that saw it (a worker, or the parameter server).
    pub participant: usize,
    /// Its round (or inner step, or update) when it did.
    pub step: u64,
    /// What was not finite, e.g. "training loss NaN".
    pub what: String,
}

impl std::fmt::Display for Diverged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "training diverged: participant {} at step {}: {}. Lower the learning rate (--lr), or a method's outer_lr, or clip gradients (--grad-clip); no checkpoint holding non-finite numbers was written, the last one on disk is finite",
            self.participant, self.step, self.what
        )
    }
}

impl std::error::Error for Diverged {}

/// `loss` if it is finite, else the divergence it shows.
pub fn check_loss(participant: usize, step: u64, loss: f32) -> Result<(), Diverged> {
    match loss.is_finite() {
        true => Ok(()),
        false => Err(Diverged { participant, step, what: format!("training loss {loss}") }),
    }
}

/// Every value a checkpoint part would hold (its model piece and named
/// tensors) is finite; else the first that is not.
pub fn check_state(
    participant: usize,
    step: u64,
    model: Option<&ModelPiece>,
    tensors: &[(String, Vec<f32>)],
) -> Result<(), Diverged> {
    let piece = model.map(|m| ("the model", m.offset, &m.values[..]));
    let tensors = tensors.iter().map(|(name, t)| (name.as_str(), 0, &t[..]));
    for (name, offset, values) in piece.into_iter().chain(tensors) {
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            let what = format!("value {} of {name} is {} (its checkpoint part is not written)", offset + i, values[i]);
            return Err(Diverged { participant, step, what });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_finite_loss_is_a_divergence_naming_where() {
        assert_eq!(check_loss(0, 3, 2.5), Ok(()));
        let d = check_loss(1, 7, f32::NAN).unwrap_err();
        assert_eq!((d.participant, d.step), (1, 7));
        let text = d.to_string();
        assert!(text.contains("participant 1 at step 7: training loss NaN") && text.contains("--lr"), "{text}");
        assert!(check_loss(0, 1, f32::INFINITY).unwrap_err().what.contains("inf"));
    }

    #[test]
    fn a_part_with_a_non_finite_value_is_refused_naming_it() {
        let mut model = ModelPiece { offset: 10, values: vec![1.0, 2.0] };
        let mut tensors = vec![("m".to_string(), vec![0.5, 0.25, 0.0])];
        assert_eq!(check_state(0, 4, Some(&model), &tensors), Ok(()));
        tensors[0].1[2] = f32::NEG_INFINITY;
        let d = check_state(0, 4, Some(&model), &tensors).unwrap_err();
        assert_eq!(d.what, "value 2 of m is -inf (its checkpoint part is not written)");
        // The model piece is checked first, at its place in the flat vector.
        model.values[1] = f32::NAN;
        let d = check_state(2, 4, Some(&model), &tensors).unwrap_err();
        assert!(d.what.starts_with("value 11 of the model is NaN"), "{}", d.what);
    }
}
