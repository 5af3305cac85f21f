//! The call tree by function: the profile's stack prefix tree is keyed by
//! frame address, so two return addresses in one function under the same
//! caller are two nodes there. Viewers that show functions (flame graphs,
//! DevTools, the report) want them merged; this does it once, in one pass,
//! for every exporter that needs it.

use rustc_hash::FxHashMap;

use crate::profile::{ProfileData, Symbols};

pub struct CallTree {
    /// Function of each node (index into `Symbols::functions`).
    pub func: Vec<u32>,
    /// Parent of each node, or -1 for a root. Parents come first.
    pub parent: Vec<i32>,
    /// For each node of the profile's stack table, its call-tree node.
    pub of_stack: Vec<u32>,
}

impl CallTree {
    /// Builds the tree; `profile` must have validated (parents come first).
    pub fn build(profile: &ProfileData, symbols: &Symbols) -> CallTree {
        let n = profile.stack_frame.len();
        let mut tree = CallTree { func: Vec::new(), parent: Vec::new(), of_stack: Vec::with_capacity(n) };
        let mut index: FxHashMap<(i32, u32), u32> = FxHashMap::default();
        for (&frame, &parent) in profile.stack_frame.iter().zip(&profile.stack_parent) {
            let func = symbols.frame_function[frame as usize];
            let parent = if parent < 0 { -1 } else { tree.of_stack[parent as usize] as i32 };
            let node = *index.entry((parent, func)).or_insert_with(|| {
                tree.func.push(func);
                tree.parent.push(parent);
                (tree.func.len() - 1) as u32
            });
            tree.of_stack.push(node);
        }
        tree
    }

    pub fn len(&self) -> usize {
        self.func.len()
    }

    pub fn is_empty(&self) -> bool {
        self.func.is_empty()
    }

    /// The nodes from the root down to `node`.
    pub fn path(&self, node: u32) -> Vec<u32> {
        let mut path = Vec::new();
        let mut n = node as i32;
        while n >= 0 {
            path.push(n as u32);
            n = self.parent[n as usize];
        }
        path.reverse();
        path
    }
}

/// Which samples an aggregated view counts.
pub struct SampleFilter<'a> {
    /// Per thread index: counted or not; `None` counts every thread.
    pub threads: Option<&'a [bool]>,
    pub include_idle: bool,
}

impl SampleFilter<'_> {
    pub fn keeps(&self, profile: &ProfileData, i: usize) -> bool {
        (self.include_idle || profile.sample_idle[i] == 0)
            && self.threads.is_none_or(|t| t.get(profile.sample_thread[i] as usize).copied().unwrap_or(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::names::resolve;
    use crate::profile::tests::sample_profile;

    #[test]
    fn frames_of_one_function_merge() {
        let mut p = sample_profile();
        // Frame 3 ("c") becomes a second return address in "a": main>a and
        // main>c are then the same call-tree node.
        p.symbols.as_mut().unwrap().frame_function[3] = 1;
        let s = resolve(&p);
        let t = CallTree::build(&p, &s);
        assert_eq!(t.len(), 3);
        assert_eq!(t.of_stack, vec![0, 1, 2, 1]);
        assert_eq!(t.path(2), vec![0, 1, 2]);
    }

    #[test]
    fn filter_drops_idle_and_other_threads() {
        let p = sample_profile();
        let f = SampleFilter { threads: None, include_idle: false };
        assert_eq!((0..4).filter(|&i| f.keeps(&p, i)).count(), 3);
        let only_worker = [false, true];
        let f = SampleFilter { threads: Some(&only_worker), include_idle: true };
        assert_eq!((0..4).filter(|&i| f.keeps(&p, i)).count(), 2);
    }
}
