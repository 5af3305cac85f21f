//! speedscope's file format (https://www.speedscope.app/file-format-schema.json):
//! one `sampled` profile per thread, all sharing one frame table (a frame
//! per function). Each sample weighs one interval, in nanoseconds; idle
//! samples are kept, as in every timeline format.
//!
//! The sample lists are serialized straight from the stack table, so a
//! million samples never exist as a million `Vec`s at once.

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

use super::names::{resolve, thread_label};
use crate::profile::{ProfileData, Symbols};

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<Sampled<'a>>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<Frame<'a>>,
}

#[derive(Serialize)]
struct Frame<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    col: Option<u32>,
}

#[derive(Serialize)]
struct Sampled<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Stacks<'a>,
    weights: Weights<'a>,
}

/// The samples of one thread, each as its stack of frame indices, root
/// first, computed while serializing.
struct Stacks<'a> {
    profile: &'a ProfileData,
    symbols: &'a Symbols,
    indices: Vec<u32>,
}

impl Serialize for Stacks<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.indices.len()))?;
        let mut stack = Vec::new();
        for &i in &self.indices {
            stack.clear();
            let node = self.profile.sample_stack[i as usize];
            stack.extend(self.profile.stack_frames(node).map(|f| self.symbols.frame_function[f as usize]));
            stack.reverse();
            seq.serialize_element(&stack)?;
        }
        seq.end()
    }
}

/// Each sample's weight in nanoseconds (its row weight times the
/// interval), computed while serializing.
struct Weights<'a> {
    profile: &'a ProfileData,
    indices: &'a [u32],
}

impl Serialize for Weights<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.indices.len()))?;
        let interval = self.profile.interval_ns.max(1);
        for &i in self.indices {
            seq.serialize_element(&(self.profile.weight(i as usize) * interval))?;
        }
        seq.end()
    }
}

pub fn export(profile: &ProfileData) -> Vec<u8> {
    let symbols = resolve(profile);
    let frames = symbols
        .functions
        .iter()
        .map(|f| Frame {
            name: &f.name,
            file: (!f.file.is_empty()).then_some(f.file.as_str()),
            line: (f.line > 0).then_some(f.line),
            col: (f.column() > 0).then_some(f.column()),
        })
        .collect();
    // Samples of each thread, in time order.
    let mut per_thread: Vec<Vec<u32>> = vec![Vec::new(); profile.threads.len()];
    for (i, &t) in profile.sample_thread.iter().enumerate() {
        per_thread[t as usize].push(i as u32);
    }
    for list in &mut per_thread {
        list.sort_by_key(|&i| profile.sample_time_ns[i as usize]);
    }
    let interval = profile.interval_ns.max(1);
    let mut profiles = Vec::new();
    let mut active = 0;
    for (t, indices) in per_thread.iter().enumerate() {
        if indices.is_empty() {
            continue; // speedscope shows nothing for a thread without samples
        }
        if profile.threads[t].is_main {
            active = profiles.len();
        }
        let first = profile.sample_time_ns[indices[0] as usize].saturating_sub(profile.start_ns);
        let total: u64 = indices.iter().map(|&i| profile.weight(i as usize)).sum();
        profiles.push(Sampled {
            ty: "sampled",
            name: thread_label(profile, t),
            unit: "nanoseconds",
            start_value: first,
            end_value: first + total * interval,
            samples: Stacks { profile, symbols: &symbols, indices: indices.clone() },
            weights: Weights { profile, indices },
        });
    }
    let file = File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared { frames },
        profiles,
        name: format!("machsampler profile of pid {}", profile.meta.pid),
        active_profile_index: active,
        exporter: format!("machsampler {}", env!("CARGO_PKG_VERSION")),
    };
    // Serializing plain data into a Vec cannot fail.
    serde_json::to_vec(&file).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn one_profile_per_thread_with_shared_frames() {
        let p = sample_profile();
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        assert_eq!(v["shared"]["frames"].as_array().unwrap().len(), 4);
        assert_eq!(v["shared"]["frames"][1]["name"], "a");
        let profiles = v["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 2);
        assert_eq!(profiles[0]["name"], "main (100)");
        assert_eq!(profiles[0]["samples"], serde_json::json!([[0, 1, 2], [0, 1, 2]]));
        // Worker samples in time order: stack 3 (t=1500) then stack 1 (t=2500).
        assert_eq!(profiles[1]["samples"], serde_json::json!([[0, 3], [0, 1]]));
        assert_eq!(profiles[1]["weights"], serde_json::json!([1000, 1000]));
        assert_eq!(v["activeProfileIndex"], 0);
    }
}
