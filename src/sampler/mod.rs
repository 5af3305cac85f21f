//! The sampling engine: everything between "a thread is stopped" and "a
//! recording of deduplicated stacks". It knows threads, registers, stacks
//! and time, and nothing of files, names or JavaScript. Platforms plug in
//! through [`backend::Backend`]; the sampler thread is [`session`].

pub mod addr_memo;
pub mod backend;
pub mod buffer;
pub mod error;
pub mod history;
pub mod observer;
pub mod options;
pub mod own_threads;
pub mod registry;
pub mod session;
pub mod stacks;
pub mod stats;
pub mod stopped_window;
pub mod thread_id;
pub mod timebase;
pub mod unwind;
pub mod walker;
