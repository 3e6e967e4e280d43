//! A [`LocalFabric`] is one participant's view of a job of threads: groups
//! are made on first use from a registry shared by the job (the first
//! member to ask creates the group's shared state, the others join it), and
//! messages go through one mailbox per participant (a queue and a condvar;
//! the message is moved, not copied). A participant whose fabric is dropped
//! (its thread ended or panicked) is marked gone: a receiver waiting on it
//! panics with its name instead of hanging. A participant whose program
//! failed (`Fabric::failure_notice`, called by the real runtime) makes every
//! receiver panic, whomever it waits for: the peer it waits on may be
//! waiting on the failed one.

use super::{LocalComm, Shared};
use crate::comm::{CommStats, Communicator, Fabric, Message};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What the participants of one in-process job share: the registry of
/// groups and the mailboxes.
struct Net {
    participants: usize,
    groups: Mutex<HashMap<Vec<usize>, Arc<Shared>>>,
    mail: Mutex<MailState>,
    /// One condvar per participant's mailbox.
    cvs: Vec<Condvar>,
}

struct MailState {
    /// Per receiver: (sender, message) in arrival order.
    queues: Vec<VecDeque<(usize, Message)>>,
    /// Participants whose fabric was dropped: (gone, was panicking).
    gone: Vec<Option<bool>>,
    /// The first participant whose program failed (`failure_notice`).
    failed: Option<usize>,
}

impl Net {
    fn mail(&self) -> MutexGuard<'_, MailState> {
        self.mail.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the mail state (a participant gone or failed), then wakes
    /// every receiver so it checks again.
    fn mark_and_wake(&self, mark: impl FnOnce(&mut MailState)) {
        mark(&mut self.mail());
        self.cvs.iter().for_each(Condvar::notify_all);
    }
}

/// One participant's handle on an in-process job: groups and mailboxes.
pub struct LocalFabric {
    rank: usize,
    net: Arc<Net>,
    groups: HashMap<Vec<usize>, LocalComm>,
    stats: CommStats,
}

impl LocalFabric {
    /// One fabric per participant of a new job of `participants` threads.
    pub fn job(participants: usize) -> Vec<LocalFabric> {
        assert!(participants >= 1, "LocalFabric::job: at least one participant");
        let net = Arc::new(Net {
            participants,
            groups: Mutex::new(HashMap::new()),
            mail: Mutex::new(MailState {
                queues: (0..participants).map(|_| VecDeque::new()).collect(),
                gone: vec![None; participants],
                failed: None,
            }),
            cvs: (0..participants).map(|_| Condvar::new()).collect(),
        });
        (0..participants)
            .map(|rank| LocalFabric { rank, net: net.clone(), groups: HashMap::new(), stats: CommStats::default() })
            .collect()
    }

    fn mail(&self) -> MutexGuard<'_, MailState> {
        self.net.mail()
    }

    /// Panics if `who` is gone and nothing it sent is left for us.
    fn check_alive(&self, st: &MailState, who: usize) {
        if let Some(panicking) = st.gone[who] {
            let why = if panicking { "panicked" } else { "ended" };
            crate::comm::stranded::stranded(format!(
                "local fabric: participant {} waits for a message from participant {who}, which {why}",
                self.rank
            ));
        }
    }

    /// Panics if some participant's program failed: whoever we wait for may
    /// be waiting for it (a server for a failed worker's update, a worker
    /// for the server's next model), so waiting on could last for ever.
    fn check_no_failure(&self, st: &MailState) {
        if let Some(who) = st.failed {
            crate::comm::stranded::stranded(format!(
                "local fabric: participant {} stops waiting for messages: participant {who} failed",
                self.rank
            ));
        }
    }
}

impl Drop for LocalFabric {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        self.net.mark_and_wake(|st| st.gone[self.rank] = Some(panicking));
    }
}

impl Fabric for LocalFabric {
    fn rank(&self) -> usize {
        self.rank
    }
    fn participants(&self) -> usize {
        self.net.participants
    }
    fn group(&mut self, members: &[usize]) -> &mut dyn Communicator {
        if !self.groups.contains_key(members) {
            let rank = members.iter().position(|&m| m == self.rank).unwrap_or_else(|| {
                panic!("participant {} asked for group {members:?}, which it is not a member of", self.rank)
            });
            assert!(members.windows(2).all(|w| w[0] < w[1]), "group members must be sorted and distinct: {members:?}");
            assert!(
                members.last().is_some_and(|&m| m < self.net.participants),
                "group {members:?} names a participant outside 0..{}",
                self.net.participants
            );
            let shared = {
                let mut reg = self.net.groups.lock().unwrap_or_else(|e| e.into_inner());
                reg.entry(members.to_vec()).or_insert_with(|| Shared::new(members.len())).clone()
            };
            self.groups.insert(members.to_vec(), LocalComm { rank, shared, stats: CommStats::default() });
        }
        self.groups.get_mut(members).expect("just inserted")
    }
    fn send(&mut self, to: usize, mut msg: Message) {
        assert!(to < self.net.participants && to != self.rank, "participant {} cannot send to {to}", self.rank);
        msg.round_for_wire();
        let bytes = msg.wire_len();
        self.mail().queues[to].push_back((self.rank, msg));
        self.net.cvs[to].notify_all();
        self.stats.count_message(bytes, true);
    }
    fn recv(&mut self, from: usize) -> Message {
        let mut st = self.mail();
        loop {
            if let Some(i) = st.queues[self.rank].iter().position(|(s, _)| *s == from) {
                let (_, msg) = st.queues[self.rank].remove(i).expect("found");
                drop(st);
                self.stats.count_message(msg.wire_len(), false);
                return msg;
            }
            // The failure first: it is why `from` may have gone too.
            self.check_no_failure(&st);
            self.check_alive(&st, from);
            st = self.net.cvs[self.rank].wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
    fn recv_any(&mut self, timeout: Option<Duration>) -> Option<(usize, Message)> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.mail();
        loop {
            if let Some((from, msg)) = st.queues[self.rank].pop_front() {
                drop(st);
                self.stats.count_message(msg.wire_len(), false);
                return Some((from, msg));
            }
            self.check_no_failure(&st);
            // With no deadline and nobody left to send, this would wait for ever.
            if deadline.is_none() && (0..self.net.participants).all(|p| p == self.rank || st.gone[p].is_some()) {
                panic!(
                    "local fabric: participant {} waits for a message but every other participant has ended",
                    self.rank
                );
            }
            st = match deadline {
                None => self.net.cvs[self.rank].wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    self.net.cvs[self.rank].wait_timeout(st, d - now).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }
    fn message_stats(&self) -> CommStats {
        self.stats
    }
    fn failure_notice(&self) -> Box<dyn Fn() + Send + Sync> {
        let (net, rank) = (self.net.clone(), self.rank);
        Box::new(move || {
            net.mark_and_wake(|st| {
                st.failed.get_or_insert(rank);
            })
        })
    }
}
