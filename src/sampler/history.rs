//! A bounded history of recent samples: what every thread was doing in
//! the last few seconds, kept for as long as a process runs.
//!
//! Samples go into chunks of rows, each covering a stretch of time, so old
//! samples are dropped a chunk at a time: memory follows the sample rate
//! times the window kept, never the process's age. Dropped chunks are
//! cleared and reused; a chunk no longer written gives back its growth
//! slack. All chunks share one stack table, so a stack seen all through
//! the window is stored once. The stacks only dropped chunks used are
//! removed when the table has doubled since it was last compacted, which
//! keeps the cost of that pass proportional to the stacks added. A hard
//! byte limit bounds the worst case (a very high sample rate, or a stall
//! that lasts longer than the window): the oldest chunk goes first, and is
//! counted.
//!
//! A row weighs the time it stands for (`weight_us`), not a count of
//! intervals: CPU samples, wall samples and the fast samples of a stalled
//! thread can then share a profile with one exact time base. Consecutive
//! samples of a thread with the same stack and kind share a row, up to
//! `MAX_RUN_NS`, so a thread blocked for a long time costs a row per run.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::stacks::StackTable;

/// Off CPU: waiting in a system call, or idle.
pub const FLAG_IDLE: u8 = 1;
/// A capture the stall watcher asked for (a stalled thread sampled faster).
pub const FLAG_FAST: u8 = 2;
/// The weight is CPU time (a CPU-mode sample); otherwise wall-clock time.
pub const FLAG_CPU: u8 = 4;

/// Longest time one row (a run of identical samples) may span.
pub const MAX_RUN_NS: u64 = 100_000_000;
/// Rows per chunk at most (thread indices in a chunk fit a u16).
const CHUNK_ROWS: usize = 1 << 16;
/// Distinct threads per chunk at most.
const CHUNK_THREADS: usize = u16::MAX as usize;
/// Stack nodes in the shared table at most (about 21 bytes each: the
/// usual byte limit comes first).
const MAX_NODES: usize = 1 << 21;
/// The table is not compacted below this many nodes.
const COMPACT_MIN_NODES: usize = 1 << 14;
/// Time offsets within a chunk are u32 nanoseconds.
const MAX_CHUNK_SPAN_NS: u64 = 4_000_000_000;

/// One sample to keep.
#[derive(Clone, Copy, Debug)]
pub struct HistorySample<'a> {
    pub tid: u64,
    pub time_ns: u64,
    /// Leaf first.
    pub frames: &'a [u64],
    pub weight_ns: u64,
    pub flags: u8,
}

#[derive(Debug, Default)]
struct Chunk {
    start_ns: u64,
    end_ns: u64,
    /// (tid, name, is_main) of the threads with rows here.
    threads: Vec<(u64, String, bool)>,
    thread_index: FxHashMap<u64, u16>,
    thread: Vec<u16>,
    /// Nanoseconds after `start_ns`.
    offset_ns: Vec<u32>,
    stack: Vec<u32>,
    weight_us: Vec<u32>,
    flags: Vec<u8>,
}

impl Chunk {
    fn reset(&mut self, start_ns: u64) {
        self.start_ns = start_ns;
        self.end_ns = start_ns;
        self.threads.clear();
        self.thread_index.clear();
        self.thread.clear();
        self.offset_ns.clear();
        self.stack.clear();
        self.weight_us.clear();
        self.flags.clear();
    }

    /// No more rows come (a newer chunk is open): drops what only adding
    /// rows needs and the columns' growth slack.
    fn seal(&mut self) {
        self.thread_index = FxHashMap::default();
        self.threads.shrink_to_fit();
        self.thread.shrink_to_fit();
        self.offset_ns.shrink_to_fit();
        self.stack.shrink_to_fit();
        self.weight_us.shrink_to_fit();
        self.flags.shrink_to_fit();
    }

    fn rows(&self) -> usize {
        self.thread.len()
    }

    /// The rows taken in `[from_ns, to_ns]`.
    fn rows_between(&self, from_ns: u64, to_ns: u64) -> impl Iterator<Item = usize> + '_ {
        (0..self.rows()).filter(move |&row| (from_ns..=to_ns).contains(&(self.start_ns + self.offset_ns[row] as u64)))
    }

    fn bytes(&self) -> usize {
        self.thread.capacity() * 2
            + (self.offset_ns.capacity() + self.stack.capacity() + self.weight_us.capacity()) * 4
            + self.flags.capacity()
            + self.threads.capacity() * std::mem::size_of::<(u64, String, bool)>()
            + self.threads.iter().map(|t| t.1.capacity()).sum::<usize>()
            + self.thread_index.capacity() * (8 + 2 + 1)
    }
}

/// What a window of the history holds, ready for a profile: rows with
/// their stacks interned in one table.
#[derive(Debug, Default)]
pub struct HistoryWindow {
    /// (tid, name, is_main), indexed by `thread`.
    pub threads: Vec<(u64, String, bool)>,
    pub thread: Vec<u32>,
    pub time_ns: Vec<u64>,
    pub stack: Vec<u32>,
    pub weight_ns: Vec<u64>,
    pub flags: Vec<u8>,
    pub stacks: StackTable,
}

/// Counters of a history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistoryStats {
    /// Rows held now.
    pub rows: u64,
    /// Bytes held (reserved capacity, spare chunks included).
    pub bytes: u64,
    /// Samples refused: a stack too big for an empty chunk's table.
    pub dropped: u64,
    /// Chunks dropped before they left the window, for the byte limit.
    pub truncated: u64,
}

#[derive(Debug)]
pub struct History {
    chunks: VecDeque<Chunk>,
    spare: Vec<Chunk>,
    chunk_span_ns: u64,
    max_bytes: usize,
    /// The stacks of every chunk's rows.
    stacks: StackTable,
    /// Nodes the table kept when it was last compacted.
    compacted_nodes: usize,
    /// A chunk was dropped since: the table may hold stacks no row uses.
    retired_since_compaction: bool,
    /// The last row of each thread, for runs: (chunk start, row).
    last: FxHashMap<u64, (u64, u32)>,
    names: FxHashMap<u64, (String, bool)>,
    dropped: u64,
    truncated: u64,
}

impl History {
    /// A history whose chunks each cover `chunk_span_ns` (at most 4 s)
    /// and which never holds more than `max_bytes`.
    pub fn new(chunk_span_ns: u64, max_bytes: usize) -> Self {
        History {
            chunks: VecDeque::new(),
            spare: Vec::new(),
            chunk_span_ns: chunk_span_ns.clamp(1_000_000, MAX_CHUNK_SPAN_NS),
            max_bytes,
            stacks: StackTable::new(MAX_NODES),
            compacted_nodes: 0,
            retired_since_compaction: false,
            last: FxHashMap::default(),
            names: FxHashMap::default(),
            dropped: 0,
            truncated: 0,
        }
    }

    /// Chunks opened from now on cover `chunk_span_ns` (at most 4 s).
    pub fn set_span(&mut self, chunk_span_ns: u64) {
        self.chunk_span_ns = chunk_span_ns.clamp(1_000_000, MAX_CHUNK_SPAN_NS);
    }

    /// The span for chunks that keep `keep_ns` in about eight pieces.
    pub fn span_for(keep_ns: u64) -> u64 {
        (keep_ns / 8).clamp(250_000_000, MAX_CHUNK_SPAN_NS)
    }

    /// Remembers a thread's name, for the rows it gets from now on.
    pub fn name_thread(&mut self, tid: u64, name: &str, is_main: bool) {
        match self.names.get_mut(&tid) {
            Some((n, m)) if n == name && *m == is_main => {}
            Some(entry) => *entry = (name.to_string(), is_main),
            None => {
                self.names.insert(tid, (name.to_string(), is_main));
            }
        }
    }

    fn open_chunk(&mut self, time_ns: u64) {
        if let Some(current) = self.chunks.back_mut() {
            current.seal();
        }
        let mut c = self.spare.pop().unwrap_or_default();
        c.reset(time_ns);
        self.chunks.push_back(c);
    }

    /// Opens a chunk for a sample taken at `time_ns` when the current one
    /// is full, spans too long, or starts after it.
    fn chunk_for(&mut self, time_ns: u64) {
        let fits = self.chunks.back().is_some_and(|c| {
            time_ns >= c.start_ns
                && time_ns - c.start_ns < self.chunk_span_ns
                && c.rows() < CHUNK_ROWS
                && c.threads.len() < CHUNK_THREADS
        });
        if !fits {
            self.open_chunk(time_ns);
        }
    }

    pub fn push(&mut self, s: HistorySample<'_>) {
        let weight_us = (s.weight_ns / 1000).clamp(1, u32::MAX as u64) as u32;
        // Samples come in time order per thread, and nearly so across
        // threads (captures are collected a little after they are taken):
        // one a little older than the current chunk goes in it anyway.
        let stack = match self.stacks.intern(s.frames) {
            Ok(stack) => stack,
            Err(_) => {
                // The table is full: the stacks of chunks already dropped
                // go first, then the oldest chunks with theirs, the
                // current one last (the history starts over).
                loop {
                    if !self.retired_since_compaction {
                        if self.chunks.is_empty() {
                            self.dropped += 1;
                            return;
                        }
                        self.truncated += 1;
                        self.retire_oldest();
                    }
                    self.compact();
                    if let Ok(stack) = self.stacks.intern(s.frames) {
                        break stack;
                    }
                }
            }
        };
        self.chunk_for(s.time_ns);
        let c = self.chunks.back_mut().expect("chunk_for opens a chunk");
        let time_ns = s.time_ns.max(c.start_ns);
        let offset = (time_ns - c.start_ns) as u32;
        c.end_ns = c.end_ns.max(time_ns);
        if let Some(&(chunk, row)) = self.last.get(&s.tid) {
            let row = row as usize;
            let same = chunk == c.start_ns
                && c.stack.get(row) == Some(&stack)
                && c.flags.get(row) == Some(&s.flags)
                && offset.saturating_sub(c.offset_ns[row]) as u64 <= MAX_RUN_NS;
            if same {
                if let Some(w) = c.weight_us[row].checked_add(weight_us) {
                    c.weight_us[row] = w;
                    return;
                }
            }
        }
        let thread = match c.thread_index.get(&s.tid) {
            Some(&i) => i,
            None => {
                let i = c.threads.len() as u16;
                let (name, is_main) = self.names.get(&s.tid).cloned().unwrap_or_default();
                c.threads.push((s.tid, name, is_main));
                c.thread_index.insert(s.tid, i);
                i
            }
        };
        c.thread.push(thread);
        c.offset_ns.push(offset);
        c.stack.push(stack);
        c.weight_us.push(weight_us);
        c.flags.push(s.flags);
        self.last.insert(s.tid, (c.start_ns, (c.rows() - 1) as u32));
    }

    /// Adds `ns` to thread `tid`'s last row, if it is idle and in the
    /// current chunk (a wall-mode tick that found the thread still idle).
    pub fn extend_idle(&mut self, tid: u64, ns: u64) -> bool {
        let Some(&(chunk, row)) = self.last.get(&tid) else { return false };
        let Some(c) = self.chunks.back_mut().filter(|c| c.start_ns == chunk) else { return false };
        let row = row as usize;
        if c.flags.get(row).is_none_or(|f| f & FLAG_IDLE == 0) {
            return false;
        }
        match c.weight_us[row].checked_add((ns / 1000) as u32) {
            Some(w) => {
                c.weight_us[row] = w;
                true
            }
            None => false,
        }
    }

    /// Drops every chunk that ends before `from_ns`, and the oldest ones
    /// while over the byte limit.
    pub fn trim(&mut self, from_ns: u64) {
        while self.chunks.len() > 1 && self.chunks.front().is_some_and(|c| c.end_ns < from_ns) {
            self.retire_oldest();
        }
        if self.retired_since_compaction
            && self.stacks.node_count() >= (2 * self.compacted_nodes).max(COMPACT_MIN_NODES)
        {
            self.compact();
        }
        // Over the byte limit (a very high rate, or stacks that never
        // repeat): the oldest chunks go, the current one last.
        while !self.chunks.is_empty() && self.bytes() > self.max_bytes {
            self.truncated += 1;
            self.retire_oldest();
            self.compact();
        }
        if self.last.len() > 4 * self.chunks.iter().map(|c| c.threads.len()).sum::<usize>() + 64 {
            let live: rustc_hash::FxHashSet<u64> =
                self.chunks.iter().flat_map(|c| c.threads.iter().map(|t| t.0)).collect();
            self.last.retain(|tid, _| live.contains(tid));
            self.names.retain(|tid, _| live.contains(tid));
        }
    }

    /// Drops the stacks no row uses any more.
    fn compact(&mut self) {
        let mut keep = vec![false; self.stacks.node_count()];
        for c in &self.chunks {
            for &stack in &c.stack {
                keep[stack as usize] = true;
            }
        }
        let map = self.stacks.retain(&mut keep);
        for c in self.chunks.iter_mut() {
            for stack in c.stack.iter_mut() {
                *stack = map[*stack as usize];
            }
        }
        self.compacted_nodes = self.stacks.node_count();
        self.retired_since_compaction = false;
    }

    fn retire_oldest(&mut self) {
        if let Some(mut c) = self.chunks.pop_front() {
            self.retired_since_compaction = true;
            c.reset(0);
            // One spare is enough for a steady rate; more would hold the
            // memory of a burst for ever.
            if self.spare.is_empty() {
                self.spare.push(c);
            }
        }
    }

    /// The oldest time still held.
    pub fn oldest_ns(&self) -> Option<u64> {
        self.chunks.front().map(|c| c.start_ns)
    }

    pub fn bytes(&self) -> usize {
        self.chunks.iter().chain(&self.spare).map(Chunk::bytes).sum::<usize>()
            + self.stacks.bytes_used()
            + self.last.capacity() * (8 + 8 + 4 + 1)
            + self.names.capacity() * (8 + std::mem::size_of::<(String, bool)>() + 1)
    }

    pub fn stats(&self) -> HistoryStats {
        HistoryStats {
            rows: self.chunks.iter().map(|c| c.rows() as u64).sum(),
            bytes: self.bytes() as u64,
            dropped: self.dropped,
            truncated: self.truncated,
        }
    }

    /// The rows taken in `[from_ns, to_ns]`, with the stacks they use.
    pub fn window(&self, from_ns: u64, to_ns: u64) -> HistoryWindow {
        let mut out = HistoryWindow { stacks: StackTable::new(usize::MAX), ..Default::default() };
        let in_window = || self.chunks.iter().filter(|c| c.end_ns >= from_ns && c.start_ns <= to_ns);
        // The stacks the window's rows use and their ancestors, copied in
        // the table's order (parents before children).
        let mut used = vec![false; self.stacks.node_count()];
        for c in in_window() {
            for row in c.rows_between(from_ns, to_ns) {
                used[c.stack[row] as usize] = true;
            }
        }
        self.stacks.mark_ancestors(&mut used);
        let mut node_map = vec![u32::MAX; used.len()];
        for (i, _) in used.iter().enumerate().filter(|(_, &u)| u) {
            let parent = self.stacks.stack_parent[i];
            let parent = if parent < 0 { -1 } else { node_map[parent as usize] as i32 };
            let address = self.stacks.frame_address[self.stacks.stack_frame[i] as usize];
            // The window's table is unbounded: it holds no more than the
            // bounded table it is copied from.
            node_map[i] = out.stacks.intern_child(parent, address).unwrap_or(0);
        }
        let mut thread_of: FxHashMap<u64, u32> = FxHashMap::default();
        for c in in_window() {
            let threads: Vec<u32> = c
                .threads
                .iter()
                .map(|(tid, name, is_main)| {
                    *thread_of.entry(*tid).or_insert_with(|| {
                        out.threads.push((*tid, name.clone(), *is_main));
                        (out.threads.len() - 1) as u32
                    })
                })
                .collect();
            for row in c.rows_between(from_ns, to_ns) {
                let thread = threads[c.thread[row] as usize];
                // A later chunk may know a name the first one did not.
                let (_, name, is_main) = &c.threads[c.thread[row] as usize];
                let known = &mut out.threads[thread as usize];
                if known.1.is_empty() && !name.is_empty() {
                    known.1 = name.clone();
                    known.2 = *is_main;
                }
                out.thread.push(thread);
                out.time_ns.push(c.start_ns + c.offset_ns[row] as u64);
                out.stack.push(node_map[c.stack[row] as usize]);
                out.weight_ns.push(c.weight_us[row] as u64 * 1000);
                out.flags.push(c.flags[row]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn sample(tid: u64, t: u64, frames: &[u64], flags: u8) -> HistorySample<'_> {
        HistorySample { tid, time_ns: t, frames, weight_ns: 10 * MS, flags }
    }

    #[test]
    fn window_holds_what_was_taken_with_one_stack_table() {
        let mut h = History::new(100 * MS, 1 << 30);
        h.name_thread(1, "main", true);
        h.name_thread(2, "worker", false);
        for i in 0..100u64 {
            let leaf = 0x100 + (i % 3);
            h.push(sample(1 + i % 2, i * 10 * MS, &[leaf, 0x20, 0x10], FLAG_CPU));
        }
        assert!(h.chunks.len() >= 10, "{} chunks", h.chunks.len());
        let w = h.window(200 * MS, 499 * MS);
        assert_eq!(w.time_ns.len(), 30);
        assert_eq!(w.time_ns.first(), Some(&(200 * MS)));
        assert!(w.time_ns.windows(2).all(|p| p[0] < p[1]));
        assert_eq!(w.threads.len(), 2);
        assert!(w.threads.contains(&(1, "main".into(), true)));
        // Stacks were re-interned into one table: three distinct leaves.
        assert_eq!(w.stacks.frame_count(), 5);
        for (i, &s) in w.stack.iter().enumerate() {
            let i = 20 + i as u64;
            assert_eq!(w.stacks.addresses(s), vec![0x100 + i % 3, 0x20, 0x10]);
        }
        assert!(w.weight_ns.iter().all(|&w| w == 10 * MS));
    }

    #[test]
    fn runs_of_one_stack_share_a_row_and_keep_their_time() {
        let mut h = History::new(1000 * MS, 1 << 30);
        // A thread blocked for 250 ms, sampled every millisecond.
        for i in 0..250 {
            h.push(HistorySample {
                tid: 7,
                time_ns: i * MS,
                frames: &[1, 2],
                weight_ns: MS,
                flags: FLAG_FAST | FLAG_IDLE,
            });
        }
        let w = h.window(0, u64::MAX);
        // Runs are cut at MAX_RUN_NS.
        assert_eq!(w.time_ns, vec![0, 101 * MS, 202 * MS]);
        assert_eq!(w.weight_ns.iter().sum::<u64>(), 250 * MS);
        // Another kind of sample breaks the run.
        h.push(HistorySample { tid: 7, time_ns: 251 * MS, frames: &[1, 2], weight_ns: MS, flags: FLAG_CPU });
        assert_eq!(h.window(0, u64::MAX).time_ns.len(), 4);
    }

    #[test]
    fn memory_is_flat_however_long_it_runs() {
        let keep = 2_000 * MS;
        let mut h = History::new(History::span_for(keep), 1 << 30);
        let mut peak = 0;
        let mut at_10s = 0;
        // 60 s at 100 Hz of 20 threads with 50 distinct stacks.
        for tick in 0..6_000u64 {
            let t = tick * 10 * MS;
            for tid in 0..20u64 {
                let leaf = 0x1000 + (tick * 7 + tid) % 50;
                h.push(sample(tid, t, &[leaf, 0x30, 0x20, 0x10], FLAG_CPU));
            }
            h.trim(t.saturating_sub(keep));
            peak = peak.max(h.bytes());
            if tick == 1_000 {
                at_10s = h.bytes();
            }
        }
        assert!(peak <= at_10s + at_10s / 4, "peak {peak} bytes, {at_10s} at 10 s");
        let s = h.stats();
        // The window kept: 2 s plus at most one chunk.
        let rows_per_s = 20 * 100;
        assert!(s.rows >= 2 * rows_per_s && s.rows <= 3 * rows_per_s, "{} rows", s.rows);
        assert_eq!(h.oldest_ns().map(|t| t >= 60_000 * MS - keep - History::span_for(keep)), Some(true));
        assert_eq!((s.dropped, s.truncated), (0, 0));
    }

    #[test]
    fn the_byte_limit_drops_the_oldest_first() {
        let mut h = History::new(250 * MS, 200_000);
        for i in 0..20_000u64 {
            let frames = [i, i + 1, i + 2, i + 3];
            h.push(sample(1, i * MS, &frames, FLAG_CPU));
            h.trim(0);
        }
        let s = h.stats();
        assert!(s.bytes <= 200_000 + h.chunks.back().map_or(0, |c| c.bytes()) as u64, "{s:?}");
        assert!(s.truncated > 0);
        assert!(h.oldest_ns().unwrap() > 10_000 * MS, "the newest samples are kept");
    }

    #[test]
    fn idle_rows_grow_on_idle_ticks() {
        let mut h = History::new(1000 * MS, 1 << 30);
        h.push(HistorySample { tid: 3, time_ns: 0, frames: &[9], weight_ns: 10 * MS, flags: FLAG_IDLE });
        assert!(h.extend_idle(3, 10 * MS));
        assert!(!h.extend_idle(4, 10 * MS), "no such thread");
        h.push(HistorySample { tid: 3, time_ns: 20 * MS, frames: &[8], weight_ns: 10 * MS, flags: 0 });
        assert!(!h.extend_idle(3, 10 * MS), "its last row is not idle");
        assert_eq!(h.window(0, u64::MAX).weight_ns, vec![20 * MS, 10 * MS]);
    }

    #[test]
    fn stacks_only_dropped_rows_used_are_removed() {
        // 1 s kept, 1 kHz, every sample a new stack: the table follows the
        // window, and the rows kept still read their own stacks.
        let keep = 1_000 * MS;
        let mut h = History::new(250 * MS, 1 << 30);
        // 100 000 samples: 100 002 nodes if nothing were removed.
        for i in 0..100_000u64 {
            let t = i * MS;
            h.push(sample(1, t, &[0x1000 + i, 0x20, 0x10], FLAG_CPU));
            h.trim(t.saturating_sub(keep));
        }
        let rows = h.stats().rows as usize;
        assert!(rows < 2_000, "{rows} rows");
        assert!(h.stacks.node_count() <= COMPACT_MIN_NODES + 2 * rows + 2, "{} nodes", h.stacks.node_count());
        let w = h.window(0, u64::MAX);
        assert_eq!(w.time_ns.len(), rows);
        for (&t, &s) in w.time_ns.iter().zip(&w.stack) {
            assert_eq!(w.stacks.addresses(s), vec![0x1000 + t / MS, 0x20, 0x10]);
        }
        assert_eq!(h.stats().truncated, 0);
    }

    #[test]
    fn one_chunk_whose_stacks_never_repeat_stays_within_the_byte_limit() {
        // A single chunk (4 s at 1 kHz) of deep stacks that never repeat:
        // the limit drops the current chunk too, the history starts over,
        // and every push stays cheap (no compaction per sample).
        let limit = 4 << 20;
        let mut h = History::new(4_000 * MS, limit);
        let frames = |i: u64| -> Vec<u64> { (0..64).map(|d| (i << 8) | d).collect() };
        for i in 0..4_000u64 {
            h.push(sample(1, i * MS, &frames(i), FLAG_CPU));
            h.trim(0);
            assert!(h.bytes() <= limit + limit / 2, "{} bytes at sample {i}", h.bytes());
        }
        assert!(h.stats().truncated > 0);
        assert!(h.stats().rows > 0, "the newest samples are kept");
    }

    #[test]
    fn a_full_table_drops_the_oldest_chunks_then_starts_over() {
        let mut h = History { stacks: StackTable::new(64), ..History::new(10 * MS, 1 << 30) };
        for i in 0..100u64 {
            h.push(sample(1, i * MS, &[0x1000 + i, 0x20, 0x10], FLAG_CPU));
        }
        let s = h.stats();
        assert_eq!(s.dropped, 0);
        assert!(s.truncated > 0 && s.rows > 0, "{s:?}");
        assert!(h.stacks.node_count() <= 64);
        let w = h.window(0, u64::MAX);
        let newest = *w.time_ns.last().unwrap();
        assert_eq!(w.stacks.addresses(*w.stack.last().unwrap()), vec![0x1000 + newest / MS, 0x20, 0x10]);
    }

    #[test]
    fn a_stack_seen_all_through_the_window_is_stored_once() {
        let keep = 10_000 * MS;
        let mut h = History::new(History::span_for(keep), 1 << 30);
        for tick in 0..6_000u64 {
            let t = tick * 10 * MS;
            for tid in 0..4u64 {
                let frames: Vec<u64> = (0..40).map(|d| 0x1000 * (tid + 1) + d + (tick % 7) * 0x100).collect();
                h.push(sample(tid, t, &frames, FLAG_CPU));
            }
            h.trim(t.saturating_sub(keep));
        }
        // 4 threads x 7 stacks x 40 frames, none shared between them.
        assert_eq!(h.stacks.node_count(), 4 * 7 * 40);
    }
}
