//! Deduplication of stacks into a prefix tree.
//!
//! Each distinct address becomes one frame; each distinct (parent, frame)
//! pair becomes one stack node, so a stack is the index of its leaf node and
//! its frames are found by following `parent` to the root (-1). Samples that
//! share a prefix share its nodes, which is why a long profile costs a few
//! bytes per sample rather than a full stack each.
//!
//! The table is bounded: once `max_nodes` nodes exist, a stack that would
//! need new nodes is refused (the caller counts the sample as dropped).

use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxHashMap;

/// The table has no room for this stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableFull;

/// Identifies a table's contents: new for each table and each `clear`.
static NEXT_CONTENTS: AtomicU64 = AtomicU64::new(1);

/// The last stack one thread interned, root first, with its nodes.
/// Consecutive samples of a thread share most of their frames from the
/// root; those are matched by comparing addresses instead of being looked
/// up again.
#[derive(Debug, Default)]
pub struct PathCache {
    contents: u64,
    addresses: Vec<u64>,
    nodes: Vec<u32>,
}

#[derive(Clone, Debug)]
pub struct StackTable {
    /// Address of each frame.
    pub frame_address: Vec<u64>,
    /// Frame of each stack node.
    pub stack_frame: Vec<u32>,
    /// Parent node of each stack node, -1 for a root.
    pub stack_parent: Vec<i32>,
    frame_index: FxHashMap<u64, u32>,
    node_index: FxHashMap<(i32, u32), u32>,
    max_nodes: usize,
    /// Which [`PathCache`]s are valid for this table.
    contents: u64,
}

/// An empty table with room for nothing (`new` says how much).
impl Default for StackTable {
    fn default() -> Self {
        StackTable::new(0)
    }
}

impl StackTable {
    pub fn new(max_nodes: usize) -> Self {
        StackTable {
            frame_address: Vec::new(),
            stack_frame: Vec::new(),
            stack_parent: Vec::new(),
            frame_index: FxHashMap::default(),
            node_index: FxHashMap::default(),
            max_nodes: max_nodes.min(i32::MAX as usize),
            contents: NEXT_CONTENTS.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub fn frame_count(&self) -> usize {
        self.frame_address.len()
    }

    pub fn node_count(&self) -> usize {
        self.stack_frame.len()
    }

    fn intern_frame(&mut self, address: u64) -> u32 {
        let next = self.frame_address.len() as u32;
        *self.frame_index.entry(address).or_insert_with(|| {
            self.frame_address.push(address);
            next
        })
    }

    /// Interns a stack given leaf first. Returns the leaf node. An empty
    /// stack is refused with `TableFull` only if the table is full; otherwise
    /// it is stored as a single node for address 0 so every sample has a node.
    pub fn intern(&mut self, leaf_first: &[u64]) -> Result<u32, TableFull> {
        if leaf_first.is_empty() {
            return self.intern(&[0]);
        }
        let mut parent: i32 = -1;
        for &addr in leaf_first.iter().rev() {
            parent = self.intern_child(parent, addr)? as i32;
        }
        Ok(parent as u32)
    }

    /// Like [`StackTable::intern`], reusing the nodes of the frames the
    /// stack shares, from the root, with the last one interned through
    /// `cache`.
    pub fn intern_cached(&mut self, leaf_first: &[u64], cache: &mut PathCache) -> Result<u32, TableFull> {
        if leaf_first.is_empty() {
            return self.intern(leaf_first);
        }
        if cache.contents != self.contents {
            cache.contents = self.contents;
            cache.addresses.clear();
            cache.nodes.clear();
        }
        let n = leaf_first.len();
        let shared = cache.addresses.iter().zip(leaf_first.iter().rev()).take_while(|(a, b)| a == b).count();
        cache.addresses.truncate(shared);
        cache.nodes.truncate(shared);
        let mut parent = cache.nodes.last().map_or(-1, |&node| node as i32);
        for &address in leaf_first[..n - shared].iter().rev() {
            let node = self.intern_child(parent, address)?;
            cache.addresses.push(address);
            cache.nodes.push(node);
            parent = node as i32;
        }
        Ok(parent as u32)
    }

    /// Interns one node: `address` called from node `parent` (-1 for a root).
    pub fn intern_child(&mut self, parent: i32, address: u64) -> Result<u32, TableFull> {
        let frame = self.intern_frame(address);
        let key = (parent, frame);
        if let Some(&n) = self.node_index.get(&key) {
            return Ok(n);
        }
        if self.stack_frame.len() >= self.max_nodes {
            return Err(TableFull);
        }
        let n = self.stack_frame.len() as u32;
        self.stack_frame.push(frame);
        self.stack_parent.push(parent);
        self.node_index.insert(key, n);
        Ok(n)
    }

    /// Empties the table, keeping its memory for reuse.
    pub fn clear(&mut self) {
        self.contents = NEXT_CONTENTS.fetch_add(1, Ordering::Relaxed);
        self.frame_address.clear();
        self.stack_frame.clear();
        self.stack_parent.clear();
        self.frame_index.clear();
        self.node_index.clear();
    }

    /// Marks every ancestor of a marked node (`marks`: one per node).
    pub fn mark_ancestors(&self, marks: &mut [bool]) {
        // Parents come before their children: one backward pass is enough.
        for i in (0..marks.len().min(self.node_count())).rev() {
            let parent = self.stack_parent[i];
            if marks[i] && parent >= 0 {
                marks[parent as usize] = true;
            }
        }
    }

    /// Keeps the nodes marked in `keep`, their ancestors and the frames
    /// they use, in their order, and drops the rest. Returns the new index
    /// of each old node (`u32::MAX` for a dropped one). Memory held beyond
    /// twice what is kept is given back.
    pub fn retain(&mut self, keep: &mut [bool]) -> Vec<u32> {
        let n = self.node_count();
        assert_eq!(keep.len(), n, "one mark per node");
        self.mark_ancestors(keep);
        let mut frame_kept = vec![false; self.frame_count()];
        for (&frame, _) in self.stack_frame.iter().zip(keep.iter()).filter(|(_, &k)| k) {
            frame_kept[frame as usize] = true;
        }
        // New indexes never exceed old ones: both columns compact in place.
        let mut frame_map = vec![u32::MAX; frame_kept.len()];
        let mut frames = 0;
        for (old, _) in frame_kept.iter().enumerate().filter(|(_, &k)| k) {
            self.frame_address[frames] = self.frame_address[old];
            frame_map[old] = frames as u32;
            frames += 1;
        }
        let mut node_map = vec![u32::MAX; n];
        let mut nodes = 0;
        for old in 0..n {
            if !keep[old] {
                continue;
            }
            let parent = self.stack_parent[old];
            self.stack_frame[nodes] = frame_map[self.stack_frame[old] as usize];
            self.stack_parent[nodes] = if parent < 0 { -1 } else { node_map[parent as usize] as i32 };
            node_map[old] = nodes as u32;
            nodes += 1;
        }
        self.frame_address.truncate(frames);
        self.stack_frame.truncate(nodes);
        self.stack_parent.truncate(nodes);
        if self.frame_address.capacity() > 2 * frames {
            self.frame_address.shrink_to_fit();
        }
        if self.stack_frame.capacity() > 2 * nodes {
            self.stack_frame.shrink_to_fit();
            self.stack_parent.shrink_to_fit();
        }
        // The indexes are refilled in place (a second pair would double
        // their peak), then given back what they no longer need.
        self.frame_index.clear();
        self.frame_index.extend(self.frame_address.iter().enumerate().map(|(i, &a)| (a, i as u32)));
        self.node_index.clear();
        self.node_index.extend((0..nodes).map(|i| ((self.stack_parent[i], self.stack_frame[i]), i as u32)));
        if self.node_index.capacity() > 2 * nodes.max(16) {
            self.frame_index.shrink_to_fit();
            self.node_index.shrink_to_fit();
        }
        self.contents = NEXT_CONTENTS.fetch_add(1, Ordering::Relaxed);
        node_map
    }

    /// The addresses of a stack, leaf first.
    pub fn addresses(&self, node: u32) -> Vec<u64> {
        let mut out = Vec::new();
        let mut n = node as i32;
        while n >= 0 {
            let i = n as usize;
            out.push(self.frame_address[self.stack_frame[i] as usize]);
            n = self.stack_parent[i];
        }
        out
    }

    /// Approximate bytes held, including hash-table overhead.
    pub fn bytes_used(&self) -> usize {
        let frames = self.frame_address.capacity() * 8 + self.frame_index.capacity() * (8 + 4 + 1);
        let nodes = self.stack_frame.capacity() * 8 + self.node_index.capacity() * (8 + 4 + 1);
        frames + nodes
    }

    /// Gives up the tables, dropping the lookup indexes.
    pub fn into_columns(self) -> (Vec<u64>, Vec<u32>, Vec<i32>) {
        (self.frame_address, self.stack_frame, self.stack_parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_share_nodes() {
        let mut t = StackTable::new(100);
        let a = t.intern(&[3, 2, 1]).unwrap(); // leaf 3, root 1
        let b = t.intern(&[4, 2, 1]).unwrap();
        let c = t.intern(&[3, 2, 1]).unwrap();
        assert_eq!(a, c);
        assert_ne!(a, b);
        assert_eq!(t.node_count(), 4, "1, 1>2, 1>2>3, 1>2>4");
        assert_eq!(t.frame_count(), 4);
        assert_eq!(t.addresses(a), vec![3, 2, 1]);
        assert_eq!(t.addresses(b), vec![4, 2, 1]);
        // The root node's parent is -1.
        let root = t.intern(&[1]).unwrap();
        assert_eq!(t.stack_parent[root as usize], -1);
    }

    #[test]
    fn interning_through_a_path_cache_gives_the_same_nodes() {
        // Two tables fed the same stacks, one through per-thread caches:
        // every stack gets the same node, including after a clear.
        let (mut plain, mut cached) = (StackTable::new(10_000), StackTable::new(10_000));
        let mut caches = [PathCache::default(), PathCache::default()];
        // A fixed xorshift sequence: the same stacks on every run.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for round in 0..2000 {
            if round == 1000 {
                plain.clear();
                cached.clear();
            }
            // Root-side frames mostly shared, leaf side varied; some empty.
            let len = next(12) as usize;
            let stack: Vec<u64> =
                (0..len).map(|depth| if depth + 3 < len { 100 + depth as u64 } else { next(6) }).collect();
            let leaf_first: Vec<u64> = stack.into_iter().rev().collect();
            let thread = next(2) as usize;
            let a = plain.intern(&leaf_first).unwrap();
            let b = cached.intern_cached(&leaf_first, &mut caches[thread]).unwrap();
            assert_eq!(a, b, "round {round}: {leaf_first:?}");
            assert_eq!(cached.addresses(b), if leaf_first.is_empty() { vec![0] } else { leaf_first.clone() });
        }
        assert_eq!(plain.node_count(), cached.node_count());
    }

    #[test]
    fn same_address_at_different_depths_is_one_frame() {
        let mut t = StackTable::new(100);
        let s = t.intern(&[7, 7, 7]).unwrap();
        assert_eq!(t.frame_count(), 1);
        assert_eq!(t.node_count(), 3);
        assert_eq!(t.addresses(s), vec![7, 7, 7]);
    }

    #[test]
    fn bounded() {
        let mut t = StackTable::new(3);
        t.intern(&[3, 2, 1]).unwrap();
        assert_eq!(t.intern(&[4, 2, 1]), Err(TableFull));
        // Stacks that need no new node still work when full.
        assert!(t.intern(&[2, 1]).is_ok());
        assert_eq!(t.node_count(), 3);
    }

    #[test]
    fn empty_stack_gets_a_node() {
        let mut t = StackTable::new(10);
        let s = t.intern(&[]).unwrap();
        assert_eq!(t.addresses(s), vec![0]);
    }

    #[test]
    fn retain_keeps_marked_stacks_and_their_ancestors() {
        let mut t = StackTable::new(100);
        let a = t.intern(&[3, 2, 1]).unwrap();
        let b = t.intern(&[9, 8]).unwrap();
        let c = t.intern(&[4, 2, 1]).unwrap();
        let d = t.intern(&[5, 4, 2, 1]).unwrap();
        let mut keep = vec![false; t.node_count()];
        keep[c as usize] = true;
        keep[b as usize] = true;
        let map = t.retain(&mut keep);
        assert_eq!(map[a as usize], u32::MAX);
        assert_eq!(map[d as usize], u32::MAX, "a child of a kept node is not kept");
        assert_eq!(t.addresses(map[c as usize]), vec![4, 2, 1]);
        assert_eq!(t.addresses(map[b as usize]), vec![9, 8]);
        assert_eq!((t.node_count(), t.frame_count()), (5, 5));
        // The indexes follow: known stacks keep their node, new ones are added.
        assert_eq!(t.intern(&[4, 2, 1]), Ok(map[c as usize]));
        let e = t.intern(&[3, 2, 1]).unwrap();
        assert_eq!(t.addresses(e), vec![3, 2, 1]);
        assert_eq!(t.node_count(), 6);
        // Nothing kept: an empty table that still works.
        let mut none = vec![false; t.node_count()];
        assert!(t.retain(&mut none).iter().all(|&m| m == u32::MAX));
        assert_eq!((t.node_count(), t.frame_count()), (0, 0));
        let f = t.intern(&[7]).unwrap();
        assert_eq!(t.addresses(f), vec![7]);
    }
}
