//! The line under a `lowcomm compare` table that says whether every
//! method trained the same tokens, or how far apart they were.

use super::store::MethodResult;
use super::table::tokens;

/// What the sweep's budgets were: equal tokens, or how far apart. `unit`
/// is `parallel.budget` (`tokens` or `rounds`). A run that diverged stopped
/// early and is not counted.
pub fn budget_line(results: &[MethodResult], unit: &str) -> String {
    let done: Vec<&MethodResult> = results.iter().filter(|r| r.finished()).collect();
    let stopped: Vec<String> = results
        .iter()
        .filter(|r| !r.finished())
        .map(|r| format!("{} stopped when it diverged, after {} tokens", r.spec, tokens(r)))
        .collect();
    let stopped = if stopped.is_empty() { String::new() } else { format!(" ({})", stopped.join("; ")) };
    let lo = done.iter().min_by_key(|r| tokens(r));
    let hi = done.iter().max_by_key(|r| tokens(r));
    match (lo, hi) {
        (Some(lo), Some(hi)) if tokens(lo) == tokens(hi) => format!(
            "Budget: every method got the same token budget and trained {} tokens (parallel.budget = {unit}){stopped}.",
            tokens(lo)
        ),
        (Some(lo), Some(hi)) => format!(
            "Budget: the methods did NOT get the same token budget (parallel.budget = {unit}{}): from {} tokens ({}) to {} ({}), {:.1}x; compare their losses on loss_vs_tokens.svg{}{stopped}.",
            if unit == "rounds" { ": --steps rounds each, and dpu, acco-wp and acco fit as many micro-batches into a round as its communication allows" } else { "" },
            tokens(lo),
            lo.spec,
            tokens(hi),
            hi.spec,
            tokens(hi) as f64 / tokens(lo).max(1) as f64,
            if unit == "rounds" { ", or drop --budget rounds for equal tokens" } else { "" }
        ),
        _ => format!("Budget: parallel.budget = {unit}; no method finished{stopped}."),
    }
}

#[cfg(test)]
mod tests {
    use super::super::marks::tests::result;
    use super::super::store::Ended;
    use super::*;

    #[test]
    fn the_budget_line_says_whether_every_method_trained_the_same_tokens() {
        let a = result("ddp", &[6.0, 5.0], 5.0);
        let mut acco = result("acco", &[6.0, 5.0], 5.0);
        acco.rounds[1].tokens = 600;
        // Equal: 200 tokens each.
        let line = budget_line(&[a.clone(), a.clone()], "tokens");
        assert_eq!(
            line,
            "Budget: every method got the same token budget and trained 200 tokens (parallel.budget = tokens)."
        );
        // --budget rounds: 200 against 600, 3x.
        let line = budget_line(&[a.clone(), acco], "rounds");
        assert!(
            line.contains("did NOT get the same token budget")
                && line.contains("from 200 tokens (ddp) to 600 (acco), 3.0x"),
            "{line}"
        );
        assert!(line.contains("drop --budget rounds"), "{line}");
        // A run that diverged stopped early: said, not counted.
        let mut d = result("co2", &[6.0], f32::NAN);
        d.ended = Ended::Diverged { participant: 0, step: 2, what: "NaN".into() };
        let line = budget_line(&[a, d], "tokens");
        assert!(
            line.contains("trained 200 tokens") && line.contains("co2 stopped when it diverged, after 100 tokens"),
            "{line}"
        );
    }
}
