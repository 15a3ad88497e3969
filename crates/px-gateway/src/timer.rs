//! One deadline queue for everything the engine holds: TCP merges
//! ([`Timer::Hold`]) and caravans being filled ([`Timer::Caravan`]).
//!
//! Every hold waits the same merge timeout from its start and the engine's
//! `now` never goes back, so the order holds start in is also deadline
//! order: a FIFO is the queue, O(1) both ends. Entries are not removed when
//! their hold leaves early (full, PSH, flushed...): the owner checks that an
//! entry still names a live hold (its id) when it reaches it, so the
//! queue's front may be early, never late.
//!
//! A riding PSH (adaptive PSH, `merge::policy`) shortens its hold to a
//! grace that is the same for every hold: those deadlines have a FIFO of
//! their own, in deadline order for the same reason, and the earlier front
//! of the two is the queue's front.
//!
//! Memory pressure takes the oldest holds of one kind first. Each kind has
//! its own cursor into the queue, so entries of the other kind are stepped
//! over once, not at every eviction.

use std::collections::VecDeque;
use std::time::Instant;

use crate::flow::FlowKey;

/// What a deadline belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The TCP merge held by flow slot `flow`, hold `id`.
    Hold { flow: u32, id: u64 },
    /// The open caravan of flow `key`, caravan `id`.
    Caravan { key: FlowKey, id: u64 },
}

impl Timer {
    fn kind(&self) -> usize {
        match self {
            Timer::Hold { .. } => 0,
            Timer::Caravan { .. } => 1,
        }
    }
}

/// The deadlines of all holds, in deadline order.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    queue: VecDeque<(Instant, Timer)>,
    /// Entries popped from the front so far: entry `n` (counted from the
    /// first ever pushed) sits at `queue[n - popped]`.
    popped: u64,
    /// Per kind, the first entry memory pressure has not taken yet.
    pressure: [u64; 2],
    /// Deadlines of one fixed, shorter length (PSH grace).
    grace: VecDeque<(Instant, Timer)>,
}

impl Deadlines {
    /// Queues a deadline; `at` is no earlier than any queued (see the
    /// module docs).
    #[inline]
    pub fn push(&mut self, at: Instant, t: Timer) {
        self.queue.push_back((at, t));
    }

    /// Queues a deadline of the fixed grace length; `at` is no earlier than
    /// any grace deadline queued.
    pub fn push_grace(&mut self, at: Instant, t: Timer) {
        self.grace.push_back((at, t));
    }

    /// Whether the grace queue's front comes before the main queue's.
    #[inline]
    fn grace_first(&self) -> bool {
        match (self.grace.front(), self.queue.front()) {
            (Some(g), Some(q)) => g.0 < q.0,
            (g, _) => g.is_some(),
        }
    }

    /// Entries queued, stale ones included.
    pub fn len(&self) -> usize {
        self.queue.len() + self.grace.len()
    }

    /// The earliest deadline queued (may belong to a hold that already left).
    #[inline]
    pub fn next(&self) -> Option<Instant> {
        self.front().map(|e| e.0)
    }

    /// The earliest entry, left in place.
    #[inline]
    pub fn front(&self) -> Option<(Instant, Timer)> {
        if self.grace_first() { self.grace.front().copied() } else { self.queue.front().copied() }
    }

    /// Removes and returns the earliest entry.
    #[inline]
    pub fn pop(&mut self) -> Option<(Instant, Timer)> {
        if self.grace_first() {
            return self.grace.pop_front();
        }
        let e = self.queue.pop_front()?;
        self.popped += 1;
        Some(e)
    }

    /// The oldest TCP hold memory pressure has not taken yet (it may have
    /// left already: the caller checks its id).
    pub fn oldest_hold(&mut self) -> Option<(u32, u64)> {
        match self.take_oldest(0)? {
            Timer::Hold { flow, id } => Some((flow, id)),
            Timer::Caravan { .. } => None,
        }
    }

    /// The same for caravans.
    pub fn oldest_caravan(&mut self) -> Option<(FlowKey, u64)> {
        match self.take_oldest(1)? {
            Timer::Caravan { key, id } => Some((key, id)),
            Timer::Hold { .. } => None,
        }
    }

    fn take_oldest(&mut self, kind: usize) -> Option<Timer> {
        let mut n = self.pressure[kind].max(self.popped);
        let found = loop {
            let Some(&(_, t)) = self.queue.get((n - self.popped) as usize) else { break None };
            n += 1;
            if t.kind() == kind {
                break Some(t);
            }
        };
        self.pressure[kind] = n;
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::IpAddr;
    use std::time::Duration;

    fn key(n: u16) -> FlowKey {
        let a: IpAddr = "198.51.100.1".parse().unwrap();
        FlowKey::new(a, "203.0.113.1".parse().unwrap(), n, 80)
    }

    #[test]
    fn deadline_order_and_pops() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        assert_eq!(d.next(), None);
        d.push(t0, Timer::Hold { flow: 1, id: 1 });
        d.push(t0 + Duration::from_micros(5), Timer::Caravan { key: key(1), id: 2 });
        assert_eq!(d.next(), Some(t0));
        assert_eq!(d.pop(), Some((t0, Timer::Hold { flow: 1, id: 1 })));
        assert_eq!(d.front().map(|e| e.1), Some(Timer::Caravan { key: key(1), id: 2 }));
        assert!(d.pop().is_some() && d.pop().is_none());
    }

    #[test]
    fn pressure_takes_the_oldest_of_its_kind_once() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        d.push(t0, Timer::Caravan { key: key(1), id: 1 });
        d.push(t0, Timer::Hold { flow: 7, id: 2 });
        d.push(t0, Timer::Caravan { key: key(2), id: 3 });
        d.push(t0, Timer::Hold { flow: 8, id: 4 });
        assert_eq!(d.oldest_hold(), Some((7, 2)));
        assert_eq!(d.oldest_caravan(), Some((key(1), 1)));
        // Entries stay queued for their deadlines; pressure moves on.
        assert_eq!(d.next(), Some(t0));
        d.pop();
        d.pop();
        d.pop();
        assert_eq!(d.oldest_hold(), Some((8, 4)));
        assert_eq!(d.oldest_hold(), None);
        assert_eq!(d.oldest_caravan(), None, "the caravan at entry 2 was popped");
        d.push(t0, Timer::Hold { flow: 9, id: 5 });
        assert_eq!(d.oldest_hold(), Some((9, 5)));
    }

    #[test]
    fn grace_deadlines_come_out_in_time_order_with_the_others() {
        let t0 = Instant::now();
        let us = |n| t0 + std::time::Duration::from_micros(n);
        let mut d = Deadlines::default();
        d.push(us(500), Timer::Hold { flow: 1, id: 1 });
        d.push(us(510), Timer::Hold { flow: 2, id: 2 });
        d.push_grace(us(42), Timer::Hold { flow: 2, id: 2 });
        d.push_grace(us(520), Timer::Hold { flow: 3, id: 3 });
        let order: Vec<_> = std::iter::from_fn(|| d.pop().map(|e| e.0)).collect();
        assert_eq!(order, [us(42), us(500), us(510), us(520)]);
        assert_eq!(d.next(), None);
    }
}
