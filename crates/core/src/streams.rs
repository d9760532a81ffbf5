//! Stream id -> slot lookup: a flat table over the 16-bit id space (256 KiB, allocated on first
//! use), so the per-packet lookup is one load, and no randomly seeded hasher enters the core.

use crate::StreamId;

#[derive(Clone, Debug, Default)]
pub(crate) struct StreamMap {
    /// `slot + 1` per stream id; 0 = absent.
    table: Vec<u32>,
}

impl StreamMap {
    pub(crate) fn get(&self, id: StreamId) -> Option<usize> {
        match self.table.get(usize::from(id)) {
            Some(&v) if v > 0 => Some(v as usize - 1),
            _ => None,
        }
    }

    pub(crate) fn insert(&mut self, id: StreamId, slot: usize) {
        if self.table.is_empty() {
            self.table = vec![0; 1 << 16];
        }
        self.table[usize::from(id)] = slot as u32 + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup() {
        let mut m = StreamMap::default();
        assert_eq!(m.get(7), None);
        m.insert(7, 0);
        m.insert(u16::MAX, 1);
        assert_eq!(
            (m.get(7), m.get(u16::MAX), m.get(0)),
            (Some(0), Some(1), None)
        );
    }
}
