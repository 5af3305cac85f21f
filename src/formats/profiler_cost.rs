//! The profiler's own work that shows in the profile, found by name: the
//! time V8 spends writing its code log, which `record` turns on so that
//! inlined functions can be split out. It runs on the program's threads,
//! so the sampler records it like any other work; the summary states it
//! beside the profiler's other costs.

use crate::profile::ProfileData;

/// Functions of V8's code-log file writer, by prefix: `V8FileLogger` and
/// `LogFile` (V8 11 on), `Log` and its `MessageBuilder` (V8 10). The
/// dispatcher (`Logger` from V8 11 on) is left out: it also serves the
/// addon's own code-event handler, whose cost is measured apart; so is
/// `V8FileLogger::SetCodeEventHandler`, which installs that handler.
const V8_LOG_WRITER: [&str; 3] = ["v8::internal::V8FileLogger::", "v8::internal::LogFile::", "v8::internal::Log::"];
const NOT_WRITING: &str = "v8::internal::V8FileLogger::SetCodeEventHandler";

/// Running samples (weights counted) with a frame of V8's code-log writer;
/// 0 for a profile without names.
pub fn v8_log_samples(d: &ProfileData) -> u64 {
    let Some(symbols) = d.symbols.as_ref() else { return 0 };
    let writer = |frame: u32| {
        let f = symbols.frame_function.get(frame as usize);
        f.and_then(|&f| symbols.functions.get(f as usize))
            .is_some_and(|f| V8_LOG_WRITER.iter().any(|p| f.name.starts_with(p)) && !f.name.starts_with(NOT_WRITING))
    };
    // Per stack node: whether it or a caller is the writer (parents come
    // before their children in the stack table).
    let mut under = vec![false; d.stack_frame.len()];
    for i in 0..d.stack_frame.len() {
        let parent = usize::try_from(d.stack_parent[i]).ok().filter(|&p| p < i);
        under[i] = parent.is_some_and(|p| under[p]) || writer(d.stack_frame[i]);
    }
    (0..d.sample_count())
        .filter(|&i| d.sample_idle[i] == 0 && under.get(d.sample_stack[i] as usize).copied().unwrap_or(false))
        .map(|i| d.weight(i))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_samples_under_the_log_writer_count_idle_ones_not() {
        // Stacks: 0 main, 1 main>a, 2 main>a>b, 3 main>c; samples on 2, 2,
        // 3 and 1 (idle).
        let mut d = crate::profile::tests::sample_profile();
        d.sample_weight = vec![2, 3, 5, 7];
        let symbols = d.symbols.as_mut().unwrap();
        symbols.functions[1].name = "v8::internal::V8FileLogger::CodeCreateEvent(int)".into();
        assert_eq!(v8_log_samples(&d), 5);
        // The dispatcher also serves the addon's handler, which the
        // installer's enumeration feeds: not counted.
        for name in [
            "v8::internal::Logger::CodeCreateEvent(int)",
            "v8::internal::V8FileLogger::SetCodeEventHandler(unsigned int)",
        ] {
            d.symbols.as_mut().unwrap().functions[1].name = name.into();
            assert_eq!(v8_log_samples(&d), 0);
        }
        d.symbols = None;
        assert_eq!(v8_log_samples(&d), 0);
    }
}
