//! The holders of one key, kept as a sorted vector.
//!
//! Most keys have one or a few holders. A `BTreeMap` allocates a node for eleven entries
//! even for one, which made the holder map the largest part of an idle key (about 2.4 KB of
//! the 2.6 KB a key cost in memory, against under 200 bytes encoded). A sorted vector
//! holds exactly what it has, looks holders up by binary search, and is encoded as the map
//! it replaces, so snapshots and backups read and write the same bytes.

use super::account::HolderSlot;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Up to this many holders a key's vector grows one slot at a time.
const EXACT_GROWTH_MAX: usize = 4;

/// Holder id → what the ledger remembers of that holder on one key, in id order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holders {
    entries: Vec<(String, HolderSlot)>,
}

impl Holders {
    pub fn new() -> Self {
        Holders::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn find(&self, id: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(id))
    }

    pub fn contains_key(&self, id: &str) -> bool {
        self.find(id).is_ok()
    }

    pub fn get(&self, id: &str) -> Option<&HolderSlot> {
        self.find(id).ok().map(|i| &self.entries[i].1)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut HolderSlot> {
        self.find(id).ok().map(|i| &mut self.entries[i].1)
    }

    /// Sets `id`'s slot; returns the one it replaced.
    pub fn insert(&mut self, id: String, slot: HolderSlot) -> Option<HolderSlot> {
        match self.find(&id) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, slot)),
            Err(i) => {
                // Most keys keep one or two holders for good: room for exactly the next
                // one, not the four a vector's first growth reserves. Past a few, the
                // usual doubling keeps inserts cheap on keys shared by many holders.
                if self.entries.len() < EXACT_GROWTH_MAX {
                    self.entries.reserve_exact(1);
                }
                self.entries.insert(i, (id, slot));
                None
            }
        }
    }

    /// Keeps the holders for which `keep` is true; frees the room of the others.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut HolderSlot) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
        if self.entries.capacity() > 2 * self.entries.len() {
            self.entries.shrink_to_fit();
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &HolderSlot)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &HolderSlot> {
        self.entries.iter().map(|(_, v)| v)
    }
}

impl<'a> IntoIterator for &'a Holders {
    type Item = (&'a String, &'a HolderSlot);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, HolderSlot)>,
        fn(&'a (String, HolderSlot)) -> (&'a String, &'a HolderSlot),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

impl Serialize for Holders {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Holders {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HoldersVisitor;
        impl<'de> Visitor<'de> for HoldersVisitor {
            type Value = Holders;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of holder ids to holder slots")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Holders, A::Error> {
                // The hint comes from the input: trust it only up to a small bound.
                let hint = access.size_hint().unwrap_or(0).min(64);
                let mut entries: Vec<(String, HolderSlot)> = Vec::with_capacity(hint);
                while let Some((k, v)) = access.next_entry::<String, HolderSlot>()? {
                    entries.push((k, v));
                }
                // Written in id order; anything else is sorted, and a repeated id is not
                // something this ledger wrote.
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                if entries.windows(2).any(|w| w[0].0 == w[1].0) {
                    return Err(serde::de::Error::custom("a holder id appears twice"));
                }
                Ok(Holders { entries })
            }
        }
        d.deserialize_map(HoldersVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Nanos;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn slot(n: u64) -> HolderSlot {
        HolderSlot {
            current: Some(n),
            demand_milli_per_sec: n,
            priority: 0,
            last_seen: Nanos(n),
            last_request_id: n,
            last_outcome: None,
            entitled: Default::default(),
        }
    }

    proptest! {
        /// The same operations on a `Holders` and a `BTreeMap` leave the same contents,
        /// and both encode to the same bytes, which each decodes to the other.
        #[test]
        fn behaves_and_encodes_as_the_map_it_replaces(
            ops in proptest::collection::vec((0u8..3, 0u64..12), 0..60)
        ) {
            let mut ours = Holders::new();
            let mut map: BTreeMap<String, HolderSlot> = BTreeMap::new();
            for (op, n) in ops {
                let id = format!("agent-{n}");
                match op {
                    0 => prop_assert_eq!(ours.insert(id.clone(), slot(n)), map.insert(id, slot(n))),
                    1 => {
                        ours.retain(|k, _| *k != id);
                        map.retain(|k, _| *k != id);
                    }
                    _ => prop_assert_eq!(ours.get(&id), map.get(&id)),
                }
                prop_assert_eq!(ours.len(), map.len());
            }
            let listed: Vec<_> = ours.iter().collect();
            prop_assert_eq!(listed, map.iter().collect::<Vec<_>>());
            let bytes = postcard::to_allocvec(&ours).unwrap();
            prop_assert_eq!(&bytes, &postcard::to_allocvec(&map).unwrap());
            let back: Holders = postcard::from_bytes(&bytes).unwrap();
            prop_assert_eq!(back, ours);
        }
    }

    #[test]
    fn a_repeated_holder_id_is_refused() {
        let twice = vec![("a".to_string(), slot(1)), ("a".to_string(), slot(2))];
        let bytes = postcard::to_allocvec(&twice).unwrap();
        let err = postcard::from_bytes::<Holders>(&bytes).unwrap_err();
        assert!(matches!(err, postcard::Error::SerdeDeCustom), "{err:?}");
    }
}
