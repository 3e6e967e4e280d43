use super::*;

fn spec(pooled: bool) -> RoundLogSpec {
    RoundLogSpec {
        workers: 2,
        first: 0,
        tokens: 0,
        total: 3,
        tokens_per_micro_batch: 10,
        schedule: LrSchedule::constant(0.5),
        lr_by_tokens: None,
        virtual_time: true,
        quiet: true,
        label: String::new(),
        pooled,
        pool: Vec::new(),
    }
}

fn log(pooled: bool) -> RoundLog {
    RoundLog::new(None, spec(pooled))
}

/// Worker 0 runs 4 rounds (losses 1..4, ending at 1..4 s), worker 1 two
/// (losses 10, 20, ending at 2 and 4 s), in this order.
fn feed(l: &RoundLog) {
    let p = |step, loss, end_s| StepPoint { step, loss, micro_batches: 1, end_s };
    for (w, point) in
        [(0, p(1, 1.0, 1.0)), (0, p(2, 2.0, 2.0)), (1, p(1, 10.0, 2.0)), (0, p(3, 3.0, 3.0)), (0, p(4, 4.0, 4.0))]
            .into_iter()
            .chain([(1, p(2, 20.0, 4.0)), (2, p(1, 0.0, 4.0))])
    {
        l.point(w, &point);
    }
}

#[test]
fn lockstep_rounds_wait_for_every_worker_and_pooled_rounds_cover_the_run() {
    let lockstep = log(false);
    feed(&lockstep);
    let r = lockstep.finish().unwrap();
    // Round k of both workers: the curve stops at worker 1's last round.
    let got: Vec<_> = r.iter().map(|r| (r.step, r.loss, r.wall_s, r.tokens)).collect();
    assert_eq!(got, [(1, 5.5, 2.0, 20), (2, 11.0, 4.0, 40)]);
    // Pooled: each pair of worker rounds as they arrive, whoever ran them
    // (the server's point, participant 2, is not a worker round).
    let pooled = log(true);
    feed(&pooled);
    let r = pooled.finish().unwrap();
    let got: Vec<_> = r.iter().map(|r| (r.step, r.loss, r.wall_s, r.tokens)).collect();
    assert_eq!(got, [(1, 1.5, 2.0, 20), (2, 6.5, 3.0, 40), (3, 12.0, 4.0, 60)]);
}

#[test]
fn under_a_token_budget_the_logged_lr_follows_the_tokens_applied_before_the_round() {
    // In warm-up, lr = step + 1; 20 tokens per synchronous step, 10 per
    // micro-batch, two workers: rounds of 1 + 1, 3 + 3 and 1 + 1 micro-batches.
    let schedule = LrSchedule { max_lr: 10.0, warmup_steps: 10, total_steps: 10, min_lr: 0.0 };
    let l = RoundLog::new(None, RoundLogSpec { schedule, lr_by_tokens: Some(20), ..spec(false) });
    let p = |step, micro_batches| StepPoint { step, loss: 1.0, micro_batches, end_s: step as f64 };
    for (w, point) in [(0, p(1, 1)), (1, p(1, 1)), (0, p(2, 3)), (1, p(2, 3)), (0, p(3, 1)), (1, p(3, 1))] {
        l.point(w, &point);
    }
    let r = l.finish().unwrap();
    // Before the rounds: 0, 20 and 80 tokens applied: steps 0, 1 and 4
    // (by the round's number they would be 0, 1 and 2).
    let got: Vec<_> = r.iter().map(|r| (r.tokens, r.lr)).collect();
    assert_eq!(got, [(20, 1.0), (80, 2.0), (100, 5.0)]);
}

#[test]
fn a_resumed_pooled_log_equals_the_uninterrupted_one() {
    // Two workers and a server (participant 2); each point 1 micro-batch.
    let p = |step| StepPoint { step, loss: step as f32, micro_batches: 1, end_s: step as f64 };
    let before = [(0, p(1)), (0, p(2)), (1, p(1)), (0, p(3)), (1, p(2)), (2, p(1)), (2, p(2))];
    let after = [(0, p(4)), (0, p(5)), (2, p(3))];
    let feed = |l: &RoundLog, points: &[(usize, StepPoint)]| points.iter().for_each(|(w, q)| l.point(*w, q));
    let whole = tempfile::tempdir().unwrap();
    let l = RoundLog::new(Some(MetricsLog::open(whole.path(), None).unwrap()), spec(true));
    feed(&l, &before);
    feed(&l, &after);
    l.finish().unwrap();
    // Interrupted after `before` (a checkpoint: worker 0 at its step 3,
    // worker 1 at 2, the server at 2) and after `after` had been logged.
    let resumed = tempfile::tempdir().unwrap();
    let l = RoundLog::new(Some(MetricsLog::open(resumed.path(), None).unwrap()), spec(true));
    feed(&l, &before);
    feed(&l, &after);
    l.finish().unwrap();
    let at = Position { round: 2, tokens_seen: 50, last_steps: &[3, 2, 2] };
    let r = resume_log(resumed.path(), &at, 2, true, 10).unwrap();
    // 5 worker rounds: 2 pooled rounds (40 tokens), worker 1's step 2 back in the pool.
    assert_eq!((r.first, r.tokens, r.pool.clone()), (2, 40, vec![p(2)]));
    let l = RoundLog::new(Some(r.log), RoundLogSpec { first: r.first, tokens: r.tokens, pool: r.pool, ..spec(true) });
    feed(&l, &after);
    l.finish().unwrap();
    let text = |d: &tempfile::TempDir| std::fs::read_to_string(d.path().join("metrics.jsonl")).unwrap();
    // (Trimming every line by the checkpoint's round, 2, as before this
    // test, dropped worker 0's step 3 and started the pool empty.)
    assert_eq!(text(&resumed), text(&whole));
}

#[test]
fn rounds_that_arrive_a_participant_at_a_time_are_pooled_in_the_order_they_ended() {
    // `feed`'s rounds as MPI's checkpoint parts bring them: worker 0's four,
    // then worker 1's two, then the server's.
    let p = |step, loss, end_s| StepPoint { step, loss, micro_batches: 1, end_s };
    let w0 = [p(1, 1.0, 1.0), p(2, 2.0, 2.0), p(3, 3.0, 3.0), p(4, 4.0, 4.0)];
    let w1 = [p(1, 10.0, 2.0), p(2, 20.0, 4.0)];
    let server = [p(1, 0.0, 4.0)];
    let rounds = |r: Vec<RoundRecord>| r.iter().map(|r| (r.step, r.loss, r.wall_s, r.tokens)).collect::<Vec<_>>();
    let ordered = log(true);
    observe_in_time_order(&ordered, [(0, &w0[..]), (1, &w1[..]), (2, &server[..])]);
    let live = log(true);
    feed(&live);
    assert_eq!(rounds(ordered.finish().unwrap()), rounds(live.finish().unwrap()));
    // Fed as they come, the pooled curve paired worker 0's rounds with each
    // other, and worker 1's (with more rounds, its times go back: the real
    // runs' curves.csv before this).
    let as_they_come = log(true);
    [(0, &w0[..]), (1, &w1[..])].iter().for_each(|(w, pts)| pts.iter().for_each(|pt| as_they_come.point(*w, pt)));
    assert_eq!(rounds(as_they_come.finish().unwrap()), [(1, 1.5, 2.0, 20), (2, 3.5, 4.0, 40), (3, 15.0, 4.0, 60)]);
}
