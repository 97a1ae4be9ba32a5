//! Ordered scans that see writes not yet applied to sled: sled's iterator
//! merged with the overlay's entries in the same range (the overlay wins).

use super::StoreError;
use sled::IVec;
use std::cmp::Ordering;
use std::collections::VecDeque;
use std::iter::Peekable;
use std::path::PathBuf;

type Entry = (IVec, IVec);

/// Items of a scan, in key order or reversed.
pub struct Scan {
    sled: Peekable<Box<dyn Iterator<Item = sled::Result<Entry>> + Send>>,
    overlay: VecDeque<(IVec, Option<IVec>)>,
    reverse: bool,
    dir: PathBuf,
}

impl Scan {
    /// `overlay` in ascending key order, taken before `iter` was created:
    /// an entry missing from it was applied to sled first, so `iter` sees
    /// it.
    pub(super) fn new(
        iter: sled::Iter,
        mut overlay: Vec<(IVec, Option<IVec>)>,
        reverse: bool,
        dir: PathBuf,
    ) -> Scan {
        let sled: Box<dyn Iterator<Item = sled::Result<Entry>> + Send> = if reverse {
            overlay.reverse();
            Box::new(iter.rev())
        } else {
            Box::new(iter)
        };
        Scan {
            sled: sled.peekable(),
            overlay: overlay.into(),
            reverse,
            dir,
        }
    }

    /// Whether `a` comes before `b` in this scan's order.
    fn order(&self, a: &[u8], b: &[u8]) -> Ordering {
        if self.reverse { b.cmp(a) } else { a.cmp(b) }
    }
}

impl Iterator for Scan {
    type Item = Result<Entry, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let next_sled = match self.sled.peek() {
                Some(Ok((k, _))) => Some(k.clone()),
                Some(Err(_)) => {
                    let err = self.sled.next()?.err()?;
                    return Some(Err(StoreError::Sled {
                        path: self.dir.clone(),
                        source: err,
                    }));
                }
                None => None,
            };
            let take_overlay = match (&next_sled, self.overlay.front()) {
                (None, None) => return None,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(s), Some((o, _))) => match self.order(s, o) {
                    Ordering::Less => false,
                    Ordering::Greater => true,
                    Ordering::Equal => {
                        // The overlay's write replaces sled's value.
                        self.sled.next();
                        true
                    }
                },
            };
            if !take_overlay {
                return self.sled.next().map(|r| {
                    r.map_err(|source| StoreError::Sled {
                        path: self.dir.clone(),
                        source,
                    })
                });
            }
            match self.overlay.pop_front() {
                Some((k, Some(v))) => return Some(Ok((k, v))),
                // Removed: skip it (and sled's entry, dropped above).
                Some((_, None)) => continue,
                None => return None,
            }
        }
    }
}
