//! Fault injection: the next calls of a kind return a chosen
//! `kern_return_t` (or, for calls that return no code, fail their own way).
//! Tests arm faults with [`inject`]; a process can also arm them at start
//! with `MACHSIM_FAULTS=call=code[*N],...` (for example
//! `thread_suspend=37*5,rosetta=1`), read once when the simulation starts.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    ThreadSuspend,
    ThreadResume,
    ThreadGetState,
    /// `thread_get_state` succeeds but reports fewer words than asked.
    ThreadGetStateShort,
    ThreadInfoBasic,
    ThreadInfoIdentifier,
    ThreadInfoExtended,
    TaskThreads,
    TimebaseInfo,
    WaitUntil,
    /// `mach_thread_self` returns `MACH_PORT_NULL`.
    ThreadSelf,
    /// `pthread_threadid_np` reports tid 0.
    ThreadIdZero,
    /// `pthread_get_stackaddr_np` returns null.
    StackAddr,
    /// `pthread_from_mach_thread_np` finds no pthread.
    PthreadFromPort,
    /// `sysctl.proc_translated` answers 1 (Rosetta).
    Rosetta,
    /// `machdep.virtual_address_size` fails.
    VaBits,
}

const CALLS: usize = 16;
const NAMES: [(&str, Call); CALLS] = [
    ("thread_suspend", Call::ThreadSuspend),
    ("thread_resume", Call::ThreadResume),
    ("thread_get_state", Call::ThreadGetState),
    ("thread_get_state_short", Call::ThreadGetStateShort),
    ("thread_info_basic", Call::ThreadInfoBasic),
    ("thread_info_identifier", Call::ThreadInfoIdentifier),
    ("thread_info_extended", Call::ThreadInfoExtended),
    ("task_threads", Call::TaskThreads),
    ("mach_timebase_info", Call::TimebaseInfo),
    ("mach_wait_until", Call::WaitUntil),
    ("mach_thread_self", Call::ThreadSelf),
    ("pthread_threadid_np", Call::ThreadIdZero),
    ("pthread_get_stackaddr_np", Call::StackAddr),
    ("pthread_from_mach_thread_np", Call::PthreadFromPort),
    ("rosetta", Call::Rosetta),
    ("va_bits", Call::VaBits),
];

static REMAINING: [AtomicU32; CALLS] = [const { AtomicU32::new(0) }; CALLS];
static CODE: [AtomicI32; CALLS] = [const { AtomicI32::new(0) }; CALLS];
static HITS: [AtomicU32; CALLS] = [const { AtomicU32::new(0) }; CALLS];

/// The next `times` calls of `call` fail with `code` (`u32::MAX`: until
/// cleared).
pub fn inject(call: Call, code: i32, times: u32) {
    CODE[call as usize].store(code, Ordering::SeqCst);
    REMAINING[call as usize].store(times, Ordering::SeqCst);
}

/// Clears every fault.
pub fn clear() {
    for r in &REMAINING {
        r.store(0, Ordering::SeqCst);
    }
}

/// How many calls of `call` an injected fault answered so far.
pub fn hits(call: Call) -> u32 {
    HITS[call as usize].load(Ordering::SeqCst)
}

/// The code to fail this call with, if a fault is armed. Lock-free: it runs
/// inside the stopped window.
#[inline]
pub fn take(call: Call) -> Option<i32> {
    let r = &REMAINING[call as usize];
    let mut n = r.load(Ordering::Relaxed);
    while n > 0 {
        let next = if n == u32::MAX { n } else { n - 1 };
        match r.compare_exchange_weak(n, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                HITS[call as usize].fetch_add(1, Ordering::Relaxed);
                return Some(CODE[call as usize].load(Ordering::Acquire));
            }
            Err(now) => n = now,
        }
    }
    None
}

/// Parses `MACHSIM_FAULTS` (see the module docs). Unknown names are errors,
/// so a typo cannot silently test nothing.
pub fn arm_from(spec: &str) -> Result<(), String> {
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = item.split_once('=').ok_or_else(|| format!("machsim: fault `{item}` has no `=code`"))?;
        let call = NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
            .ok_or_else(|| format!("machsim: unknown fault `{name}`"))?;
        let (code, times) = match value.split_once('*') {
            Some((c, t)) => (c, t.parse::<u32>().map_err(|e| format!("machsim: fault `{item}`: {e}"))?),
            None => (value, u32::MAX),
        };
        let code = parse_code(code).ok_or_else(|| format!("machsim: fault `{item}`: bad code"))?;
        inject(call, code, times);
    }
    Ok(())
}

fn parse_code(s: &str) -> Option<i32> {
    match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok().map(|v| v as i32),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_typos_are_refused() {
        assert!(arm_from("nonsense=5").is_err());
        assert!(arm_from("thread_suspend").is_err());
        assert!(arm_from("thread_suspend=zz").is_err());
        assert!(arm_from("thread_suspend=5*q").is_err());
        assert_eq!(arm_from("thread_get_state=0x10000003*0, va_bits=1*0"), Ok(()), "hex codes and counts");
        assert_eq!(parse_code("0x10000003"), Some(0x1000_0003));
    }
}
