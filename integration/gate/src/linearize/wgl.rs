//! The Wing–Gong–Lowe linearizability search with memoisation (Lowe, "Testing for
//! linearizability", 2017), as Porcupine implements it: operations' calls and returns in
//! one doubly linked list in time order; the search linearizes the first call whose step the
//! model accepts, lifting that operation out of the list, and backtracks when it meets a
//! return whose operation it has not placed. A cache of (placed set, model state) prunes
//! every configuration already explored, which is what turns the exponential search into one
//! that finishes on histories with many concurrent operations.
//!
//! Operations whose return was never seen (`ret: None`) have no return entry: they may be
//! placed anywhere after their call, or never (they may not have taken effect).

use std::collections::HashSet;
use std::hash::Hash;

/// A sequential specification: the state after `op` answered `ret` (None: the answer was
/// never seen, apply what the operation may have done), or None if that answer is
/// impossible in this state.
pub trait Model: Clone + Eq + Hash {
    type Op;
    type Ret;
    fn step(&self, op: &Self::Op, ret: Option<&Self::Ret>) -> Option<Self>;
}

/// One operation: its call time and, if seen, its return time and answer.
#[derive(Debug, Clone)]
pub struct Call<O, R> {
    pub op: O,
    pub invoked: u64,
    pub ret: Option<(u64, R)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Linearizable,
    NotLinearizable,
    /// The step budget ran out: nothing is claimed.
    Exhausted,
}

const NONE: usize = usize::MAX;

/// The event list: node 0 is the head sentinel; node `1 + 2i` is operation i's call and
/// `2 + 2i` its return (unused when the return was never seen).
struct List {
    next: Vec<usize>,
    prev: Vec<usize>,
}

impl List {
    fn unlink(&mut self, n: usize) {
        let (p, x) = (self.prev[n], self.next[n]);
        self.next[p] = x;
        if x != NONE {
            self.prev[x] = p;
        }
    }

    /// Puts `n` back where it was: valid when undone in the reverse order of unlinking.
    fn relink(&mut self, n: usize) {
        let (p, x) = (self.prev[n], self.next[n]);
        self.next[p] = n;
        if x != NONE {
            self.prev[x] = n;
        }
    }
}

/// Decides whether `calls` linearize against `init`, within `budget` search steps.
pub fn check<M: Model>(init: M, calls: &[Call<M::Op, M::Ret>], budget: u64) -> Outcome {
    let n = calls.len();
    // Time order; at equal times calls before returns (the permissive reading).
    let mut order: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * n);
    for (i, c) in calls.iter().enumerate() {
        order.push((c.invoked, 0, 1 + 2 * i));
        if let Some((t, _)) = &c.ret {
            order.push(((*t).max(c.invoked), 1, 2 + 2 * i));
        }
    }
    order.sort_unstable();
    let mut list = List {
        next: vec![NONE; 2 * n + 1],
        prev: vec![NONE; 2 * n + 1],
    };
    let mut last = 0;
    for &(_, _, node) in &order {
        list.next[last] = node;
        list.prev[node] = last;
        last = node;
    }
    let words = n.div_ceil(64);
    let mut placed = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, M)> = HashSet::new();
    let mut stack: Vec<(usize, M)> = Vec::new();
    let mut state = init;
    let mut entry = list.next[0];
    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps > budget {
            return Outcome::Exhausted;
        }
        if entry == NONE {
            // Every operation that returned has been placed.
            return Outcome::Linearizable;
        }
        let op = (entry - 1) / 2;
        if entry % 2 == 1 {
            let call = &calls[op];
            let next = state.step(&call.op, call.ret.as_ref().map(|(_, r)| r));
            if let Some(next) = next {
                let mut p = placed.clone();
                p[op / 64] |= 1 << (op % 64);
                if cache.insert((p.clone(), next.clone())) {
                    stack.push((op, std::mem::replace(&mut state, next)));
                    placed = p;
                    list.unlink(1 + 2 * op);
                    if call.ret.is_some() {
                        list.unlink(2 + 2 * op);
                    }
                    entry = list.next[0];
                    continue;
                }
            }
            entry = list.next[entry];
        } else {
            // A return before its operation was placed: undo the last placement.
            let Some((undo, before)) = stack.pop() else {
                return Outcome::NotLinearizable;
            };
            state = before;
            placed[undo / 64] &= !(1 << (undo % 64));
            if calls[undo].ret.is_some() {
                list.relink(2 + 2 * undo);
            }
            list.relink(1 + 2 * undo);
            entry = list.next[1 + 2 * undo];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register: write(v) sets it, read answers it.
    #[derive(Clone, PartialEq, Eq, Hash)]
    struct Reg(u8);

    enum Op {
        W(u8),
        R,
    }

    impl Model for Reg {
        type Op = Op;
        type Ret = u8;
        fn step(&self, op: &Op, ret: Option<&u8>) -> Option<Self> {
            match (op, ret) {
                (Op::W(v), _) => Some(Reg(*v)),
                (Op::R, Some(r)) => (*r == self.0).then(|| self.clone()),
                (Op::R, None) => Some(self.clone()),
            }
        }
    }

    fn call(op: Op, invoked: u64, ret: Option<(u64, u8)>) -> Call<Op, u8> {
        Call { op, invoked, ret }
    }

    #[test]
    fn registers() {
        // A read concurrent with a write may see either value.
        let h = [
            call(Op::W(1), 0, Some((10, 0))),
            call(Op::R, 5, Some((6, 1))),
        ];
        assert_eq!(check(Reg(0), &h, 1000), Outcome::Linearizable);
        let h = [
            call(Op::W(1), 0, Some((10, 0))),
            call(Op::R, 5, Some((6, 0))),
        ];
        assert_eq!(check(Reg(0), &h, 1000), Outcome::Linearizable);
        // A read after the write returned must see it.
        let h = [
            call(Op::W(1), 0, Some((4, 0))),
            call(Op::R, 5, Some((6, 0))),
        ];
        assert_eq!(check(Reg(0), &h, 1000), Outcome::NotLinearizable);
        // A write whose answer was lost may explain a later read, or not have happened.
        let h = [call(Op::W(2), 0, None), call(Op::R, 5, Some((6, 2)))];
        assert_eq!(check(Reg(0), &h, 1000), Outcome::Linearizable);
        let h = [call(Op::W(2), 0, None), call(Op::R, 5, Some((6, 0)))];
        assert_eq!(check(Reg(0), &h, 1000), Outcome::Linearizable);
        // Two reads that order the writes both ways cannot both hold.
        let h = [
            call(Op::W(1), 0, Some((10, 0))),
            call(Op::W(2), 0, Some((10, 0))),
            call(Op::R, 11, Some((12, 1))),
            call(Op::R, 13, Some((14, 2))),
        ];
        assert_eq!(check(Reg(0), &h, 1000), Outcome::NotLinearizable);
        assert_eq!(check(Reg(0), &h, 2), Outcome::Exhausted);
    }
}
