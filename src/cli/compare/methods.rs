//! Which of the runs `lowcomm compare --methods` asks for
//! (`strategy::method_spec`: names, `NAME:key=value` variants, `all`) do
//! not fit this setup: skipped under `all`, refused when named.

use crate::strategy::Method;
use crate::train::RunConfig;

/// Why `method` cannot run under `cfg`, if it cannot (a misfit of the
/// setup, not a bad value: those are errors of the method's own keys).
pub fn misfit(method: &Method, cfg: &RunConfig) -> Option<String> {
    if !cfg.faults.is_empty() && !method.survives_faults() {
        return Some(format!(
            "a fault plan (--faults) takes workers down, and {} cannot survive that (every round waits for every worker): use async-diloco",
            method.name()
        ));
    }
    let accum = cfg.train.grad_accum;
    if method.accumulates_while_communicating() && accum > 1 {
        return Some(format!(
            "it accumulates as many micro-batches as fit while a round communicates, so --grad-accum {accum} does not apply (fix the count with --fixed-micro-batches K)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grad_accum_misfits_the_methods_that_accumulate_while_communicating() {
        let mut cfg = RunConfig::default();
        cfg.train.grad_accum = 2;
        let why = misfit(&Method::Acco, &cfg).unwrap();
        assert!(why.contains("--grad-accum 2") && why.contains("--fixed-micro-batches"), "{why}");
        assert_eq!(misfit(&Method::Zero1, &cfg), None);
        cfg.train.grad_accum = 1;
        assert_eq!(misfit(&Method::Acco, &cfg), None);
    }
}
