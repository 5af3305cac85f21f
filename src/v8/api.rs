//! V8's exported C++ API, resolved at run time with
//! `dlsym(RTLD_DEFAULT, <mangled name>)`, so the addon compiles no C++ and
//! links against no V8 library: the functions come from the process's own
//! node binary (which exports them for native addons, on Linux and macOS).
//!
//! The Itanium C++ ABI (Linux and macOS, x86_64 and arm64) passes `this` as
//! the first argument and references as pointers, and every function used
//! here takes and returns only pointers, integers and plain enums, so each
//! is called through an `extern "C"` function pointer of the matching shape.
//!
//! Resolution happens once, outside any signal handler, in [`api`]; the
//! result lives in a `OnceLock` whose `get` is a single atomic load, so the
//! signal path only reads it.

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

use super::abi::{JitCodeEvent, Layout, RegisterState, V8Version};

pub type Isolate = c_void;
pub type JitCodeEventHandler = extern "C" fn(event: *const JitCodeEvent);
pub type InterruptCallback = extern "C" fn(isolate: *mut Isolate, data: *mut c_void);

/// The functions the layer calls, resolved from the running node binary.
pub struct Api {
    pub version: V8Version,
    pub version_string: String,
    pub layout: Layout,
    /// `static v8::Isolate* v8::Isolate::GetCurrent()`.
    pub get_current: unsafe extern "C" fn() -> *mut Isolate,
    /// `static v8::Isolate* v8::Isolate::TryGetCurrent()`.
    pub try_get_current: unsafe extern "C" fn() -> *mut Isolate,
    /// `void v8::Isolate::GetStackSample(const RegisterState&, void**, size_t, SampleInfo*)`.
    pub get_stack_sample: unsafe extern "C" fn(
        this: *mut Isolate,
        state: *const RegisterState,
        frames: *mut *mut c_void,
        limit: usize,
        info: *mut c_void,
    ),
    /// `void v8::Isolate::GetEmbeddedCodeRange(const void**, size_t*)`.
    pub get_embedded_code_range: unsafe extern "C" fn(this: *mut Isolate, start: *mut *const c_void, len: *mut usize),
    /// `void v8::Isolate::GetCodeRange(void**, size_t*)`.
    pub get_code_range: unsafe extern "C" fn(this: *mut Isolate, start: *mut *mut c_void, len: *mut usize),
    /// `void v8::Isolate::SetJitCodeEventHandler(JitCodeEventOptions, JitCodeEventHandler)`.
    pub set_jit_code_event_handler:
        unsafe extern "C" fn(this: *mut Isolate, options: i32, handler: Option<JitCodeEventHandler>),
    /// `void v8::Isolate::RequestInterrupt(InterruptCallback, void*)`.
    pub request_interrupt: unsafe extern "C" fn(this: *mut Isolate, callback: InterruptCallback, data: *mut c_void),
    /// `uv_loop_t* node::GetCurrentEventLoop(v8::Isolate*)`: null when the
    /// current context belongs to no Node environment. Missing outside
    /// Node (then isolates are only found when the addon loads on them).
    pub node_get_current_event_loop: Option<unsafe extern "C" fn(isolate: *mut Isolate) -> *mut c_void>,
    /// `void node::AddEnvironmentCleanupHook(v8::Isolate*, void (*)(void*), void*)`.
    pub node_add_env_cleanup_hook:
        Option<unsafe extern "C" fn(isolate: *mut Isolate, hook: extern "C" fn(arg: *mut c_void), arg: *mut c_void)>,
    /// `int v8::UnboundScript::GetId() const`: the script's id.
    pub unbound_script_get_id: Option<unsafe extern "C" fn(this: *const c_void) -> i32>,
    /// What [`Api::source_url`] calls, all or none.
    pub source_url_api: Option<SourceUrlApi>,
}

/// The calls that read a script's `//# sourceURL`.
pub struct SourceUrlApi {
    /// `v8::Local<v8::Value> v8::UnboundScript::GetSourceURL()`: a string,
    /// or undefined.
    get_source_url: unsafe extern "C" fn(this: *const c_void) -> *const c_void,
    /// `bool v8::Value::FullIsString() const`.
    is_string: unsafe extern "C" fn(this: *const c_void) -> bool,
    /// `v8::String::Utf8Value::Utf8Value(v8::Isolate*, v8::Local<v8::Value>)`,
    /// or with a last `WriteOptions` argument (V8 12.9-13.x). Called with
    /// the options either way: a version without them ignores the extra
    /// integer argument, as the C calling conventions of both architectures
    /// allow.
    utf8_new: unsafe extern "C" fn(this: *mut Utf8Value, isolate: *mut Isolate, value: *const c_void, options: i32),
    /// `v8::String::Utf8Value::~Utf8Value()`.
    utf8_drop: unsafe extern "C" fn(this: *mut Utf8Value),
    /// `v8::Local<v8::Value> v8::UnboundScript::GetSourceMappingURL()`: a
    /// string, or undefined.
    get_source_mapping_url: Option<unsafe extern "C" fn(this: *const c_void) -> *const c_void>,
    /// `int v8::String::Length() const`: UTF-16 units.
    string_length: Option<unsafe extern "C" fn(this: *const c_void) -> i32>,
}

/// Room for a `v8::String::Utf8Value` (`char* str_` then its length, 16
/// bytes in every supported version), with margin.
#[repr(C, align(16))]
pub struct Utf8Value {
    str: *const c_char,
    rest: [u64; 7],
}

impl Api {
    /// Copies the `//# sourceURL` of `script` (a `Local<UnboundScript>`)
    /// into `out`; returns its length, or None if the script has none or
    /// it does not fit.
    ///
    /// # Safety
    /// On `isolate`'s own thread, inside a callback where V8 made `script`
    /// (a HandleScope is open), such as a code event's.
    pub unsafe fn source_url(&self, isolate: *mut Isolate, script: *const c_void, out: &mut [u8]) -> Option<usize> {
        let f = self.source_url_api.as_ref()?;
        // SAFETY: per the contract, `script` is a live Local<UnboundScript>
        // on its isolate's thread; the result is a Local in the open scope.
        let url = unsafe { (f.get_source_url)(script) };
        // SAFETY: per the contract; `url` is a Local of the open scope.
        unsafe {
            f.with_string(isolate, url, |bytes| {
                out.get_mut(..bytes.len()).map(|o| {
                    o.copy_from_slice(bytes);
                    bytes.len()
                })
            })
        }
        .flatten()
    }

    /// The `//# sourceMappingURL` of `script` (a `Local<UnboundScript>`),
    /// if it has one of at most `max_bytes` (UTF-8). A longer one is not
    /// copied: its length is asked first where V8 exports the call.
    ///
    /// # Safety
    /// As [`Api::source_url`].
    pub unsafe fn source_mapping_url(
        &self,
        isolate: *mut Isolate,
        script: *const c_void,
        max_bytes: usize,
    ) -> Option<String> {
        let f = self.source_url_api.as_ref()?;
        let get = f.get_source_mapping_url?;
        // SAFETY: per the contract, as in `source_url`.
        let url = unsafe { get(script) };
        // A string of n UTF-16 units has at least n bytes of UTF-8.
        // SAFETY: `url` is a non-null Local<Value> of the open scope, and
        // String::Length is called on it only once it is known a string.
        let too_long = f.string_length.is_some_and(|length| unsafe {
            !url.is_null() && (f.is_string)(url) && length(url).max(0) as usize > max_bytes
        });
        if too_long {
            return None;
        }
        // SAFETY: per the contract; `url` is a Local of the open scope.
        let copied = unsafe {
            f.with_string(isolate, url, |bytes| {
                (bytes.len() <= max_bytes).then(|| String::from_utf8_lossy(bytes).into_owned())
            })
        };
        copied.flatten()
    }
}

impl SourceUrlApi {
    /// Calls `f` with the UTF-8 bytes of `value` if it is a string.
    ///
    /// # Safety
    /// On `isolate`'s thread with a HandleScope open; `value` is null or a
    /// Local<Value> of that scope.
    unsafe fn with_string<T>(
        &self,
        isolate: *mut Isolate,
        value: *const c_void,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Option<T> {
        // SAFETY: a non-null Local<Value> of the open scope.
        if value.is_null() || !unsafe { (self.is_string)(value) } {
            return None;
        }
        let mut utf8 = Utf8Value { str: std::ptr::null(), rest: [0; 7] };
        // SAFETY: `utf8` has room for a Utf8Value; `value` is a string, so
        // the constructor converts it without calling JavaScript (and
        // without a context); the destructor below frees what it made.
        unsafe { (self.utf8_new)(&mut utf8, isolate, value, REPLACE_INVALID_UTF8) };
        let out = if utf8.str.is_null() {
            None
        } else {
            // SAFETY: Utf8Value's buffer is NUL-terminated UTF-8, alive
            // until the destructor.
            Some(f(unsafe { CStr::from_ptr(utf8.str) }.to_bytes()))
        };
        // SAFETY: constructed above, destroyed once.
        unsafe { (self.utf8_drop)(&mut utf8) };
        out
    }
}

/// Why the layer is not available.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// No V8 in this process (e.g. `cargo test`), or it exports no API.
    NoV8,
    /// A symbol is missing (named).
    MissingSymbol(&'static str),
    /// V8 is there, but its version's struct layouts were not verified.
    UnsupportedVersion(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::NoV8 => write!(f, "no V8 API in this process"),
            Unavailable::MissingSymbol(s) => write!(f, "V8 API symbol {s} not found"),
            Unavailable::UnsupportedVersion(v) => write!(f, "V8 {v} is not a supported version"),
        }
    }
}

pub const SYM_GET_VERSION: &CStr = c"_ZN2v82V810GetVersionEv";
pub const SYM_GET_CURRENT: &CStr = c"_ZN2v87Isolate10GetCurrentEv";
pub const SYM_TRY_GET_CURRENT: &CStr = c"_ZN2v87Isolate13TryGetCurrentEv";
pub const SYM_GET_STACK_SAMPLE: &CStr = c"_ZN2v87Isolate14GetStackSampleERKNS_13RegisterStateEPPvmPNS_10SampleInfoE";
pub const SYM_GET_EMBEDDED_CODE_RANGE: &CStr = c"_ZN2v87Isolate20GetEmbeddedCodeRangeEPPKvPm";
pub const SYM_GET_CODE_RANGE: &CStr = c"_ZN2v87Isolate12GetCodeRangeEPPvPm";
pub const SYM_SET_JIT_CODE_EVENT_HANDLER: &CStr =
    c"_ZN2v87Isolate22SetJitCodeEventHandlerENS_19JitCodeEventOptionsEPFvPKNS_12JitCodeEventEE";
pub const SYM_REQUEST_INTERRUPT: &CStr = c"_ZN2v87Isolate16RequestInterruptEPFvPS0_PvES2_";
pub const SYM_NODE_GET_CURRENT_EVENT_LOOP: &CStr = c"_ZN4node19GetCurrentEventLoopEPN2v87IsolateE";
pub const SYM_NODE_ADD_ENV_CLEANUP_HOOK: &CStr = c"_ZN4node25AddEnvironmentCleanupHookEPN2v87IsolateEPFvPvES3_";
pub const SYM_UNBOUND_SCRIPT_GET_ID: &CStr = c"_ZNK2v813UnboundScript5GetIdEv";
pub const SYM_UNBOUND_SCRIPT_GET_SOURCE_URL: &CStr = c"_ZN2v813UnboundScript12GetSourceURLEv";
pub const SYM_UNBOUND_SCRIPT_GET_SOURCE_MAPPING_URL: &CStr = c"_ZN2v813UnboundScript19GetSourceMappingURLEv";
pub const SYM_STRING_LENGTH: &CStr = c"_ZNK2v86String6LengthEv";
pub const SYM_VALUE_FULL_IS_STRING: &CStr = c"_ZNK2v85Value12FullIsStringEv";
pub const SYM_UTF8_VALUE_NEW: &CStr = c"_ZN2v86String9Utf8ValueC1EPNS_7IsolateENS_5LocalINS_5ValueEEE";
/// V8 12.9 to 13.x: the same with a `String::WriteOptions` argument.
pub const SYM_UTF8_VALUE_NEW_WITH_OPTIONS: &CStr =
    c"_ZN2v86String9Utf8ValueC1EPNS_7IsolateENS_5LocalINS_5ValueEEENS0_12WriteOptionsE";
/// `String::WriteOptions::REPLACE_INVALID_UTF8`.
const REPLACE_INVALID_UTF8: i32 = 8;
pub const SYM_UTF8_VALUE_DROP: &CStr = c"_ZN2v86String9Utf8ValueD1Ev";

fn lookup(name: &'static CStr) -> Result<*mut c_void, Unavailable> {
    // SAFETY: dlsym with RTLD_DEFAULT searches the global scope for a
    // NUL-terminated name; it does not call the symbol.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if p.is_null() {
        Err(Unavailable::MissingSymbol(name.to_str().unwrap_or("?")))
    } else {
        Ok(p)
    }
}

fn resolve() -> Result<Api, Unavailable> {
    let get_version = lookup(SYM_GET_VERSION).map_err(|_| Unavailable::NoV8)?;
    // SAFETY: `v8::V8::GetVersion()` is `static const char* ()`, returning
    // a static NUL-terminated string.
    let version_string = unsafe {
        let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(get_version);
        let p = f();
        if p.is_null() {
            return Err(Unavailable::NoV8);
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    // Test hook: pretend to be another V8 version (to test the fallback for
    // unknown versions against a real node binary).
    let version_string = match std::env::var("MACHSAMPLER_TEST_V8_VERSION") {
        Ok(v) if !v.is_empty() => v,
        _ => version_string,
    };
    let version = V8Version::parse(&version_string).ok_or(Unavailable::UnsupportedVersion(version_string.clone()))?;
    let layout = Layout::for_version(version);
    if layout == Layout::Unsupported {
        return Err(Unavailable::UnsupportedVersion(version_string));
    }
    // SAFETY (all transmutes below): each symbol is the mangled name of the
    // C++ function whose signature the field type mirrors under the Itanium
    // ABI (`this` first, references as pointers, enums as int); the mangled
    // names encode the parameter types, so a signature change would change
    // the name and fail the lookup instead.
    unsafe {
        Ok(Api {
            version,
            version_string,
            layout,
            get_current: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *mut Isolate>(lookup(
                SYM_GET_CURRENT,
            )?),
            try_get_current: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *mut Isolate>(lookup(
                SYM_TRY_GET_CURRENT,
            )?),
            get_stack_sample: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut Isolate, *const RegisterState, *mut *mut c_void, usize, *mut c_void),
            >(lookup(SYM_GET_STACK_SAMPLE)?),
            get_embedded_code_range: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut Isolate, *mut *const c_void, *mut usize),
            >(lookup(SYM_GET_EMBEDDED_CODE_RANGE)?),
            get_code_range: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut Isolate, *mut *mut c_void, *mut usize),
            >(lookup(SYM_GET_CODE_RANGE)?),
            set_jit_code_event_handler: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut Isolate, i32, Option<JitCodeEventHandler>),
            >(lookup(SYM_SET_JIT_CODE_EVENT_HANDLER)?),
            request_interrupt: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut Isolate, InterruptCallback, *mut c_void),
            >(lookup(SYM_REQUEST_INTERRUPT)?),
            node_get_current_event_loop: lookup(SYM_NODE_GET_CURRENT_EVENT_LOOP)
                .ok()
                .map(|p| std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut Isolate) -> *mut c_void>(p)),
            node_add_env_cleanup_hook: lookup(SYM_NODE_ADD_ENV_CLEANUP_HOOK).ok().map(|p| {
                std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut Isolate, extern "C" fn(*mut c_void), *mut c_void),
                >(p)
            }),
            unbound_script_get_id: lookup(SYM_UNBOUND_SCRIPT_GET_ID)
                .ok()
                .map(|p| std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_void) -> i32>(p)),
            source_url_api: (|| {
                Some(SourceUrlApi {
                    get_source_url: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(*const c_void) -> *const c_void,
                    >(lookup(SYM_UNBOUND_SCRIPT_GET_SOURCE_URL).ok()?),
                    is_string: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_void) -> bool>(
                        lookup(SYM_VALUE_FULL_IS_STRING).ok()?,
                    ),
                    utf8_new: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(*mut Utf8Value, *mut Isolate, *const c_void, i32),
                    >(
                        lookup(SYM_UTF8_VALUE_NEW).or_else(|_| lookup(SYM_UTF8_VALUE_NEW_WITH_OPTIONS)).ok()?
                    ),
                    utf8_drop: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut Utf8Value)>(
                        lookup(SYM_UTF8_VALUE_DROP).ok()?,
                    ),
                    get_source_mapping_url: lookup(SYM_UNBOUND_SCRIPT_GET_SOURCE_MAPPING_URL).ok().map(|p| {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_void) -> *const c_void>(p)
                    }),
                    string_length: lookup(SYM_STRING_LENGTH)
                        .ok()
                        .map(|p| std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_void) -> i32>(p)),
                })
            })(),
        })
    }
}

static API: OnceLock<Result<Api, Unavailable>> = OnceLock::new();

/// The resolved API, resolving it on first use. Not for signal handlers
/// (the first call runs `dlsym`); use [`api_if_resolved`] there.
pub fn api() -> Result<&'static Api, Unavailable> {
    API.get_or_init(resolve).as_ref().map_err(Clone::clone)
}

/// The API if an earlier [`api`] call resolved it. Async-signal-safe: one
/// atomic load.
#[inline]
pub fn api_if_resolved() -> Option<&'static Api> {
    match API.get() {
        Some(Ok(api)) => Some(api),
        _ => None,
    }
}

/// A code range reported by V8, `[start, start + len)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodeRange {
    pub start: u64,
    pub len: u64,
}

impl CodeRange {
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < self.len
    }
}

impl Api {
    /// The embedded builtins blob (shared by all isolates of the process).
    ///
    /// # Safety
    /// `isolate` must be a live isolate.
    pub unsafe fn embedded_code_range(&self, isolate: *mut Isolate) -> CodeRange {
        let (mut start, mut len) = (std::ptr::null::<c_void>(), 0usize);
        // SAFETY: per the contract `isolate` is live; both out-pointers are
        // valid locals.
        unsafe { (self.get_embedded_code_range)(isolate, &mut start, &mut len) };
        CodeRange { start: start as u64, len: len as u64 }
    }

    /// The isolate's JIT code range (empty where V8 reserves none).
    ///
    /// # Safety
    /// `isolate` must be a live isolate.
    pub unsafe fn code_range(&self, isolate: *mut Isolate) -> CodeRange {
        let (mut start, mut len) = (std::ptr::null_mut::<c_void>(), 0usize);
        // SAFETY: as above.
        unsafe { (self.get_code_range)(isolate, &mut start, &mut len) };
        CodeRange { start: start as u64, len: len as u64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_v8_in_a_test_binary() {
        // `cargo test` runs without node, so nothing resolves and nothing is
        // called.
        assert_eq!(api().err(), Some(Unavailable::NoV8));
        assert!(api_if_resolved().is_none());
        assert!(Unavailable::UnsupportedVersion("9.9".into()).to_string().contains("9.9"));
    }

    #[test]
    fn code_range_contains() {
        let r = CodeRange { start: 0x1000, len: 0x100 };
        assert!(r.contains(0x1000) && r.contains(0x10ff));
        assert!(!r.contains(0xfff) && !r.contains(0x1100));
        assert!(!CodeRange::default().contains(0));
    }
}
