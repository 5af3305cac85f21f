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

/// Frames of the addon's own code-event handling, which V8's log classes
/// also call into (line positions go through `V8FileLogger` to the JIT
/// handler): time under them is not the log's.
const HANDLER: [&str; 2] = ["machsampler::", "v8::internal::JitLogger::"];

/// Running samples (weights counted) in V8's code-log writer, and not in
/// the addon's handler under it; 0 for a profile without names.
pub fn v8_log_samples(d: &ProfileData) -> u64 {
    let Some(symbols) = d.symbols.as_ref() else { return 0 };
    let name = |frame: u32| {
        let f = symbols.frame_function.get(frame as usize);
        f.and_then(|&f| symbols.functions.get(f as usize)).map_or("", |f| f.name.as_str())
    };
    let writer = |n: &str| V8_LOG_WRITER.iter().any(|p| n.starts_with(p)) && !n.starts_with(NOT_WRITING);
    let handler = |n: &str| HANDLER.iter().any(|p| n.starts_with(p));
    // Per stack node, from the root: outside the writer, in it, or in the
    // handler it called (parents come before their children in the table).
    #[derive(Clone, Copy, PartialEq)]
    enum In {
        Program,
        Writer,
        Handler,
    }
    let mut state = vec![In::Program; d.stack_frame.len()];
    for i in 0..d.stack_frame.len() {
        let parent = usize::try_from(d.stack_parent[i]).ok().filter(|&p| p < i).map_or(In::Program, |p| state[p]);
        let n = name(d.stack_frame[i]);
        state[i] = match parent {
            In::Program if writer(n) => In::Writer,
            In::Writer if handler(n) => In::Handler,
            other => other,
        };
    }
    (0..d.sample_count())
        .filter(|&i| d.sample_idle[i] == 0 && state.get(d.sample_stack[i] as usize) == Some(&In::Writer))
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
        // V8's log class calling the addon's handler (line positions).
        let symbols = d.symbols.as_mut().unwrap();
        symbols.functions[1].name = "v8::internal::V8FileLogger::CodeLinePosInfoRecordEvent(unsigned long)".into();
        symbols.functions[2].name = "machsampler::v8::events::on_jit_event".into();
        assert_eq!(v8_log_samples(&d), 0);
        d.symbols = None;
        assert_eq!(v8_log_samples(&d), 0);
    }
}
