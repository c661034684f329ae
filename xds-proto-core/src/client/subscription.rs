//! The names subscribed on one server for one resource type: a hash set for the
//! membership tests of every watch and response, and the sorted list that requests
//! carry, rebuilt only when a request needs it, by merging what was added into the
//! last list. (A B-tree kept the list sorted on every watch: some 14 name comparisons
//! per insert, a fifth of a watch's cost in a burst of 20,000.)

use std::collections::HashSet;
use std::sync::Arc;

type NameSet = HashSet<Arc<str>, foldhash::fast::FixedState>;

#[derive(Debug, Default)]
pub(super) struct Subscription {
    set: NameSet,
    /// Sorted, as of the last [`names`](Self::names); it may hold names removed since.
    sorted: Arc<[Arc<str>]>,
    /// Added since the last `names`, in no order; it may hold names removed since, and
    /// a name twice.
    added: Vec<Arc<str>>,
    /// A name was added or removed since the last `names`.
    stale: bool,
    /// A name was removed since the last `names`: only then may the sorted list and
    /// the additions hold names no longer subscribed, or a name twice. (Without, the
    /// rebuild tests no name against the set: for a burst of 10,000, that was 10,000
    /// lookups, each a cache miss, before the request could leave.)
    removed: bool,
}

impl Subscription {
    /// Adds `name`; returns whether it is new.
    pub(super) fn insert(&mut self, name: &Arc<str>) -> bool {
        if !self.set.insert(name.clone()) {
            return false;
        }
        self.added.push(name.clone());
        self.stale = true;
        // Added and removed again and again while no request is built: keep the
        // record of additions no larger than the subscription.
        if self.added.len() > 2 * self.set.len() + 64 {
            self.rebuild();
        }
        true
    }

    /// Removes `name`; returns whether it was subscribed.
    pub(super) fn remove(&mut self, name: &str) -> bool {
        let removed = self.set.remove(name);
        self.stale |= removed;
        self.removed |= removed;
        removed
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.set.contains(name)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.set.len()
    }

    /// Every subscribed name, sorted, as a request carries them.
    pub(super) fn names(&mut self) -> Arc<[Arc<str>]> {
        if self.stale {
            self.rebuild();
        }
        self.sorted.clone()
    }

    /// Merges the additions into the sorted list and drops the names removed.
    fn rebuild(&mut self) {
        let set = &self.set;
        let filter = std::mem::take(&mut self.removed);
        let mut added = std::mem::take(&mut self.added);
        if filter {
            added.retain(|n| set.contains(n));
        }
        added.sort_unstable();
        if filter {
            added.dedup();
        }
        let mut merged = Vec::with_capacity(set.len());
        let mut old = (self.sorted.iter())
            .filter(|n| !filter || set.contains(*n))
            .peekable();
        let mut new = added.into_iter().peekable();
        loop {
            let next = match (old.peek(), new.peek()) {
                (Some(o), Some(n)) if *o < n => old.next().cloned(),
                (Some(o), Some(n)) if *o == n => {
                    new.next();
                    old.next().cloned()
                }
                (_, Some(_)) => new.next(),
                (Some(_), None) => old.next().cloned(),
                (None, None) => break,
            };
            merged.extend(next);
        }
        self.sorted = merged.into();
        self.stale = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// One step of the property below: insert or remove a name (of 20), or read the
    /// sorted list.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8),
        Remove(u8),
        Names,
    }

    impl quickcheck::Arbitrary for Op {
        fn arbitrary(g: &mut quickcheck::Gen) -> Op {
            let n = u8::arbitrary(g) % 20;
            match u8::arbitrary(g) % 5 {
                0 | 1 => Op::Insert(n),
                2 | 3 => Op::Remove(n),
                _ => Op::Names,
            }
        }
    }

    quickcheck::quickcheck! {
        /// It behaves as the sorted set it replaced: the same answers to insert,
        /// remove and contains, and the same names in the same order.
        fn behaves_as_a_sorted_set(ops: Vec<Op>) -> bool {
            let mut sub = Subscription::default();
            let mut model: BTreeSet<Arc<str>> = BTreeSet::new();
            let name = |n: u8| -> Arc<str> { Arc::from(format!("n{n}")) };
            for op in ops {
                let agrees = match op {
                    Op::Insert(n) => sub.insert(&name(n)) == model.insert(name(n)),
                    Op::Remove(n) => sub.remove(&name(n)) == model.remove(&name(n)),
                    Op::Names => *sub.names() == *model.iter().cloned().collect::<Vec<_>>(),
                };
                let same = sub.len() == model.len()
                    && (0..20).all(|n| sub.contains(&name(n)) == model.contains(&name(n)));
                if !agrees || !same || sub.added.len() > 2 * model.len() + 65 {
                    return false;
                }
            }
            *sub.names() == *model.iter().cloned().collect::<Vec<_>>()
        }
    }
}
