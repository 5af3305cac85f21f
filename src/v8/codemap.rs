//! Address → name map of V8 code (compiled code and bytecode arrays), built
//! from V8's code events, versioned in time.
//!
//! V8 reports code as it is created (`CODE_ADDED`), moved by the GC
//! (`CODE_MOVED`, both for machine code and for bytecode arrays) and, rarely,
//! removed (`CODE_REMOVED`). It does not report code that simply dies: the
//! address range is reused by a later object, which is reported as added.
//! So, like V8's own CPU-profiler code map and DataDog's `code-map.cc`, an
//! added range evicts every live range it overlaps.
//!
//! Unlike them, this map is consulted after the fact: samples are
//! symbolized when the profile is read, by which time an address a sample
//! saw may hold different code. Every entry therefore records when it was
//! born and when it died (a move, removal, or eviction), in the same
//! `CLOCK_MONOTONIC` nanoseconds as the samples' timestamps, and
//! [`CodeMap::lookup`] answers for the time of the sample. This is sound
//! because V8 reports a move during the GC pause that performs it, while no
//! JS of that isolate runs, and reports added code before it can run.
//!
//! Memory is bounded: dead entries are kept (for older samples) up to
//! `max_dead` and then dropped oldest first; live entries and distinct names
//! have caps too, past which events are counted and dropped.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;

/// What kind of code an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeKind {
    /// A BytecodeArray (interpreted function); addresses inside it are
    /// what `GetStackSample` reports for interpreted frames.
    Bytecode,
    /// Machine code: baseline (Sparkplug), Maglev, TurboFan, stubs,
    /// builtins, regexps.
    Jit,
    Wasm,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    len: u64,
    name: u32,
    kind: CodeKind,
    /// Registry serial of the isolate that reported it (0: unknown).
    isolate: u32,
    born: u64,
    died: u64,
}

const ALIVE: u64 = u64::MAX;

/// Limits on what the map keeps.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_live: usize,
    pub max_dead: usize,
    pub max_names: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // About 200 bytes an entry in practice (B-trees, queues, malloc):
        // measured 50 MB of RSS for 226 000 live entries. So at most ~50 MB
        // of live entries and ~25 MB of dead ones. A real app's code is a
        // few tens of thousands of entries; the caps only bind under heavy
        // churn (a GC-heavy eval stress passes 500 000 live entries in two
        // minutes).
        Limits { max_live: 1 << 18, max_dead: 1 << 17, max_names: 1 << 20 }
    }
}

/// Event counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapStats {
    pub added: u64,
    pub moved: u64,
    pub removed: u64,
    /// Moves or removals of an address with no live entry.
    pub unknown: u64,
    /// Live entries ended by a later overlapping addition.
    pub evicted: u64,
    /// Dead entries dropped to stay within `max_dead`.
    pub forgotten: u64,
    /// Events dropped because a cap was reached (names).
    pub dropped: u64,
    /// Live entries ended because the live cap was reached (oldest first).
    pub aged_out: u64,
    /// Additions of code that was already there (re-enumeration).
    pub repeated: u64,
    pub live: u64,
    pub dead: u64,
    pub names: u64,
}

/// The answer to a lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit<'a> {
    /// The name as V8 reported it, e.g. `JS:*fib /app/fib.js:3:13`.
    pub raw: &'a str,
    pub start: u64,
    pub len: u64,
    pub kind: CodeKind,
    pub isolate: u32,
    /// True if the entry was alive at the requested time; false if it is
    /// the nearest in time (a sample older than the map, for instance).
    pub exact: bool,
}

/// An isolate's entries, live and (until dropped) ended, by (start, seq).
#[derive(Debug, Default)]
struct IsolateEntries {
    keys: Vec<(u64, u64)>,
    live: usize,
}

#[derive(Debug)]
pub struct CodeMap {
    names: Vec<Box<str>>,
    name_ids: FxHashMap<Box<str>, u32>,
    /// Every entry, live and dead, by (start, sequence).
    entries: BTreeMap<(u64, u64), Entry>,
    /// Live entries by start, each with its sequence number and a copy of
    /// its entry (adding code and looking up live code then need no second
    /// search in `entries`): they never overlap.
    live: BTreeMap<u64, (u64, Entry)>,
    /// The entries of each isolate but 0 (shared code), for retiring an
    /// isolate without a walk of every live entry.
    by_isolate: FxHashMap<u32, IsolateEntries>,
    /// Dead entries in the order they died.
    dead: VecDeque<(u64, u64)>,
    max_len: u64,
    seq: u64,
    limits: Limits,
    stats: MapStats,
    /// Changes whenever an entry is inserted (process-unique, so two maps
    /// never share a value): until it changes, an address that no entry
    /// covers stays uncovered, whatever the time asked about.
    generation: u64,
}

fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Default for CodeMap {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl CodeMap {
    pub fn new(limits: Limits) -> Self {
        CodeMap {
            names: Vec::new(),
            name_ids: FxHashMap::default(),
            entries: BTreeMap::new(),
            live: BTreeMap::new(),
            by_isolate: FxHashMap::default(),
            dead: VecDeque::new(),
            max_len: 0,
            seq: 0,
            limits,
            stats: MapStats::default(),
            generation: next_generation(),
        }
    }

    /// See the field: a cache of addresses `lookup` found no entry for is
    /// valid while this stays the same.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn stats(&self) -> MapStats {
        MapStats {
            live: self.live.len() as u64,
            dead: self.dead.len() as u64,
            names: self.names.len() as u64,
            ..self.stats
        }
    }

    fn intern(&mut self, name: &str) -> Option<u32> {
        if let Some(&id) = self.name_ids.get(name) {
            return Some(id);
        }
        if self.names.len() >= self.limits.max_names {
            return None;
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.name_ids.insert(name.into(), id);
        Some(id)
    }

    /// Ends the live entry keyed `(start, seq)` at time `t`.
    fn kill(&mut self, start: u64, seq: u64, t: u64) {
        self.live.remove(&start);
        if let Some(e) = self.entries.get_mut(&(start, seq)) {
            e.died = t.max(e.born);
            if let Some(mine) = self.by_isolate.get_mut(&e.isolate) {
                mine.live = mine.live.saturating_sub(1);
            }
        }
        self.dead.push_back((start, seq));
        while self.dead.len() > self.limits.max_dead {
            if let Some(key) = self.dead.pop_front() {
                self.entries.remove(&key);
                self.stats.forgotten += 1;
            }
        }
    }

    /// The sequence number of the live entry starting at `start`.
    fn live_seq(&self, start: u64) -> Option<u64> {
        self.live.get(&start).map(|&(seq, _)| seq)
    }

    /// Live entries overlapping `[start, end)`, as (start, seq, entry), in
    /// address order. One search: live entries do not overlap, so walking
    /// down from `end`, every entry starting at or above `start` overlaps,
    /// and of those below it only the first may reach in.
    fn live_overlapping(&self, start: u64, end: u64) -> Vec<(u64, u64, Entry)> {
        let mut out = Vec::new();
        for (&s, &(seq, e)) in self.live.range(..end).rev() {
            if s >= start || s.saturating_add(e.len) > start {
                out.push((s, seq, e));
            }
            if s <= start {
                break;
            }
        }
        out.reverse();
        out
    }

    fn insert(&mut self, start: u64, len: u64, kind: CodeKind, name: u32, isolate: u32, t: u64) {
        let end = start.saturating_add(len.max(1));
        let overlapping = self.live_overlapping(start, end);
        self.insert_over(&overlapping, start, len, kind, name, isolate, t);
    }

    /// Inserts an entry, ending the live ones it overlaps (`overlapping`,
    /// from [`Self::live_overlapping`]).
    #[allow(clippy::too_many_arguments)]
    fn insert_over(
        &mut self,
        overlapping: &[(u64, u64, Entry)],
        start: u64,
        len: u64,
        kind: CodeKind,
        name: u32,
        isolate: u32,
        t: u64,
    ) {
        for &(s, seq, _) in overlapping {
            self.kill(s, seq, t);
            self.stats.evicted += 1;
        }
        self.seq += 1;
        self.generation = next_generation();
        let seq = self.seq;
        let entry = Entry { len: len.max(1), name, kind, isolate, born: t, died: ALIVE };
        self.entries.insert((start, seq), entry);
        self.live.insert(start, (seq, entry));
        if isolate != 0 {
            let mine = self.by_isolate.entry(isolate).or_default();
            mine.keys.push((start, seq));
            mine.live += 1;
            // Keys of entries since ended are dropped once they are half.
            if mine.keys.len() > 2 * mine.live + 64 {
                let live = &self.live;
                mine.keys.retain(|(s, q)| live.get(s).map(|l| l.0) == Some(*q));
            }
        }
        self.max_len = self.max_len.max(len.max(1));
    }

    /// `CODE_ADDED`: `[start, start + len)` holds `name` from time `t`.
    pub fn add(&mut self, start: u64, len: u64, kind: CodeKind, name: &str, isolate: u32, t: u64) {
        if start == 0 {
            self.stats.dropped += 1;
            return;
        }
        if self.live.len() >= self.limits.max_live {
            self.age_out(t);
        }
        let Some(name) = self.intern(name) else {
            self.stats.dropped += 1;
            return;
        };
        self.stats.added += 1;
        let overlapping = self.live_overlapping(start, start.saturating_add(len.max(1)));
        // The same code reported again (each install re-enumerates existing
        // code): keep the entry, with its older birth time.
        if let [(s, _, e)] = overlapping[..] {
            if s == start && e.len == len.max(1) && e.name == name && e.kind == kind && e.isolate == isolate {
                self.stats.repeated += 1;
                return;
            }
        }
        self.insert_over(&overlapping, start, len, kind, name, isolate, t);
    }

    /// Makes room at the live cap. V8 does not report code that dies, so
    /// entries for dead code stay live until new code overlaps them; under
    /// heavy churn (eval, short-lived functions) they pile up. The oldest
    /// eighth is ended: such an entry still names its samples (a lookup
    /// falls back to the nearest entry in time) until it is forgotten.
    /// Oldest means first added: the smallest sequence numbers. Found by a
    /// pass over the live entries (rare: once per eighth of the cap), so
    /// adding code keeps no queue of its own.
    fn age_out(&mut self, t: u64) {
        let n = (self.live.len() / 8).max(1);
        let mut oldest: Vec<(u64, u64)> = self.live.iter().map(|(&start, &(seq, _))| (seq, start)).collect();
        if n < oldest.len() {
            oldest.select_nth_unstable(n);
            oldest.truncate(n);
        }
        oldest.sort_unstable();
        for (seq, start) in oldest {
            self.kill(start, seq, t);
            self.stats.aged_out += 1;
        }
    }

    /// `CODE_MOVED`: the code at `from` now lives at `to` (with length
    /// `len`, if V8 reported one).
    pub fn move_code(&mut self, from: u64, to: u64, len: Option<u64>, t: u64) {
        let Some(seq) = self.live_seq(from) else {
            self.stats.unknown += 1;
            return;
        };
        let Some(e) = self.entries.get(&(from, seq)).copied() else {
            self.stats.unknown += 1;
            return;
        };
        self.stats.moved += 1;
        self.kill(from, seq, t);
        if to != 0 {
            let len = len.filter(|&l| l > 0).unwrap_or(e.len);
            self.insert(to, len, e.kind, e.name, e.isolate, t);
        }
    }

    /// `CODE_REMOVED`: the code at `start` is gone.
    pub fn remove(&mut self, start: u64, t: u64) {
        match self.live_seq(start) {
            Some(seq) => {
                self.stats.removed += 1;
                self.kill(start, seq, t);
            }
            None => self.stats.unknown += 1,
        }
    }

    /// Ends every live entry of an isolate (it was disposed of: its
    /// addresses may be reused by another isolate). Entries of isolate 0
    /// (shared code, e.g. embedded builtins) are never retired.
    pub fn retire_isolate(&mut self, isolate: u32, t: u64) {
        if isolate == 0 {
            return;
        }
        let Some(mine) = self.by_isolate.remove(&isolate) else { return };
        for (s, seq) in mine.keys {
            if self.live_seq(s) == Some(seq) {
                self.kill(s, seq, t);
            }
        }
    }

    /// Forgets everything (e.g. between profiles, when no sample can refer
    /// to the old entries).
    pub fn clear_dead(&mut self) {
        while let Some(key) = self.dead.pop_front() {
            self.entries.remove(&key);
        }
    }

    fn hit(&self, start: u64, e: &Entry, exact: bool) -> Hit<'_> {
        Hit {
            raw: self.names.get(e.name as usize).map_or("", |s| s),
            start,
            len: e.len,
            kind: e.kind,
            isolate: e.isolate,
            exact,
        }
    }

    /// Every entry (live or dead) that covers `addr`, as (born, died,
    /// raw name); `died` is `u64::MAX` for a live entry.
    pub fn covering(&self, addr: u64) -> Vec<(u64, u64, &str)> {
        let mut out = self.covering_exactly(addr);
        // The bytecode whose function-entry position `addr` may be.
        if let Some(first) = self.at_function_entry(addr) {
            out.extend(
                self.entries
                    .range((first, 0)..=(first, u64::MAX))
                    .filter(|(_, e)| e.kind == CodeKind::Bytecode)
                    .map(|(_, e)| (e.born, e.died, self.names.get(e.name as usize).map_or("", |n| n))),
            );
        }
        out
    }

    fn covering_exactly(&self, addr: u64) -> Vec<(u64, u64, &str)> {
        let mut out = Vec::new();
        for (&(s, _), e) in self.entries.range(..=(addr, u64::MAX)).rev() {
            if addr - s >= self.max_len {
                break;
            }
            if addr - s < e.len {
                out.push((e.born, e.died, self.names.get(e.name as usize).map_or("", |n| n)));
            }
        }
        out
    }

    /// True if entries for more than one code object (start, length, kind
    /// and name) covered `addr` at some time in `[from, to]`: what was
    /// inlined at `addr` then depends on when.
    pub fn several_objects_during(&self, addr: u64, from: u64, to: u64) -> bool {
        let mut first: Option<(u64, u64, CodeKind, u32)> = None;
        for (&(s, _), e) in self.entries.range(..=(addr, u64::MAX)).rev() {
            if addr - s >= self.max_len {
                break;
            }
            if addr - s >= e.len || e.born > to || e.died <= from {
                continue;
            }
            let object = (s, e.len, e.kind, e.name);
            match first {
                None => first = Some(object),
                Some(f) if f != object => return true,
                Some(_) => {}
            }
        }
        false
    }

    /// An interpreted frame stopped at its function's entry (the stack
    /// check of V8's interpreter entry, where interrupts are served) has
    /// V8's entry offset, -1: its bytecode address is one byte before the
    /// first bytecode. Returns that first bytecode's address if some
    /// bytecode starts right after `addr`.
    fn at_function_entry(&self, addr: u64) -> Option<u64> {
        let next = addr.checked_add(1)?;
        self.entries.range((next, 0)..=(next, u64::MAX)).any(|(_, e)| e.kind == CodeKind::Bytecode).then_some(next)
    }

    /// The live entries that start in `[start, end)`, as (start, len, raw
    /// name), in address order.
    pub fn live_in(&self, start: u64, end: u64) -> Vec<(u64, u64, &str)> {
        self.live
            .range(start..end)
            .map(|(&s, &(_, e))| (s, e.len, self.names.get(e.name as usize).map_or("", |n| n)))
            .collect()
    }

    /// The code that covered `addr` at time `t`. If no entry was alive
    /// then, the entry covering `addr` nearest in time, marked not exact.
    /// An interpreted frame at its function's entry (one byte before the
    /// first bytecode, see `at_function_entry`) gets its bytecode's entry,
    /// which then starts after `addr`.
    pub fn lookup(&self, addr: u64, t: u64) -> Option<Hit<'_>> {
        let hit = self.lookup_exactly(addr, t);
        if hit.as_ref().is_some_and(|h| h.exact) {
            return hit;
        }
        // Code alive at `t` that starts right after `addr` wins over none,
        // or over code that covered `addr` at another time (a bytecode
        // array the GC moved away, whose bytes the new one now holds).
        let entry = self
            .at_function_entry(addr)
            .and_then(|first| self.lookup_exactly(first, t))
            .filter(|h| h.kind == CodeKind::Bytecode && h.start == addr + 1);
        match (hit, entry) {
            (_, Some(e)) if e.exact => Some(e),
            (Some(h), _) => Some(h),
            (None, e) => e,
        }
    }

    fn lookup_exactly(&self, addr: u64, t: u64) -> Option<Hit<'_>> {
        // Fast path: the live entry, if it was already born.
        if let Some((&s, &(_, e))) = self.live.range(..=addr).next_back() {
            if addr - s < e.len && e.born <= t {
                return Some(self.hit(s, &e, true));
            }
        }
        let mut best: Option<(u64, u64, &Entry)> = None; // (distance, start, entry)
        for (&(s, _), e) in self.entries.range(..=(addr, u64::MAX)).rev() {
            if addr - s >= self.max_len {
                break; // nothing earlier can reach `addr`
            }
            if addr - s >= e.len {
                continue;
            }
            let distance = if t < e.born {
                e.born - t
            } else if t >= e.died {
                t - e.died + 1
            } else {
                0
            };
            if distance == 0 {
                return Some(self.hit(s, e, true));
            }
            if best.is_none_or(|(d, _, _)| distance < d) {
                best = Some((distance, s, e));
            }
        }
        best.map(|(_, s, e)| self.hit(s, e, false))
    }
}

/// A code entry's name, split up for display.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsName {
    /// `fib (/app/fib.js:3:13)` for JavaScript; V8's text otherwise.
    pub display: String,
    /// The function's name (`(anonymous)` if it has none), for JS.
    pub function: String,
    /// `url:line[:column]`, for JS.
    pub location: String,
    /// V8's tier mark: `~` interpreted (or baseline in old V8), `^`
    /// Sparkplug, `+` Maglev, `*` TurboFan; `None` if absent.
    pub tier: Option<char>,
    /// True for JavaScript functions (not builtins, stubs, regexps...).
    pub is_js: bool,
}

/// `parse_js_name(raw).is_js` without building the name: the sampler
/// classifies every frame of every sample with it.
pub fn is_js_name(raw: &str) -> bool {
    raw.split_once(':').is_some_and(|(kind, _)| is_js_kind(kind))
}

/// The code-event kinds of JavaScript code (V8 10 to 14).
fn is_js_kind(kind: &str) -> bool {
    matches!(kind, "JS" | "LazyCompile" | "Function" | "Script" | "Eval")
}

/// Splits a JavaScript code-event name into its kind (`JS`, `LazyCompile`,
/// ...), its marks and the rest (`name url:line:col`, as V8's log writes
/// it); None for non-JS code.
pub fn split_js_name(raw: &str) -> Option<(&str, &str, &str)> {
    let (kind, rest) = raw.split_once(':').filter(|(kind, _)| is_js_kind(kind))?;
    // The mark: an optional `o` (OSR code, V8 14) when a tier symbol follows,
    // then tier symbols and `'` (context-specialized). No mark at all for
    // functions whose optimization is disabled.
    const MARKS: [char; 5] = ['*', '~', '^', '+', '\''];
    let rest = match rest.strip_prefix('o') {
        Some(after) if after.starts_with(MARKS) => after,
        _ => rest,
    };
    let name = rest.trim_start_matches(MARKS);
    Some((kind, &rest[..rest.len() - name.len()], name))
}

/// `s` without its trailing `:<digits>` (a line or a column), if it has one.
pub fn strip_number(s: &str) -> Option<&str> {
    let (rest, n) = s.rsplit_once(':')?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(rest)
}

/// The location (`url:line:col`) of a JavaScript code-event name, as
/// [`parse_js_name`] finds it, without allocating; None for non-JS code.
pub fn js_location(raw: &str) -> Option<&str> {
    split_js_name(raw).map(|(_, _, rest)| split_function_and_location(rest).1)
}

/// The function and location of a JS name's `name url:line:col` part.
/// WebAssembly code (a function or a wrapper) has no location, and its
/// name may hold colons (`wasm-to-js:i:i-cb-0-turbofan`).
fn split_function_and_location(rest: &str) -> (&str, &str) {
    let wasm = without_wasm_tier(rest);
    if wasm.len() != rest.len() {
        return (wasm.trim(), "");
    }
    match split_function_and_url(rest) {
        Some((n, loc)) => (n.trim(), loc.trim()),
        None if looks_like_location(rest) => ("", rest.trim()),
        None => (rest.trim(), ""),
    }
}

/// Splits V8's code-event name: `JS:<tier><name> <url>:<line>:<column>`
/// (V8 11+), `Function:`/`LazyCompile:<tier><name> <url>:<line>:<column>`
/// (V8 10), `Script:~ <url>` for top-level code, `Eval:`, or anything else
/// for non-JS code (kept as is).
pub fn parse_js_name(raw: &str) -> JsName {
    let other = |raw: &str| JsName {
        display: without_wasm_tier(raw).to_string(),
        function: String::new(),
        location: String::new(),
        tier: None,
        is_js: false,
    };
    let Some((_, marks, rest)) = split_js_name(raw) else { return other(raw) };
    let tier = marks.chars().find(|c| *c != '\'');
    let (function, location) = split_function_and_location(rest);
    // A script's top level (`Script:` events) is `(anonymous)` too, as in
    // V8's own profiles: an ES module's body resumed after a top-level
    // await is a `JS:` function at the same place, and both are one row.
    let function = if function.is_empty() { "(anonymous)".to_string() } else { function.to_string() };
    let display = if location.is_empty() { function.clone() } else { format!("{function} ({location})") };
    JsName { display, function, location: location.to_string(), tier, is_js: true }
}

/// A WebAssembly function's name without the index and compiler tier V8
/// appends (`wasm-function[717]-717-liftoff`, `…-717-turbofan`), so a
/// function is one row whichever tier ran it, as in `--cpu-prof`. Code
/// shared by a module (an import wrapper) has `<anonymous>` for an index,
/// and a wrapper no compiler tier (`wasm-to-js-<anonymous>-none`).
fn without_wasm_tier(raw: &str) -> &str {
    const TIERS: [&str; 5] = ["-liftoff", "-turbofan", "-liftoff-debug", "-turbofan-debug", "-none"];
    let Some(rest) = TIERS.iter().find_map(|t| raw.strip_suffix(t)) else { return raw };
    let is_index = |i: &str| i == "<anonymous>" || (!i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()));
    match rest.rsplit_once('-') {
        Some((name, index)) if !name.is_empty() && is_index(index) => name,
        _ => raw,
    }
}

/// V8 writes `name url:line:col`. Both can hold spaces: a name (`get
/// size`, `get [Symbol.iterator]`) and a url (`[worker eval]`, a path
/// under `/Applications/My App.app`). The url starts at the first space
/// followed by what only a url starts with: `/`, a bracketed name followed
/// by its line (`[eval]:1:1`), `<` (`<anonymous>`), or a scheme or file
/// name running to a colon (`node:internal/x`, `file:///a`, `C:\\a`,
/// `b.js:1`). If none does, the first space ends the name, after a `get ` or
/// `set ` prefix.
fn split_function_and_url(rest: &str) -> Option<(&str, &str)> {
    let spaces = || rest.match_indices(' ').map(|(i, _)| i);
    let at = spaces().find(|&i| url_start(&rest[i + 1..])).or_else(|| {
        let skip = if rest.starts_with("get ") || rest.starts_with("set ") { 4 } else { 0 };
        spaces().find(|&i| i >= skip)
    })?;
    Some((&rest[..at], &rest[at + 1..]))
}

/// Whether `s` starts like a script url (see [`split_function_and_url`]).
fn url_start(s: &str) -> bool {
    if s.starts_with('/') || s.starts_with("<anonymous>") {
        return true;
    }
    if let Some(inner) = s.strip_prefix('[') {
        // `[worker eval]:1:19`, not `[Symbol.iterator] /a.js:1:1`.
        return inner.find(']').is_some_and(|j| matches!(inner[j + 1..].chars().next(), None | Some(':')));
    }
    let word = s.find(|c: char| !(c.is_ascii_alphanumeric() || "+-._".contains(c))).unwrap_or(s.len());
    word > 0 && s.as_bytes()[0].is_ascii_alphabetic() && s[word..].starts_with(':')
}

fn looks_like_location(s: &str) -> bool {
    s.contains('/') || s.contains(':') || s.ends_with(".js") || s.ends_with(".mjs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webassembly_functions_are_one_row_whatever_the_tier() {
        for raw in [
            "wasm-function[717]-717-liftoff",
            "JS:wasm-function[717]-717-turbofan",
            "Function:wasm-function[717]-717-liftoff",
        ] {
            assert_eq!(parse_js_name(raw).display, "wasm-function[717]", "{raw}");
        }
        // JavaScript with a location keeps its name whatever it ends with.
        assert_eq!(parse_js_name("JS:*a-1-liftoff /app/a.js:1:1").function, "a-1-liftoff");
        assert_eq!(parse_js_name("fill_block-12-turbofan").display, "fill_block");
        // Not a tier after an index: left as it is.
        assert_eq!(parse_js_name("my-liftoff").display, "my-liftoff");
        assert_eq!(parse_js_name("-3-liftoff").display, "-3-liftoff");
        // Wrappers between WebAssembly and JavaScript, as V8 10-14 name them:
        // the signature and import name hold colons, but no location.
        for (raw, display) in [
            ("JS:wasm-to-js:i:i-cb-0-turbofan", "wasm-to-js:i:i-cb"),
            ("Function:wasm-to-js:ii:i-0-turbofan", "wasm-to-js:ii:i"),
            ("JS:wasm-to-js-<anonymous>-none", "wasm-to-js"),
            // Names from the name section of Rust and C++ modules.
            (
                "JS:<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop-45-turbofan",
                "<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop",
            ),
            (
                "JS:std::string::append(char const*, unsigned long)-77-liftoff",
                "std::string::append(char const*, unsigned long)",
            ),
        ] {
            let js = parse_js_name(raw);
            assert_eq!((js.display.as_str(), js.location.as_str()), (display, ""), "{raw}");
            assert_eq!(js_location(raw), Some(""), "{raw}");
        }
    }

    #[test]
    fn is_js_name_agrees_with_the_parser() {
        for raw in [
            "JS:*fib /app/fib.js:3:13",
            "JS:~ node:internal/main/eval_string:1:1",
            "LazyCompile:*fib /app/fib.js:306",
            "Function:~a b.js:1",
            "Script:~ /x.js",
            "Eval:~ ",
            "JS:o*hot /a.js:1:1",
            "Builtin:InterpreterEntryTrampoline",
            "BytecodeHandler:Ldar",
            "RegExp:a+b",
            "Stub:CEntry",
            "no colon",
            "",
        ] {
            assert_eq!(is_js_name(raw), parse_js_name(raw).is_js, "{raw}");
        }
    }
    use proptest::prelude::*;

    const FIB: &str = "JS:*fib /app/fib.js:3:13";

    #[test]
    fn names_with_bracketed_urls() {
        let n = parse_js_name("JS:*hot [worker eval]:1:19");
        assert_eq!((n.function.as_str(), n.location.as_str()), ("hot", "[worker eval]:1:19"));
        assert_eq!(n.display, "hot ([worker eval]:1:19)");
        let n = parse_js_name("JS:~get size /app/a.js:2:3");
        assert_eq!((n.function.as_str(), n.location.as_str()), ("get size", "/app/a.js:2:3"));
    }

    #[test]
    fn names_and_urls_with_spaces() {
        let cases = [
            ("JS:*hotLoop /tmp/my project/app.js:1:17", "hotLoop", "/tmp/my project/app.js:1:17"),
            ("JS:~get size /Applications/My App.app/main.js:2:3", "get size", "/Applications/My App.app/main.js:2:3"),
            ("JS:~get [Symbol.iterator] /app/a.js:4:5", "get [Symbol.iterator]", "/app/a.js:4:5"),
            ("JS:*[Symbol.iterator] /app/a.js:4:5", "[Symbol.iterator]", "/app/a.js:4:5"),
            ("JS:~set value file:///C:/My Files/a.js:1:2", "set value", "file:///C:/My Files/a.js:1:2"),
            ("JS:~main node:internal/modules/run_main:1:1", "main", "node:internal/modules/run_main:1:1"),
            ("JS:~f C:\\My App\\a.js:3:4", "f", "C:\\My App\\a.js:3:4"),
            ("JS:~f b.js:3:4", "f", "b.js:3:4"),
            ("JS:~f evalmachine.<anonymous>:1:1", "f", "evalmachine.<anonymous>:1:1"),
            ("JS:~f <anonymous>:1:1", "f", "<anonymous>:1:1"),
            ("JS:~hot [worker eval]:1:19", "hot", "[worker eval]:1:19"),
            ("JS:~f my dir/a.js:1:1", "f", "my dir/a.js:1:1"),
            ("JS:~get x my dir/a.js:1:1", "get x", "my dir/a.js:1:1"),
            ("JS:~ /my dir/x.js:1:1", "(anonymous)", "/my dir/x.js:1:1"),
            ("JS:~<instance_members_initializer> /a b/x.js:1:1", "<instance_members_initializer>", "/a b/x.js:1:1"),
            ("JS:~get <computed> /a.js:1:1", "get <computed>", "/a.js:1:1"),
            ("Script:~ /my dir/main.js", "(anonymous)", "/my dir/main.js"),
        ];
        for (raw, function, location) in cases {
            let n = parse_js_name(raw);
            assert_eq!((n.function.as_str(), n.location.as_str()), (function, location), "{raw}");
        }
    }

    #[test]
    fn add_lookup_and_overlap_eviction() {
        let mut m = CodeMap::default();
        m.add(0x1000, 0x100, CodeKind::Jit, FIB, 1, 10);
        assert_eq!(m.lookup(0x1000, 20).unwrap().raw, FIB);
        assert_eq!(m.lookup(0x10ff, 20).unwrap().raw, FIB);
        assert!(m.lookup(0x1100, 20).is_none());
        assert!(m.lookup(0xfff, 20).is_none());
        // Overlapping code added later evicts the old entry for later times
        // but not for earlier ones.
        m.add(0x1080, 0x100, CodeKind::Jit, "JS:~other /a.js:1:1", 1, 30);
        assert_eq!(m.lookup(0x1010, 40), Some(Hit { exact: false, ..m.lookup(0x1010, 20).unwrap() }));
        assert_eq!(m.lookup(0x1010, 20).unwrap().raw, FIB);
        assert_eq!(m.lookup(0x10a0, 20).unwrap().raw, FIB);
        assert_eq!(m.lookup(0x10a0, 40).unwrap().raw, "JS:~other /a.js:1:1");
        let s = m.stats();
        assert_eq!((s.added, s.evicted, s.live, s.dead, s.names), (2, 1, 1, 1, 2));
    }

    #[test]
    fn moves_are_followed_in_time() {
        let mut m = CodeMap::default();
        m.add(0x1000, 0x40, CodeKind::Bytecode, "JS:~f /f.js:1:1", 1, 10);
        m.move_code(0x1000, 0x9000, Some(0x40), 50);
        // Before the move the old address names it; after, the new one.
        assert_eq!(m.lookup(0x1010, 20).unwrap().raw, "JS:~f /f.js:1:1");
        assert!(m.lookup(0x1010, 20).unwrap().exact);
        assert!(m.lookup(0x9010, 20).is_some_and(|h| !h.exact));
        assert!(m.lookup(0x9010, 60).is_some_and(|h| h.exact && h.kind == CodeKind::Bytecode));
        assert!(m.lookup(0x1010, 60).is_some_and(|h| !h.exact));
        // A later object at the old address takes it over.
        m.add(0x1000, 0x20, CodeKind::Jit, "JS:*g /g.js:2:2", 1, 70);
        assert_eq!(m.lookup(0x1010, 80).unwrap().raw, "JS:*g /g.js:2:2");
        assert_eq!(m.lookup(0x1010, 20).unwrap().raw, "JS:~f /f.js:1:1");
        // Moving or removing what is not there is counted, not an error.
        m.move_code(0x5000, 0x6000, None, 90);
        m.remove(0x5000, 90);
        assert_eq!(m.stats().unknown, 2);
        m.remove(0x1000, 100);
        assert!(m.lookup(0x1010, 110).is_some_and(|h| !h.exact));
        assert_eq!(m.stats().removed, 1);
        // A move with no length keeps the old one.
        m.move_code(0x9000, 0xa000, None, 120);
        assert_eq!(m.lookup(0xa03f, 130).unwrap().len, 0x40);
    }

    #[test]
    fn an_interpreted_frame_at_its_function_entry_is_named() {
        // V8's entry offset (-1) puts the frame one byte before the first
        // bytecode; for machine code the byte before is no such position.
        let mut m = CodeMap::default();
        m.add(0x1000, 0x40, CodeKind::Bytecode, "JS:~f /f.js:1:1", 1, 10);
        m.add(0x2000, 0x40, CodeKind::Jit, "JS:*g /g.js:1:1", 1, 10);
        assert_eq!(m.lookup(0xfff, 20).map(|h| (h.raw, h.start)), Some(("JS:~f /f.js:1:1", 0x1000)));
        assert_eq!(m.covering(0xfff).len(), 1);
        assert!(m.lookup(0x1fff, 20).is_none() && m.covering(0x1fff).is_empty());
        assert!(m.lookup(0xffe, 20).is_none());
        // A bytecode array alive then wins over one that covered the
        // address before it moved away.
        let mut moved = CodeMap::default();
        moved.add(0xf00, 0x200, CodeKind::Bytecode, "JS:~old /o.js:1:1", 1, 0);
        moved.move_code(0xf00, 0x5000, Some(0x200), 5);
        moved.add(0x1000, 0x40, CodeKind::Bytecode, "JS:~f /f.js:1:1", 1, 10);
        assert_eq!(moved.lookup(0xfff, 20).map(|h| (h.raw, h.exact)), Some(("JS:~f /f.js:1:1", true)));
        assert_eq!(moved.lookup(0xfff, 2).map(|h| h.raw), Some("JS:~old /o.js:1:1"));
        assert_eq!(moved.covering(0xfff).len(), 2);
        // An address some code covers is that code's, whatever starts next.
        m.add(0x3000, 0x10, CodeKind::Jit, "JS:*h /h.js:1:1", 1, 10);
        m.add(0x3010, 0x40, CodeKind::Bytecode, "JS:~i /i.js:1:1", 1, 10);
        assert_eq!(m.lookup(0x300f, 20).map(|h| h.raw), Some("JS:*h /h.js:1:1"));
        // Both are candidates over time; the lookup at the sample's time decides.
        assert_eq!(m.covering(0x300f).len(), 2);
    }

    #[test]
    fn the_same_code_reported_again_keeps_its_entry() {
        let mut m = CodeMap::default();
        m.add(0x1000, 0x40, CodeKind::Jit, FIB, 1, 10);
        m.add(0x1000, 0x40, CodeKind::Jit, FIB, 1, 50);
        let s = m.stats();
        assert_eq!((s.live, s.dead, s.repeated), (1, 0, 1));
        // Still named for a sample taken between the two reports.
        assert!(m.lookup(0x1010, 20).is_some_and(|h| h.exact));
        // A different name at the same place is new code.
        m.add(0x1000, 0x40, CodeKind::Jit, "JS:*g /g.js:1:1", 1, 60);
        assert_eq!(m.stats().dead, 1);
    }

    #[test]
    fn retire_isolate_ends_only_its_entries() {
        let mut m = CodeMap::default();
        m.add(0x1000, 0x10, CodeKind::Jit, "JS:*a /a.js:1:1", 1, 10);
        m.add(0x2000, 0x10, CodeKind::Jit, "JS:*b /b.js:1:1", 2, 10);
        m.add(0x3000, 0x10, CodeKind::Jit, "Builtin:Shared", 0, 10);
        // Isolate 1's code moved by its GC, and code of isolate 1 replaced
        // by isolate 2's at the same place.
        m.add(0x4000, 0x10, CodeKind::Bytecode, "JS:~c /c.js:1:1", 1, 10);
        m.move_code(0x4000, 0x5000, None, 12);
        m.add(0x6000, 0x10, CodeKind::Jit, "JS:*d /d.js:1:1", 1, 10);
        m.add(0x6000, 0x10, CodeKind::Jit, "JS:*e /e.js:1:1", 2, 14);
        m.retire_isolate(1, 20);
        m.retire_isolate(0, 20);
        assert!(m.lookup(0x3000, 30).is_some_and(|h| h.exact));
        assert!(m.lookup(0x1000, 30).is_some_and(|h| !h.exact));
        assert!(m.lookup(0x1000, 15).is_some_and(|h| h.exact && h.isolate == 1));
        assert!(m.lookup(0x2000, 30).is_some_and(|h| h.exact && h.isolate == 2));
        assert!(m.lookup(0x5000, 30).is_some_and(|h| !h.exact));
        assert!(m.lookup(0x6000, 30).is_some_and(|h| h.exact && h.isolate == 2));
        assert!(!m.by_isolate.contains_key(&1));
        assert_eq!(m.by_isolate[&2].live, 2);
    }

    #[test]
    fn bookkeeping_stays_proportional_to_live_entries() {
        let mut m = CodeMap::default();
        for i in 0..100_000u64 {
            // One entry moved around forever: one live entry.
            if i == 0 {
                m.add(0x1000, 0x10, CodeKind::Bytecode, "JS:~f x:1:1", 1, 0);
            } else {
                m.move_code(0x1000 + (i - 1) % 2 * 0x1000, 0x1000 + i % 2 * 0x1000, None, i);
            }
        }
        assert_eq!(m.stats().live, 1);
        assert_eq!(m.by_isolate[&1].live, 1);
        assert!(m.by_isolate[&1].keys.len() <= 2 + 64 + 1, "{}", m.by_isolate[&1].keys.len());
        assert!(m.dead.len() <= Limits::default().max_dead);
    }

    #[test]
    fn memory_is_bounded() {
        let mut m = CodeMap::new(Limits { max_live: 4, max_dead: 3, max_names: 2 });
        for i in 0..10u64 {
            // Same address each time: each add evicts the previous one.
            m.add(0x1000, 0x10, CodeKind::Jit, if i % 2 == 0 { "JS:*a x:1:1" } else { "JS:*b x:1:1" }, 1, i);
        }
        let s = m.stats();
        assert_eq!((s.live, s.dead, s.forgotten, s.names), (1, 3, 6, 2));
        assert_eq!(m.entries.len(), 4);
        m.add(0x2000, 0x10, CodeKind::Jit, "JS:*c x:1:1", 1, 20);
        assert_eq!(m.stats().dropped, 1, "third name refused");
        for i in 0..5u64 {
            m.add(0x3000 + i * 0x100, 0x10, CodeKind::Jit, "JS:*a x:1:1", 1, 30 + i);
        }
        // The live cap ends the oldest entries first (one at a time for a
        // cap of 4): 0x1000, then 0x3000.
        let s = m.stats();
        assert_eq!(s.live, 4);
        assert_eq!(s.aged_out, 2);
        assert!(m.lookup(0x3400, 40).is_some_and(|h| h.exact), "newest kept");
        assert!(m.lookup(0x1000, 40).is_some_and(|h| !h.exact), "oldest aged out, still named");
        m.clear_dead();
        assert_eq!(m.stats().dead, 0);
        assert!(m.lookup(0x3000, 40).is_none(), "forgotten");
        assert!(m.lookup(0x3400, 40).is_some());
    }

    #[test]
    fn names_parse_for_every_version() {
        let n = parse_js_name("JS:*fib /app/fib.js:3:13");
        assert_eq!((n.display.as_str(), n.tier, n.is_js), ("fib (/app/fib.js:3:13)", Some('*'), true));
        let n = parse_js_name("JS:~ /app/x.js:1:1");
        assert_eq!(n.display, "(anonymous) (/app/x.js:1:1)");
        assert_eq!(n.tier, Some('~'));
        let n = parse_js_name("LazyCompile:~fib /app/fib.js:3:13");
        assert_eq!(n.display, "fib (/app/fib.js:3:13)");
        let n = parse_js_name("JS:^get value /app/x.js:9:3");
        assert_eq!((n.function.as_str(), n.location.as_str(), n.tier), ("get value", "/app/x.js:9:3", Some('^')));
        let n = parse_js_name("Script:~ /app/main.js");
        assert_eq!(n.display, "(anonymous) (/app/main.js)", "as V8's profiles name a script's top level");
        let n = parse_js_name("JS:+Foo.bar node:internal/x:10:5");
        assert_eq!((n.display.as_str(), n.tier), ("Foo.bar (node:internal/x:10:5)", Some('+')));
        let n = parse_js_name("JS:o+f /app/x.js:4:11");
        assert_eq!((n.display.as_str(), n.tier), ("f (/app/x.js:4:11)", Some('+')));
        let n = parse_js_name("JS:'*g /app/x.js:4:11");
        assert_eq!((n.display.as_str(), n.tier), ("g (/app/x.js:4:11)", Some('*')));
        let n = parse_js_name("JS:o /app/x.js:1:1");
        assert_eq!((n.display.as_str(), n.tier), ("o (/app/x.js:1:1)", None));
        let n = parse_js_name("JS:on /app/x.js:1:1");
        assert_eq!(n.function, "on");
        let n = parse_js_name("Builtin:ArrayPrototypePush");
        assert_eq!((n.display.as_str(), n.is_js), ("Builtin:ArrayPrototypePush", false));
        assert!(!parse_js_name("RegExp:[a-z]+").is_js);
        assert!(!parse_js_name("no colon").is_js);
    }

    proptest! {
        /// Random adds and moves against a brute-force model: for the live
        /// state at the end, every address resolves to the entry a linear
        /// scan of the surviving ranges gives.
        #[test]
        fn live_lookup_matches_model(ops in prop::collection::vec((1u64..64, 1u64..8, any::<bool>(), 1u64..64), 1..200)) {
            let mut m = CodeMap::default();
            let mut model: Vec<(u64, u64, String)> = Vec::new(); // live (start, end, name)
            for (i, (start, len, is_move, to)) in ops.into_iter().enumerate() {
                let t = i as u64 + 1;
                if is_move {
                    if let Some(pos) = model.iter().position(|(s, _, _)| *s == start * 16) {
                        let (s, e, name) = model.remove(pos);
                        let (ns, ne) = (to * 16, to * 16 + (e - s));
                        model.retain(|(a, b, _)| *b <= ns || *a >= ne);
                        model.push((ns, ne, name));
                    }
                    m.move_code(start * 16, to * 16, None, t);
                } else {
                    let (s, e) = (start * 16, start * 16 + len * 16);
                    model.retain(|(a, b, _)| *b <= s || *a >= e);
                    let name = format!("JS:*f{i} x:1:1");
                    model.push((s, e, name.clone()));
                    m.add(s, len * 16, CodeKind::Jit, &name, 1, t);
                }
            }
            for addr in (16..(80 * 16)).step_by(8) {
                let want = model.iter().find(|(s, e, _)| addr >= *s && addr < *e).map(|(_, _, n)| n.as_str());
                let got = m.lookup(addr, u64::MAX - 1).filter(|h| h.exact).map(|h| h.raw);
                prop_assert_eq!(got, want, "addr {:#x}", addr);
            }
        }
    }
}
